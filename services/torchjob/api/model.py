"""The runtime half of the generated API model: decoding a JSON object into typed dataclasses with
errors that name the field, and encoding it back without losing anything.

`types.py` (generated from proto/) declares each message as a dataclass with a FIELDS table;
this module does the work for all of them, so the generated file stays declarative.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Literal, Self

Kind = Literal["string", "boolean", "int32", "int64", "enum", "message", "object", "intOrString"]

INT_BOUNDS: dict[str, tuple[int, int]] = {
    "int32": (-(2**31), 2**31 - 1),
    "int64": (-(2**63), 2**63 - 1),
}


class ModelError(ValueError):
    """A value does not fit the API schema; `path` names the field, as in `spec.replicaSpecs[0]`."""

    def __init__(self, path: str, message: str) -> None:
        super().__init__(f"{path or '<root>'}: {message}")
        self.path = path
        self.message = message


@dataclass(frozen=True, slots=True)
class Limits:
    """What the CRD schema says of a field beyond its type. The apiserver checks these before any
    webhook sees the object; `torchjob run`, which has no apiserver, checks them itself. For a
    repeated field, the items bounds are the array's and the others each item's."""

    required: bool = False
    minimum: int | None = None
    maximum: int | None = None
    min_length: int | None = None
    max_length: int | None = None
    pattern: str = ""
    min_items: int | None = None
    max_items: int | None = None


@dataclass(frozen=True, slots=True)
class FieldInfo:
    """How one attribute is stored in JSON."""

    attr: str
    key: str
    kind: Kind
    repeated: bool = False
    ref: str = ""  # the message class name for kind "message", in the declaring class's module
    values: tuple[str, ...] = ()  # allowed strings for kind "enum"
    default: Any = None  # JSON value the webhook fills in when the field is absent
    limits: Limits | None = None
    # A JSON object of string keys whose values are of `kind` (a protobuf map); `repeated` is
    # then False.
    map: bool = False


# Every generated message class by (module, class name): two generated modules (two APIs) may
# each declare a message of the same name, and a field's `ref` names one in its own module.
_MODELS: dict[tuple[str, str], type[Model]] = {}


def model_of(owner: type[Model], ref: str) -> type[Model]:
    """The message class a field of `owner` names by `ref`: the one declared in owner's module."""
    return _MODELS[(owner.__module__, ref)]


