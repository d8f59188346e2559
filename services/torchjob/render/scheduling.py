"""How a job's pods are scheduled as a group (gang scheduling), and what that adds to them. Pure.

A job is placed whole or not at all when its pods form a group one scheduler knows:
- native: Kubernetes' own PodGroup (scheduling.k8s.io/v1beta1, GenericWorkload feature gate);
  each pod names it in spec.schedulingGroup and kube-scheduler binds at least minCount together.
- volcano, coscheduling: the PodGroup kinds of Volcano and of scheduler-plugins' coscheduling,
  for clusters that run those schedulers.
- t9k: the T9k scheduler's PodGroup (scheduler.tensorstack.dev/v1beta1) with the job's T9k queue
  and priority, for jobs that ask for the T9k scheduler on a cluster that serves it.
- kueue: no group object of ours; every pod carries Kueue's pod-group label and total-count
  annotation, and Kueue admits the group as one workload by lifting its scheduling gate.
- none: pods are placed one by one, as the default scheduler does.

`gang_of` decides the mode of one job from the reconciler's settings, the job's own choice and
what the cluster serves; `decorate_pod` and `render_pod_group` turn the decision into objects.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Final, Literal, get_args

from torchjob.api import constants, queries
from torchjob.api.types import PyTorchTrainingJobSpec
from torchjob.render.topology import replicas_of

GangMode = Literal["native", "volcano", "coscheduling", "t9k", "kueue", "none"]
# What the reconciler is told to do with jobs that do not choose: `auto` is native when the
# apiserver serves native PodGroups, else none.
GangSetting = Literal["auto", "native", "volcano", "coscheduling", "none"]
GANG_SETTINGS: Final[tuple[GangSetting, ...]] = get_args(GangSetting)
# How T9k's spec.scheduler.t9kScheduler is honoured: by the T9k scheduler, or as a Kueue queue.
T9kQueues = Literal["t9k", "kueue"]

ANNOTATION_GANG: Final = constants.ANNOTATION_GANG_SCHEDULING

# Kueue's plain-pod-group contract.
KUEUE_QUEUE_LABEL: Final = "kueue.x-k8s.io/queue-name"
KUEUE_GROUP_LABEL: Final = "kueue.x-k8s.io/pod-group-name"
KUEUE_TOTAL_ANNOTATION: Final = "kueue.x-k8s.io/pod-group-total-count"
KUEUE_PRIORITY_LABEL: Final = "kueue.x-k8s.io/priority-class"
KUEUE_GATE: Final = "kueue.x-k8s.io/admission"
# Kueue declares a pod group's Workload finished (frees its quota and lets its pods go) once every
# pod of the group succeeded, or, when a pod of the group carries this annotation set to
# "false", once none of them runs or waits to. A job that ended marks its pods so
# (`kueue_group_ended_patch`): a job that succeeded stops the replicas still running (they end
# Failed), and one that failed does not replace its failed pods.
KUEUE_RETRIABLE_ANNOTATION: Final = "kueue.x-k8s.io/retriable-in-group"
# Kueue's webhook puts this finalizer on each pod it manages. Kueue removes it from a pod of a
# group that is being deleted only once a replacement pod of the same role exists, or when the
# group's Workload is deleted (it then lets every pod of the group go); a replacement of ours has
# the replica's name, which the pod held keeps, so a job that goes on releases the Workload
# (lifecycle/kueue.py).
KUEUE_FINALIZER: Final = "kueue.x-k8s.io/managed"
# Volcano's and coscheduling's ways for a pod to name its group.
VOLCANO_GROUP_ANNOTATION: Final = "scheduling.k8s.io/group-name"
COSCHEDULING_GROUP_LABEL: Final = "scheduling.x-k8s.io/pod-group"


@dataclass(frozen=True, slots=True)
class GroupKind:
    """A PodGroup kind, by its REST coordinates."""

    group: str
    version: str
    plural: str = "podgroups"
    kind: str = "PodGroup"

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}"


GROUP_KINDS: Final[Mapping[GangMode, GroupKind]] = {
    "native": GroupKind("scheduling.k8s.io", "v1beta1"),
    "volcano": GroupKind("scheduling.volcano.sh", "v1beta1"),
    "coscheduling": GroupKind("scheduling.x-k8s.io", "v1alpha1"),
    "t9k": GroupKind("scheduler.tensorstack.dev", "v1beta1"),
}


@dataclass(frozen=True, slots=True)
class SchedulingSettings:
    """The reconciler's scheduling settings (the chart's `scheduling` values)."""

    gang: GangSetting = "auto"
    volcano_scheduler: str = "volcano"
    coscheduling_scheduler: str = "scheduler-plugins-scheduler"
    t9k_queues: T9kQueues = "t9k"
    # T9k priorities (0-100) to priority classes: the class of the highest threshold at or below
    # the job's priority. Empty: no priority class is set.
    t9k_priority_classes: tuple[tuple[int, str], ...] = ()
    t9k_scheduler: str = constants.T9K_SCHEDULER_NAME
    # The group kinds the apiserver serves, found at start.
    served: frozenset[GangMode] = field(default_factory=frozenset)


@dataclass(frozen=True, slots=True)
class Gang:
    """How one job's pods are grouped: the mode, the group's name (the job's), how many pods
    must be placed together and how many the group has now."""

    mode: GangMode
    name: str
    min_count: int
    total: int
    queue: str = ""  # Kueue's, T9k's or (a Kubeflow job's) Volcano's queue
    priority_class: str = ""
    priority: int | None = None  # T9k's, 0-100
    # A Kubeflow job's schedulingPolicy: the group's minimum resources (Volcano and
    # coscheduling) and how long coscheduling waits for the whole group.
    min_resources: Mapping[str, Any] | None = None
    schedule_timeout: int | None = None

    @property
    def kind(self) -> GroupKind | None:
        """The group object's kind; None when the mode has none (kueue, none)."""
        return GROUP_KINDS.get(self.mode)


@dataclass(frozen=True, slots=True)
class GangUnavailable:
    """The job asks for a mode this cluster cannot give it."""

    message: str


def gang_of(
    job_meta: Mapping[str, Any], spec: PyTorchTrainingJobSpec, settings: SchedulingSettings
) -> Gang | GangUnavailable:
    """How the job's pods are grouped (see `_mode_and_queue`); a mode whose group kind the
    cluster does not serve is unavailable."""
    total = len(replicas_of(spec))
    low, _ = queries.elastic_bounds(spec)
    min_count = max(1, min(total, low)) if low is not None else total
    mode, queue = _mode_and_queue(job_meta, spec, settings)
    gang = Gang(mode, str(job_meta["name"]), min_count, total, queue)
    if mode == "kueue":  # Kueue admits a pod group only whole
        return replace(gang, min_count=total, priority_class=_priority_class(spec, settings))
    if mode == "t9k":
        t9k = spec.scheduler.t9k_scheduler if spec.scheduler else None
        return replace(gang, priority=t9k.priority if t9k else None)
    if mode != "none" and mode not in settings.served:
        kind = GROUP_KINDS[mode]
        return GangUnavailable(
            f"gang scheduling '{mode}' needs {kind.plural}.{kind.group}/{kind.version}, "
            "which this cluster does not serve"
        )
    return gang


def with_scheduling_policy(gang: Gang, policy: Mapping[str, Any]) -> Gang:
    """The gang of a Kubeflow job as its spec.runPolicy.schedulingPolicy adjusts it: its
    minimum (minAvailable; Kueue admits a group only whole), queue, priority class, minimum
    resources and timeout, each where the group's kind has a place for it."""
    minimum = policy.get("minAvailable")
    if isinstance(minimum, int) and gang.mode != "kueue":
        gang = replace(gang, min_count=max(1, min(gang.total, minimum)))
    queue = policy.get("queue")
    if isinstance(queue, str) and queue and gang.mode == "volcano":
        gang = replace(gang, queue=queue)
    priority_class = policy.get("priorityClass")
    if isinstance(priority_class, str) and priority_class:
        gang = replace(gang, priority_class=priority_class)
    resources = policy.get("minResources")
    timeout = policy.get("scheduleTimeoutSeconds")
    return replace(
        gang,
        min_resources=resources if isinstance(resources, Mapping) and resources else None,
        schedule_timeout=timeout if isinstance(timeout, int) else None,
    )


def _mode_and_queue(
    job_meta: Mapping[str, Any], spec: PyTorchTrainingJobSpec, settings: SchedulingSettings
) -> tuple[GangMode, str]:
    """The job's annotation's choice; else Kueue when the job names a Kueue queue (its label, or
    T9k's queue when T9k queues map to Kueue); else the T9k scheduler's group for a T9k job
    (where the cluster serves it; else its pods go to the T9k scheduler one by one); else the
    setting."""
    choice = (job_meta.get("annotations") or {}).get(ANNOTATION_GANG)
    if choice is not None:  # admission refuses any value but these
        return (choice if choice in constants.GANG_SCHEDULING_CHOICES else "none"), ""
    queue = (job_meta.get("labels") or {}).get(KUEUE_QUEUE_LABEL)
    if queue:
        return "kueue", str(queue)
    t9k = spec.scheduler.t9k_scheduler if spec.scheduler else None
    if t9k is not None and settings.t9k_queues == "kueue":
        return "kueue", t9k.queue or ""
    if t9k is not None:
        return ("t9k" if "t9k" in settings.served else "none"), t9k.queue or ""
    if settings.gang == "auto":
        return ("native" if "native" in settings.served else "none"), ""
    return settings.gang, ""


def _priority_class(spec: PyTorchTrainingJobSpec, settings: SchedulingSettings) -> str:
    """The priority class T9k's priority maps to, when the settings map T9k queues to Kueue."""
    t9k = spec.scheduler.t9k_scheduler if spec.scheduler else None
    if t9k is None or t9k.priority is None or settings.t9k_queues != "kueue":
        return ""
    chosen = ""
    for threshold, name in sorted(settings.t9k_priority_classes):
        if t9k.priority >= threshold:
            chosen = name
    return chosen


def scheduler_name(gang: Gang, settings: SchedulingSettings) -> str | None:
    """The scheduler the group's pods need; None when any scheduler will do."""
    if gang.mode == "volcano":
        return settings.volcano_scheduler
    if gang.mode == "coscheduling":
        return settings.coscheduling_scheduler
    return None


def decorate_pod(pod: dict[str, Any], gang: Gang, settings: SchedulingSettings) -> None:
    """Make the rendered `pod` a member of the job's group."""
    metadata, spec = pod["metadata"], pod["spec"]
    labels: dict[str, str] = metadata.setdefault("labels", {})
    annotations: dict[str, str] = metadata.setdefault("annotations", {})
    wanted = scheduler_name(gang, settings)
    if gang.mode not in ("t9k", "none") and spec.get("schedulerName") == settings.t9k_scheduler:
        # render_pod sends the pods of a T9k job to the T9k scheduler; the group the job chose
        # instead (its annotation, or Kueue) is placed by another.
        del spec["schedulerName"]
    if wanted and not spec.get("schedulerName"):
        spec["schedulerName"] = wanted
    if gang.mode == "native":
        spec["schedulingGroup"] = {"podGroupName": gang.name}
    elif gang.mode == "volcano":
        annotations[VOLCANO_GROUP_ANNOTATION] = gang.name
    elif gang.mode == "coscheduling":
        labels[COSCHEDULING_GROUP_LABEL] = gang.name
    elif gang.mode == "t9k":
        labels[constants.LABEL_T9K_GROUP] = gang.name
        labels[constants.LABEL_T9K_QUEUE] = gang.queue
        labels[constants.LABEL_T9K_ROLE] = labels.get(constants.LABEL_REPLICA_TYPE, "").lower()
    elif gang.mode == "kueue":
        labels[KUEUE_QUEUE_LABEL] = gang.queue
        labels[KUEUE_GROUP_LABEL] = gang.name
        annotations[KUEUE_TOTAL_ANNOTATION] = str(gang.total)
    if gang.priority_class and not spec.get("priorityClassName"):
        spec["priorityClassName"] = gang.priority_class


def render_pod_group(
    job_meta: Mapping[str, Any],
    gang: Gang,
    owner: Mapping[str, Any],
    priority_class: str = "",
) -> dict[str, Any] | None:
    """The job's group object in its mode's kind, owned by the job; None for modes without one."""
    kind = gang.kind
    if kind is None:
        return None
    spec: dict[str, Any]
    if gang.mode == "native":
        spec = {"schedulingPolicy": {"gang": {"minCount": gang.min_count}}}
    else:
        spec = {"minMember": gang.min_count}
    if gang.mode in ("t9k", "volcano") and gang.queue:
        spec["queue"] = gang.queue
    if gang.mode == "t9k" and gang.priority is not None:
        spec["priority"] = gang.priority
    if gang.min_resources and gang.mode in ("volcano", "coscheduling"):
        spec["minResources"] = dict(gang.min_resources)
    if gang.schedule_timeout is not None and gang.mode == "coscheduling":
        spec["scheduleTimeoutSeconds"] = gang.schedule_timeout
    chosen = gang.priority_class or priority_class
    if chosen and gang.mode != "t9k":
        spec["priorityClassName"] = chosen
    return {
        "apiVersion": kind.api_version,
        "kind": kind.kind,
        "metadata": {
            "name": gang.name,
            "namespace": job_meta["namespace"],
            "labels": {constants.LABEL_JOB_NAME: gang.name},
            "ownerReferences": [dict(owner)],
        },
        "spec": spec,
    }


def shared_priority_class(spec: PyTorchTrainingJobSpec) -> str:
    """The priority class every replica's template names, for the group to be placed by; ""
    when they name none or differ."""
    names = {
        str(((r.template.spec if r.template else None) or {}).get("priorityClassName") or "")
        for r in spec.replica_specs or []
    }
    return names.pop() if len(names) == 1 else ""


def kueue_group_ended_patch() -> dict[str, Any]:
    """The merge patch that tells Kueue a pod's group is over: no pod of it is replaced, and its
    Workload is finished once none of them runs or waits to."""
    return {"metadata": {"annotations": {KUEUE_RETRIABLE_ANNOTATION: "false"}}}


def min_count_patch(gang: Gang) -> dict[str, Any]:
    """The merge patch that sets a group's minimum to the gang's."""
    if gang.mode == "native":
        return {"spec": {"schedulingPolicy": {"gang": {"minCount": gang.min_count}}}}
    return {"spec": {"minMember": gang.min_count}}
