"""Restarts wait: a replica that fails at once is recreated after a delay that grows with each
restart, instead of burning the backoff limit in seconds; the delay shows in the job's status and
in an Event. The job is recreated (`restart-in-place: "false"`): in place, the kubelet restarts
a failed container at once and its own back-off paces it (docs/failures.md)."""

from __future__ import annotations

import itertools
from datetime import datetime

from support.node import Node, training_job, wait_until

from torchjob.api import constants

# Exit code 137 without a signal: retryable under ExitCode, and as fast as a failure can be.
FAIL_AT_ONCE = ["-c", "import os; os._exit(137)"]


def parse(timestamp: str) -> datetime:
    return datetime.fromisoformat(timestamp.replace("Z", "+00:00"))


def test_recreations_back_off_and_say_so(node: Node, node_namespace: str) -> None:
    job = training_job("flaky", node.base_image, FAIL_AT_ONCE, backoff_limit=2)
    job["metadata"]["annotations"] = {constants.ANNOTATION_RESTART_IN_PLACE: "false"}
    node.apply(node_namespace, job)
    seen: dict[str, dict[str, str]] = {}  # pod uid -> its creation and finish times
    backoff_conditions: list[str] = []

    def watch() -> bool:
        job = node.job(node_namespace, "flaky")
        for condition in job.get("status", {}).get("conditions") or []:
            if condition.get("reason") == "RestartBackoff":
                backoff_conditions.append(condition.get("message", ""))
        for pod in node.job_pods(node_namespace, "flaky"):
            times = seen.setdefault(pod["metadata"]["uid"], {})
            times["created"] = pod["metadata"]["creationTimestamp"]
            for status in pod["status"].get("containerStatuses") or []:
                if "terminated" in status.get("state", {}):
                    times["finished"] = status["state"]["terminated"]["finishedAt"]
        return bool(job.get("status", {}).get("phase") == "Failed")

    wait_until("the job failed past its backoff limit", watch, interval=0.5)

    job = node.job(node_namespace, "flaky")
    assert job["status"]["backoffCount"] == 2
    failed = {c["type"]: c for c in job["status"]["conditions"]}["Failed"]
    assert failed["reason"] == "BackoffLimitExceeded"
    # Three pods in turn; each recreation waited longer than the one before.
    runs = sorted(seen.values(), key=lambda times: times["created"])
    assert len(runs) == 3, runs
    waits = [
        (parse(after["created"]) - parse(before["finished"])).total_seconds()
        for before, after in itertools.pairwise(runs)
    ]
    assert waits[0] >= 5, waits
    assert waits[1] > waits[0], waits
    assert backoff_conditions, "no RestartBackoff condition was seen"
    reasons = {event.get("reason") for event in node.events(node_namespace, "flaky")}
    assert "RestartBackoff" in reasons
