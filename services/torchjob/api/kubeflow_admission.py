"""Admission of Kubeflow's PyTorchJob (`kubeflow.org/v1`): its defaults, stored by our mutating
webhook, and its validation. Pure.

Kubeflow's training-operator applies its defaults in memory only and validates the object as the
user wrote it; here the defaults are stored and the defaulted object is validated, so a
`master:` key and a Master without `replicas` are accepted. The rules are Kubeflow's own (its
webhook's, with their meanings), then torchjob's on the PyTorchTrainingJob that runs the job
(api/kubeflow.py), their field paths mapped back to the PyTorchJob's. A field of the schema that
torchjob does not honour is refused (`UNSUPPORTED`), as is a field the schema does not have.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, Final

from torchjob.api.admission import defaulting_handler, validating_handler
from torchjob.api.defaults import JsonPatch, pointer
from torchjob.api.field_errors import Cause, FieldError, Result
from torchjob.api.job_api import KUBEFLOW_JOB
from torchjob.api.jsoncopy import json_copy
from torchjob.api.kubeflow import (
    CLEAN_POD_POLICIES,
    DEFAULT_CONTAINER,
    MASTER,
    REPLICA_TYPES,
    WORKER,
    as_training_job,
    kubeflow_path,
    ordered_replica_specs,
)
from torchjob.api.kubeflow_types import (
    ElasticPolicy,
    PodTemplateSpec,
    PyTorchJob,
    PyTorchJobSpec,
    ReplicaSpec,
    RunPolicy,
)
from torchjob.api.model import Model, ModelError, child
from torchjob.api.names import is_dns_1035_label
from torchjob.api.pod_fields import UNKNOWN_FIELD
from torchjob.api.types import PyTorchTrainingJob
from torchjob.api.validation import RULE_ELASTIC_NEEDS_TORCHRUN, decoded_job, validate

DEFAULT_NPROC_PER_NODE: Final = "auto"
DEFAULT_RESTART_POLICY: Final = "OnFailure"
DEFAULT_CLEAN_POD_POLICY: Final = "None"
CLEAN_POD: Final = tuple(CLEAN_POD_POLICIES)
RESTART_POLICIES: Final = ("OnFailure", "Always", "Never", "ExitCode")
MANAGERS: Final = ("kubeflow.org/training-operator", "kueue.x-k8s.io/multikueue")

# Fields of Kubeflow's schema that torchjob does not honour, each with why: a job setting one is
# refused rather than run without it (`*` stands for any key of a map). A field leaves the table
# when it becomes supported. Empty: every field of Kubeflow v1.9's schema is honoured
# (elasticPolicy.metrics, the last to be, since the reconciler makes the HorizontalPodAutoscaler).
# An entry reads: "spec.elasticPolicy.metrics": "is not supported yet: torchjob does not create
# a HorizontalPodAutoscaler; scale the job with `kubectl scale pytorchjob/<name> --replicas=N`".
UNSUPPORTED: dict[str, str] = {}

# torchjob's own rules that do not apply to a PyTorchJob: its elastic jobs rendezvous through the
# PET_* variables Kubeflow sets, without torchjob's torchrunConfig.
NOT_APPLICABLE: Final = frozenset({RULE_ELASTIC_NEEDS_TORCHRUN})


# -- defaults -------------------------------------------------------------------------------------


def default_pytorchjob(
    job: dict[str, Any], *, in_place: bool = False
) -> tuple[dict[str, Any], JsonPatch]:
    """Kubeflow's defaults, filled in where absent, and the JSONPatch that makes them: replica
    types spelt `Master` and `Worker` (the one rewrite: the old key removed, the new one added),
    one replica restarted OnFailure, a runPolicy cleaning up no pods and not suspended, elastic
    bounds from each other or from the Worker replicas, and nprocPerNode "auto" unless the
    deprecated elasticPolicy.nProcPerNode is set. Applying the patch twice adds nothing."""
    out = job if in_place else json_copy(job)
    patch: JsonPatch = []
    spec = out.get("spec")
    if not isinstance(spec, dict):
        return out, patch
    if spec.get("runPolicy") is None:
        spec["runPolicy"] = {}
        patch.append({"op": "add", "path": pointer("spec", "runPolicy"), "value": {}})
    run_policy = spec["runPolicy"]
    if isinstance(run_policy, dict):
        _fill(run_policy, ("spec", "runPolicy"), "cleanPodPolicy", DEFAULT_CLEAN_POD_POLICY, patch)
        _fill(run_policy, ("spec", "runPolicy"), "suspend", False, patch)
    replica_specs = spec.get("pytorchReplicaSpecs")
    if isinstance(replica_specs, dict):
        _normalise_types(replica_specs, patch)
        for kind, replica in replica_specs.items():
            if isinstance(replica, dict):
                path = ("spec", "pytorchReplicaSpecs", kind)
                _fill(replica, path, "replicas", 1, patch)
                _fill(replica, path, "restartPolicy", DEFAULT_RESTART_POLICY, patch)
    elastic = spec.get("elasticPolicy")
    if isinstance(elastic, dict):
        _default_elastic(elastic, replica_specs, patch)
    if not (isinstance(elastic, dict) and elastic.get("nProcPerNode") is not None):
        _fill(spec, ("spec",), "nprocPerNode", DEFAULT_NPROC_PER_NODE, patch)
    return out, patch


def _fill(
    obj: dict[str, Any], path: tuple[str, ...], key: str, value: Any, patch: JsonPatch
) -> None:
    if obj.get(key) is None:
        obj[key] = value
        patch.append({"op": "add", "path": pointer(*path, key), "value": value})


def _normalise_types(replica_specs: dict[str, Any], patch: JsonPatch) -> None:
    """`master`, `WORKER`: a key naming a replica type in another case moves to its own
    spelling, as Kubeflow's defaulting does (unless the own spelling is there too)."""
    for key in list(replica_specs):
        canonical = next((t for t in REPLICA_TYPES if t.lower() == key.lower()), None)
        if canonical is None or canonical == key or canonical in replica_specs:
            continue
        value = replica_specs.pop(key)
        replica_specs[canonical] = value
        base = ("spec", "pytorchReplicaSpecs")
        patch.append({"op": "remove", "path": pointer(*base, key)})
        patch.append({"op": "add", "path": pointer(*base, canonical), "value": json_copy(value)})


