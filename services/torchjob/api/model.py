"""The runtime half of the generated API model: the errors, the field tables, encoding, and the
helpers the generated decoders call.

`types.py` and `kubeflow_types.py` (generated from proto/ by tools/codegen) declare each message
as a dataclass with a FIELDS table and a decoder written out for it: its keys compared in turn,
each value checked by a test of its own kind, the class built from positional arguments. Admission
decodes every job it sees, and such a decoder takes about half the time of one that looks every
field up in the FIELDS table; writing it at build time makes it plain code with a file and line.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Literal, Self, TypeVar

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
        """Decode `data`; raise ModelError naming the first field that does not fit. Each
        generated class defines its own, calling the decoder generated for it."""
        raise NotImplementedError(f"{cls.__qualname__} has no generated decoder")

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


# The decode helpers the generated decoders call. A generated decoder accepts a value that fits
# its field as it is, with a test written inline; anything else comes here, to be converted (3.0
# is an integer) or refused with a ModelError naming the field. The field's path is built only
# then: `path` is its owner's, and `parts` the key (and index) below it, as `child` takes them.

T = TypeVar("T")
M = TypeVar("M", bound=Model)
E = TypeVar("E", bound=str)


def decode_string(raw: object, path: str, *parts: str | int) -> str:
    if not isinstance(raw, str):
        raise ModelError(child(path, *parts), f"must be a string, not {json_type(raw)}")
    return raw


def decode_boolean(raw: object, path: str, *parts: str | int) -> bool:
    if not isinstance(raw, bool):
        raise ModelError(child(path, *parts), f"must be a boolean, not {json_type(raw)}")
    return raw


def decode_object(raw: object, path: str, *parts: str | int) -> dict[str, Any]:
    """A JSON object kept as it is: an opaque message, such as a pod template's spec."""
    return raw if isinstance(raw, dict) else expect_object(raw, child(path, *parts))


def decode_int32(raw: object, path: str, *parts: str | int) -> int:
    return _decode_int("int32", raw, path, parts)


def decode_int64(raw: object, path: str, *parts: str | int) -> int:
    return _decode_int("int64", raw, path, parts)


def _decode_int(kind: str, raw: object, path: str, parts: tuple[str | int, ...]) -> int:
    # JSON decoders may give 3.0 for 3; a float with no fraction is still an integer.
    if isinstance(raw, float) and raw.is_integer():
        raw = int(raw)
    if isinstance(raw, bool) or not isinstance(raw, int):
        raise ModelError(child(path, *parts), f"must be an integer, not {json_type(raw)}")
    low, high = INT_BOUNDS[kind]
    if not low <= raw <= high:
        raise ModelError(child(path, *parts), f"must fit in {kind}")
    return raw


def decode_int_or_string(raw: object, path: str, *parts: str | int) -> int | str:
    """A Kubernetes quantity or IntOrString."""
    if isinstance(raw, str) or (isinstance(raw, int) and not isinstance(raw, bool)):
        return raw
    message = f"must be an integer or a string, not {json_type(raw)}"
    raise ModelError(child(path, *parts), message)


def decode_enum(raw: object, values: tuple[E, ...], path: str, *parts: str | int) -> E:
    if not isinstance(raw, str):
        raise ModelError(child(path, *parts), f"must be a string, not {json_type(raw)}")
    if raw not in values:
        raise ModelError(child(path, *parts), f"must be one of {', '.join(values)}, not {raw!r}")
    return raw


def decode_array(
    raw: object, path: str, key: str, decode_item: Callable[[object, str, str, int], T]
) -> list[T]:
    """A repeated scalar field: `decode_item(item, path, key, index)` for each item."""
    if not isinstance(raw, list):
        raise ModelError(child(path, key), f"must be an array, not {json_type(raw)}")
    return [decode_item(item, path, key, index) for index, item in enumerate(raw)]


def decode_message_array(
    raw: object, path: str, key: str, decode_message: Callable[[object, str], M]
) -> list[M]:
    """A repeated message field: `decode_message(item, "<path>.<key>[<index>]")` for each item."""
    if not isinstance(raw, list):
        raise ModelError(child(path, key), f"must be an array, not {json_type(raw)}")
    here = f"{path}.{key}" if path else key
    return [decode_message(item, f"{here}[{index}]") for index, item in enumerate(raw)]


def decode_map(
    raw: object, path: str, key: str, decode_value: Callable[[object, str, str, str], T]
) -> dict[str, T]:
    """A map of scalars (`map<string, V>`): `decode_value(value, path, key, name)` for each."""
    entries = raw if isinstance(raw, dict) else expect_object(raw, child(path, key))
    return {name: decode_value(value, path, key, name) for name, value in entries.items()}


def decode_message_map(
    raw: object, path: str, key: str, decode_message: Callable[[object, str], M]
) -> dict[str, M]:
    """A map of messages: `decode_message(value, "<path>.<key>.<name>")` for each entry."""
    entries = raw if isinstance(raw, dict) else expect_object(raw, child(path, key))
    return {name: decode_message(value, child(path, key, name)) for name, value in entries.items()}


def _encode(value: Any) -> Any:
    return value.to_dict() if isinstance(value, Model) else value
