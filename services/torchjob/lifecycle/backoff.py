"""When a replica that ended is restarted: after a delay that doubles with each restart of that
replica in a row, as the kubelet's CrashLoopBackOff and the Job controller's pod-failure backoff
do. Pure.

The n-th restart in a row waits `base * 2^(n-1)` seconds (at most MAX_DELAY) after the replica's
training container ended: 10s, 20s, 40s, 80s, 160s, 320s, then 360s with the default base. A
replica that ran RESET_AFTER or longer before it ended starts the row again (its restart is the
first in a row), as the kubelet forgets a container's backoff after 10 minutes of running.

Everything this needs is read from the pod that ended (its finish time, how long it ran, the
restarts in a row it was created with), so the delay survives a reconciler restart; the count is
carried to the replacement by the status written before the deletion and then by the
replacement's own annotation.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from torchjob.lifecycle.observe import PodView
from torchjob.lifecycle.times import doubled_delay

BASE_DELAY = 10.0  # seconds before a first restart; the reconciler's --restart-backoff
MAX_DELAY = 360.0  # the longest wait, reached at the 7th restart in a row
RESET_AFTER = 600.0  # a run this long or longer starts the row again


@dataclass(frozen=True, slots=True)
class RestartBackoff:
    """The delay rule; `base` is a setting (0 restarts at once, for tests and local runs)."""

    base: float = BASE_DELAY
    cap: float = MAX_DELAY
    reset_after: float = RESET_AFTER

    def delay(self, in_a_row: int) -> float:
        """Seconds before the `in_a_row`-th restart in a row (1 for the first)."""
        return doubled_delay(self.base, self.cap, in_a_row - 1)


DEFAULT_BACKOFF = RestartBackoff()

REPLICA_RESTARTS_BEFORE_GANG = 3  # the reconciler's --replica-restarts-before-gang
GANG_RESTART_LIMIT = 5  # the reconciler's --gang-restart-limit
GANG_RESTART_WINDOW = 3600.0  # the reconciler's --gang-restart-window, seconds
PROGRESS_DEADLINE = 1800  # the reconciler's --progress-deadline, seconds
START_DEADLINE = 600  # the reconciler's --start-deadline, seconds


@dataclass(frozen=True, slots=True)
class RestartRules:
    """How the planner restarts replicas: the delay before a restart; in Replica scope, how many
    restarts in a row of one replica are made before its next restart is the whole gang's
    (lifecycle/gang.py); how many gang restarts a job may make within a window (0: any number);
    how long a job that reports progress may go without a report (lifecycle/no_progress.py;
    0: no deadline); and how long a replica may be unable to start (lifecycle/start_failure.py; 0:
    no deadline), the last two unless the job sets its own."""

    backoff: RestartBackoff = DEFAULT_BACKOFF
    replica_restarts_before_gang: int = REPLICA_RESTARTS_BEFORE_GANG
    gang_restart_limit: int = GANG_RESTART_LIMIT
    gang_restart_window: float = GANG_RESTART_WINDOW
    progress_deadline: int = PROGRESS_DEADLINE
    start_deadline: int = START_DEADLINE
    # Seconds the other replicas of a job that succeeded may take to finish on their own before
    # they are stopped (lifecycle/finishing.py); the reconciler's --success-grace.
    success_grace: float = 0.0


DEFAULT_RULES = RestartRules()


@dataclass(frozen=True, slots=True)
class PendingRestart:
    """A replica that ended and is to be restarted."""

    pod: PodView
    in_a_row: int  # the restart's place in its row, which its replacement carries
    delay: float  # seconds after the end
    at: datetime | None  # when it is due; None when the end time is unknown (due at once)

    def remaining(self, now: datetime) -> float:
        return 0.0 if self.at is None else max(0.0, (self.at - now).total_seconds())


def pending_restart(pod: PodView, rule: RestartBackoff) -> PendingRestart:
    in_a_row = next_in_a_row(pod, rule)
    delay = rule.delay(in_a_row)
    at = pod.finished_at + timedelta(seconds=delay) if pod.finished_at else None
    return PendingRestart(pod, in_a_row, delay, at)


def next_in_a_row(pod: PodView, rule: RestartBackoff) -> int:
    """The place in its row of the restart that replaces `pod`, which ended."""
    if pod.ran_seconds is not None and pod.ran_seconds >= rule.reset_after:
        return 1
    return pod.consecutive_restarts + 1
