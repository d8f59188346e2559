"""What a container's terminated state says of its ending, read for the job's conditions and
Events: its reason when that says more than the exit code, the kubelet's message on one line,
how long it ran. Pure."""

from __future__ import annotations

from datetime import datetime

from torchjob.api.objects import ContainerStateTerminated, ContainerStatus, PodStatus
from torchjob.lifecycle.times import parse_time

# Terminated reasons that say no more than the exit code does; any other is worth naming.
PLAIN_REASONS = frozenset({"Error", "Completed"})
# What the kubelet said of an ending, at most this long in a condition or an Event.
MESSAGE_LIMIT = 200


def reason_of(ended: ContainerStateTerminated, status: PodStatus) -> str | None:
    """Why the container terminated, else (it did not) why the pod ended, when that says more
    than an exit code; None otherwise."""
    for reason in (ended.get("reason"), None if ended else status.get("reason")):
        if isinstance(reason, str) and reason and reason not in PLAIN_REASONS:
            return reason
    return None


def message_of(ended: ContainerStateTerminated, status: PodStatus) -> str | None:
    """What the kubelet said with the reason `reason_of` names, on one line."""
    if reason_of(ended, status) is None:
        return None
    # (api.objects types the terminated state without its message.)
    said = dict(ended).get("message") if ended.get("reason") not in (None, *PLAIN_REASONS) else None
    if said is None and not ended:
        said = status.get("message")
    if not isinstance(said, str) or not said.strip():
        return None
    return one_line(said)


def one_line(said: str, limit: int = MESSAGE_LIMIT) -> str:
    line = " ".join(said.split())
    return line if len(line) <= limit else line[: limit - 3] + "..."


def last_finish(statuses: list[ContainerStatus]) -> datetime | None:
    """The latest termination of any container: a pod whose training container never ran
    (evicted before it started, say) still ended when its last container did."""
    ends = [((s.get("state") or {}).get("terminated") or {}).get("finishedAt") for s in statuses]
    return max((moment for end in ends if (moment := parse_time(end))), default=None)


def ran_seconds(ended: ContainerStateTerminated, status: PodStatus) -> float | None:
    """From the container's start (the pod's, when the container reports none) to its end. A
    container that never started reports a start before the pod's own (containerd gives the
    epoch): it ran for 0 seconds."""
    finished = parse_time(ended.get("finishedAt"))
    pod_start = parse_time(status.get("startTime"))
    started = parse_time(ended.get("startedAt")) or pod_start
    if finished is None or started is None:
        return None
    if pod_start is not None and started < pod_start:
        return 0.0
    return max(0.0, (finished - started).total_seconds())
