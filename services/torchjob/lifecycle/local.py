"""What a kubelet would report of a replica's pod when the replica is a local process. Pure.

A local replica runs only its training container, which starts at once (there is no image to
pull): the pod is Running from its start, then Succeeded or Failed with the container's exit code.
A process killed by a signal reports 128 + the signal's number, as container runtimes do, so
restartPolicy ExitCode sees 137 for SIGKILL and 143 for SIGTERM.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from torchjob.api import queries
from torchjob.api.objects import ContainerState, PodPhase, PodStatus
from torchjob.lifecycle.times import format_time


def exit_code_of(returncode: int) -> int:
    """A process's return code as a container's exit code (killed by signal N -> 128 + N)."""
    return 128 - returncode if returncode < 0 else returncode


def local_pod_status(
    pod: dict[str, Any], started: datetime, exit_code: int | None, finished: datetime | None
) -> PodStatus:
    """The pod's status: Running until the process exits, then Succeeded (0) or Failed."""
    _, container = queries.training_container_in(pod.get("spec") or {})
    name = container.get("name", "") if container else ""
    since = format_time(started)
    if exit_code is None:
        state: ContainerState = {"running": {"startedAt": since}}
        phase: PodPhase = "Running"
    else:
        state = {
            "terminated": {
                "exitCode": exit_code,
                "reason": "Completed" if exit_code == 0 else "Error",
                "startedAt": since,
                "finishedAt": format_time(finished or started),
            }
        }
        phase = "Succeeded" if exit_code == 0 else "Failed"
    return {
        "phase": phase,
        "podIP": "127.0.0.1",
        "startTime": since,
        "containerStatuses": [
            {"name": name, "ready": exit_code is None, "restartCount": 0, "state": state}
        ],
    }
