"""What the reconciler observes of a replica's pod, read from the pod object, and what the
apiserver said when it refused to create one. Pure."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal, NamedTuple

from torchjob.api import constants, queries
from torchjob.api.objects import (
    FINISHED_POD_PHASES,
    ContainerStateTerminated,
    ContainerStatus,
    ObjectMeta,
    PodPhase,
    PodStatus,
)
from torchjob.lifecycle.terminated import (
    last_finish,
    message_of,
    one_line,
    ran_seconds,
    reason_of,
)
from torchjob.lifecycle.times import parse_time
from torchjob.render.in_place import AGENT, RESTARTED_ALL_REASON, restarts_in_place
from torchjob.render.scheduling import (
    KUEUE_FINALIZER,
    KUEUE_GROUP_LABEL,
    KUEUE_RETRIABLE_ANNOTATION,
)

# The kubelet's waiting reasons that say a container cannot start, as the job's reason: its image
# cannot be pulled, or its configuration names what does not exist (a Secret, a ConfigMap, a key
# of one) or the runtime refuses it. Other waiting reasons (ContainerCreating, PodInitializing,
# CrashLoopBackOff) are a start under way or a restart.
START_FAILURE_REASONS = {
    "ErrImagePull": constants.REASON_IMAGE_PULL_FAILED,
    "ImagePullBackOff": constants.REASON_IMAGE_PULL_FAILED,
    "InvalidImageName": constants.REASON_IMAGE_PULL_FAILED,
    "ErrImageNeverPull": constants.REASON_IMAGE_PULL_FAILED,
    "CreateContainerConfigError": constants.REASON_CONTAINER_CONFIG_INVALID,
    "CreateContainerError": constants.REASON_CONTAINER_CONFIG_INVALID,
}


class CannotStart(NamedTuple):
    """Container `container` waits with the kubelet's `said` reason (ImagePullBackOff) and its
    `message`, on one line; `reason` is the job's (ImagePullFailed)."""

    container: str
    reason: str
    said: str
    message: str


class EndedInPlace(NamedTuple):
    """The training container's last run, ended by a failure its rule restarted it for, where
    the pod stands (render/in_place.py); a restart of every container is not one."""

    exit_code: int | None
    reason: str | None
    message: str | None
    finished_at: datetime | None
    ran_seconds: float | None


class ContainerView(NamedTuple):
    name: str
    state: str  # waiting, running or terminated
    exit_code: int | None = None
    reason: str | None = None  # why it terminated (OOMKilled, Error, ...)


