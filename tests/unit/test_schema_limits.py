"""The CRD schema's limits, carried into the generated model: every one matches the CRD, and
`validate(schema=True)` (what `torchjob run` calls, with no apiserver before it) reports each
broken limit with its field path."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from support.jobs import JobBuilder

from torchjob.api import types
from torchjob.api.defaults import default_job
from torchjob.api.model import Limits, Model
from torchjob.api.validation import validate

ROOT = Path(__file__).resolve().parents[2]
CRD = ROOT / "crds" / f"{types.GROUP}_{types.PLURAL}.yaml"

PROPERTY_LIMITS = {
    "minimum": "minimum",
    "maximum": "maximum",
    "minLength": "min_length",
    "maxLength": "max_length",
    "pattern": "pattern",
}
ARRAY_LIMITS = {"minItems": "min_items", "maxItems": "max_items"}


def crd_schema() -> dict[str, Any]:
    crd = yaml.safe_load(CRD.read_text())
    schema: dict[str, Any] = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return schema


def limits_in_crd(prop: dict[str, Any], required: bool) -> Limits:
    values: dict[str, Any] = {"required": required}
    value_schema = prop.get("items", prop) if prop.get("type") == "array" else prop
    values |= {
        name: value_schema[key] for key, name in PROPERTY_LIMITS.items() if key in value_schema
    }
    values |= {name: prop[key] for key, name in ARRAY_LIMITS.items() if key in prop}
    return Limits(**values)


def mismatches(model: type[Model], schema: dict[str, Any], path: str) -> list[str]:
    """Where a FieldInfo's limits differ from what the CRD states for that field."""
    found = []
    required = set(schema.get("required", []))
    for info in model.FIELDS:
        prop = schema["properties"][info.key]
        here = f"{path}.{info.key}"
        expected = limits_in_crd(prop, info.key in required)
        if (info.limits or Limits()) != expected:
            found.append(f"{here}: model {info.limits}, CRD {expected}")
        if info.kind == "message":
            target = prop["items"] if info.repeated else prop
            found += mismatches(getattr(types, info.ref), target, here)
    return found


def test_every_limit_of_the_crd_is_in_the_model_and_no_other() -> None:
    assert mismatches(types.PyTorchTrainingJob, crd_schema(), "") == []


TRAINER = {"name": "python", "image": "i", "args": ["train.py"]}
WORKER = JobBuilder(namespace="ns").torchrun().replicas("worker", container=TRAINER)


CASES = [
    (
        WORKER.clone().torchrun(procPerNode="0").build(),
        "spec.torchrunConfig.procPerNode",
        "'0' does not match ^([1-9][0-9]{0,3}|gpu)$",
    ),
    (
        # Python's `$` would match before the newline; the apiserver's does not.
        WORKER.clone().torchrun(procPerNode="4\n").build(),
        "spec.torchrunConfig.procPerNode",
        "'4\\n' does not match ^([1-9][0-9]{0,3}|gpu)$",
    ),
    (
        WORKER.clone().torchrun(maxRestarts=-1).build(),
        "spec.torchrunConfig.maxRestarts",
        "-1 is less than the minimum 0",
    ),
    (
        WORKER.clone().torchrun(extraOptions=["--x"] * 65).build(),
        "spec.torchrunConfig.extraOptions",
        "must have at most 64 items",
    ),
    (
        WORKER.clone().torchrun(extraOptions=["x" * 1025]).build(),
        "spec.torchrunConfig.extraOptions[0]",
        "must be at most 1024 characters",
    ),
    (
        WORKER.clone().spec(elastic={"minReplicas": 0}).build(),
        "spec.elastic.minReplicas",
        "0 is less than the minimum 1",
    ),
    (
        WORKER.clone().tensorboard(image="").build(),
        "spec.tensorboardSpec.image",
        "must be at least 1 character",
    ),
    (
        WORKER.clone().tensorboard(trainingLogFilesets=[]).build(),
        "spec.tensorboardSpec.image",
        "is required",
    ),
    (
        WORKER.clone().spec(scheduler={"t9kScheduler": {"priority": 5}}).build(),
        "spec.scheduler.t9kScheduler.queue",
        "is required",
    ),
]


@pytest.mark.parametrize(("job", "path", "message"), CASES)
def test_a_broken_limit_is_reported_with_its_field(
    job: dict[str, Any], path: str, message: str
) -> None:
    defaulted, _ = default_job(job)
    errors = {e.path: e.message for e in validate(defaulted, schema=True).errors}
    assert errors.get(path) == message, errors
    # The webhook's validation leaves these to the apiserver, which checks them before it.
    assert path not in {e.path for e in validate(defaulted).errors}


def test_the_largest_replica_count_is_still_valid_and_one_more_is_not() -> None:
    def replicas_errors(count: int) -> list[str]:
        job = WORKER.clone().replica_count(count).build()
        return [str(e) for e in validate(default_job(job)[0], schema=True).errors]

    assert replicas_errors(10000) == []
    assert replicas_errors(10001) == [
        "spec.replicaSpecs[0].replicas: 10001 is more than the maximum 10000"
    ]


def test_a_field_a_rule_refuses_gets_one_message_not_two() -> None:
    job = WORKER.clone().replica_count(0).build()  # a rule and the CRD's minimum both refuse it
    errors = [str(e) for e in validate(default_job(job)[0], schema=True).errors]
    assert errors == ["spec.replicaSpecs[0].replicas: must be at least 1"]


def test_a_status_in_the_manifest_is_not_checked_as_the_apiserver_drops_it() -> None:
    job = WORKER.build()
    job["status"] = {"conditions": [{"type": "Running"}]}  # no `status`, which the CRD requires
    assert validate(default_job(job)[0], schema=True).errors == []
