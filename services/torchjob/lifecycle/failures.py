"""When a creation the apiserver refused is tried again. Pure.

What a refusal means for the job is the planner's (lifecycle/plan.py, from the `Refusal` it
observes, lifecycle/observe.py); a refusal that may pass (a quota, an unavailable webhook) is
tried again after a delay that doubles with each refused round in a row, as client-go's
per-item rate limiter does, so a job that cannot be created costs the apiserver little and
shows the refusal all along.
"""

from __future__ import annotations

from torchjob.lifecycle.times import doubled_delay

RETRY_BASE = 1.0  # seconds before the first retry
RETRY_CAP = 300.0  # the longest wait, reached at the 10th refusal in a row


def retry_delay(in_a_row: int) -> float:
    """Seconds before trying again after the `in_a_row`-th refused round in a row (1 for the
    first)."""
    return doubled_delay(RETRY_BASE, RETRY_CAP, in_a_row - 1)