@dataclass(frozen=True, slots=True)
class PodView:
    name: str
    uid: str
    replica_type: str
    index: int
    phase: PodPhase
    exit_code: int | None  # the training container's, once it terminated
    deleting: bool
    backoff_count: int  # the annotation the pod was created with
    debug: bool
    containers: tuple[ContainerView, ...]
    # Why the training container terminated when that says more than its exit code
    # (OOMKilled), else why the pod failed (Evicted); None when nothing is worth naming.
    reason: str | None = None
    training_container: str = ""
    finished_at: datetime | None = None  # when the training container (else any) terminated
    ran_seconds: float | None = None  # how long the training container ran before it ended
    consecutive_restarts: int = 0  # the annotation the pod was created with
    # What the kubelet said with `reason`: the runtime's error (ContainerCannotRun), the
    # eviction's cause; None when it said nothing.
    message: str | None = None
    bound: bool = False  # the scheduler placed it on a node (spec.nodeName)
    gates: tuple[str, ...] = ()  # its scheduling gates: it waits for them to be lifted
    # What the scheduler said when it could not place the pod (PodScheduled False, Unschedulable).
    unschedulable: str | None = None
    # Why the pod is being stopped to make room for other work (Kueue's TerminationTarget,
    # kube-scheduler's preemption); None when it is not.
    preempted: str | None = None
    # A container (an init container included) the kubelet cannot start, and what it said.
    cannot_start: CannotStart | None = None
    node: str = ""  # the node it is bound to (spec.nodeName)
    gang_restarts: int = 0  # the annotation the pod was created with (lifecycle/gang.py)
    running_since: datetime | None = None  # when its running training container started
    # The pod tells Kueue its group is over (render/scheduling.py, KUEUE_RETRIABLE_ANNOTATION).
    group_ended: bool = False
    # The Kueue pod group the pod belongs to (its label), "" for none; and whether Kueue's
    # finalizer holds it while it is deleted (render/scheduling.py, KUEUE_FINALIZER).
    kueue_group: str = ""
    held_by_kueue: bool = False
    # When a pod being deleted is removed whether or not its kubelet confirmed it stopped
    # (metadata.deletionTimestamp: the deletion's time plus its grace period).
    deletion_due: datetime | None = None
    # Made to restart in place (render/in_place.py): the restarts in place asked of it, those
    # its agent made, the training container's restarts, and its last run if a failure ended it.
    in_place: bool = False
    restarts_asked: int = 0
    agent_restarts: int = 0
    training_restarts: int = 0
    ended_in_place: EndedInPlace | None = None
    # It has the restart agent, which diagnoses (render/diagnosis.py), and the diagnoses asked.
    diagnosable: bool = False
    diagnoses_asked: int = 0

    @property
    def finished(self) -> bool:
        return self.phase in FINISHED_POD_PHASES

    @property
    def restart_pending(self) -> bool:
        """Asked to restart in place, and not restarted yet."""
        return self.restarts_asked > self.agent_restarts

    @property
    def placed(self) -> bool:
        """On a node, or past the point where that could still be in question."""
        return self.bound or self.phase != "Pending"


def view_pod(pod: dict[str, Any]) -> PodView | None:
    """The pod as the lifecycle sees it; None when it is not a replica pod (labels missing)."""
    meta: ObjectMeta = pod.get("metadata") or ObjectMeta()
    labels = meta.get("labels") or {}
    annotations = meta.get("annotations") or {}
    index = labels.get(constants.LABEL_REPLICA_INDEX, "")
    replica_type = labels.get(constants.LABEL_REPLICA_TYPE)
    if not replica_type or not index.isdigit():
        return None
    status: PodStatus = pod.get("status") or PodStatus()
    spec = pod.get("spec") or {}
    statuses: list[ContainerStatus] = [
        s for s in status.get("containerStatuses") or [] if isinstance(s, dict)
    ]
    _, training = queries.training_container_in(spec)
    training_name = str(training.get("name", "")) if training else ""
    ended = _terminated(statuses, training_name)
    code = ended.get("exitCode")
    return PodView(
        name=meta.get("name", ""),
        uid=meta.get("uid", ""),
        replica_type=replica_type,
        index=int(index),
        phase=status.get("phase") or "Pending",
        exit_code=code if isinstance(code, int) else None,
        deleting=bool(meta.get("deletionTimestamp")),
        backoff_count=_int(annotations.get(constants.ANNOTATION_BACKOFF_COUNT)),
        debug=annotations.get(constants.ANNOTATION_DEBUG) == "true",
        containers=tuple(_container(s) for s in statuses),
        reason=reason_of(ended, status),
        training_container=training_name,
        finished_at=parse_time(ended.get("finishedAt")) or last_finish(statuses),
        ran_seconds=ran_seconds(ended, status),
        consecutive_restarts=_int(annotations.get(constants.ANNOTATION_CONSECUTIVE_RESTARTS)),
        message=message_of(ended, status),
        bound=bool(spec.get("nodeName")),
        gates=tuple(str(g.get("name", "")) for g in spec.get("schedulingGates") or ()),
        unschedulable=_unschedulable(status),
        preempted=_preempted(status),
        cannot_start=_cannot_start(status),
        node=str(spec.get("nodeName") or ""),
        gang_restarts=_int(annotations.get(constants.ANNOTATION_GANG_RESTARTS)),
        running_since=_running_since(statuses, training_name),
        group_ended=annotations.get(KUEUE_RETRIABLE_ANNOTATION) == "false",
        kueue_group=str(labels.get(KUEUE_GROUP_LABEL) or ""),
        held_by_kueue=bool(meta.get("deletionTimestamp"))
        and KUEUE_FINALIZER in (meta.get("finalizers") or ()),
        deletion_due=parse_time(meta.get("deletionTimestamp")),
        diagnosable=any(
            isinstance(c, dict) and c.get("name") == AGENT for c in spec.get("initContainers") or ()
        ),
        diagnoses_asked=_int(annotations.get(constants.ANNOTATION_DIAGNOSES_ASKED)),
        **_in_place(spec, status, statuses, training_name, annotations),
    )