def _default_elastic(elastic: dict[str, Any], replica_specs: Any, patch: JsonPatch) -> None:
    low, high = elastic.get("minReplicas"), elastic.get("maxReplicas")
    if low is not None and high is not None:
        return
    if high is not None:
        bound: Any = high
    elif low is not None:
        bound = low
    else:
        worker = replica_specs.get(WORKER) if isinstance(replica_specs, dict) else None
        bound = worker.get("replicas") if isinstance(worker, dict) else None
        if bound is None:
            return  # no Worker: validation says so
    path = ("spec", "elasticPolicy")
    _fill(elastic, path, "minReplicas", bound, patch)
    _fill(elastic, path, "maxReplicas", bound, patch)


# -- validation -----------------------------------------------------------------------------------


def validate_pytorchjob(obj: Any, old: Any = None) -> Result:
    """Validate a defaulted PyTorchJob; with `old` (defaulted too), also the rules of an update.
    Kubeflow's rules first, then the fields torchjob does not honour or the schema does not have,
    then torchjob's own rules on the job that runs it, their paths mapped back. As for torchjob's
    own API, a rule the old object already broke does not refuse an update."""
    result = Result()
    job = decoded_job(PyTorchJob, obj, result)
    if job is None:
        return result
    errors, warnings = _object_errors(job)
    previous = _decoded(old)
    if previous is not None and errors:
        before = {str(e) for e in _object_errors(previous)[0]}
        errors = [e for e in errors if str(e) not in before]
    if previous is not None:
        errors += _update_errors(previous, job)
    refused = [e.path for e in errors]
    ours = _our_rules(obj, old if previous is not None else None)
    errors += [e for e in ours.errors if not _covered(e.path, refused)]
    result.errors = errors
    result.warnings = warnings + ours.warnings
    return result


def _decoded(old: Any) -> PyTorchJob | None:
    if old is None:
        return None
    try:
        previous = PyTorchJob.from_dict(old)
    except ModelError:
        return None  # an old object that no longer decodes cannot constrain the update
    return previous if previous.spec is not None else None


