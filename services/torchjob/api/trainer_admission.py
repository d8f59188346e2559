"""Kubeflow Trainer's API at admission: a TrainJob's defaults, and the rules of a TrainJob and of
the training runtimes it is made from. Pure: the webhook looks the runtime a TrainJob names up
first and hands it in (None where there is none).

torchjob runs the torch subset of Trainer's API (docs/trainjob.md): a runtime of PyTorch's policy
whose JobSet has a `node` replicated job and, where it names them, the dataset and model
initializers. What lies outside it (other ML policies, Trainer's own gang scheduling, JobSet
features beyond those templates) is refused with the field named, never dropped."""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import Any, Final

from torchjob.api.admission import Request, Response, defaulting_handler, invalid, refuse
from torchjob.api.defaults import JsonPatch, pointer
from torchjob.api.field_errors import Cause, FieldError, Result
from torchjob.api.job_api import TRAIN_JOB
from torchjob.api.jsoncopy import json_copy
from torchjob.api.kubeflow import STATUS_RECORD
from torchjob.api.trainer import (
    CLUSTER_RUNTIME,
    INITIALIZERS,
    NODE,
    RESERVED_ENV,
    RUNTIME_PLURALS,
    RUNTIME_RECORD,
    TRAINER_MANAGER,
    as_training_job,
    copied_runtime,
    pod_template_of,
)
from torchjob.api.trainer_types import GROUP, TrainJob
from torchjob.api.validation import decoded_job, validate

NAME: Final = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
STORAGE_URI: Final = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://.+$")
MULTIKUEUE: Final = "kueue.x-k8s.io/multikueue"
MANAGERS: Final = (TRAINER_MANAGER, MULTIKUEUE)
TORCH_ONLY: Final = "torchjob runs PyTorch's runtimes (spec.mlPolicy.torch) only"
# Why each part of a runtime torchjob does not run is refused.
REFUSED_POLICIES: Final = {
    "mpi": TORCH_ONLY,
    "jax": TORCH_ONLY,
    "xgboost": TORCH_ONLY,
    "flux": TORCH_ONLY,
}
GANG: Final = (
    "Kubeflow Trainer's gang scheduling is not torchjob's: remove it and set the TrainJob's "
    "annotation batch.tensorstack.dev/gang-scheduling, or queue it with Kueue (docs/scheduling.md)"
)
ENV_INJECTION: Final = "only the `node` container gets torchrun's environment in torchjob"
# What of the JobSet template torchjob runs; every other key is refused by name.
JOBSET_KEYS: Final = frozenset({"replicatedJobs", "ttlSecondsAfterFinished"})
REPLICATED_JOB_KEYS: Final = frozenset({"name", "template", "replicas", "dependsOn"})
JOB_SPEC_KEYS: Final = frozenset({"template", "backoffLimit", "parallelism", "completions"})
REPLICATED_JOBS: Final = (NODE, *(name for name, _ in INITIALIZERS))


# -- defaults -------------------------------------------------------------------------------------


def default_trainjob(
    job: dict[str, Any], *, in_place: bool = False
) -> tuple[dict[str, Any], JsonPatch]:
    """Trainer's defaults where absent: the runtime's API group and kind (a
    ClusterTrainingRuntime), and a job that is not suspended."""
    out = job if in_place else json_copy(job)
    patch: JsonPatch = []
    spec = out.get("spec")
    if not isinstance(spec, dict):
        return out, patch
    ref = spec.get("runtimeRef")
    if isinstance(ref, dict):
        for key, value in (("apiGroup", GROUP), ("kind", CLUSTER_RUNTIME)):
            if ref.get(key) is None:
                ref[key] = value
                patch.append(
                    {"op": "add", "path": pointer("spec", "runtimeRef", key), "value": value}
                )
    if spec.get("suspend") is None:
        spec["suspend"] = False
        patch.append({"op": "add", "path": pointer("spec", "suspend"), "value": False})
    return out, patch


# -- a runtime ------------------------------------------------------------------------------------


def runtime_errors(spec: Any, path: str = "spec") -> list[FieldError]:
    """What of a runtime's spec torchjob does not run, each error naming its field."""
    if not isinstance(spec, Mapping):
        return [FieldError(path, "is required", Cause.REQUIRED)]
    return list(_policy_errors(spec, path)) + list(_jobset_errors(spec.get("template"), path))


