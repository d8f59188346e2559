"""Status after the apiserver refused to create a replica's pod or Service. Pure."""

from __future__ import annotations

import copy
from datetime import datetime
from typing import Any

from torchjob.lifecycle.status import condition
from torchjob.lifecycle.times import format_time


def creation_failed(
    status: dict[str, Any],
    reason: str,
    message: str,
    permanent: bool,
    generation: int,
    now: datetime,
) -> dict[str, Any]:
    """ReplicaFailure with `reason` and the apiserver's message; a permanent refusal (an invalid
    pod template) also fails the job, a transient one (quota, an unavailable webhook) is
    retried."""
    out = copy.deepcopy(status)
    stamp = format_time(now)
    _set_condition(out, "ReplicaFailure", reason, message, generation, stamp)
    if permanent:
        out["phase"] = "Failed"
        out["completionTime"] = stamp
        _set_condition(out, "Failed", reason, message, generation, stamp)
        _set_condition(out, "Running", reason, message, generation, stamp, "False")
    return out


def _set_condition(
    status: dict[str, Any],
    kind: str,
    reason: str,
    message: str,
    generation: int,
    stamp: str,
    value: str = "True",
) -> None:
    conditions = status.get("conditions") or []
    before = next((c for c in conditions if c.get("type") == kind), None)
    status["conditions"] = [c for c in conditions if c.get("type") != kind] + [
        condition(kind, value, reason, message, generation, stamp, before)
    ]
