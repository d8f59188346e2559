"""What a progress report may say, and what the job's status then shows. Pure.

A report is `{"trainerStatus": {progressPercentage, estimatedRemainingSeconds, metrics,
lastUpdatedTime}}` (api/progress.py). Each one replaces the last: a field it leaves out is
cleared, as Kubeflow Trainer's server-side apply clears it. `lastUpdatedTime` in status is when
the endpoint received the report, not the time the reporter wrote: a heartbeat read by the
cluster must not depend on the reporter's clock. It has microseconds: with several endpoint
replicas, each writing its own latest report, the later of two reports is the one status keeps
(`supersedes`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

from torchjob.api.progress import MAX_METRIC_TEXT, MAX_METRICS, PERCENTAGE_RANGE, SECONDS_RANGE
from torchjob.lifecycle.times import format_micro_time, parse_time

FIELD: Final = "trainerStatus"


class ReportError(ValueError):
    """A report that cannot be written: `field` names what is wrong in it."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field


@dataclass(frozen=True, slots=True)
class Progress:
    """One report, checked: what `status.trainerStatus` will show."""

    percentage: int | None
    remaining_seconds: int | None
    metrics: tuple[tuple[str, str], ...]

    @property
    def final(self) -> bool:
        """The reporter says training is done (100 %): the endpoint writes it at once rather
        than at the job's next slot, so that status shows it by the time the job ends."""
        return self.percentage == 100

    def status(self, received: datetime) -> dict[str, Any]:
        """The value of `status.trainerStatus`, for a JSON merge patch: None clears a field."""
        return {
            "progressPercentage": self.percentage,
            "estimatedRemainingSeconds": self.remaining_seconds,
            "metrics": [{"name": n, "value": v} for n, v in self.metrics] or None,
            "lastUpdatedTime": format_micro_time(received),
        }


def read_report(body: Any) -> Progress:
    """The report in a decoded JSON body; ReportError names the first field that is wrong."""
    if not isinstance(body, dict):
        raise ReportError("body", "must be a JSON object")
    report = body.get(FIELD)
    if not isinstance(report, dict):
        raise ReportError(FIELD, "required, an object")
    _check_time(report.get("lastUpdatedTime"))
    return Progress(
        percentage=_whole(report, "progressPercentage", PERCENTAGE_RANGE),
        remaining_seconds=_whole(report, "estimatedRemainingSeconds", SECONDS_RANGE),
        metrics=_metrics(report.get("metrics")),
    )


def _whole(report: dict[str, Any], key: str, bounds: tuple[int, int]) -> int | None:
    """A whole number within `bounds`; a fraction is cut to its whole part (the Kubeflow SDK
    sends an ETA as the caller computed it, which may be a float)."""
    value = report.get(key)
    field = f"{FIELD}.{key}"
    if value is None:
        return None
    # isfinite only on a float: an integer too large for one (JSON allows it) would overflow.
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or (isinstance(value, float) and not math.isfinite(value))
    ):
        raise ReportError(field, f"must be a number, not {value!r}"[:120])
    low, high = bounds
    if not low <= value <= high:
        raise ReportError(field, f"must be from {low} to {high}, not {value}"[:120])
    return int(value)


def _metrics(value: Any) -> tuple[tuple[str, str], ...]:
    if value is None:
        return ()
    field = f"{FIELD}.metrics"
    if not isinstance(value, list):
        raise ReportError(field, "must be a list of {name, value}")
    if len(value) > MAX_METRICS:
        raise ReportError(field, f"at most {MAX_METRICS} metrics, not {len(value)}")
    metrics = []
    for index, metric in enumerate(value):
        at = f"{field}[{index}]"
        if not isinstance(metric, dict):
            raise ReportError(at, "must be an object with a name and a value")
        metrics.append(
            (_text(metric.get("name"), f"{at}.name"), _text(metric.get("value"), f"{at}.value"))
        )
    return tuple(metrics)


def _text(value: Any, field: str) -> str:
    """A metric's name or value: a string of 1 to 64 characters (a number is written as one)."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        value = str(value)
    if not isinstance(value, str) or not value:
        raise ReportError(field, "required, a string")
    if len(value) > MAX_METRIC_TEXT:
        raise ReportError(field, f"at most {MAX_METRIC_TEXT} characters, not {len(value)}")
    return value


def _check_time(value: Any) -> None:
    """The reporter's time, when it sends one, must be an RFC 3339 time with its zone."""
    if value is None:
        return
    field = f"{FIELD}.lastUpdatedTime"
    try:
        moment = parse_time(value)
    except ValueError:
        moment = None
    if moment is None or moment.tzinfo is None:
        raise ReportError(field, f"must be an RFC 3339 time with a zone, not {value!r}"[:120])


def seconds_since_report(status: dict[str, Any], now: datetime) -> float | None:
    """How long ago the job's last report arrived, from its status alone; None without one."""
    report = status.get(FIELD) or {}
    try:
        received = parse_time(report.get("lastUpdatedTime"))
    except ValueError:
        return None
    if received is None or received.tzinfo is None:
        return None  # a time without a zone (not the endpoint's) says no moment for sure
    return max(0.0, (now - received).total_seconds())


def supersedes(report: dict[str, Any], shown: dict[str, Any] | None) -> bool:
    """Whether `report` (a `Progress.status`) was received after the report status shows, so
    that writing it moves status forward; a report another replica received later stays."""
    try:
        shown_at = parse_time((shown or {}).get("lastUpdatedTime"))
    except ValueError:
        shown_at = None
    received = parse_time(report["lastUpdatedTime"])
    if shown_at is None or shown_at.tzinfo is None:
        return True
    return received is not None and received > shown_at


def failure_status(code: int, reason: str, message: str) -> dict[str, Any]:
    """The body of a refused report: a `metav1.Status`, as Kubernetes' and Kubeflow Trainer's
    servers answer, so that their clients read it."""
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }
