"""The Kubernetes objects a job embeds (a replica's pod template, the job's metadata,
tensorboardSpec.resources), checked field by field against the Pod schema of the Kubernetes
version we support, as the apiserver's strict field validation checks a Pod: every field it does
not know and every value of the wrong JSON type, with its path. Pure.

The CRD keeps the pod template opaque (`x-kubernetes-preserve-unknown-fields`), so the apiserver
stores a misspelled field there without a word and drops it only when the reconciler creates the
pod. The field tree comes from the apiserver's own OpenAPI document, reduced by
tools/gen-pod-schema into `pod_schema.py`, a module of data, so nothing is read at call time.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

from torchjob.api.model import child, json_type
from torchjob.api.pod_schema import DEFINITIONS, KUBERNETES_VERSION

__all__ = ["KUBERNETES_VERSION", "Problem", "fits", "problems"]

UNKNOWN_FIELD: Final = "unknown field"


@dataclass(frozen=True, slots=True)
class Problem:
    """`unknown` is true for a field the schema does not have; otherwise the value's type is
    wrong and `message` says what it should be."""

    path: str
    message: str
    unknown: bool


# What each scalar code accepts, by exact type (bool is an int in Python, never a number in JSON),
# and how an error names it.
_SCALARS: Final[dict[str, tuple[frozenset[type], str]]] = {
    "s": (frozenset({str}), "a string"),
    "i": (frozenset({int}), "an integer"),
    "b": (frozenset({bool}), "a boolean"),
    "n": (frozenset({int, float}), "a number"),
    "q": (frozenset({str, int, float}), "a quantity (a string or a number)"),
    "o": (frozenset({str, int}), "an integer or a string"),
}

# A code compiled once into a node: (kind, argument). An object's argument is its fields' nodes,
# filled in after every definition has a dict, so that definitions may refer to one another.
_ANY, _OBJECT, _ARRAY, _MAP, _SCALAR = range(5)
Node = tuple[int, Any]


def _compile(code: str, objects: dict[str, dict[str, Node]]) -> Node:
    head = code[0]
    if head == "*":
        return (_ANY, None)
    if head == "@":
        return (_OBJECT, objects[code[1:]])
    if head == "[":
        return (_ARRAY, _compile(code[1:], objects))
    if head == "{":
        return (_MAP, _compile(code[1:], objects))
    return (_SCALAR, (_SCALARS[code][0], code))


def _compile_all() -> dict[str, dict[str, Node]]:
    objects: dict[str, dict[str, Node]] = {name: {} for name in DEFINITIONS}
    for name, fields in DEFINITIONS.items():
        objects[name].update((key, _compile(code, objects)) for key, code in fields.items())
    return objects


_OBJECTS: Final = _compile_all()


def fits(value: Any, definition: str) -> bool:
    """Whether `value` has no problem as an object of the Kubernetes definition `definition`."""
    return _fits(value, (_OBJECT, _OBJECTS[definition]))


def problems(value: Any, definition: str, path: str) -> list[Problem]:
    """Every problem in `value`, an object of the Kubernetes definition `definition` (a name in
    `pod_schema.DEFINITIONS`, such as "PodSpec") found at `path`."""
    node = (_OBJECT, _OBJECTS[definition])
    # Nearly every object has no problem: a check that builds no path says so, and only an object
    # with one is walked again to name them.
    if _fits(value, node):
        return []
    found: list[Problem] = []
    _walk(value, node, path, found)
    return found


def _fits(value: Any, node: Node) -> bool:
    # The hot loop of admission: scalars, most of any template, are checked inline.
    kind, argument = node
    if kind == _OBJECT:
        if type(value) is not dict:
            return False
        for key, item in value.items():
            field = argument.get(key)
            if field is None:
                return False
            if item is None:
                continue
            if field[0] == _SCALAR:
                if type(item) not in field[1][0] and not _integral(item, field[1][1]):
                    return False
            elif field[0] != _ANY and not _fits(item, field):
                return False
        return True
    if kind == _SCALAR:
        return type(value) in argument[0] or _integral(value, argument[1])
    if kind == _ARRAY:
        if type(value) is not list:
            return False
        items: Any = value
    elif kind == _MAP:
        if type(value) is not dict:
            return False
        items = value.values()
    else:
        return True
    if argument[0] == _SCALAR:
        accepted, code = argument[1]
        for item in items:
            if item is not None and type(item) not in accepted and not _integral(item, code):
                return False
        return True
    # Loops rather than all() over a generator, here and above: about half the time.
    for item in items:  # noqa: SIM110
        if item is not None and not _fits(item, argument):
            return False
    return True


def _integral(value: Any, code: str) -> bool:
    """A float with no fraction where an integer goes: a JSON decoder may give 3.0 for 3."""
    return code == "i" and type(value) is float and value.is_integer()


def _walk(value: Any, node: Node, path: str, found: list[Problem]) -> None:
    kind, argument = node
    if value is None or kind == _ANY:  # null is absent to the apiserver
        return
    if kind == _OBJECT:
        if not isinstance(value, dict):
            found.append(_wrong_type(value, "an object", path))
            return
        for key, item in value.items():
            field = argument.get(key)
            if field is None:
                found.append(Problem(child(path, key), UNKNOWN_FIELD, True))
            else:
                _walk(item, field, child(path, key), found)
    elif kind == _ARRAY:
        if not isinstance(value, list):
            found.append(_wrong_type(value, "an array", path))
            return
        for index, item in enumerate(value):
            _walk(item, argument, child(path, index), found)
    elif kind == _MAP:
        if not isinstance(value, dict):
            found.append(_wrong_type(value, "an object", path))
            return
        for key, item in value.items():  # a map key in brackets, as Kubernetes writes it
            _walk(item, argument, f"{path}[{key}]", found)
    elif not _fits(value, node):
        found.append(_wrong_type(value, _SCALARS[argument[1]][1], path))


def _wrong_type(value: Any, expected: str, path: str) -> Problem:
    return Problem(path, f"must be {expected}, not {json_type(value)}", False)
