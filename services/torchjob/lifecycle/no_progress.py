"""The progress deadline: a job that reports its progress (status.trainerStatus, written by the
progress endpoint) and then reports nothing for longer than its deadline is taken to hang (a
collective that never completes, a deadlock), and every replica is restarted together, charged
once; when no restart is allowed (a replica type's restartPolicy is Never, backoffLimit or the
gang restart limit is reached) the job fails with reason NoProgress. Pure.

The silence counts from the later of the last report and the moment every current pod of the
job was running (the latest start of their training containers): a job that has just been
restarted, or that waited for its pods to be placed, has had no chance to report yet. A job that
never reported has no deadline: nothing says it would report at all. The deadline is the job's
annotation (ANNOTATION_PROGRESS_DEADLINE), else the reconciler's setting; 0 turns it off.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from torchjob.api import constants, queries
from torchjob.lifecycle.progress import FIELD, seconds_since_report
from torchjob.lifecycle.round import GangCause, Outcome, Round
from torchjob.lifecycle.times import seconds_text


@dataclass(frozen=True, slots=True)
class Silence:
    """What the progress deadline decides this round: the seconds until it passes (`wait`), or,
    once it has, the gang restart it asks for (`cause`) or the job's failure when no restart is
    allowed (`outcome`); all None without a deadline."""

    wait: float | None = None
    cause: GangCause | None = None
    outcome: Outcome | None = None
    since: datetime | None = None  # when the silence past the deadline began


def check(state: Round) -> Silence:
    """The NoProgress restart when the deadline has passed (or the job's failure when no
    restart is allowed); else the seconds until the deadline."""
    observed = state.observed
    deadline = queries.progress_deadline(observed.job_meta, state.rules.progress_deadline)
    status: dict[str, Any] = dict(observed.status)
    since_report = seconds_since_report(status, observed.now) if deadline else None
    running = _all_running_since(state)
    if since_report is None or running is None:
        return Silence()
    silent = min(since_report, max(0.0, (observed.now - running).total_seconds()))
    if silent < deadline:
        return Silence(wait=deadline - silent)
    what = (
        f"no progress reported for {seconds_text(silent)}, past the progress deadline "
        f"({deadline}s); the last report, at {_last_report(status)}"
    )
    since = observed.now - timedelta(seconds=silent)
    never = _never_restarted(state)
    if never is not None:
        message = f"{what}; replica type {never} has restartPolicy Never: no restart is allowed"
        return Silence(outcome=Outcome(False, constants.REASON_NO_PROGRESS, message), since=since)
    return Silence(cause=GangCause(what, constants.REASON_NO_PROGRESS, True), since=since)


def _all_running_since(state: Round) -> datetime | None:
    """When the last of the job's current pods started running; None unless all of them run. A
    pod asked to restart in place and not restarted yet does not run: its start is the one
    before the restart."""
    starts = []
    for replica in state.desired:
        pod = state.pods.get((replica.type, replica.index))
        if pod is None or not state.current(pod) or pod.phase != "Running" or pod.restart_pending:
            return None
        if pod.running_since is None:
            return None
        starts.append(pod.running_since)
    return max(starts, default=None)


def _last_report(status: dict[str, Any]) -> str:
    """`2026-01-01T12:00:00.000000Z: 42%, loss=0.25`: when the last report came and what it
    said."""
    report = status.get(FIELD) or {}
    said = []
    if isinstance(report.get("progressPercentage"), int):
        said.append(f"{report['progressPercentage']}%")
    for metric in report.get("metrics") or []:
        if isinstance(metric, dict):
            said.append(f"{metric.get('name')}={metric.get('value')}")
    return f"{report.get('lastUpdatedTime')}: {', '.join(said) or 'no progress figures'}"


def _never_restarted(state: Round) -> str | None:
    for spec in state.observed.spec.replica_specs or []:
        if spec.restart_policy == "Never":
            return spec.type
    return None
