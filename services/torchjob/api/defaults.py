"""Defaulting: fill in only the fields the user left out, never rewrite what was written.

Works on the plain JSON object (so unknown and opaque content is untouched) and returns the
JSONPatch that turns the user's object into the defaulted one. Applying it twice adds nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from torchjob.api import types
from torchjob.api.jsoncopy import json_copy
from torchjob.api.model import FieldInfo, Model

JsonPatch = list[dict[str, Any]]

# Parent objects created when absent, so that their defaults can be filled in.
CREATED_WHEN_ABSENT: dict[type[Model], tuple[str, ...]] = {
    types.PyTorchTrainingJobSpec: ("runPolicy",),
}


def pointer(*parts: str | int) -> str:
    """An RFC 6901 JSON pointer."""
    return "".join("/" + str(p).replace("~", "~0").replace("/", "~1") for p in parts)


def default_job(job: dict[str, Any], *, in_place: bool = False) -> tuple[dict[str, Any], JsonPatch]:
    """The defaulted copy of `job` and the JSONPatch (`add` operations only) that makes it. With
    `in_place`, `job` itself is defaulted: for a caller that owns it, such as an admission
    handler with the request it has just decoded, and can spare the copy."""
    out = job if in_place else json_copy(job)
    patch: JsonPatch = []
    spec = out.get("spec")
    if isinstance(spec, dict):
        _default_object(types.PyTorchTrainingJobSpec, spec, ("spec",), patch)
    return out, patch


def _default_object(
    model: type[Model], obj: dict[str, Any], path: tuple[str | int, ...], patch: JsonPatch
) -> None:
    plan = _plan_of(model)
    for key in plan.created_when_absent:
        if obj.get(key) is None:
            obj[key] = {}
            patch.append({"op": "add", "path": pointer(*path, key), "value": {}})
    for info in plan.with_default:
        if obj.get(info.key) is None:
            obj[info.key] = json_copy(info.default)
            patch.append({"op": "add", "path": pointer(*path, info.key), "value": info.default})
    for info, child_model in plan.messages:
        value = obj.get(info.key)
        if value is not None:
            _default_child(child_model, value, (*path, info.key), info.repeated, patch)


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


@dataclass(frozen=True, slots=True)
class _DefaultingPlan:
    """What defaulting looks at in one message, worked out once per message class."""

    created_when_absent: tuple[str, ...]
    with_default: tuple[FieldInfo, ...]
    messages: tuple[tuple[FieldInfo, type[Model]], ...]


_PLANS: dict[type[Model], _DefaultingPlan] = {}


def _plan_of(model: type[Model]) -> _DefaultingPlan:
    plan = _PLANS.get(model)
    if plan is None:
        plan = _PLANS[model] = _DefaultingPlan(
            created_when_absent=CREATED_WHEN_ABSENT.get(model, ()),
            with_default=tuple(info for info in model.FIELDS if info.default is not None),
            messages=tuple(
                (info, types_by_name(info.ref)) for info in model.FIELDS if info.kind == "message"
            ),
        )
    return plan


def types_by_name(name: str) -> type[Model]:
    model = getattr(types, name)
    assert isinstance(model, type) and issubclass(model, Model)
    return model
