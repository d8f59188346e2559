"""What the reconciler observes of a replica's pod, read from the pod object. Pure."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from torchjob.api import constants, queries

# The pod phases after which a pod's containers run no more.
FINISHED_PHASES = ("Succeeded", "Failed")


@dataclass(frozen=True, slots=True)
class PodView:
    name: str
    uid: str
    replica_type: str
    index: int
    phase: str  # Pending, Running, Succeeded, Failed, Unknown
    exit_code: int | None  # the training container's, once it terminated
    deleting: bool
    backoff_count: int  # the annotation the pod was created with
    debug: bool
    containers: tuple[tuple[str, str, int | None], ...]  # (name, state, exit code)

    @property
    def finished(self) -> bool:
        return self.phase in FINISHED_PHASES


def view_pod(pod: dict[str, Any]) -> PodView | None:
    """The pod as the lifecycle sees it; None when it is not a replica pod (labels missing)."""
    meta = pod.get("metadata") or {}
    labels = meta.get("labels") or {}
    annotations = meta.get("annotations") or {}
    index = labels.get(constants.LABEL_REPLICA_INDEX, "")
    replica_type = labels.get(constants.LABEL_REPLICA_TYPE)
    if not replica_type or not index.isdigit():
        return None
    status = pod.get("status") or {}
    containers = tuple(_container(c) for c in status.get("containerStatuses") or [])
    return PodView(
        name=meta.get("name", ""),
        uid=meta.get("uid", ""),
        replica_type=replica_type,
        index=int(index),
        phase=status.get("phase") or "Pending",
        exit_code=_training_exit_code(pod, containers),
        deleting=bool(meta.get("deletionTimestamp")),
        backoff_count=_int(annotations.get(constants.ANNOTATION_BACKOFF_COUNT)),
        debug=annotations.get(constants.ANNOTATION_DEBUG) == "true",
        containers=containers,
    )


def _container(status: dict[str, Any]) -> tuple[str, str, int | None]:
    state = status.get("state") or {}
    for kind in ("terminated", "running", "waiting"):
        if kind in state:
            code = (state.get("terminated") or {}).get("exitCode")
            return status.get("name", ""), kind, code if isinstance(code, int) else None
    return status.get("name", ""), "waiting", None


def _training_exit_code(
    pod: dict[str, Any], containers: tuple[tuple[str, str, int | None], ...]
) -> int | None:
    _, training = queries.training_container_in(pod.get("spec") or {})
    training_name = training.get("name") if training else None
    for name, state, code in containers:
        if name == training_name and state == "terminated":
            return code
    return None


def _int(value: Any) -> int:
    return int(value) if isinstance(value, str) and value.isdigit() else 0
