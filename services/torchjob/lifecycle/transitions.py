"""The Events of a change of status that no condition row records: a replica count that changed
(an elastic job scaled) and a phase entered; with the conditions' own (lifecycle/conditions.py).
Pure."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from torchjob.api import constants
from torchjob.api.types import JobPhase
from torchjob.lifecycle.conditions import Event, condition_events


def transition_events(old: Mapping[str, Any], new: dict[str, Any]) -> list[Event]:
    return _scale_events(old, new) + condition_events(old, new) + _phase_events(old, new)


def _scale_events(old: Mapping[str, Any], new: dict[str, Any]) -> list[Event]:
    before = {t.get("type"): len(t.get("replicas") or []) for t in old.get("tasks") or []}
    events = []
    for task in new.get("tasks") or []:
        kind, count = task.get("type"), len(task.get("replicas") or [])
        if before.get(kind, count) != count:
            message = f"{kind}: from {before[kind]} to {count} replicas"
            events.append(Event("Normal", constants.REASON_SCALED, message))
    return events


def _phase_events(old: Mapping[str, Any], new: dict[str, Any]) -> list[Event]:
    """An Event when the job enters a phase; a finished job's is its Completed or Failed
    condition's (lifecycle/conditions.py)."""
    phase: JobPhase | None = new.get("phase")
    if old.get("phase") == phase or (phase == "Pending" and not old.get("phase")):
        return []  # a new job is pending by the user's own act: no news
    if phase in constants.FINISHED_JOB_PHASES:
        return []
    return [Event("Normal", f"Job{phase}", f"the job is {str(phase).lower()}")]
