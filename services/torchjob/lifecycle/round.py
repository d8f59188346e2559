"""What one round of planning starts from and what it has found out, in the terms both the
planner (lifecycle/plan.py) and the status builder (lifecycle/status.py) use. Pure.

The planner fills a `Round` while it walks the replicas; the status is then built from the
round's facts alone, so the status builder never needs to know how the planner decided.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, cast

from torchjob.api.objects import ObjectMeta
from torchjob.api.types import PyTorchTrainingJobSpec, PyTorchTrainingJobStatusDict
from torchjob.lifecycle.backoff import DEFAULT_RULES, PendingRestart, RestartRules
from torchjob.lifecycle.nodes import NodesSeen
from torchjob.lifecycle.observe import GroupView, PodView, Refusal
from torchjob.render.scheduling import Gang, GangUnavailable
from torchjob.render.topology import Replica

# A replica's identity within its job: (replica type, index).
PodKey = tuple[str, int]


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


@dataclass(slots=True)
class Round:
    """The facts one round of planning gathers about the job."""

    observed: Observed
    # Every replica the spec asks for now.
    desired: list[Replica]
    # The observed pod of each replica that has one.
    pods: dict[PodKey, PodView]
    # Restarts counted against backoffLimit, this round's recreations included.
    backoff_count: int
    # Restarts counted per replica type (status.tasks[].restartCount), this round's included.
    restarts_by_type: dict[str, int]
    # How the job ended, when this round decided it.
    outcome: Outcome | None = None
    # How each replica that failed this round failed (`j-worker-0 failed with exit code 1`).
    failures: list[str] = field(default_factory=list)
    # Replicas (by pod name) whose recorded pod uid the status drops: their pod is recreated,
    # or deleted by a pause or a change of mode, so it will not count as a restart.
    uid_dropped: set[str] = field(default_factory=set)
    # Restarts decided but not due yet.
    waiting: list[PendingRestart] = field(default_factory=list)
    # Restarts in a row each replica's status shows, where this round decided it (a restart
    # pending or made); the others show their pod's own, or what the status recorded.
    in_a_row: dict[str, int] = field(default_factory=dict)
    # Refusals of creations this round makes again, which retrying may overcome.
    refused: list[Refusal] = field(default_factory=list)
    # The job runs in debug mode now (runMode.debug, not paused): only pods of this mode are its
    # current pods; the others are of the mode before and are deleted.
    debug: bool = False
    # The job's group object is being replaced: no pod is created until the new one exists.
    hold_creations: bool = False
    # Pods stopped to make room for other work (observe.PREEMPTION_CONDITIONS): recreated
    # without counting a restart, to wait to be placed again.
    preempted: list[PodView] = field(default_factory=list)
    # How replicas are restarted (lifecycle/backoff.py), and the job's restart scope: a replica
    # restart restarts every replica (Gang) or the replica alone.
    rules: RestartRules = DEFAULT_RULES
    gang_scope: bool = False
    # The job's gang restarts (status.gangRestarts), this round's included, and the times of
    # the latest ones counted against the gang restart limit (status.gangRestartTimes).
    gang_restarts: int = 0
    gang_restart_times: list[str] = field(default_factory=list)
    # Reasons found this round to restart every replica; the first decides (lifecycle/gang.py).
    gang_causes: list[GangCause] = field(default_factory=list)
    # What the ReplicaFailure condition says while every replica is restarted; None otherwise.
    gang_restarting: str | None = None
    # The job has ended but these pods (by name) have not finished: they are stopped, and the
    # job says it ended once they are gone (lifecycle/finishing.py).
    stopping: list[str] = field(default_factory=list)

    def current(self, pod: PodView) -> bool:
        """The pod is one of the job's pods as the spec stands: not being deleted, of the job's
        mode (debug or not), and not of a gang restarted since."""
        return (
            not pod.deleting and pod.debug == self.debug and pod.gang_restarts >= self.gang_restarts
        )