def _policy_errors(spec: Mapping[str, Any], path: str) -> Iterator[FieldError]:
    policy = spec.get("mlPolicy") or {}
    for key, why in REFUSED_POLICIES.items():
        if policy.get(key) is not None:
            yield FieldError(f"{path}.mlPolicy.{key}", why, Cause.NOT_SUPPORTED)
    if policy.get("torch") is None and not any(policy.get(k) is not None for k in REFUSED_POLICIES):
        yield FieldError(f"{path}.mlPolicy.torch", TORCH_ONLY, Cause.REQUIRED)
    if (policy.get("torch") or {}).get("envInjection") is not None:
        yield FieldError(f"{path}.mlPolicy.torch.envInjection", ENV_INJECTION, Cause.NOT_SUPPORTED)
    if spec.get("podGroupPolicy") is not None:
        yield FieldError(f"{path}.podGroupPolicy", GANG, Cause.NOT_SUPPORTED)


def _jobset_errors(template: Any, path: str) -> Iterator[FieldError]:
    path = f"{path}.template.spec"
    jobset = (template or {}).get("spec") if isinstance(template, Mapping) else None
    if not isinstance(jobset, Mapping):
        yield FieldError(
            path, "is required: the JobSet with a `node` replicated job", Cause.REQUIRED
        )
        return
    yield from _unknown(jobset, JOBSET_KEYS, path, "a JobSet feature torchjob does not run")
    jobs = jobset.get("replicatedJobs") or []
    names = [j.get("name") for j in jobs if isinstance(j, Mapping)]
    if NODE not in names:
        yield FieldError(
            f"{path}.replicatedJobs", "needs the `node` replicated job", Cause.REQUIRED
        )
    for index, job in enumerate(jobs):
        yield from _replicated_job_errors(job, f"{path}.replicatedJobs[{index}]")


def _replicated_job_errors(job: Any, path: str) -> Iterator[FieldError]:
    if not isinstance(job, Mapping):
        yield FieldError(path, "must be an object")
        return
    name = job.get("name")
    if name not in REPLICATED_JOBS:
        allowed = ", ".join(REPLICATED_JOBS)
        yield FieldError(f"{path}.name", f"torchjob runs the replicated jobs {allowed} only")
        return
    yield from _unknown(job, REPLICATED_JOB_KEYS, path, "a JobSet feature torchjob does not run")
    if job.get("replicas") not in (None, 1):
        yield FieldError(f"{path}.replicas", "must be 1: spec.trainer.numNodes counts the nodes")
    job_spec = (job.get("template") or {}).get("spec") or {}
    yield from _unknown(
        job_spec, JOB_SPEC_KEYS, f"{path}.template.spec", "a Job setting torchjob does not run"
    )
    containers = (pod_template_of(job).get("spec") or {}).get("containers") or []
    if name not in [c.get("name") for c in containers if isinstance(c, Mapping)]:
        yield FieldError(
            f"{path}.template.spec.template.spec.containers",
            f"needs the container `{name}`, as Kubeflow Trainer names it",
            Cause.REQUIRED,
        )


def _unknown(
    obj: Mapping[str, Any], known: frozenset[str], path: str, why: str
) -> Iterator[FieldError]:
    for key in obj:
        if key not in known:
            yield FieldError(f"{path}.{key}", why, Cause.NOT_SUPPORTED)


def validate_runtime_request(request: Request) -> Response:
    """The validating handler of both runtime kinds."""
    if request.operation not in ("CREATE", "UPDATE"):
        return Response(request.uid, True)
    if not isinstance(request.object, dict):
        return refuse(request.uid, "request.object must be a training runtime")
    kind = str(request.object.get("kind") or "TrainingRuntime")
    return invalid(request, kind, Result(runtime_errors(request.object.get("spec"))))


# -- a TrainJob -----------------------------------------------------------------------------------


def validate_trainjob(
    obj: Any, old: Any = None, runtime: Mapping[str, Any] | None = None, *, resolved: bool = True
) -> Result:
    """Validate a defaulted TrainJob against the runtime it names (None: not found); with `old`
    (defaulted too), also the rules of an update. Not `resolved`: no runtime was looked for
    (a manifest checked away from its cluster), and only Trainer's own rules apply."""
    result = Result()
    job = decoded_job(TrainJob, obj, result)
    if job is None:
        return result
    spec = obj.get("spec") or {}
    errors = list(_name_errors(obj)) + list(_spec_errors(spec))
    if isinstance(old, Mapping):
        errors += list(_update_errors(old.get("spec") or {}, spec))
    if spec.get("managedBy") not in (None, "", TRAINER_MANAGER):
        result.errors = errors  # another controller runs it: its runtime is not ours to judge
        return result
    if resolved and (spec.get("runtimeRef") or {}).get("name"):
        errors += list(_runtime_errors(obj, runtime))
    result.errors = errors
    return result


