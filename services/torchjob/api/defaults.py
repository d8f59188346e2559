"""Defaulting: fill in only the fields the user left out, never rewrite what was written.

Works on the plain JSON object (so unknown and opaque content is untouched) and returns the
JSONPatch that turns the user's object into the defaulted one. Applying it twice adds nothing.
"""

from __future__ import annotations

from typing import Any

from torchjob.api import types
from torchjob.api.jsoncopy import json_copy
from torchjob.api.model import Model

JsonPatch = list[dict[str, Any]]

# Parent objects created when absent, so that their defaults can be filled in.
CREATED_WHEN_ABSENT: dict[type[Model], tuple[str, ...]] = {
    types.PyTorchTrainingJobSpec: ("runPolicy",),
}


def pointer(*parts: str | int) -> str:
    """An RFC 6901 JSON pointer."""
    return "".join("/" + str(p).replace("~", "~0").replace("/", "~1") for p in parts)


def default_job(job: dict[str, Any]) -> tuple[dict[str, Any], JsonPatch]:
    """The defaulted copy of `job` and the JSONPatch (`add` operations only) that makes it."""
    out = json_copy(job)
    patch: JsonPatch = []
    spec = out.get("spec")
    if isinstance(spec, dict):
        _default_object(types.PyTorchTrainingJobSpec, spec, ("spec",), patch)
    return out, patch


def _default_object(
    model: type[Model], obj: dict[str, Any], path: tuple[str | int, ...], patch: JsonPatch
) -> None:
    for key in CREATED_WHEN_ABSENT.get(model, ()):
        if obj.get(key) is None:
            obj[key] = {}
            patch.append({"op": "add", "path": pointer(*path, key), "value": {}})
    for info in model.FIELDS:
        value = obj.get(info.key)
        if value is None and info.default is not None:
            obj[info.key] = json_copy(info.default)
            patch.append({"op": "add", "path": pointer(*path, info.key), "value": info.default})
        elif info.kind == "message":
            _default_child(types_by_name(info.ref), value, (*path, info.key), info.repeated, patch)


def _default_child(
    model: type[Model], value: Any, path: tuple[str | int, ...], repeated: bool, patch: JsonPatch
) -> None:
    # A wrongly typed value is left for validation to report.
    if repeated and isinstance(value, list):
        for index, item in enumerate(value):
            if isinstance(item, dict):
                _default_object(model, item, (*path, index), patch)
    elif not repeated and isinstance(value, dict):
        _default_object(model, value, path, patch)


def types_by_name(name: str) -> type[Model]:
    model = getattr(types, name)
    assert isinstance(model, type) and issubclass(model, Model)
    return model
