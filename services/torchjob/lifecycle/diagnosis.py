"""Diagnoses: where a job's training processes are when it hangs, or when a user asks. Pure.

A diagnosis is asked when the job's silence passes its progress deadline (before the gang
restart that follows, lifecycle/no_progress.py), and when the job's ANNOTATION_DIAGNOSE takes a
new value (`torchjob diagnose`, the console). The reconciler raises each running pod's
diagnoses-asked annotation (render/diagnosis.py: the restart agent collects the stacks of the
pod's training processes, prints them to its log and ends with a summary line), waits
COLLECT_SECONDS, reads each pod's summary line from its agent's log (reconciler/diagnoses.py) and
writes what they say, summarized (lifecycle/hang.py), into status.diagnosis and an Event
`Diagnosed`. Meanwhile the silence's restart waits; then its Event names the diagnosis by its
number (the summary is the tenant's processes' word: only those two carry it).

status.diagnosis holds the latest one: its number, reason (NoProgress, Requested), the request
it answered last, when it was asked and collected, how many pods were asked, and the summary.
The stacks themselves stay in the agents' logs, readable by whoever may read the job's logs.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final, NamedTuple

from torchjob.api import constants, queries
from torchjob.lifecycle.observe import PodView
from torchjob.lifecycle.round import Round
from torchjob.lifecycle.times import format_time, parse_time

FIELD: Final = "diagnosis"
# How long the agents are given to answer: the kubelet's refresh of the annotation's file (about
# a second or two), the processes' half-second look and the agent's wait for those that do not
# answer (render/agent/restart_agent.py's ANSWER_SECONDS).
COLLECT_SECONDS: Final = 10.0


class PodSeen(NamedTuple):
    """A pod a diagnosis asked: its name, its replica (`worker-0`) and its node."""

    name: str
    replica: str
    node: str


@dataclass(frozen=True, slots=True)
class Ask:
    """Raise the diagnoses-asked annotation of `pods` (name, uid) to `number`."""

    number: int
    pods: tuple[tuple[str, str], ...]


@dataclass(frozen=True, slots=True)
class Collect:
    """Read diagnosis `number`'s summary from each of `pods`' agent logs."""

    number: int
    pods: tuple[PodSeen, ...]


@dataclass(frozen=True, slots=True)
class Step:
    """What diagnosing decides this round: the status.diagnosis to write (None: as it is), an
    ask or a collection, when to look again, and whether the silence's restart waits for it."""

    record: dict[str, Any] | None = None
    ask: Ask | None = None
    collect: Collect | None = None
    requeue_after: float | None = None
    holds_restart: bool = False


NONE: Final = Step()


def recorded(status: dict[str, Any]) -> dict[str, Any]:
    value = status.get(FIELD)
    return dict(value) if isinstance(value, dict) else {}


def status_field(status: dict[str, Any], decided: dict[str, Any] | None = None) -> dict[str, Any]:
    """The status' diagnosis: as the round `decided` it, else as recorded; {} for none."""
    record = decided or recorded(status)
    return {FIELD: record} if record else {}


def step(state: Round, stalled_since: datetime | None) -> Step:
    """The diagnosis under way, collected when due; else a new one when the job's silence began
    (`stalled_since`) after the latest was asked, or when the job asks for one."""
    observed = state.observed
    record = recorded(dict(observed.status))
    asked = parse_time(record.get("askedTime"))
    stalled = stalled_since is not None
    if asked is not None and not record.get("collectedTime"):
        due = COLLECT_SECONDS - (observed.now - asked).total_seconds()
        if due > 0:
            return Step(requeue_after=due, holds_restart=stalled)
        collect = Collect(int(record.get("number") or 0), _seen(_asked_pods(state)))
        # Looked at again at once: what the silence's restart waited for is in (the status
        # write that records it is the reconciler's own, which no watch event brings back).
        return Step(collect=collect, requeue_after=0.0, holds_restart=stalled)
    request = queries.diagnosis_request(observed.job_meta)
    requested = request is not None and request != record.get("request")
    new_stall = stalled_since is not None and not _of_stall(record, stalled_since)
    if not (requested or new_stall):
        return NONE
    pods = _asked_pods(state)
    number = int(record.get("number") or 0) + 1
    reason = constants.REASON_NO_PROGRESS if new_stall else constants.DIAGNOSIS_REQUESTED
    new = {
        "number": number,
        "reason": reason,
        "askedTime": format_time(observed.now),
        "pods": len(pods),
        **({"request": request} if requested else _kept_request(record)),
        # The status is written as a merge patch: the latest diagnosis's findings are removed.
        "collectedTime": None,
        "message": None,
    }
    if not pods:
        # Nothing to ask (no running pod with the agent): said at once, and nothing waits.
        return Step(record=new | _nothing_to_ask(observed.now))
    refs = tuple((p.name, p.uid) for p in pods)
    return Step(new, Ask(number, refs), requeue_after=COLLECT_SECONDS, holds_restart=stalled)


def collected(record: dict[str, Any], message: str, now: datetime) -> dict[str, Any]:
    """status.diagnosis once its summary is in."""
    return record | {"collectedTime": format_time(now), "message": message}


def said_for_stall(status: dict[str, Any], stalled_since: datetime) -> str | None:
    """What the restart's Event says of a diagnosis collected since the silence began; None
    when there is none. Not its summary: that is the tenant's processes' word, which only the
    Diagnosed Event and status.diagnosis carry, as theirs."""
    record = recorded(status)
    if not _of_stall(record, stalled_since) or not record.get("collectedTime"):
        return None
    return f"where each rank was: diagnosis {record.get('number')}"


def _of_stall(record: dict[str, Any], stalled_since: datetime) -> bool:
    """The diagnosis is the one the silence since `stalled_since` asked for (one a user asked
    for meanwhile, maybe before the deadline passed, is not)."""
    asked = parse_time(record.get("askedTime"))
    reason = record.get("reason")
    return reason == constants.REASON_NO_PROGRESS and asked is not None and asked >= stalled_since


def _asked_pods(state: Round) -> list[PodView]:
    """The job's current running pods whose agent can answer."""
    return [
        pod
        for pod in state.observed.pods
        if pod.diagnosable
        and state.current(pod)
        and pod.phase == "Running"
        and not pod.restart_pending
    ]


def _seen(pods: list[PodView]) -> tuple[PodSeen, ...]:
    return tuple(PodSeen(p.name, f"{p.replica_type.lower()}-{p.index}", p.node) for p in pods)


def _kept_request(record: dict[str, Any]) -> dict[str, Any]:
    return {"request": record["request"]} if record.get("request") else {}


def _nothing_to_ask(now: datetime) -> dict[str, Any]:
    message = "no running replica pod has the restart agent that diagnoses"
    return {"collectedTime": format_time(now), "message": message}