def _name_errors(obj: Mapping[str, Any]) -> Iterator[FieldError]:
    name = str((obj.get("metadata") or {}).get("name") or "")
    if name and (len(name) > 63 or not NAME.match(name)):
        yield FieldError(
            "metadata.name", "must be a DNS label (a-z, 0-9, '-') of at most 63 characters"
        )


def _spec_errors(spec: Mapping[str, Any]) -> Iterator[FieldError]:
    ref = spec.get("runtimeRef") or {}
    if not ref.get("name"):
        yield FieldError("spec.runtimeRef.name", "is required", Cause.REQUIRED)
    if ref.get("apiGroup") not in (None, GROUP):
        yield FieldError("spec.runtimeRef.apiGroup", f"must be {GROUP}", Cause.NOT_SUPPORTED)
    if ref.get("kind") not in (None, *RUNTIME_PLURALS):
        yield FieldError(
            "spec.runtimeRef.kind",
            f"must be one of {', '.join(RUNTIME_PLURALS)}",
            Cause.NOT_SUPPORTED,
        )
    if spec.get("managedBy") not in (None, "", *MANAGERS):
        yield FieldError(
            "spec.managedBy", f"must be one of {', '.join(MANAGERS)}", Cause.NOT_SUPPORTED
        )
    for index, variable in enumerate((spec.get("trainer") or {}).get("env") or []):
        if isinstance(variable, Mapping) and variable.get("name") in RESERVED_ENV:
            yield FieldError(
                f"spec.trainer.env[{index}].name",
                "torchrun's variables are set by torchjob from the job (docs/trainjob.md)",
                Cause.FORBIDDEN,
            )
    for _, key in INITIALIZERS:
        uri = ((spec.get("initializer") or {}).get(key) or {}).get("storageUri")
        if uri and not STORAGE_URI.match(str(uri)):
            yield FieldError(f"spec.initializer.{key}.storageUri", "must be a URI: scheme://...")
    for index, patch in enumerate(spec.get("runtimePatches") or []):
        body = (patch or {}).get("trainingRuntimeSpec") if isinstance(patch, Mapping) else None
        yield from _patch_errors(body or {}, f"spec.runtimePatches[{index}].trainingRuntimeSpec")


def _patch_errors(body: Mapping[str, Any], path: str) -> Iterator[FieldError]:
    """A runtime patch may set labels and annotations only: of the JobSet, the `node` Job and
    its pods."""
    why = "torchjob applies the labels and annotations of a runtime patch only"
    yield from _unknown(body, frozenset({"template"}), path, why)
    template = body.get("template") or {}
    yield from _unknown(template, frozenset({"metadata", "spec"}), f"{path}.template", why)
    yield from _meta_errors(template.get("metadata"), f"{path}.template.metadata", why)
    jobset = template.get("spec") or {}
    yield from _unknown(jobset, frozenset({"replicatedJobs"}), f"{path}.template.spec", why)
    for index, job in enumerate(jobset.get("replicatedJobs") or []):
        at = f"{path}.template.spec.replicatedJobs[{index}]"
        yield from _unknown(job, frozenset({"name", "template"}), at, why)
        job_template = job.get("template") or {}
        yield from _unknown(job_template, frozenset({"metadata", "spec"}), f"{at}.template", why)
        yield from _meta_errors(job_template.get("metadata"), f"{at}.template.metadata", why)
        job_spec = job_template.get("spec") or {}
        yield from _unknown(job_spec, frozenset({"template"}), f"{at}.template.spec", why)
        pod = job_spec.get("template") or {}
        yield from _unknown(pod, frozenset({"metadata"}), f"{at}.template.spec.template", why)
        yield from _meta_errors(pod.get("metadata"), f"{at}.template.spec.template.metadata", why)


def _meta_errors(meta: Any, path: str, why: str) -> Iterator[FieldError]:
    if isinstance(meta, Mapping):
        yield from _unknown(meta, frozenset({"labels", "annotations"}), path, why)