def _object_errors(job: PyTorchJob) -> tuple[list[FieldError], list[str]]:
    warnings: list[str] = []
    errors = list(_kubeflow_errors(job, warnings))
    refused = [e.path for e in errors]
    errors += [e for e in unsupported_errors(job) if not _covered(e.path, refused)]
    refused = [e.path for e in errors]
    errors += [e for e in unknown_field_errors(job) if not _covered(e.path, refused)]
    return errors, warnings


def _covered(path: str, refused: list[str]) -> bool:
    """Whether a refusal of `path`, or of a field within it or around it, is already given."""
    return any(
        path == r or path.startswith((f"{r}.", f"{r}[")) or r.startswith((f"{path}.", f"{path}["))
        for r in refused
    )


def _kubeflow_errors(job: PyTorchJob, warnings: list[str]) -> Iterator[FieldError]:
    """The rules of Kubeflow's validating webhook (v1.9), in its order, with its meanings."""
    spec = job.spec or PyTorchJobSpec()
    name = (job.metadata or {}).get("name")
    if isinstance(name, str) and name and not is_dns_1035_label(name):
        yield FieldError(
            "metadata.name",
            f"{name!r} must be a DNS-1035 label: at most 63 characters, lower-case letters, "
            "digits and '-', starting with a letter and ending with a letter or digit",
        )
    run_policy = spec.run_policy or RunPolicy()
    if run_policy.clean_pod_policy is not None:
        yield from _one_of("spec.runPolicy.cleanPodPolicy", run_policy.clean_pod_policy, CLEAN_POD)
    manager = run_policy.managed_by
    if manager is not None and manager not in MANAGERS:
        supported = ", ".join(f'"{m}"' for m in MANAGERS)
        yield FieldError(
            "spec.runPolicy.managedBy",
            f"{manager!r} is not supported: supported values: {supported}",
            Cause.NOT_SUPPORTED,
        )
    replica_specs = spec.pytorch_replica_specs
    if spec.elastic_policy is not None:
        yield from _elastic_policy_errors(spec, warnings)
    if not replica_specs:
        yield FieldError("spec.pytorchReplicaSpecs", "is required", Cause.REQUIRED)
        return
    if spec.elastic_policy is not None:
        yield from _elastic_bound_errors(spec.elastic_policy, replica_specs.get(WORKER))
    for kind, replica in ordered_replica_specs(replica_specs):
        path = child("spec.pytorchReplicaSpecs", kind)
        if kind not in REPLICA_TYPES:
            yield FieldError(
                path,
                f"{kind!r} is not supported: supported values: {', '.join(REPLICA_TYPES)}",
                Cause.NOT_SUPPORTED,
            )
            continue
        yield from _container_errors(replica.template, child(path, "template"))
        if replica.restart_policy is not None:
            policy_path = child(path, "restartPolicy")
            yield from _one_of(policy_path, replica.restart_policy, RESTART_POLICIES)
        if kind == MASTER and replica.replicas != 1:
            yield FieldError(child(path, "replicas"), "must be 1", Cause.FORBIDDEN)
        elif replica.replicas is not None and replica.replicas < 1:
            yield FieldError(child(path, "replicas"), "must be at least 1", Cause.FORBIDDEN)


def _elastic_policy_errors(spec: PyTorchJobSpec, warnings: list[str]) -> Iterator[FieldError]:
    elastic = spec.elastic_policy
    assert elastic is not None
    if WORKER not in (spec.pytorch_replica_specs or {}):
        yield FieldError(
            child("spec.pytorchReplicaSpecs", WORKER),
            "must be configured if elastic policy is used",
            Cause.REQUIRED,
        )
    if elastic.n_proc_per_node is not None:
        warnings.append(
            "spec.elasticPolicy.nProcPerNode is deprecated, use spec.nprocPerNode instead"
        )
        if spec.nproc_per_node is not None:
            yield FieldError(
                "spec.elasticPolicy.nProcPerNode",
                "must not be used with spec.nprocPerNode",
                Cause.FORBIDDEN,
            )
    yield from _metric_errors(elastic.metrics or [])


