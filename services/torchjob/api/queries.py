"""Answers read off a job that admission, rendering and the lifecycle all need the same way."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from torchjob.api import constants
from torchjob.api.constants import (
    ANNOTATION_AVOID_FAILING_NODES,
    ANNOTATION_PROGRESS_DEADLINE,
    ANNOTATION_RESTART_BACKOFF,
    ANNOTATION_RESTART_IN_PLACE,
    ANNOTATION_RESTART_SCOPE,
    ANNOTATION_SERVICE_SCOPE,
    ANNOTATION_START_DEADLINE,
    RESTART_SCOPE_GANG,
    RESTART_SCOPE_REPLICA,
    RETRYABLE_EXIT_CODES,
    SERVICE_SCOPE_JOB,
    SERVICE_SCOPE_REPLICA,
)
from torchjob.api.types import PyTorchTrainingJobSpec, ReplicaSpec

TRAINING_CONTAINER_NAME = "python"
GPU_RESOURCE = "nvidia.com/gpu"
MASTER_TYPE = "master"
DEFAULT_BACKOFF_LIMIT = 3  # runPolicy.backoffLimit when absent, as the webhook fills it in

PLAIN_ENV = ("MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK", "PYTHONUNBUFFERED")
TORCHRUN_ENV = (
    "PET_NNODES",
    "PET_NPROC_PER_NODE",
    "PET_NODE_RANK",
    "PET_MASTER_ADDR",
    "PET_MASTER_PORT",
    "PET_RDZV_BACKEND",
    "PET_RDZV_ENDPOINT",
    "PET_RDZV_ID",
    "PET_MAX_RESTARTS",
)


def replica_spec(spec: PyTorchTrainingJobSpec, replica_type: str) -> ReplicaSpec:
    """The replica spec of type `replica_type` (which the caller knows the job has)."""
    return next(r for r in spec.replica_specs or [] if r.type == replica_type)


def elastic_bounds(spec: PyTorchTrainingJobSpec) -> tuple[int | None, int | None]:
    """The fewest and the most replicas the job runs with: spec.elastic's while it is enabled;
    torchrunConfig.minNodes, the older spelling of the lower bound, otherwise."""
    elastic = spec.elastic if spec.elastic and spec.elastic.enabled else None
    return _lower_bound(spec, elastic.min_replicas if elastic else None), (
        elastic.max_replicas if elastic else None
    )


def written_elastic_bounds(spec: PyTorchTrainingJobSpec) -> tuple[int | None, int | None]:
    """The bounds as written, whether or not spec.elastic is enabled (what an update may not
    change)."""
    elastic = spec.elastic
    return _lower_bound(spec, elastic.min_replicas if elastic else None), (
        elastic.max_replicas if elastic else None
    )


def _lower_bound(spec: PyTorchTrainingJobSpec, min_replicas: int | None) -> int | None:
    if min_replicas is None and spec.torchrun_config:
        return spec.torchrun_config.min_nodes
    return min_replicas


def torchrun_enabled(spec: PyTorchTrainingJobSpec) -> bool:
    """Either spelling; validation refuses a job where they disagree."""
    config = spec.torchrun_config
    return bool(config and (config.enabled or config.enable))


def backoff_limit(spec: PyTorchTrainingJobSpec) -> int:
    """How many replica restarts the job may make before it fails."""
    limit = spec.run_policy.backoff_limit if spec.run_policy else None
    return DEFAULT_BACKOFF_LIMIT if limit is None else limit


def start_deadline(metadata: Mapping[str, Any], default: float) -> float:
    """Seconds a replica may be unable to start before the job fails (0: no deadline): the job's
    start-deadline annotation, else `default` (the reconciler's --start-deadline)."""
    value = (metadata.get("annotations") or {}).get(ANNOTATION_START_DEADLINE)
    return float(value) if isinstance(value, str) and re.fullmatch("[0-9]+", value) else default


def avoids_failing_nodes(meta: Mapping[str, Any]) -> bool:
    """Whether the job's new pods avoid the nodes its replicas kept failing on
    (constants.ANNOTATION_AVOID_FAILING_NODES): unless its annotation says "false"."""
    return _annotations(meta).get(ANNOTATION_AVOID_FAILING_NODES) != "false"


def restart_backoff(metadata: Mapping[str, Any], default: float) -> float:
    """Seconds before a replica's first restart in a row (lifecycle/backoff.py): the job's
    restart-backoff annotation, else `default` (the reconciler's --restart-backoff)."""
    value = _annotations(metadata).get(ANNOTATION_RESTART_BACKOFF)
    return float(value) if isinstance(value, str) and re.fullmatch("[0-9]{1,6}", value) else default


def restart_scope(meta: Mapping[str, Any], spec: PyTorchTrainingJobSpec) -> str:
    """What a replica's restart restarts: `Replica` (the replica alone) or `Gang` (every
    replica). The job's annotation, else Replica for a torchrun job, whose rendezvous lets a
    restarted replica rejoin the others, and Gang otherwise: a plain process group cannot take a
    new member, so the others would hang or crash on it."""
    chosen = _annotations(meta).get(ANNOTATION_RESTART_SCOPE)
    if chosen in (RESTART_SCOPE_REPLICA, RESTART_SCOPE_GANG):
        return str(chosen)
    elastic = bool(spec.elastic and spec.elastic.enabled)  # a Kubeflow elasticPolicy too
    return RESTART_SCOPE_REPLICA if torchrun_enabled(spec) or elastic else RESTART_SCOPE_GANG


def service_scope(meta: Mapping[str, Any]) -> str:
    """Whose headless Service names a replica (constants.ANNOTATION_SERVICE_SCOPE): `Job` when
    the job's annotation says so, else `Replica`."""
    chosen = _annotations(meta).get(ANNOTATION_SERVICE_SCOPE)
    return SERVICE_SCOPE_JOB if chosen == SERVICE_SCOPE_JOB else SERVICE_SCOPE_REPLICA


def restart_in_place(meta: Mapping[str, Any]) -> bool:
    """Whether the job's pods are made to restart in place where the cluster can
    (constants.ANNOTATION_RESTART_IN_PLACE): unless the job's annotation says "false"."""
    return _annotations(meta).get(ANNOTATION_RESTART_IN_PLACE) != "false"


def diagnosis_request(meta: Mapping[str, Any]) -> str | None:
    """The job's latest request for a diagnosis (constants.ANNOTATION_DIAGNOSE), at most
    MAX_DIAGNOSIS_REQUEST characters; None when it has made none."""
    value = _annotations(meta).get(constants.ANNOTATION_DIAGNOSE)
    return value[:MAX_DIAGNOSIS_REQUEST] if isinstance(value, str) and value else None


MAX_DIAGNOSIS_REQUEST = 64


def progress_deadline(meta: Mapping[str, Any], default: int) -> int:
    """Seconds without a progress report after which the job is restarted (0: never): the job's
    annotation, else `default` (the reconciler's setting)."""
    written = _annotations(meta).get(ANNOTATION_PROGRESS_DEADLINE)
    return int(written) if isinstance(written, str) and written.isdigit() else default


def _annotations(meta: Mapping[str, Any]) -> Mapping[str, Any]:
    annotations = meta.get("annotations")
    return annotations if isinstance(annotations, Mapping) else {}


def debug_enabled(spec: PyTorchTrainingJobSpec) -> bool:
    debug = spec.run_mode.debug if spec.run_mode else None
    return bool(debug and (debug.enabled or debug.enable))


def training_container(replica: ReplicaSpec) -> tuple[int, dict[str, Any] | None]:
    """The replica's training container; (index, container)."""
    pod_spec = replica.template.spec if replica.template else None
    return training_container_in(pod_spec or {})


def training_container_in(pod_spec: dict[str, Any]) -> tuple[int, dict[str, Any] | None]:
    """The container named `python`, else the first one, of a pod spec; (index, container)."""
    containers = pod_spec.get("containers")
    if not isinstance(containers, list) or not containers:
        return 0, None
    for index, container in enumerate(containers):
        if isinstance(container, dict) and container.get("name") == TRAINING_CONTAINER_NAME:
            return index, container
    first = containers[0]
    return 0, first if isinstance(first, dict) else None


def gpu_limit(container: dict[str, Any]) -> int:
    """The container's nvidia.com/gpu limit as a whole number (0 when absent or unreadable)."""
    resources = container.get("resources")
    limits = resources.get("limits") if isinstance(resources, dict) else None
    value = limits.get(GPU_RESOURCE) if isinstance(limits, dict) else None
    if isinstance(value, bool):
        return 0
    if isinstance(value, int):
        return value
    if isinstance(value, str) and re.fullmatch(r"[0-9]+", value):
        return int(value)
    return 0


def user_env_names(container: dict[str, Any] | None) -> set[str]:
    env = container.get("env") if container else None
    if not isinstance(env, list):
        return set()
    return {e["name"] for e in env if isinstance(e, dict) and isinstance(e.get("name"), str)}


def injected_env_names(spec: PyTorchTrainingJobSpec) -> set[str]:
    return set(PLAIN_ENV) | (set(TORCHRUN_ENV) if torchrun_enabled(spec) else set())


def job_name_for_length(metadata: dict[str, Any], generated_suffix: int) -> str:
    """The job's name, or a stand-in as long as the name the apiserver will generate."""
    name = metadata.get("name")
    if isinstance(name, str) and name:
        return name
    prefix = metadata.get("generateName")
    return (prefix if isinstance(prefix, str) else "") + "x" * generated_suffix


def restarts_after_failure(policy: str, exit_code: int | None) -> bool:
    """Whether a replica of restart policy `policy` whose training container failed with
    `exit_code` is restarted (budget and elasticity aside)."""
    if policy in ("OnFailure", "Always"):
        return True
    if policy == "ExitCode":
        # No exit code means the pod was lost (eviction, node failure): not the code's fault.
        return exit_code is None or exit_code in RETRYABLE_EXIT_CODES
    return False