def _update_errors(old: Mapping[str, Any], new: Mapping[str, Any]) -> Iterator[FieldError]:
    for key in ("trainer", "initializer", "activeDeadlineSeconds"):
        if old.get(key) != new.get(key):
            yield FieldError(f"spec.{key}", "is immutable", Cause.FORBIDDEN)
    if old.get("runtimePatches") != new.get("runtimePatches") and not (
        old.get("suspend") and new.get("suspend")
    ):
        yield FieldError(
            "spec.runtimePatches", "may change only while the job is suspended", Cause.FORBIDDEN
        )


def _runtime_errors(
    obj: Mapping[str, Any], runtime: Mapping[str, Any] | None
) -> Iterator[FieldError]:
    """The runtime must exist and be one torchjob runs; the job made from it must pass
    torchjob's own rules."""
    ref = (obj.get("spec") or {}).get("runtimeRef") or {}
    kind, name = ref.get("kind") or CLUSTER_RUNTIME, ref.get("name")
    if runtime is None:
        where = (
            f" in namespace {(obj.get('metadata') or {}).get('namespace')}"
            if kind != CLUSTER_RUNTIME
            else ""
        )
        yield FieldError(
            "spec.runtimeRef.name", f"{kind} {name!r} not found{where}", Cause.NOT_SUPPORTED
        )
        return
    for error in runtime_errors(runtime.get("spec")):
        yield FieldError("spec.runtimeRef.name", f"{kind} {name!r}: {error}", Cause.NOT_SUPPORTED)
    spec = obj.get("spec") or {}
    initializers = [n for n, key in INITIALIZERS if (spec.get("initializer") or {}).get(key)]
    jobs = ((runtime.get("spec") or {}).get("template") or {}).get("spec") or {}
    present = {j.get("name") for j in jobs.get("replicatedJobs") or [] if isinstance(j, Mapping)}
    for name_, key in INITIALIZERS:
        if name_ in initializers and name_ not in present:
            yield FieldError(
                f"spec.initializer.{key}", f"{kind} {name!r} has no {name_}", Cause.NOT_SUPPORTED
            )
    yield from _our_rules(obj, runtime)


def _our_rules(obj: Mapping[str, Any], runtime: Mapping[str, Any]) -> Iterator[FieldError]:
    """torchjob's rules on the PyTorchTrainingJob the job is made into, their paths those of
    the TrainJob's fields that made them."""
    job = dict(obj)
    job["status"] = {STATUS_RECORD: {RUNTIME_RECORD: {"spec": runtime.get("spec") or {}}}}
    training = {
        k: v
        for k, v in as_training_job(job).items()
        if k in ("apiVersion", "kind", "metadata", "spec")
    }
    for error in validate(training).errors:
        yield FieldError(_trainjob_path(error.path), error.message, error.cause)


def _trainjob_path(path: str) -> str:
    if path.startswith("spec.replicaSpecs[0].replicas"):
        return "spec.trainer.numNodes"
    if path.startswith("spec.runPolicy.activeDeadlineSeconds"):
        return "spec.activeDeadlineSeconds"
    if path.startswith("spec.replicaSpecs"):
        return "spec.runtimeRef.name"  # the runtime's `node` pod template, with the overrides
    return path


def validate_trainjob_request(request: Request, runtime: Mapping[str, Any] | None) -> Response:
    """The validating handler of TrainJobs, given the runtime the job names (None: none)."""
    if request.operation not in ("CREATE", "UPDATE"):
        return Response(request.uid, True)
    if not isinstance(request.object, dict):
        return refuse(request.uid, f"request.object must be a {TRAIN_JOB.kind} object")
    new, _ = default_trainjob(request.object, in_place=True)
    old = None
    if request.operation == "UPDATE" and isinstance(request.old_object, dict):
        old, _ = default_trainjob(request.old_object, in_place=True)
    # A job that started is judged by the runtime it was made from, whatever became of that.
    made_from = copied_runtime(request.old_object) if isinstance(request.old_object, dict) else None
    return invalid(request, TRAIN_JOB.kind, validate_trainjob(new, old, made_from or runtime))


mutate_trainjob = defaulting_handler(default_trainjob)


def validate_trainjob_unresolved(request: Request) -> Response:
    """The validating handler where no runtime was looked up (the webhook looks one up first:
    `Admission.validate_with_template`)."""
    return validate_trainjob_request(request, None)
