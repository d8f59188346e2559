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

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Final

from torchjob.api.model import child, json_type
from torchjob.api.pod_schema import DEFINITIONS, KUBERNETES_VERSION

__all__ = ["KUBERNETES_VERSION", "Problem", "problems"]

UNKNOWN_FIELD: Final = "unknown field"


@dataclass(frozen=True, slots=True)
class Problem:
    """`unknown` is true for a field the schema does not have; otherwise the value's type is
    wrong and `message` says what it should be."""

    path: str
    message: str
    unknown: bool


# What each scalar code accepts; bool is an int in Python but never a number in JSON.
_SCALARS: Final[dict[str, tuple[tuple[type, ...], str]]] = {
    "s": ((str,), "a string"),
    "i": ((int,), "an integer"),
    "b": ((bool,), "a boolean"),
    "n": ((int, float), "a number"),
    "q": ((str, int, float), "a quantity (a string or a number)"),
    "o": ((str, int), "an integer or a string"),
}


def problems(value: Any, definition: str, path: str) -> Iterator[Problem]:
    """Every problem in `value`, an object of the Kubernetes definition `definition` (a name in
    `pod_schema.DEFINITIONS`, such as "PodSpec") found at `path`."""
    return _walk(value, "@" + definition, path)


def _walk(value: Any, code: str, path: str) -> Iterator[Problem]:
    if value is None or code == "*":  # null is absent to the apiserver
        return
    head = code[0]
    if head == "@":
        if not isinstance(value, dict):
            yield _wrong_type(value, "an object", path)
            return
        fields = DEFINITIONS[code[1:]]
        for key, item in value.items():
            item_code = fields.get(key)
            if item_code is None:
                yield Problem(child(path, key), UNKNOWN_FIELD, True)
            elif item is not None and item_code != "*":
                yield from _walk(item, item_code, child(path, key))
    elif head == "[":
        if not isinstance(value, list):
            yield _wrong_type(value, "an array", path)
            return
        item_code = code[1:]
        if item_code[0] in _SCALARS:  # the common case (command, args): no path unless wrong
            accepted, expected = _SCALARS[item_code]
            for index, item in enumerate(value):
                if not _fits(item, item_code, accepted):
                    yield _wrong_type(item, expected, child(path, index))
            return
        for index, item in enumerate(value):
            yield from _walk(item, item_code, child(path, index))
    elif head == "{":
        if not isinstance(value, dict):
            yield _wrong_type(value, "an object", path)
            return
        item_code = code[1:]
        for key, item in value.items():  # a map key in brackets, as Kubernetes writes it
            yield from _walk(item, item_code, f"{path}[{key}]")
    else:
        accepted, expected = _SCALARS[code]
        if not _fits(value, code, accepted):
            yield _wrong_type(value, expected, path)


def _fits(value: Any, code: str, accepted: tuple[type, ...]) -> bool:
    if value is None:
        return True
    if isinstance(value, bool):
        return code == "b"
    if code == "i" and isinstance(value, float):
        return value.is_integer()  # a JSON decoder may give 3.0 for 3
    return isinstance(value, accepted)


def _wrong_type(value: Any, expected: str, path: str) -> Problem:
    return Problem(path, f"must be {expected}, not {json_type(value)}", False)
