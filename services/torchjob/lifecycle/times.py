"""Times as the Kubernetes API writes them, and delays as people read them. Pure."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any


def parse_time(value: Any) -> datetime | None:
    if not isinstance(value, str) or not value:
        return None
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def format_time(moment: datetime) -> str:
    """metav1.Time: whole seconds and a literal Z."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def format_micro_time(moment: datetime) -> str:
    """metav1.MicroTime (Events, Leases): exactly six fractional digits and a literal Z."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def seconds_text(seconds: float) -> str:
    """`20s`, `1m20s`, `6m`, `0.5s`: a delay for people."""
    if seconds < 10 and seconds != int(seconds):
        return f"{seconds:.1f}s"
    minutes, rest = divmod(round(seconds), 60)
    if minutes:
        return f"{minutes}m{rest}s" if rest else f"{minutes}m"
    return f"{rest}s"
