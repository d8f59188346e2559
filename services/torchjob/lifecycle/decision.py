"""What one step of the planner decides, as a value: each step (lifecycle/plan.py,
lifecycle/replicas.py, lifecycle/gang.py, lifecycle/finishing.py) reads the round's facts and
what the steps before it decided (a `Tally`), and returns a `Decision`; `plan()` applies the
decisions, in the order it writes down once, and nothing else changes the round. Pure.

Also here: the Event that announces a restart, which a replica's restart and the gang's both
decide.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from torchjob.api import constants, queries
from torchjob.api.objects import FINISHED_POD_PHASES
from torchjob.lifecycle.backoff import PendingRestart
from torchjob.lifecycle.conditions import Event
from torchjob.lifecycle.diagnosis import Ask, Collect
from torchjob.lifecycle.observe import PodView, Refusal, describe_failure, ending
from torchjob.lifecycle.round import GangCause, Outcome, Round, recorded
from torchjob.lifecycle.times import seconds_text
from torchjob.render.topology import Replica

PodRef = tuple[str, str]  # (name, uid)
InARow = tuple[str, int]  # (pod name, restarts in a row)


@dataclass(frozen=True, slots=True)
class PodToCreate:
    replica: Replica
    annotations: dict[str, str]
    avoid: tuple[str, ...] = ()  # nodes it prefers not to run on (lifecycle/failing_nodes.py)


@dataclass(frozen=True, slots=True)
class InPlaceRestart:
    """A pod asked to restart every container where it stands (lifecycle/in_place.py): its
    gang-restarts annotation raised to `gang_restarts` and its restarts asked to `asked`."""

    name: str
    uid: str
    gang_restarts: int
    asked: int


@dataclass(frozen=True, slots=True)
class Tally:
    """What the steps so far decided that a later step reads."""

    # Restarts counted against backoffLimit, those decided so far included.
    backoff_count: int
    # Restart Events decided so far (each names its place against backoffLimit).
    announced: int
    # No pod is created this round (the group is replaced, or an earlier gang still stops).
    hold_creations: bool


@dataclass(frozen=True, slots=True)
class GangRestart:
    """Every replica is restarted together for `cause`; `times`: the gang restarts counted
    against the gang restart limit, this one included (None: this one is not counted)."""

    cause: GangCause
    times: tuple[str, ...] | None
    # The nodes it names and those the job avoids after it (lifecycle/failing_nodes.py).
    named: tuple[str, ...] = ()
    avoided: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Decision:
    """What one step decided. Lists add to what the steps before decided; a gang restart
    replaces what they decided to create, the restarts they wait for and announce."""

    # The objects to create and delete.
    create_services: tuple[Replica, ...] = ()
    create_pods: tuple[PodToCreate, ...] = ()
    delete_pods: tuple[PodRef, ...] = ()
    restart_in_place: tuple[InPlaceRestart, ...] = ()
    force_delete_pods: tuple[PodRef, ...] = ()  # stuck on a node that will never confirm it
    end_group: tuple[PodRef, ...] = ()  # pods to tell Kueue their group is over (finishing.py)
    delete_services: tuple[str, ...] = ()
    create_group: bool = False
    resize_group: bool = False
    delete_group: bool = False
    hold_creations: bool = False  # no pod is created by the steps after this one
    # How the job ended (the first step that decides it decides), and what its conditions say.
    outcome: Outcome | None = None
    failures: tuple[str, ...] = ()
    refused: tuple[Refusal, ...] = ()
    preempted: tuple[PodView, ...] = ()
    waiting: tuple[PendingRestart, ...] = ()
    gang_restarting: str | None = None  # replaces what a step before said
    stopping: tuple[str, ...] = ()
    # Restart accounting: one entry per restart counted against backoffLimit, with the replica
    # type whose restartCount it adds to (None: no type's).
    charged: tuple[str | None, ...] = ()
    uid_dropped: frozenset[str] = frozenset()
    # The training container's restarts in place counted, by pod name (lifecycle/in_place.py).
    counted_in_place: tuple[InARow, ...] = ()
    # The restarts in a row a replica's status shows: set whatever a step before set, and set
    # unless a step before set it.
    in_a_row: tuple[InARow, ...] = ()
    in_a_row_kept: tuple[InARow, ...] = ()
    gang_causes: tuple[GangCause, ...] = ()  # reasons to restart every replica (gang.settle)
    gang_restart: GangRestart | None = None
    # Events recorded now, and restart Events recorded with the status that shows the restart.
    events: tuple[Event, ...] = ()
    announced: tuple[Event, ...] = ()
    requeue_after: float | None = None  # look again after, unless another step asks sooner
    # A diagnosis (lifecycle/diagnosis.py): its status.diagnosis, its ask or its collection.
    diagnosis: dict[str, Any] | None = None
    ask_diagnosis: Ask | None = None
    collect_diagnosis: Collect | None = None


NOTHING = Decision()


def budget_outcome(state: Round, tally: Tally, ended: PodView | None = None) -> Outcome | None:
    """The job's failure when one more restart would pass backoffLimit; `ended`: the pod whose
    restart it would be."""
    limit = queries.backoff_limit(state.observed.spec)
    if tally.backoff_count + 1 <= limit:
        return None
    last = f"; the last: {describe_failure(ended)}" if ended and ended.phase == "Failed" else ""
    return Outcome(
        False,
        constants.REASON_BACKOFF_LIMIT_EXCEEDED,
        f"replica restarts reached backoffLimit ({limit}){last}",
    )


def announce(state: Round, pending: PendingRestart, wait: float, tally: Tally) -> tuple[Event, ...]:
    """The Event of restart `pending`, due in `wait` seconds, the first time the end is seen: a
    status already showing this pod ended has had its Event (it is recorded once that status is
    written)."""
    pod = pending.pod
    seen = recorded(state.observed.status, pod.name)
    if seen.get("uid") == pod.uid and seen.get("phase") in FINISHED_POD_PHASES:
        return ()
    when = f"in {seconds_text(wait)}" if wait > 0 else "now"
    # The restart this is: of the replica, in a row, and of the job, against backoffLimit.
    counted = tally.backoff_count + 1 + tally.announced
    limit = queries.backoff_limit(state.observed.spec)
    count = f"restart {pending.in_a_row} in a row, {counted} of backoffLimit {limit}"
    message = f"restarting {pod.name} ({count}) {when} after {ending(pod)}"
    kind: Literal["Normal", "Warning"] = "Normal" if pod.phase == "Succeeded" else "Warning"
    return (Event(kind, constants.REASON_RESTART_BACKOFF, message),)
