"""The decoders of the typed Python model: for each message, a function that turns a JSON object
into its dataclass, written out field by field, and the `from_dict` that calls it.

A decoder compares the object's keys in turn (so the first field that does not fit is the one
reported), accepts a value that fits its field as it is, and hands anything else to the decode
helpers of torchjob.api.model, which convert it (3.0 is 3) or raise a ModelError naming the field.
Admission decodes every job it sees: written out this way a decoder takes about half the time of
one that looks each key up in the FIELDS table.
"""

from __future__ import annotations

import builtins
import re
from collections.abc import Callable

from codegen.schema import Field, Message, Schema

# The local names of a decoder besides its fields'; a field named like one of them, or like a
# builtin, gets a trailing underscore (`type_`).
DECODER_LOCALS = frozenset({"data", "path", "obj", "key", "raw", "extra"})

# A value of each scalar kind that is accepted as it is, and the helper for any other value.
INLINE_TESTS = {
    "string": "isinstance(raw, str)",
    "boolean": "isinstance(raw, bool)",
    "object": "isinstance(raw, dict)",
    # `type(...) is int` leaves out booleans; the bounds are int32's and int64's.
    "int32": "type(raw) is int and -(2**31) <= raw < 2**31",
    "int64": "type(raw) is int and -(2**63) <= raw < 2**63",
}
SCALAR_HELPERS = {
    "string": "decode_string",
    "boolean": "decode_boolean",
    "object": "decode_object",
    "int32": "decode_int32",
    "int64": "decode_int64",
    "intOrString": "decode_int_or_string",
}


def model_kind(schema: Schema, f: Field) -> str:
    """The field's kind in the Python model: an opaque message is an "object", a quantity an
    "intOrString"; anything else is the field's own kind."""
    if f.kind == "message" and schema.messages[f.ref or ""].opaque:
        return "object"
    if f.kind == "message" and schema.messages[f.ref or ""].int_or_string:
        return "intOrString"
    return f.kind


def snake(name: str) -> str:
    """`PyTorchTrainingJob` -> `py_torch_training_job`, `RDZVConf` -> `rdzv_conf`."""
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "_", name).lower()


def constant(name: str) -> str:
    """`RestartPolicy` -> `RESTART_POLICY`, the prefix of its `_VALUES` tuple."""
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).upper()


def decoder_name(message_name: str) -> str:
    return f"_decode_{snake(message_name)}"


def from_dict_method(message: Message) -> list[str]:
    """The `from_dict` of a message's dataclass, indented for its class body."""
    return [
        "    @classmethod",
        f'    def from_dict(cls, data: object, path: str = "") -> {message.name}:',
        '        """Decode `data`; raise ModelError naming the first field that does not fit."""',
        f"        return {decoder_name(message.name)}(data, path)",
    ]


def decoded_messages(schema: Schema) -> list[Message]:
    """The messages that have a dataclass, hence a decoder."""
    return [m for m in schema.messages.values() if not m.opaque and not m.int_or_string]


def render(schema: Schema, annotation: Callable[[Field], str]) -> tuple[list[str], set[str]]:
    """The decoders' source, and the names it takes from torchjob.api.model. `annotation` gives
    a field's Python type, as its dataclass declares it."""
    writer = _Writer(schema, annotation)
    lines = [
        "# Decoders: one per message, called by its from_dict and by the decoders of the messages",
        "# that hold it. Each accepts a value that fits its field as it is; anything else goes to",
        "# torchjob.api.model's decode helpers, which convert it (3.0 is 3) or raise a ModelError",
        "# naming the field.",
    ]
    for message in decoded_messages(schema):
        lines += ["", "", *writer.decoder(message)]
    for enum_name in sorted(writer.enum_item_decoders):
        lines += ["", "", *_enum_item_decoder(enum_name)]
    return lines, writer.helpers


