"""Validation of a defaulted PyTorchTrainingJob: every rule, each error with its field path, all of
them at once; soft problems come back as warnings. Pure: the webhook and `torchjob run` call it."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any, TypeVar

from torchjob.api import constants, queries, schema_checks
from torchjob.api.field_errors import Cause, FieldError, Result, counted
from torchjob.api.model import Model, ModelError, child
from torchjob.api.names import DNS_1035_LABEL
from torchjob.api.types import (
    Elastic,
    PyTorchTrainingJob,
    PyTorchTrainingJobSpec,
    ReplicaSpec,
    TensorBoardSpec,
    TorchrunConfig,
)

# Rules another API tells apart (FieldError.rule).
RULE_ELASTIC_NEEDS_TORCHRUN = "ElasticNeedsTorchrun"

FILESET = re.compile(
    rf"^{re.escape(constants.T9K_PVC_PREFIX)}"
    r"(?P<claim>[a-z0-9]([-a-z0-9.]*[a-z0-9])?)(?P<subpath>/.*)?$"
)


def validate(obj: Any, old: Any = None, *, schema: bool = False) -> Result:
    """Validate a (defaulted) job; with `old`, also the rules of an update. With `schema`, also
    the bounds and patterns of the CRD schema, which the apiserver has checked before a webhook
    sees the object, but nothing has checked before `torchjob run`.

    On an update, a rule the old object already broke does not refuse the new one (Kubernetes
    calls this ratcheting): a job stored before a rule existed can still have its metadata
    changed, its finalizers removed or its replicas scaled back into bounds."""
    result = Result()
    job = decoded_job(PyTorchTrainingJob, obj, result)
    if job is None or job.spec is None:  # decoded_job has refused a job without a spec
        return result
    result.errors += _object_errors(job, schema=schema)
    result.warnings += list(_warnings(job.spec))
    if old is not None:
        try:
            previous = PyTorchTrainingJob.from_dict(old)
        except ModelError:
            return result  # an old object that no longer decodes cannot constrain the update
        if result.errors and previous.spec is not None:
            before = {str(e) for e in _object_errors(previous, schema=schema)}
            result.errors = [e for e in result.errors if str(e) not in before]
        result.errors += _update_errors(previous, job)
    return result


JobModel = TypeVar("JobModel", bound=Model)


def decoded_job(model: type[JobModel], obj: Any, result: Result) -> JobModel | None:
    """`obj` decoded as the job `model`; None, with the error in `result`, when a field does not
    fit or there is no spec."""
    try:
        job = model.from_dict(obj)
    except ModelError as error:
        result.errors.append(FieldError(error.path or "<root>", error.message))
        return None
    if getattr(job, "spec", None) is None:
        result.errors.append(FieldError("spec", "is required", Cause.REQUIRED))
        return None
    return job


def _object_errors(job: PyTorchTrainingJob, *, schema: bool) -> list[FieldError]:
    errors = (
        _spec_errors(job)
        + _gang_choice_errors(job)
        + _start_deadline_errors(job)
        + _restart_annotation_errors(job)
    )
    # A field the rules above already refused needs no second message.
    refused = {error.path for error in errors}
    errors += [e for e in schema_checks.unknown_field_errors(job) if e.path not in refused]
    if schema and job.spec is not None:
        refused = {error.path for error in errors}
        # The spec only: the apiserver drops a status written on create.
        limits = schema_checks.schema_errors(job.spec, "spec")
        errors += [e for e in limits if e.path not in refused]
    return errors


def _gang_choice_errors(job: PyTorchTrainingJob) -> list[FieldError]:
    annotations = (job.metadata or {}).get("annotations") or {}
    choice = annotations.get(constants.ANNOTATION_GANG_SCHEDULING)
    if choice is None or choice in constants.GANG_SCHEDULING_CHOICES:
        return []
    path = f"metadata.annotations[{constants.ANNOTATION_GANG_SCHEDULING}]"
    allowed = ", ".join(constants.GANG_SCHEDULING_CHOICES)
    return [FieldError(path, f"{choice!r} is not one of {allowed}", Cause.NOT_SUPPORTED)]


def _start_deadline_errors(job: PyTorchTrainingJob) -> list[FieldError]:
    annotations = (job.metadata or {}).get("annotations") or {}
    seconds = annotations.get(constants.ANNOTATION_START_DEADLINE)
    if seconds is None or (isinstance(seconds, str) and re.fullmatch("[0-9]+", seconds)):
        return []
    path = f"metadata.annotations[{constants.ANNOTATION_START_DEADLINE}]"
    return [FieldError(path, f"{seconds!r} is not a whole number of seconds (0: no deadline)")]


def _restart_annotation_errors(job: PyTorchTrainingJob) -> list[FieldError]:
    """The restart and service scopes, restarting in place and avoiding failing nodes are each
    one of their two words; the progress deadline and the restart delay whole seconds."""
    annotations = (job.metadata or {}).get("annotations") or {}
    errors = []
    for annotation, choices in (
        (constants.ANNOTATION_RESTART_SCOPE, constants.RESTART_SCOPES),
        (constants.ANNOTATION_SERVICE_SCOPE, constants.SERVICE_SCOPES),
        (constants.ANNOTATION_RESTART_IN_PLACE, constants.TRUE_FALSE),
        (constants.ANNOTATION_AVOID_FAILING_NODES, constants.TRUE_FALSE),
    ):
        scope = annotations.get(annotation)
        if scope is not None and scope not in choices:
            path = f"metadata.annotations[{annotation}]"
            allowed = ", ".join(choices)
            errors.append(
                FieldError(path, f"{scope!r} is not one of {allowed}", Cause.NOT_SUPPORTED)
            )
    deadline = annotations.get(constants.ANNOTATION_PROGRESS_DEADLINE)
    if deadline is not None and not re.fullmatch(r"[0-9]{1,9}", str(deadline)):
        path = f"metadata.annotations[{constants.ANNOTATION_PROGRESS_DEADLINE}]"
        errors.append(FieldError(path, f"{deadline!r} is not a whole number of seconds (0: off)"))
    delay = annotations.get(constants.ANNOTATION_RESTART_BACKOFF)
    if delay is not None and not re.fullmatch(r"[0-9]{1,6}", str(delay)):
        path = f"metadata.annotations[{constants.ANNOTATION_RESTART_BACKOFF}]"
        message = f"{delay!r} is not a whole number of seconds (0: restart at once)"
        errors.append(FieldError(path, message))
    return errors


def _spec_errors(job: PyTorchTrainingJob) -> list[FieldError]:
    spec = job.spec
    assert spec is not None
    errors = list(_name_errors(job))
    errors += _replica_spec_errors(job, spec, name_refused=bool(errors))
    errors += _spelling_errors(spec)
    errors += _torchrun_errors(spec)
    errors += _elastic_errors(spec)
    errors += _elastic_count_errors(spec)
    errors += _run_policy_errors(spec)
    if spec.tensorboard_spec is not None:
        errors += _tensorboard_errors(spec.tensorboard_spec)
    return errors


def _name_errors(job: PyTorchTrainingJob) -> Iterator[FieldError]:
    """The job's name (or generateName) names the objects made for it: a Pod and a headless
    Service `<job>-<type>-<index>` per replica, labelled with the job's name, and a TensorBoard
    Deployment and Service `<job>-tensorboard` (shortened with a hash past 63 characters). A
    Service's name must be a DNS-1035 label and a label value at most 63 characters, so the name
    must be a DNS-1035 label; the apiserver admits any DNS subdomain (`resnet.v2`), and such a
    job would wait for its Services forever."""
    metadata = job.metadata or {}
    path = "metadata.name" if metadata.get("name") else "metadata.generateName"
    name = queries.job_name_for_length(metadata, constants.GENERATE_NAME_SUFFIX)
    if not name:
        return  # the apiserver requires a name; `torchjob run` says so before validating
    spec = job.spec or PyTorchTrainingJobSpec()
    kind = next((r.type for r in spec.replica_specs or [] if r.type), "worker")
    written = metadata.get("name") or metadata.get("generateName")
    if not DNS_1035_LABEL.fullmatch(name):
        yield FieldError(
            path,
            f"{written!r} would name the Service {f'{name}-{kind}-0'!r} of replica 0 of type "
            f"{kind!r}, which must be a DNS-1035 label: lower-case letters, digits and '-', "
            "starting with a letter and ending with a letter or digit",
        )
    elif len(name) > constants.DNS_LABEL_MAX:
        yield FieldError(
            path,
            f"is {len(name)} characters; the label {constants.LABEL_JOB_NAME} on every replica "
            f"carries it, and a label value is at most {constants.DNS_LABEL_MAX}",
            Cause.TOO_LONG,
        )


def _replica_spec_errors(
    job: PyTorchTrainingJob, spec: PyTorchTrainingJobSpec, *, name_refused: bool
) -> Iterator[FieldError]:
    replica_specs = spec.replica_specs or []
    if not replica_specs:
        yield FieldError("spec.replicaSpecs", "must list at least one replica type", Cause.REQUIRED)
    seen: set[str] = set()
    for index, replica in enumerate(replica_specs):
        path = child("spec.replicaSpecs", index)
        yield from _replica_type_errors(job, replica, path, seen, name_refused=name_refused)
        yield from _template_errors(replica, path)
        if replica.replicas is not None and replica.replicas < 1:
            yield FieldError(child(path, "replicas"), "must be at least 1")


def _replica_type_errors(
    job: PyTorchTrainingJob, replica: ReplicaSpec, path: str, seen: set[str], *, name_refused: bool
) -> Iterator[FieldError]:
    kind = replica.type
    # Paths are built for errors only, here and below: every admission runs these rules.
    if not kind:
        yield FieldError(child(path, "type"), "is required", Cause.REQUIRED)
        return
    if not DNS_1035_LABEL.fullmatch(kind):
        yield FieldError(
            child(path, "type"), f"{kind!r} must be a lower-case DNS label (a-z, 0-9, '-')"
        )
    if kind in seen:
        yield FieldError(
            child(path, "type"), f"{kind!r} is used by another replica spec", Cause.DUPLICATE
        )
    seen.add(kind)
    if name_refused:
        return  # the name alone is refused; the names it makes with the type say nothing more
    job_name = queries.job_name_for_length(job.metadata or {}, constants.GENERATE_NAME_SUFFIX)
    last = f"{job_name}-{kind}-{_highest_index(job, replica)}"
    if len(last) > constants.DNS_LABEL_MAX:
        yield FieldError(
            child(path, "type"),
            f"replica name {last!r} (its Pod's and its Service's) is {len(last)} characters; job "
            f"name, type and index must fit in {constants.DNS_LABEL_MAX}",
            Cause.TOO_LONG,
        )


def _highest_index(job: PyTorchTrainingJob, replica: ReplicaSpec) -> int:
    """The highest replica index of the type: an elastic job may scale it up to its bound."""
    count = replica.replicas or 1
    spec = job.spec or PyTorchTrainingJobSpec()
    elastic = spec.elastic if spec.elastic and spec.elastic.enabled else None
    if elastic is not None:
        count = max(count, elastic.max_replicas or 0, elastic.expected_replicas or 0)
    return max(count - 1, 0)


def _template_errors(replica: ReplicaSpec, path: str) -> Iterator[FieldError]:
    template = replica.template
    pod_spec = template.spec if template is not None else None
    if pod_spec is None:
        yield FieldError(child(path, "template", "spec"), "is required", Cause.REQUIRED)
        return
    containers = pod_spec.get("containers")
    if not isinstance(containers, list) or not containers:
        yield FieldError(
            child(path, "template", "spec", "containers"),
            "must list at least one container",
            Cause.REQUIRED,
        )
        return
    for index, container in enumerate(containers):
        if not isinstance(container, dict) or not isinstance(container.get("name"), str):
            yield FieldError(
                child(path, "template", "spec", "containers", index, "name"),
                "is required",
                Cause.REQUIRED,
            )


def _spelling_errors(spec: PyTorchTrainingJobSpec) -> Iterator[FieldError]:
    torchrun = spec.torchrun_config
    if (
        torchrun
        and None not in (torchrun.enable, torchrun.enabled)
        and torchrun.enable != torchrun.enabled
    ):
        yield FieldError(
            "spec.torchrunConfig.enabled",
            "spec.torchrunConfig.enable and spec.torchrunConfig.enabled disagree; set only one",
        )
    debug = spec.run_mode.debug if spec.run_mode else None
    if debug and None not in (debug.enable, debug.enabled) and debug.enable != debug.enabled:
        yield FieldError(
            "spec.runMode.debug.enabled",
            "spec.runMode.debug.enable and spec.runMode.debug.enabled disagree; set only one",
        )
    min_nodes = torchrun.min_nodes if torchrun else None
    min_replicas = spec.elastic.min_replicas if spec.elastic else None
    if None not in (min_nodes, min_replicas) and min_nodes != min_replicas:
        yield FieldError(
            "spec.elastic.minReplicas",
            "spec.torchrunConfig.minNodes and spec.elastic.minReplicas disagree; set only one",
        )


def _torchrun_errors(spec: PyTorchTrainingJobSpec) -> Iterator[FieldError]:
    if not queries.torchrun_enabled(spec):
        return
    proc = spec.torchrun_config.proc_per_node if spec.torchrun_config else None
    for index, replica in enumerate(spec.replica_specs or []):
        container_index, container = queries.training_container(replica)
        if container is None:
            continue
        path = f"spec.replicaSpecs[{index}].template.spec.containers[{container_index}]"
        if not container.get("args"):
            yield FieldError(
                f"{path}.args",
                "torchrun is enabled, so the container's command is replaced: put the training "
                "script and its arguments in args",
            )
        if proc == "gpu" and queries.gpu_limit(container) < 1:
            yield FieldError(
                f"{path}.resources.limits",
                'procPerNode "gpu" needs a GPU limit (nvidia.com/gpu) on the training container',
            )


def _elastic_errors(spec: PyTorchTrainingJobSpec) -> Iterator[FieldError]:
    elastic: Elastic | None = spec.elastic
    if elastic is None or not elastic.enabled:
        return
    if not queries.torchrun_enabled(spec):
        yield FieldError(
            "spec.elastic.enabled",
            "elastic training needs spec.torchrunConfig.enabled",
            Cause.FORBIDDEN,
            rule=RULE_ELASTIC_NEEDS_TORCHRUN,
        )
    low, high = elastic.min_replicas, elastic.max_replicas
    if low is not None and high is not None and low > high:
        # No count lies between them: _elastic_count_errors says nothing more.
        yield FieldError("spec.elastic.minReplicas", f"{low} exceeds maxReplicas {high}")


def _elastic_count_errors(spec: PyTorchTrainingJobSpec) -> Iterator[FieldError]:
    """An elastic job runs between its bounds: torchrun's nnodes is `min:max`, counted across
    every replica type. The replicas written, and expectedReplicas (what a user scales), must lie
    between them, at create and on every update."""
    if not queries.torchrun_enabled(spec):
        return  # the bounds mean nothing without torchrun (and elastic without it is refused)
    low, high = queries.elastic_bounds(spec)
    if (low is None and high is None) or (low is not None and high is not None and low > high):
        return
    elastic = spec.elastic if spec.elastic and spec.elastic.enabled else None
    low_field = (
        "spec.elastic.minReplicas"
        if elastic and elastic.min_replicas is not None
        else "spec.torchrunConfig.minNodes"
    )
    replica_specs = spec.replica_specs or []
    counts = [(r.type or "?", 1 if r.replicas is None else r.replicas) for r in replica_specs]
    total = sum(count for _, count in counts)
    # The messages are worked out only for a count out of bounds: every admission runs this.
    if counts and low is not None and total < low:
        path, what = _counts_text(counts, total)
        bounds = _bounds_text(low, low_field, high)
        yield FieldError(path, f"{what} fewer than {low_field} {low}; {bounds}")
    if counts and high is not None and total > high:
        path, what = _counts_text(counts, total)
        bounds = _bounds_text(low, low_field, high)
        yield FieldError(path, f"{what} more than spec.elastic.maxReplicas {high}; {bounds}")
    expected = elastic.expected_replicas if elastic else None
    if expected is not None and (
        (low is not None and expected < low) or (high is not None and expected > high)
    ):
        bounds = _bounds_text(low, low_field, high)
        yield FieldError("spec.elastic.expectedReplicas", f"{expected} is out of bounds: {bounds}")


def _counts_text(counts: list[tuple[str, int]], total: int) -> tuple[str, str]:
    """The field that holds the replica counts, and what they add up to, for a message."""
    are = "is" if total == 1 else "are"
    if len(counts) == 1:
        return "spec.replicaSpecs[0].replicas", f"{counted(total, 'replica')} {are}"
    by_type = ", ".join(f"{kind} {count}" for kind, count in counts)
    return "spec.replicaSpecs", f"{counted(total, 'replica')} in all ({by_type}) {are}"


def _bounds_text(low: int | None, low_field: str, high: int | None) -> str:
    if low is not None and high is not None:
        return f"an elastic job runs between {low} and {high} replicas in all"
    if low is not None:
        return f"an elastic job runs at least {low} replicas in all ({low_field})"
    return f"an elastic job runs at most {high} replicas in all"


def _run_policy_errors(spec: PyTorchTrainingJobSpec) -> Iterator[FieldError]:
    policy = spec.run_policy
    if policy and policy.active_deadline_seconds is not None and policy.active_deadline_seconds < 1:
        yield FieldError("spec.runPolicy.activeDeadlineSeconds", "must be greater than 0")
    if policy and policy.backoff_limit is not None and policy.backoff_limit < 0:
        yield FieldError("spec.runPolicy.backoffLimit", "must not be negative")
    scheduler = spec.scheduler.t9k_scheduler if spec.scheduler else None
    if scheduler and scheduler.priority is not None and not 0 <= scheduler.priority <= 100:
        yield FieldError("spec.scheduler.t9kScheduler.priority", "must be between 0 and 100")


def _tensorboard_errors(tensorboard: TensorBoardSpec) -> Iterator[FieldError]:
    for index, fileset in enumerate(tensorboard.training_log_filesets or []):
        path = child("spec.tensorboardSpec.trainingLogFilesets", index)
        if not fileset.startswith(constants.T9K_PVC_PREFIX):
            scheme = fileset.split("://", 1)[0] if "://" in fileset else fileset
            message = f"{scheme!r} is not supported: use t9k://pvc/<claim>/<subpath>"
            yield FieldError(path, message, Cause.NOT_SUPPORTED)
        elif not FILESET.match(fileset):
            yield FieldError(path, f"{fileset!r} must be t9k://pvc/<claim>/<subpath>")
        else:
            yield from _log_path_errors(path, fileset.removeprefix(constants.T9K_PVC_PREFIX))
    pvcs = tensorboard.log_dir.pvc if tensorboard.log_dir else None
    for index, pvc in enumerate(pvcs or []):
        for sub_index, sub_path in enumerate(pvc.sub_path or []):
            path = child("spec.tensorboardSpec.logDir.pvc", index, "subPath", sub_index)
            yield from _log_path_errors(path, sub_path)


def _log_path_errors(path: str, value: str) -> Iterator[FieldError]:
    if "," in value:
        yield FieldError(
            path, f"{value!r} must not contain ',': TensorBoard separates log directories with it"
        )
    if ".." in value.split("/"):
        yield FieldError(path, f"{value!r} must not contain '..': it would leave the claim")


def _warnings(spec: PyTorchTrainingJobSpec) -> Iterator[str]:
    torchrun = spec.torchrun_config
    uses_etcd = bool(torchrun and torchrun.rdzv_backend in ("etcd", "etcd-v2"))
    if torchrun and uses_etcd and queries.torchrun_enabled(spec) and not _has_endpoint(torchrun):
        yield (
            f"spec.torchrunConfig.rdzvBackend is {torchrun.rdzv_backend} but extraOptions has "
            "no --rdzv-endpoint: torchrun needs the address of your etcd server"
        )
    for index, replica in enumerate(spec.replica_specs or []):
        container_index, container = queries.training_container(replica)
        user_names = queries.user_env_names(container)
        if not user_names:
            continue
        for env_name in user_names & queries.injected_env_names(spec):
            path = f"spec.replicaSpecs[{index}].template.spec.containers[{container_index}].env"
            yield f"{path}: {env_name} is set by you and wins over the value torchjob would inject"


def _has_endpoint(torchrun: TorchrunConfig) -> bool:
    options = torchrun.extra_options or []
    return any(o.startswith(("--rdzv-endpoint", "--rdzv_endpoint")) for o in options)


def _update_errors(old: PyTorchTrainingJob, new: PyTorchTrainingJob) -> Iterator[FieldError]:
    old_spec, new_spec = old.spec or PyTorchTrainingJobSpec(), new.spec or PyTorchTrainingJobSpec()
    elastic = bool(new_spec.elastic and new_spec.elastic.enabled)
    if _replica_specs_for_compare(old_spec, elastic) != _replica_specs_for_compare(
        new_spec, elastic
    ):
        allowed = " except replicas of an elastic job" if elastic else ""
        yield FieldError(
            "spec.replicaSpecs",
            f"is immutable{allowed}: the running pods were made from it. To change it, delete "
            "the job and create it again (with Argo CD, the sync options "
            "Force=true,Replace=true; see docs/gitops.md)",
            Cause.FORBIDDEN,
        )
    if queries.written_elastic_bounds(old_spec) != queries.written_elastic_bounds(new_spec):
        yield FieldError(
            "spec.elastic", "minReplicas and maxReplicas are immutable", Cause.FORBIDDEN
        )
    if _resume_specs(old_spec) != _resume_specs(new_spec):
        yield FieldError("spec.runMode.pause.resumeSpecs", "is immutable", Cause.FORBIDDEN)
    if queries.service_scope(old.metadata or {}) != queries.service_scope(new.metadata or {}):
        path = f"metadata.annotations[{constants.ANNOTATION_SERVICE_SCOPE}]"
        message = "is immutable: the job's pods were given their DNS names by it"
        yield FieldError(path, message, Cause.FORBIDDEN)


def _replica_specs_for_compare(spec: PyTorchTrainingJobSpec, elastic: bool) -> list[dict[str, Any]]:
    out = [replica.to_dict() for replica in spec.replica_specs or []]
    if elastic:
        for replica in out:
            replica.pop("replicas", None)
    return out


def _resume_specs(spec: PyTorchTrainingJobSpec) -> list[dict[str, Any]]:
    pause = spec.run_mode.pause if spec.run_mode else None
    return [r.to_dict() for r in (pause.resume_specs or [])] if pause else []