def _in_place(
    spec: dict[str, Any],
    status: PodStatus,
    statuses: list[ContainerStatus],
    training_name: str,
    annotations: dict[str, str],
) -> dict[str, Any]:
    """The PodView fields of restarting in place; none for a pod not made for it."""
    if not restarts_in_place(spec):
        return {}
    none = ContainerStatus()
    agent = next(
        (s for s in status.get("initContainerStatuses") or () if s.get("name") == AGENT), none
    )
    training = next((s for s in statuses if s.get("name") == training_name), none)
    last = (training.get("lastState") or {}).get("terminated") or {}
    ended = None
    if last and last.get("reason") != RESTARTED_ALL_REASON:
        code = last.get("exitCode")
        ended = EndedInPlace(
            code if isinstance(code, int) else None,
            reason_of(last, PodStatus()),
            message_of(last, PodStatus()),
            parse_time(last.get("finishedAt")),
            ran_seconds(last, status),
        )
    return {
        "in_place": True,
        "restarts_asked": _int(annotations.get(constants.ANNOTATION_RESTARTS_ASKED)),
        "agent_restarts": int(agent.get("restartCount") or 0),
        "training_restarts": int(training.get("restartCount") or 0),
        "ended_in_place": ended,
    }


def _running_since(statuses: list[ContainerStatus], training_name: str) -> datetime | None:
    for status in statuses:
        if status.get("name") == training_name:
            running = (status.get("state") or {}).get("running") or {}
            return parse_time(running.get("startedAt"))
    return None


# Pod conditions that say the cluster stopped the pod, through no fault of the job's, with any
# reason (None: any): Kueue's eviction of its workload (TerminationTarget: preemption, a queue
# stopped, a lost admission) and every disruption Kubernetes marks (DisruptionTarget:
# PreemptionByScheduler, DeletionByTaintManager for a node that went away, EvictionByEvictionAPI
# for a drain, DeletionByPodGC for a pod of a node that no longer exists, TerminationByKubelet for
# node pressure or a node shutdown). Such an ending is not charged to backoffLimit.
PREEMPTION_CONDITIONS: dict[str, str | None] = {"TerminationTarget": None, "DisruptionTarget": None}


def _preempted(status: PodStatus) -> str | None:
    """The reason the cluster stopped the pod, with what it said (Kueue names the workload that
    preempted it: "Preempted to accommodate a workload (UID: ..., JobUID: ...) due to
    prioritization in the ClusterQueue"); None when it did not."""
    for condition in status.get("conditions") or ():
        kind, reason = str(condition.get("type")), str(condition.get("reason") or "")
        if condition.get("status") != "True" or kind not in PREEMPTION_CONDITIONS:
            continue
        if PREEMPTION_CONDITIONS[kind] in (None, reason):
            said = one_line(str(condition.get("message") or ""))
            return f"{reason or kind}: {said}" if said else reason or kind
    return None