class _Writer:
    """Writes decoders, noting the helpers they call."""

    def __init__(self, schema: Schema, annotation: Callable[[Field], str]) -> None:
        self.schema = schema
        self.annotation = annotation
        self.helpers: set[str] = set()
        self.enum_item_decoders: set[str] = set()  # enums that are items of arrays or maps
        self.reserved = set(dir(builtins)) | DECODER_LOCALS

    def decoder(self, message: Message) -> list[str]:
        locals_ = [self._local(f) for f in message.fields]
        self.helpers.add("expect_object")
        lines = [
            f"def {decoder_name(message.name)}(data: object, path: str) -> {message.name}:",
            "    obj = data if isinstance(data, dict) else expect_object(data, path)",
        ]
        if not message.fields:
            return [*lines, f"    return {message.name}(dict(obj))"]
        for f, name in zip(message.fields, locals_, strict=True):
            lines.append(f"    {name}: {self.annotation(f)} | None = None")
        lines.append("    extra: dict[str, Any] = {}")
        lines.append("    for key, raw in obj.items():")
        for n, (f, name) in enumerate(zip(message.fields, locals_, strict=True)):
            lines.append(f"        {'if' if n == 0 else 'elif'} key == {f.json_name!r}:")
            lines += [f"            {line}" for line in self._field(f, name)]
        lines += ["        else:", "            extra[key] = raw"]
        lines.append(f"    return {message.name}({', '.join([*locals_, 'extra'])})")
        return lines

    def _local(self, f: Field) -> str:
        return f"{f.name}_" if f.name in self.reserved else f.name

    def _field(self, f: Field, name: str) -> list[str]:
        """The statements that set `name` from `raw`, the value of field `f` (null is absent)."""
        kind = model_kind(self.schema, f)
        if f.repeated or f.map:
            return ["if raw is not None:", f"    {name} = {self._container(f, kind)}"]
        if kind == "message":
            here = 'f"{path}.{key}" if path else key'
            return ["if raw is not None:", f"    {name} = {decoder_name(f.ref or '')}(raw, {here})"]
        if kind == "enum":
            values = f"{constant(f.ref or '')}_VALUES"
            self.helpers.add("decode_enum")
            test, slow = f"raw in {values}", f"decode_enum(raw, {values}, path, key)"
        elif kind in INLINE_TESTS:
            test, slow = INLINE_TESTS[kind], f"{self._scalar_helper(kind)}(raw, path, key)"
        else:  # no test worth writing inline: an intOrString
            decode = f"{self._scalar_helper(kind)}(raw, path, key)"
            return ["if raw is not None:", f"    {name} = {decode}"]
        return [f"if {test}:", f"    {name} = raw", "elif raw is not None:", f"    {name} = {slow}"]

    def _container(self, f: Field, kind: str) -> str:
        if kind == "message":
            helper = "decode_message_map" if f.map else "decode_message_array"
            item = decoder_name(f.ref or "")
        else:
            helper = "decode_map" if f.map else "decode_array"
            item = self._item_helper(f, kind)
        self.helpers.add(helper)
        return f"{helper}(raw, path, key, {item})"

    def _item_helper(self, f: Field, kind: str) -> str:
        if kind == "enum":
            self.enum_item_decoders.add(f.ref or "")
            self.helpers.add("decode_enum")
            return f"_decode_{snake(f.ref or '')}"
        return self._scalar_helper(kind)

    def _scalar_helper(self, kind: str) -> str:
        helper = SCALAR_HELPERS[kind]
        self.helpers.add(helper)
        return helper


def _enum_item_decoder(enum_name: str) -> list[str]:
    """The decoder of one item of an array (or map) of an enum, as decode_array calls it."""
    name, values = f"_decode_{snake(enum_name)}", f"{constant(enum_name)}_VALUES"
    return [
        f"def {name}(raw: object, path: str, *parts: str | int) -> {enum_name}:",
        f"    return decode_enum(raw, {values}, path, *parts)",
    ]
