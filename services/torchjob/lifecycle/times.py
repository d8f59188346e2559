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


# 2**62 times any sensible base is far beyond any cap, and larger exponents overflow a float.
_MAX_DOUBLINGS = 62


def doubled_delay(base: float, cap: float, doublings: int) -> float:
    """`base` doubled `doublings` times (none for 0 or less), at most `cap`: the wait of a retry
    or a restart that waits twice as long each time in a row, as client-go's rate limiters and
    the kubelet's CrashLoopBackOff do. The one such rule: every capped doubling reads it."""
    return min(cap, base * 2.0 ** min(max(doublings, 0), _MAX_DOUBLINGS))
