"""The shapes of the Kubernetes objects the code builds and reads, as the JSON they are sent and
stored as: TypedDicts, so they cost nothing at run time (kopf's `_cogs/structs/bodies.py` is the
model). Only the fields the code touches are declared; every field is optional, as in the API."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal, TypedDict

# A pod's phase (`status.phase`), as the kubelet reports it.
PodPhase = Literal["Pending", "Running", "Succeeded", "Failed", "Unknown"]
# The pod phases after which a pod's containers run no more.
FINISHED_POD_PHASES: tuple[PodPhase, ...] = ("Succeeded", "Failed")


class OwnerReference(TypedDict, total=False):
    apiVersion: str
    kind: str
    name: str
    uid: str
    controller: bool
    blockOwnerDeletion: bool


class ObjectMeta(TypedDict, total=False):
    name: str
    generateName: str
    namespace: str
    uid: str
    resourceVersion: str
    generation: int
    creationTimestamp: str
    deletionTimestamp: str
    labels: dict[str, str]
    annotations: dict[str, str]
    ownerReferences: list[OwnerReference]
    finalizers: list[str]


class ContainerStateTerminated(TypedDict, total=False):
    exitCode: int
    reason: str
    startedAt: str
    finishedAt: str


class ContainerState(TypedDict, total=False):
    waiting: dict[str, Any]
    running: dict[str, Any]
    terminated: ContainerStateTerminated


class ContainerStatus(TypedDict, total=False):
    name: str
    state: ContainerState
    lastState: ContainerState
    ready: bool
    restartCount: int


class PodCondition(TypedDict, total=False):
    type: str
    status: str
    reason: str
    message: str


class PodStatus(TypedDict, total=False):
    phase: PodPhase
    conditions: list[PodCondition]
    reason: str
    message: str
    podIP: str
    startTime: str
    containerStatuses: list[ContainerStatus]
    initContainerStatuses: list[ContainerStatus]


class Pod(TypedDict, total=False):
    apiVersion: str
    kind: str
    metadata: ObjectMeta
    spec: dict[str, Any]
    status: PodStatus


def latest_condition(status: Mapping[str, Any]) -> dict[str, Any] | None:
    """The True condition that changed last (an object's current story)."""
    conditions = status.get("conditions") if isinstance(status, Mapping) else None
    true = [c for c in conditions or () if isinstance(c, dict) and c.get("status") == "True"]
    return max(true, key=lambda c: str(c.get("lastTransitionTime") or ""), default=None)
