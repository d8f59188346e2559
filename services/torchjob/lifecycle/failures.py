"""Status after the apiserver refused to create a replica's pod. Pure."""

from __future__ import annotations

import copy
from datetime import datetime
from typing import Any

from torchjob.api import constants
from torchjob.lifecycle.status import format_time


def pod_creation_failed(
    status: dict[str, Any], message: str, permanent: bool, generation: int, now: datetime
) -> dict[str, Any]:
    """ReplicaFailure with the apiserver's message; a permanent refusal (an invalid template)
    also fails the job, a transient one (quota, an unavailable webhook) is retried."""
    out = copy.deepcopy(status)
    stamp = format_time(now)
    _set_condition(
        out, "ReplicaFailure", constants.REASON_POD_CREATION_FAILED, message, generation, stamp
    )
    if permanent:
        out["phase"] = "Failed"
        out["completionTime"] = stamp
        _set_condition(
            out, "Failed", constants.REASON_POD_CREATION_FAILED, message, generation, stamp
        )
        _set_condition(
            out,
            "Running",
            constants.REASON_POD_CREATION_FAILED,
            message,
            generation,
            stamp,
            "False",
        )
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
    conditions = [c for c in status.get("conditions") or [] if c.get("type") != kind]
    previous: dict[str, Any] = next(
        (c for c in status.get("conditions") or [] if c.get("type") == kind), {}
    )
    since = previous.get("lastTransitionTime") if previous.get("status") == value else stamp
    conditions.append(
        {
            "type": kind,
            "status": value,
            "reason": reason,
            "message": message,
            "lastTransitionTime": since or stamp,
            "observedGeneration": generation,
        }
    )
    status["conditions"] = conditions
