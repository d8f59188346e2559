"""The checks the apiserver makes from the CRD's schema before any webhook sees a job, made again
for `torchjob run` (which has no apiserver) and for what the CRD keeps opaque: unknown fields
(in the spec, from the generated model; in the embedded Kubernetes objects, from the Pod schema),
and the schema's limits (bounds, lengths, patterns, required fields, item counts). Pure."""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator
from typing import Any

from torchjob.api import pod_fields
from torchjob.api.field_errors import Cause, FieldError, counted
from torchjob.api.model import Limits, Model, child
from torchjob.api.types import PodTemplateSpec, PyTorchTrainingJob, TensorBoardSpec

# The fields of our schema that hold a Kubernetes object, with the definition of its type in the
# Pod schema of the Kubernetes version we support (api/pod_schema.py).
EMBEDDED: dict[tuple[type[Model], str], str] = {
    (PyTorchTrainingJob, "metadata"): "ObjectMeta",
    (PodTemplateSpec, "metadata"): "ObjectMeta",
    (PodTemplateSpec, "spec"): "PodSpec",
    (TensorBoardSpec, "resources"): "ResourceRequirements",
}


def unknown_field_errors(job: PyTorchTrainingJob) -> list[FieldError]:
    """Every field of the object that its schema does not have, as the apiserver's strict field
    validation refuses them (`kubectl apply` validates strictly by default): top-level and in the
    spec, from the CRD's structural schema, which the generated model knows; inside the Kubernetes
    objects the spec embeds (a replica's pod template above all, which the CRD keeps opaque), from
    the Pod schema, with each value's JSON type. The status is the reconciler's, written through
    its own subresource, and is not checked."""
    errors = [FieldError(key, pod_fields.UNKNOWN_FIELD, Cause.NOT_SUPPORTED) for key in job.extra]
    if job.metadata is not None:
        _embedded_errors(job.metadata, "ObjectMeta", "metadata", errors)
    # Nearly every spec has no unknown field: a check that builds no path says so, and only a
    # spec with one is walked again to name them.
    if job.spec is not None and not _fits_model(job.spec):
        _model_unknown_errors(job.spec, "spec", errors)
    return errors


# Per message class, the fields that can hold an unknown field: (attribute, key, repeated, the
# Kubernetes definition of an embedded object or "" for a message of ours). Admission walks every
# job through them, so they are worked out once.
_WALKED: dict[type[Model], tuple[tuple[str, str, bool, str], ...]] = {}


def _walked(model: type[Model]) -> tuple[tuple[str, str, bool, str], ...]:
    walked = _WALKED.get(model)
    if walked is None:
        walked = _WALKED[model] = tuple(
            (info.attr, info.key, info.repeated, EMBEDDED.get((model, info.key), ""))
            for info in model.FIELDS
            if info.kind == "message" or (model, info.key) in EMBEDDED
        )
    return walked


def _fits_model(message: Model) -> bool:
    """Whether `message` and the messages and embedded objects within it have no unknown field
    and no value of the wrong type (what `_model_unknown_errors` would report)."""
    if message.extra:
        return False
    for attr, _, repeated, definition in _walked(type(message)):
        value = getattr(message, attr)
        if value is None:
            continue
        if definition:
            if not pod_fields.fits(value, definition):
                return False
        elif not repeated:
            if not _fits_model(value):
                return False
        else:
            for item in value:
                if not _fits_model(item):
                    return False
    return True


def _model_unknown_errors(message: Model, path: str, errors: list[FieldError]) -> None:
    for key in message.extra:
        errors.append(FieldError(child(path, key), pod_fields.UNKNOWN_FIELD, Cause.NOT_SUPPORTED))
    for attr, key, repeated, definition in _walked(type(message)):
        value = getattr(message, attr)
        if value is None:
            continue
        if definition:
            _embedded_errors(value, definition, child(path, key), errors)
        elif not repeated:
            _model_unknown_errors(value, child(path, key), errors)
        else:
            for index, item in enumerate(value):
                _model_unknown_errors(item, child(path, key, index), errors)


def _embedded_errors(value: Any, definition: str, path: str, errors: list[FieldError]) -> None:
    for problem in pod_fields.problems(value, definition, path):
        cause = Cause.NOT_SUPPORTED if problem.unknown else Cause.INVALID
        errors.append(FieldError(problem.path, problem.message, cause))


def schema_errors(message: Model, path: str = "") -> Iterator[FieldError]:
    """Every value that breaks a limit of the CRD schema (bounds, lengths, patterns, required
    fields, item counts), in this message and the messages within it."""
    for info in message.FIELDS:
        value = getattr(message, info.attr)
        here = child(path, info.key)
        if info.limits is not None:
            yield from _limit_errors(info.limits, info.repeated, value, here)
        if info.kind != "message" or value is None:
            continue
        if not info.repeated:
            yield from schema_errors(value, here)
            continue
        for index, item in enumerate(value):
            yield from schema_errors(item, child(here, index))


def _limit_errors(limits: Limits, repeated: bool, value: Any, path: str) -> Iterator[FieldError]:
    if value is None:
        if limits.required:
            yield FieldError(path, "is required", Cause.REQUIRED)
        return
    if not repeated:
        yield from _value_errors(limits, value, path)
        return
    if limits.min_items is not None and len(value) < limits.min_items:
        yield FieldError(path, f"must have at least {counted(limits.min_items, 'item')}")
    if limits.max_items is not None and len(value) > limits.max_items:
        yield FieldError(
            path, f"must have at most {counted(limits.max_items, 'item')}", Cause.TOO_MANY
        )
    for index, item in enumerate(value):
        yield from _value_errors(limits, item, child(path, index))


def _value_errors(limits: Limits, value: Any, path: str) -> Iterator[FieldError]:
    if isinstance(value, int):
        if limits.minimum is not None and value < limits.minimum:
            yield FieldError(path, f"{value} is less than the minimum {limits.minimum}")
        if limits.maximum is not None and value > limits.maximum:
            yield FieldError(path, f"{value} is more than the maximum {limits.maximum}")
    if not isinstance(value, str):
        return
    if limits.min_length is not None and len(value) < limits.min_length:
        yield FieldError(path, f"must be at least {counted(limits.min_length, 'character')}")
    if limits.max_length is not None and len(value) > limits.max_length:
        message = f"must be at most {counted(limits.max_length, 'character')}"
        yield FieldError(path, message, Cause.TOO_LONG)
    if limits.pattern and not _compiled(limits.pattern).search(value):
        yield FieldError(path, f"{value!r} does not match {limits.pattern}")


# An unescaped `$`. The apiserver's (RE2) `$` is the end of the text; Python's also matches before
# a final newline, which would let "4\n" through a pattern the apiserver refuses it by.
END_ANCHOR = re.compile(r"(?<!\\)\$")


@functools.cache
def _compiled(pattern: str) -> re.Pattern[str]:
    return re.compile(END_ANCHOR.sub(r"\\Z", pattern))