def _elastic_bound_errors(
    elastic: ElasticPolicy, worker: ReplicaSpec | None
) -> Iterator[FieldError]:
    """The Worker replicas lie between the elastic bounds, which torchrun is given as
    `--nnodes=<min>:<max>` (Kubeflow checks neither; a job outside them cannot rendezvous)."""
    low, high = elastic.min_replicas, elastic.max_replicas
    if low is not None and high is not None and low > high:
        yield FieldError("spec.elasticPolicy.minReplicas", f"{low} exceeds maxReplicas {high}")
        return
    count = worker.replicas if worker is not None and worker.replicas is not None else 1
    path = child("spec.pytorchReplicaSpecs", WORKER, "replicas")
    if worker is not None and low is not None and count < low:
        yield FieldError(path, f"{count} is fewer than spec.elasticPolicy.minReplicas {low}")
    if worker is not None and high is not None and count > high:
        yield FieldError(path, f"{count} is more than spec.elasticPolicy.maxReplicas {high}")


# autoscaling/v2 MetricSpec: each metric's type and the field that describes it.
METRIC_SOURCES: Final = {
    "Resource": "resource",
    "Pods": "pods",
    "Object": "object",
    "External": "external",
    "ContainerResource": "containerResource",
}


def _metric_errors(metrics: list[Any]) -> Iterator[FieldError]:
    """Each metric is stored as written and becomes the job's HorizontalPodAutoscaler's: its type
    is checked here, so that a misspelt one is refused now, not by the autoscaler later."""
    for index, metric in enumerate(metrics):
        path = child("spec.elasticPolicy.metrics", index)
        kind = metric.get("type") if isinstance(metric, dict) else None
        source = METRIC_SOURCES.get(kind) if isinstance(kind, str) else None
        if source is None:
            yield from _one_of(child(path, "type"), str(kind), tuple(METRIC_SOURCES))
        elif not isinstance(metric.get(source), dict):
            yield FieldError(
                child(path, source), f"is required for a metric of type {kind}", Cause.REQUIRED
            )


def _one_of(path: str, value: str, supported: tuple[str, ...]) -> Iterator[FieldError]:
    """The schema has no enums (Kubeflow's has none); the values it describes are checked here."""
    if value not in supported:
        values = ", ".join(f'"{v}"' for v in supported)
        yield FieldError(
            path, f"{value!r} is not supported: supported values: {values}", Cause.NOT_SUPPORTED
        )


def _container_errors(template: PodTemplateSpec | None, path: str) -> Iterator[FieldError]:
    pod_spec = template.spec if template is not None else None
    containers = (pod_spec or {}).get("containers")
    path = child(path, "spec", "containers")
    if not isinstance(containers, list) or not containers:
        yield FieldError(path, "must be specified", Cause.REQUIRED)
        return
    for index, container in enumerate(containers):
        if not isinstance(container, dict) or not container.get("image"):
            yield FieldError(child(path, index, "image"), "is required", Cause.REQUIRED)
    names = [c.get("name") for c in containers if isinstance(c, dict)]
    if DEFAULT_CONTAINER not in names:
        yield FieldError(path, f"must have a container named {DEFAULT_CONTAINER!r}", Cause.REQUIRED)


def unsupported_errors(job: PyTorchJob) -> list[FieldError]:
    """A refusal of each field of `UNSUPPORTED` the job sets."""
    obj = job.to_dict()
    return [
        FieldError(path, reason, Cause.NOT_SUPPORTED)
        for unsupported, reason in UNSUPPORTED.items()
        for path in _set_paths(obj, unsupported.split("."), "")
    ]


def _set_paths(value: Any, parts: list[str], path: str) -> Iterator[str]:
    """The paths matching `parts` (`*` for any key of a map) where a value is set."""
    if not parts:
        if value is not None:
            yield path
        return
    if not isinstance(value, dict):
        return
    head, rest = parts[0], parts[1:]
    keys = list(value) if head == "*" else [head] if head in value else []
    for key in keys:
        yield from _set_paths(value[key], rest, child(path, key))


