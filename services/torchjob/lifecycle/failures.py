"""Status after the apiserver refused to create a replica's pod or Service. Pure."""

from __future__ import annotations

import copy
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from torchjob.api import constants
from torchjob.api.types import ConditionStatus, ConditionType
from torchjob.lifecycle.status import condition
from torchjob.lifecycle.times import format_time


@dataclass(frozen=True, slots=True)
class Refusal:
    """The apiserver refused to create a replica's `kind` named `name`, saying `said`;
    `invalid` when it found the object itself invalid (422) rather than forbidden (a quota, a
    webhook)."""

    kind: Literal["pod", "service"]
    name: str
    said: str
    invalid: bool

    @property
    def permanent(self) -> bool:
        """Only an invalid pod template fails the job: sending it again cannot succeed, while a
        quota or a webhook may let the same object in later."""
        return self.kind == "pod" and self.invalid

    @property
    def reason(self) -> str:
        if self.kind == "pod":
            return constants.REASON_POD_CREATION_FAILED
        return constants.REASON_SERVICE_CREATION_FAILED

    @property
    def message(self) -> str:
        return f"creating {self.kind} {self.name}: {self.said}"


def creation_failed(
    status: dict[str, Any], refusal: Refusal, generation: int, now: datetime
) -> dict[str, Any]:
    """ReplicaFailure with the refusal's reason and the apiserver's message; a permanent refusal
    (an invalid pod template) also fails the job, a transient one (quota, an unavailable
    webhook) is retried."""
    reason, message = refusal.reason, refusal.message
    out = copy.deepcopy(status)
    stamp = format_time(now)
    _set_condition(out, "ReplicaFailure", reason, message, generation, stamp)
    if refusal.permanent:
        out["phase"] = "Failed"
        out["completionTime"] = stamp
        _set_condition(out, "Failed", reason, message, generation, stamp)
        _set_condition(out, "Running", reason, message, generation, stamp, "False")
    return out


def _set_condition(
    status: dict[str, Any],
    kind: ConditionType,
    reason: str,
    message: str,
    generation: int,
    stamp: str,
    value: ConditionStatus = "True",
) -> None:
    conditions = status.get("conditions") or []
    before = next((c for c in conditions if c.get("type") == kind), None)
    status["conditions"] = [c for c in conditions if c.get("type") != kind] + [
        condition(kind, value, reason, message, generation, stamp, before)
    ]