def _unschedulable(status: PodStatus) -> str | None:
    """What the scheduler said when it last failed to place the pod; None when it has not."""
    for condition in status.get("conditions") or ():
        kind, holds = condition.get("type"), condition.get("status")
        if (kind, holds, condition.get("reason")) == ("PodScheduled", "False", "Unschedulable"):
            return one_line(str(condition.get("message") or "no node fits"))
    return None


def _cannot_start(status: PodStatus) -> CannotStart | None:
    """The first container, init containers first, that waits for a reason that says it cannot
    start; None when none does."""
    containers = [
        *(status.get("initContainerStatuses") or ()),
        *(status.get("containerStatuses") or ()),
    ]
    for container in containers:
        if not isinstance(container, dict):
            continue
        waiting = (container.get("state") or {}).get("waiting") or {}
        said = str(waiting.get("reason") or "")
        if said in START_FAILURE_REASONS:
            message = one_line(str(waiting.get("message") or ""))
            name = str(container.get("name", ""))
            return CannotStart(name, START_FAILURE_REASONS[said], said, message)
    return None


def _container(status: ContainerStatus) -> ContainerView:
    state = status.get("state") or {}
    name = status.get("name", "")
    for kind in ("terminated", "running", "waiting"):
        if kind in state:
            ended = state.get("terminated") or {}
            code, reason = ended.get("exitCode"), ended.get("reason")
            return ContainerView(
                name,
                kind,
                code if isinstance(code, int) else None,
                reason if isinstance(reason, str) and reason else None,
            )
    return ContainerView(name, "waiting")


def _terminated(statuses: list[ContainerStatus], training_name: str) -> ContainerStateTerminated:
    """The training container's terminated state; {} while it has not terminated."""
    for status in statuses:
        if status.get("name") == training_name:
            ended = (status.get("state") or {}).get("terminated")
            return ended if isinstance(ended, dict) else {}
    return {}


def _int(value: Any) -> int:
    return int(value) if isinstance(value, str) and value.isdigit() else 0


# Signals by number (Linux), for an exit code above 128: the container was killed by the signal
# numbered the code minus 128 (137 is SIGKILL, the OOM killer's or a runtime's kill).
SIGNALS = {
    1: "SIGHUP",
    2: "SIGINT",
    3: "SIGQUIT",
    4: "SIGILL",
    6: "SIGABRT",
    7: "SIGBUS",
    8: "SIGFPE",
    9: "SIGKILL",
    10: "SIGUSR1",
    11: "SIGSEGV",
    12: "SIGUSR2",
    13: "SIGPIPE",
    14: "SIGALRM",
    15: "SIGTERM",
}


def exit_code_text(code: int) -> str:
    """`exit code 1`; `exit code 137 (SIGKILL)` when the code says a signal killed it."""
    signal = SIGNALS.get(code - 128) if code > 128 else None
    return f"exit code {code} ({signal})" if signal else f"exit code {code}"


def describe_failure(pod: PodView) -> str:
    """`j-worker-0 failed with exit code 1`, or naming why when the kubelet says more than the
    exit code: `j-worker-0 container python was OOMKilled (exit code 137)`, `j-worker-0
    container python ended: ContainerCannotRun (exit code 128): <the runtime's message>`,
    `j-worker-0 failed (Evicted: The node was low on resource: memory.)`."""
    if pod.reason and pod.exit_code is not None:
        return f"{pod.name} {_killed(pod)}"
    if pod.exit_code is not None:
        return f"{pod.name} failed with {exit_code_text(pod.exit_code)}"
    return f"{pod.name} failed" + (f" ({_reason_said(pod)})" if pod.reason else "")


def _killed(pod: PodView) -> str:
    container = f"container {pod.training_container} " if pod.training_container else ""
    code = pod.exit_code if pod.exit_code is not None else 0
    if pod.reason == "OOMKilled":  # says the signal already
        return f"{container}was {pod.reason} (exit code {code})"
    said = f": {pod.message}" if pod.message else ""
    return f"{container}ended: {pod.reason} ({exit_code_text(code)}){said}"