def unknown_field_errors(job: PyTorchJob) -> list[FieldError]:
    """Every field the PyTorchJob schema does not have, top-level and in the spec (inside a
    replica's pod template torchjob's own rules find them, from the Pod schema). The status is
    the operator's, written through its own subresource, and is not checked."""
    errors = [FieldError(key, UNKNOWN_FIELD, Cause.NOT_SUPPORTED) for key in job.extra]
    if job.spec is not None:
        _unknown_in(job.spec, "spec", errors)
    return errors


def _unknown_in(message: Model, path: str, errors: list[FieldError]) -> None:
    if isinstance(message, PodTemplateSpec):
        return  # torchjob's own rules walk it, with the Pod schema
    for key in message.extra:
        errors.append(FieldError(child(path, key), UNKNOWN_FIELD, Cause.NOT_SUPPORTED))
    for info in message.FIELDS:
        value = getattr(message, info.attr)
        if info.kind != "message" or value is None:
            continue
        here = child(path, info.key)
        if info.map:
            for key, item in value.items():
                _unknown_in(item, child(here, key), errors)
        elif info.repeated:
            for index, item in enumerate(value):
                _unknown_in(item, child(here, index), errors)
        else:
            _unknown_in(value, here, errors)


def _update_errors(old: PyTorchJob, new: PyTorchJob) -> Iterator[FieldError]:
    """What may not change once the job exists, compared for real (Kubeflow's webhook compares
    the new object with itself). Replica specs and elastic bounds: torchjob's own rules."""
    old_policy = (old.spec or PyTorchJobSpec()).run_policy or RunPolicy()
    new_policy = (new.spec or PyTorchJobSpec()).run_policy or RunPolicy()
    if old_policy.managed_by != new_policy.managed_by:
        yield FieldError("spec.runPolicy.managedBy", "field is immutable", Cause.INVALID)
    old_queue = old_policy.scheduling_policy.queue if old_policy.scheduling_policy else None
    new_queue = new_policy.scheduling_policy.queue if new_policy.scheduling_policy else None
    if old_queue != new_queue:
        yield FieldError(
            "spec.runPolicy.schedulingPolicy.queue",
            "spec.runPolicy.schedulingPolicy.queue is immutable",
            Cause.INVALID,
        )


def _our_rules(new: Mapping[str, Any], old: Any) -> Result:
    """torchjob's rules on the PyTorchTrainingJob that runs the job, paths mapped back."""
    spec = new.get("spec") or {}
    result = validate(_training_job(new), _training_job(old) if isinstance(old, dict) else None)
    errors = [
        FieldError(_replica_key_path(kubeflow_path(e.path, spec)), e.message, e.cause)
        for e in result.errors
        if not _not_applicable(e)
    ]
    warnings = [kubeflow_path(w, spec) for w in result.warnings]
    return Result(errors, warnings)


def _replica_key_path(path: str) -> str:
    """A replica spec's `type` is its key in `pytorchReplicaSpecs`: a PyTorchJob has no field
    `spec.pytorchReplicaSpecs.Worker.type`, its error is of `spec.pytorchReplicaSpecs.Worker`."""
    parts = path.split(".")
    if len(parts) == 4 and parts[:2] == ["spec", "pytorchReplicaSpecs"] and parts[3] == "type":
        return ".".join(parts[:3])
    return path


def _training_job(job: Mapping[str, Any]) -> dict[str, Any]:
    """The job that runs `job`, without what only the PyTorchJob has (its own spec and status,
    which Kubeflow's rules have judged) and without its status, which validation does not read."""
    return {key: value for key, value in as_training_job(job).items() if key in TRAINING_KEYS}


def _not_applicable(error: FieldError) -> bool:
    return error.rule in NOT_APPLICABLE


# The keys of the job `as_training_job` makes that torchjob's own rules judge.
TRAINING_KEYS: Final = frozenset(
    info.key for info in PyTorchTrainingJob.FIELDS if info.key != "status"
)


# -- the admission handlers -----------------------------------------------------------------------


mutate_pytorchjob = defaulting_handler(default_pytorchjob)
validate_pytorchjob_request = validating_handler(
    KUBEFLOW_JOB.kind, default_pytorchjob, validate_pytorchjob
)