def json_type(value: object) -> str:
    """The JSON name of a value's type, for error messages."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__


def child(path: str, *parts: str | int) -> str:
    """The path of a field below `path`: a name is appended after a dot, an index in brackets
    (`child("spec.replicaSpecs", 0, "type")` is `spec.replicaSpecs[0].type`)."""
    for part in parts:
        path = f"{path}[{part}]" if isinstance(part, int) else f"{path}.{part}" if path else part
    return path


def expect_object(value: object, path: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ModelError(path, f"must be an object, not {json_type(value)}")
    return value


class Model:
    """Base of every generated message class."""

    FIELDS: ClassVar[tuple[FieldInfo, ...]] = ()
    extra: dict[str, Any]

    if TYPE_CHECKING:

        def __init__(self, **values: Any) -> None: ...

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        _MODELS[(cls.__module__, cls.__name__)] = cls

    @classmethod
    def from_dict(cls, data: object, path: str = "") -> Self:
        """Decode `data`; raise ModelError naming the first field that does not fit."""
        decode = _DECODERS.get(cls) or _decoder_of(cls)
        return decode(data, path)  # type: ignore[return-value]

    def to_dict(self) -> dict[str, Any]:
        """Encode to plain JSON values: exactly the fields that are set, plus unknown ones."""
        out: dict[str, Any] = {}
        for info in self.FIELDS:
            value = getattr(self, info.attr)
            if value is None:
                continue
            if info.repeated:
                out[info.key] = [_encode(v) for v in value]
            elif info.map:
                out[info.key] = {k: _encode(v) for k, v in value.items()}
            else:
                out[info.key] = _encode(value)
        out.update(self.extra)
        return out


Decoder = Callable[[object, str], "Model"]

# Each message class's decoder, made on its first use. Admission decodes every job it sees, and a
# decoder written out for one class (its keys compared in turn, each value checked by a test
# of its own kind, the class built from positional arguments) takes about half the time of one
# that looks every field up in the class's FIELDS table.
_DECODERS: dict[type[Model], Decoder] = {}


# Compiling is once per class, but may first happen in two threads at once (the webhook decodes
# large bodies in a worker thread): one compiles, the other waits for it.
_COMPILING = threading.RLock()
_IN_PROGRESS: set[type[Model]] = set()


def _decoder_of(model: type[Model]) -> Decoder:
    decoder = _DECODERS.get(model)
    if decoder is not None:
        return decoder
    with _COMPILING:
        decoder = _DECODERS.get(model)
        if decoder is not None:
            return decoder
        if model in _IN_PROGRESS:
            # A message that holds itself, at any depth: its decoder is looked up when called,
            # by which time it is made.
            return lambda data, path: _decoder_of(model)(data, path)
        _IN_PROGRESS.add(model)
        try:
            decoder = _DECODERS[model] = _compiled_decoder(model)
        finally:
            _IN_PROGRESS.discard(model)
    return decoder


def _compiled_decoder(model: type[Model]) -> Decoder:
    """The decoder of `model`, written as Python and compiled: for each key present, the test
    that accepts a value of the field's kind as it is, and `_decode` (which raises a ModelError
    naming the field) for anything else. Keys are taken in the object's order, so the first
    field that does not fit is the one reported, as the table-driven decoding did."""
    scope: dict[str, Any] = {
        "Model": model,
        "child": child,
        "expect_object": expect_object,
        "_decode": _decode,
        "_decode_field": _decode_field,
    }
    attrs = [info.attr for info in model.FIELDS]
    lines = [
        "def decode(data, path):",
        "    if not isinstance(data, dict):",
        "        expect_object(data, path)",
        "    extra = {}",
        *(f"    v{n} = None" for n in range(len(attrs))),
        "    for key, raw in data.items():",
    ]
    for n, info in enumerate(model.FIELDS):
        scope[f"F{n}"] = info
        lines += [
            f"        {'if' if n == 0 else 'elif'} key == {info.key!r}:",
            "            if raw is not None:",
            f"                v{n} = {_value_expression(model, info, n, scope)}",
        ]
    lines += [
        f"        {'else' if attrs else 'if True'}:",
        "            extra[key] = raw",
        f"    return Model({_arguments(model, attrs)})",
    ]
    exec("\n".join(lines), scope)  # the source is built above from the FIELDS table alone
    decoder: Decoder = scope["decode"]
    return decoder


def _value_expression(model: type[Model], info: FieldInfo, n: int, scope: dict[str, Any]) -> str:
    """The expression that decodes `raw`, the value of field number `n` (`F{n}` in `scope`)."""
    generic = f"_decode(Model, F{n}, raw, path, key)"
    if info.map:
        return f"_decode_field(Model, F{n}, raw, path, key)"
    if info.kind == "message":
        scope[f"D{n}"] = _decoder_of(model_of(model, info.ref))
        # The field's path, `child(path, key)` written out for this key: every nested message
        # of every decoded job has its path made, error or not.
        here = f"(path + {'.' + info.key!r} if path else {info.key!r})"
        if info.repeated:
            return (
                f"[D{n}(item, f'{{here}}[{{index}}]') for here in ({here},) "
                "for index, item in enumerate(raw)] if isinstance(raw, list) "
                f"else _decode_field(Model, F{n}, raw, path, key)"
            )
        return f"D{n}(raw, {here})"
    if info.repeated:
        return f"_decode_field(Model, F{n}, raw, path, key)"
    if info.kind in INT_BOUNDS:
        low, high = INT_BOUNDS[info.kind]
        return f"raw if type(raw) is int and {low} <= raw <= {high} else {generic}"
    if info.kind == "enum":
        scope[f"V{n}"] = frozenset(info.values)
        return f"raw if isinstance(raw, str) and raw in V{n} else {generic}"
    test = {"string": "str", "object": "dict", "boolean": "bool"}.get(info.kind)
    return f"raw if isinstance(raw, {test}) else {generic}" if test else generic


def _arguments(model: type[Model], attrs: list[str]) -> str:
    """The call's arguments: positional when the dataclass's fields are FIELDS then `extra`."""
    declared = [f.name for f in dataclasses.fields(model)]  # type: ignore[arg-type]
    if declared == [*attrs, "extra"]:
        return ", ".join([*(f"v{n}" for n in range(len(attrs))), "extra"])
    return ", ".join([*(f"{attr}=v{n}" for n, attr in enumerate(attrs)), "extra=extra"])


def _decode_field(owner: type[Model], info: FieldInfo, raw: object, path: str, key: str) -> Any:
    """A repeated or map field's value; `path` is its owner's, `key` its own."""
    if info.map:
        obj = raw if isinstance(raw, dict) else expect_object(raw, child(path, key))
        return {name: _decode(owner, info, value, path, key, name) for name, value in obj.items()}
    if not isinstance(raw, list):
        raise ModelError(child(path, key), f"must be an array, not {json_type(raw)}")
    return [_decode(owner, info, item, path, key, index) for index, item in enumerate(raw)]


def _decode(owner: type[Model], info: FieldInfo, raw: object, path: str, *parts: str | int) -> Any:
    """One value of `info`, at `child(path, *parts)`: a value that fits as it is is returned
    without building its path; anything else is decoded, or refused, by `_decode_value`."""
    kind = info.kind
    if kind == "string":
        if isinstance(raw, str):
            return raw
    elif kind == "message":
        return model_of(owner, info.ref).from_dict(raw, child(path, *parts))
    elif kind == "object":
        if isinstance(raw, dict):
            return raw
    elif kind == "boolean":
        if isinstance(raw, bool):
            return raw
    elif kind in INT_BOUNDS:
        low, high = INT_BOUNDS[kind]
        if type(raw) is int and low <= raw <= high:
            return raw
    elif kind == "enum" and isinstance(raw, str) and raw in info.values:
        return raw
    return _decode_value(owner, info, raw, child(path, *parts))


def _decode_value(owner: type[Model], info: FieldInfo, raw: object, path: str) -> Any:
    kind = info.kind
    if kind == "message":
        return model_of(owner, info.ref).from_dict(raw, path)
    if kind == "object":
        return expect_object(raw, path)
    if kind == "boolean":
        if not isinstance(raw, bool):
            raise ModelError(path, f"must be a boolean, not {json_type(raw)}")
        return raw
    if kind in INT_BOUNDS:
        return _decode_int(kind, raw, path)
    if kind == "intOrString":
        if isinstance(raw, str) or (isinstance(raw, int) and not isinstance(raw, bool)):
            return raw
        raise ModelError(path, f"must be an integer or a string, not {json_type(raw)}")
    if not isinstance(raw, str):
        raise ModelError(path, f"must be a string, not {json_type(raw)}")
    if kind == "enum" and raw not in info.values:
        raise ModelError(path, f"must be one of {', '.join(info.values)}, not {raw!r}")
    return raw


def _decode_int(kind: str, raw: object, path: str) -> int:
    # JSON decoders may give 3.0 for 3; a float with no fraction is still an integer.
    if isinstance(raw, float) and raw.is_integer():
        raw = int(raw)
    if isinstance(raw, bool) or not isinstance(raw, int):
        raise ModelError(path, f"must be an integer, not {json_type(raw)}")
    low, high = INT_BOUNDS[kind]
    if not low <= raw <= high:
        raise ModelError(path, f"must fit in {kind}")
    return raw


def _encode(value: Any) -> Any:
    return value.to_dict() if isinstance(value, Model) else value