def _reason_said(pod: PodView) -> str:
    return f"{pod.reason}: {pod.message}" if pod.message else str(pod.reason)


def failure_message(pod: PodView) -> str:
    return f"replica {describe_failure(pod)} and is not restarted"


def ending(pod: PodView) -> str:
    if pod.phase == "Succeeded":
        return "it succeeded (restartPolicy Always)"
    if pod.reason and pod.exit_code is not None:
        return _killed(pod)
    if pod.exit_code is not None:
        return exit_code_text(pod.exit_code)
    return f"it failed ({_reason_said(pod)})" if pod.reason else "it failed"


# A refusal of the apiserver (reconciler/executor.py) is permanent when sending the same object
# again cannot succeed: 422 Invalid (the object fails validation: an invalid pod template, a
# Service name that is not a DNS label) and 400 BadRequest (a malformed request); the planner
# fails the job at once on one. Every other refusal may pass later without a change to the job,
# so the creation is retried with backoff while a ReplicaFailure condition shows it: 403 Forbidden
# (a ResourceQuota exceeded, a policy webhook's denial, RBAC, a namespace being terminated), 409
# AlreadyExists (an object of that name the job does not own is in the way), 429 and 5xx (the
# apiserver, or a webhook it calls, is unavailable or timed out).
PERMANENT_STATUSES = frozenset({400, 422})


@dataclass(frozen=True, slots=True)
class Refusal:
    """The apiserver refused to create a replica's `kind` named `name` with HTTP `status`,
    saying `said`."""

    kind: Literal["pod", "service", "podgroup"]
    name: str
    said: str
    status: int

    @property
    def permanent(self) -> bool:
        return self.status in PERMANENT_STATUSES

    @property
    def reason(self) -> str:
        if self.kind == "pod":
            return constants.REASON_POD_CREATION_FAILED
        if self.kind == "podgroup":
            return constants.REASON_POD_GROUP_CREATION_FAILED
        return constants.REASON_SERVICE_CREATION_FAILED

    @property
    def message(self) -> str:
        return f"creating {self.kind} {self.name}: {self.said}"


@dataclass(frozen=True, slots=True)
class GroupView:
    """What the reconciler observes of a job's PodGroup (of any kind, render/scheduling.py)."""

    name: str
    min_count: int
    deleting: bool
    # The scheduler placed the group (native: PodGroupInitiallyScheduled; Volcano, coscheduling:
    # their Running or Scheduled phases).
    scheduled: bool
    # What the scheduler said when it could not place the group; None when it has not said so.
    unschedulable: str | None


# The phases of Volcano's and coscheduling's PodGroups once their members are placed.
GROUP_PLACED_PHASES = frozenset({"Running", "Scheduled", "Finished", "Completed"})


def view_group(group: dict[str, Any]) -> GroupView:
    meta = group.get("metadata") or {}
    spec = group.get("spec") or {}
    status = group.get("status") or {}
    gang = (spec.get("schedulingPolicy") or {}).get("gang") or {}
    minimum = gang.get("minCount", spec.get("minMember", 0))
    scheduled = status.get("phase") in GROUP_PLACED_PHASES
    unschedulable: str | None = None
    for condition in status.get("conditions") or ():
        kind, holds = condition.get("type"), condition.get("status")
        said = one_line(str(condition.get("message") or condition.get("reason") or ""))
        if kind == "PodGroupInitiallyScheduled":
            scheduled = holds == "True"
            if holds == "False":
                unschedulable = said or "the scheduler cannot place the group"
        elif kind == "Unschedulable" and holds == "True" and not scheduled:
            unschedulable = said or "the scheduler cannot place the group"  # Volcano's
    return GroupView(
        name=str(meta.get("name", "")),
        min_count=minimum if isinstance(minimum, int) else 0,
        deleting=bool(meta.get("deletionTimestamp")),
        scheduled=scheduled,
        unschedulable=None if scheduled else unschedulable,
    )
