"""What one round of planning starts from and what it has found out, in the terms both the
planner (lifecycle/plan.py) and the status builder (lifecycle/status.py) use. Pure.

The planner's steps read a `Round` of what was observed and each returns what it decided
(lifecycle/decision.py); the planner applies the decisions and ends with a `Round` of the facts
they make, from which alone the status is built, so the status builder never needs to know how
the planner decided.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from types import MappingProxyType
from typing import Any, cast

from torchjob.api import queries
from torchjob.api.objects import ObjectMeta
from torchjob.api.types import PyTorchTrainingJobSpec, PyTorchTrainingJobStatusDict
from torchjob.lifecycle.backoff import PendingRestart, RestartRules
from torchjob.lifecycle.nodes import NodesSeen
from torchjob.lifecycle.observe import GroupView, PodView, Refusal
from torchjob.render.scheduling import Gang, GangUnavailable
from torchjob.render.topology import Replica, service_name

# A replica's identity within its job: (replica type, index).
PodKey = tuple[str, int]
NO_COUNTS: Mapping[str, int] = MappingProxyType({})


def no_counts() -> Mapping[str, int]:
    """No count for any replica (a frozen dataclass's default is made by a function)."""
    return NO_COUNTS


@dataclass(frozen=True, slots=True)
class Observed:
    """The job and what the caches show of its pods and Services at `now`, with what the
    apiserver said when it last refused to create one of them."""

    job_meta: ObjectMeta
    spec: PyTorchTrainingJobSpec
    status: PyTorchTrainingJobStatusDict
    pods: list[PodView]
    services: frozenset[str]  # names of the job's Services
    now: datetime
    # The apiserver's refusals of the job's latest creations (reconciler/executor.py); those of
    # objects that exist since, or that the plan no longer creates, are ignored.
    refusals: tuple[Refusal, ...] = ()
    # How the job's pods are grouped for scheduling (None: one by one), and its group object.
    gang: Gang | GangUnavailable | None = None
    group: GroupView | None = None
    # The nodes of the job's pods; None where nodes are not watched (a local run).
    nodes: NodesSeen | None = None

    @classmethod
    def of_json(
        cls,
        job_meta: Mapping[str, Any],
        spec: PyTorchTrainingJobSpec,
        status: Mapping[str, Any] | None,
        pods: list[PodView],
        services: frozenset[str],
        now: datetime,
        refusals: tuple[Refusal, ...] = (),
        gang: Gang | GangUnavailable | None = None,
        group: GroupView | None = None,
        nodes: NodesSeen | None = None,
    ) -> Observed:
        """Observations of a job as stored (JSON-shaped dicts), seen through their types; no
        copy and no check: the apiserver's schema stands behind the shapes."""
        return cls(
            cast(ObjectMeta, job_meta),
            spec,
            cast(PyTorchTrainingJobStatusDict, status or {}),
            pods,
            services,
            now,
            refusals,
            gang,
            group,
            nodes,
        )


@dataclass(frozen=True, slots=True)
class Outcome:
    """How the job ended: succeeded or failed, with the reason and message its conditions
    carry."""

    succeeded: bool
    reason: str
    message: str


@dataclass(frozen=True, slots=True)
class GangCause:
    """Why every replica is to be restarted together (lifecycle/gang.py): `what` happened
    (`j-worker-0 failed with exit code 1`), the Event `reason` that tells of it, whether the
    restart counts against backoffLimit and the gang restart limit (`charged`) and which
    replica type's restartCount it adds to; `pending`: the restart delay of the replica that
    ended, None when the restart is due at once."""

    what: str
    reason: str
    charged: bool
    replica_type: str | None = None
    pending: PendingRestart | None = None


@dataclass(frozen=True, slots=True)
class Round:
    """The facts of one round about the job. The planner (lifecycle/plan.py) starts from those
    it observed (nothing decided yet), and ends with those its steps decided; the status is
    built from the latter alone (lifecycle/status.py)."""

    observed: Observed
    # Every replica the spec asks for now.
    desired: tuple[Replica, ...]
    # The observed pod of each replica that has one.
    pods: Mapping[PodKey, PodView]
    # How replicas are restarted (lifecycle/backoff.py).
    rules: RestartRules
    # The job runs in debug mode now (runMode.debug, not paused): only pods of this mode are its
    # current pods; the others are of the mode before and are deleted.
    debug: bool
    # The job's restart scope: a replica restart restarts every replica (Gang) or the replica
    # alone (lifecycle/gang.py).
    gang_scope: bool
    # The job's gang restarts (status.gangRestarts), this round's included, and the times of
    # the latest ones counted against the gang restart limit (status.gangRestartTimes).
    gang_restarts: int
    gang_restart_times: tuple[str, ...]
    # Restarts counted against backoffLimit, this round's recreations included.
    backoff_count: int
    # Restarts counted per replica type (status.tasks[].restartCount), this round's included.
    restarts_by_type: Mapping[str, int]
    # How the job ended, when this round decided it.
    outcome: Outcome | None = None
    # How each replica that failed this round failed (`j-worker-0 failed with exit code 1`).
    failures: tuple[str, ...] = ()
    # Replicas (by pod name) whose recorded pod uid the status drops: their pod is recreated,
    # or deleted by a pause or a change of mode, so it will not count as a restart.
    uid_dropped: frozenset[str] = frozenset()
    # The training container's restarts in place counted this round, by pod name
    # (lifecycle/in_place.py); the others' stand as the status recorded them.
    counted_in_place: Mapping[str, int] = field(default_factory=no_counts)
    # Restarts decided but not due yet.
    waiting: tuple[PendingRestart, ...] = ()
    # Restarts in a row each replica's status shows, where this round decided it (a restart
    # pending or made); the others show their pod's own, or what the status recorded.
    in_a_row: Mapping[str, int] = field(default_factory=no_counts)
    # Refusals of creations this round makes again, which retrying may overcome.
    refused: tuple[Refusal, ...] = ()
    # Pods stopped to make room for other work (observe.PREEMPTION_CONDITIONS): recreated
    # without counting a restart, to wait to be placed again.
    preempted: tuple[PodView, ...] = ()
    # What the ReplicaFailure condition says while every replica is restarted; None otherwise.
    gang_restarting: str | None = None
    # The job has ended but these pods (by name) have not finished: they are stopped, and the
    # job says it ended once they are gone (lifecycle/finishing.py).
    stopping: tuple[str, ...] = ()
    # The nodes the latest charged gang restart named, and those the job's new pods avoid
    # (lifecycle/failing_nodes.py).
    gang_restart_nodes: tuple[str, ...] = ()
    avoided_nodes: tuple[str, ...] = ()

    def service_of(self, replica: Replica) -> str:
        """The name of the headless Service that publishes the replica's address."""
        meta = self.observed.job_meta
        return service_name(meta["name"], replica, queries.service_scope(meta))

    def current(self, pod: PodView) -> bool:
        """The pod is one of the job's pods as the spec stands: not being deleted, of the job's
        mode (debug or not), and not of a gang restarted since."""
        return (
            not pod.deleting and pod.debug == self.debug and pod.gang_restarts >= self.gang_restarts
        )


def recorded(status: Mapping[str, Any], pod_name: str) -> dict[str, Any]:
    """The replica's entry in `status.tasks[].replicas[]`; {} when it has none."""
    for task in status.get("tasks") or []:
        for replica in task.get("replicas") or []:
            if replica.get("name") == pod_name:
                return dict(replica)
    return {}


def recorded_for(status: Mapping[str, Any], pod_name: str, uid: str) -> dict[str, Any]:
    """The replica's status entry when it records the pod of `uid`; {} otherwise."""
    seen = recorded(status, pod_name)
    return seen if seen.get("uid") == uid else {}


def recorded_in_a_row(status: Mapping[str, Any], pod_name: str) -> int:
    """The restarts in a row the replica's status entry carries (0 when none)."""
    carried = recorded(status, pod_name).get("consecutiveRestarts")
    return carried if isinstance(carried, int) else 0
