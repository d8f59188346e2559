"""Failure reasons name the cause the kubelet reported: OOMKilled, ContainerCannotRun with the
runtime's message, an eviction with its cause, the signal behind an exit code above 128; the
replica's container statuses carry the kubelet's own reason (Error included)."""

from __future__ import annotations

from typing import Any

import pytest
from support.planning import REPLICA_SCOPE, conditions, observe, replica_pod, settle, spec

from torchjob.api import constants
from torchjob.lifecycle.observe import PodView, describe_failure, exit_code_text, view_pod


def raw(
    terminated: dict[str, Any] | None, pod_status: dict[str, Any] | None = None, index: int = 0
) -> dict[str, Any]:
    state = {"terminated": terminated} if terminated else {"waiting": {"reason": "Creating"}}
    return {
        "metadata": {
            "name": f"j-worker-{index}",
            "uid": f"uid-worker-{index}",
            "labels": {
                constants.LABEL_REPLICA_TYPE: "worker",
                constants.LABEL_REPLICA_INDEX: str(index),
            },
        },
        "spec": {"containers": [{"name": "python"}]},
        "status": {
            "phase": "Failed",
            "containerStatuses": [{"name": "python", "state": state}],
            **(pod_status or {}),
        },
    }


def view(terminated: dict[str, Any] | None, pod_status: dict[str, Any] | None = None) -> PodView:
    seen = view_pod(raw(terminated, pod_status))
    assert seen is not None
    return seen


@pytest.mark.parametrize(
    ("code", "text"),
    [
        (1, "exit code 1"),
        (128, "exit code 128"),
        (130, "exit code 130 (SIGINT)"),
        (137, "exit code 137 (SIGKILL)"),
        (139, "exit code 139 (SIGSEGV)"),
        (143, "exit code 143 (SIGTERM)"),
        (255, "exit code 255"),
    ],
)
def test_an_exit_code_above_128_names_its_signal(code: int, text: str) -> None:
    assert exit_code_text(code) == text


def test_a_kill_without_a_reason_names_the_signal() -> None:
    killed = view({"exitCode": 137, "reason": "Error"})
    assert describe_failure(killed) == "j-worker-0 failed with exit code 137 (SIGKILL)"


def test_oom_killed_is_named() -> None:
    killed = view({"exitCode": 137, "reason": "OOMKilled"})
    assert describe_failure(killed) == "j-worker-0 container python was OOMKilled (exit code 137)"


def test_container_cannot_run_is_named_with_the_runtimes_message() -> None:
    said = 'failed to create shim task: exec: "pythonn": executable file not found in $PATH'
    ended = view({"exitCode": 128, "reason": "ContainerCannotRun", "message": said})
    assert describe_failure(ended) == (
        f"j-worker-0 container python ended: ContainerCannotRun (exit code 128): {said}"
    )


def test_a_long_message_is_cut() -> None:
    ended = view({"exitCode": 128, "reason": "ContainerCannotRun", "message": "x" * 5000})
    assert ended.message is not None and len(ended.message) == 200


def test_an_eviction_is_named_with_its_cause() -> None:
    evicted = view(None, {"reason": "Evicted", "message": "The node was low on resource: memory."})
    assert describe_failure(evicted) == (
        "j-worker-0 failed (Evicted: The node was low on resource: memory.)"
    )


def test_the_kubelets_error_reason_is_in_the_replica_status() -> None:
    job = spec("Never", master=False, workers=1)
    running = replica_pod("worker", 0)
    status = settle(job, [running])
    failed = view({"exitCode": 1, "reason": "Error"})
    result = observe(job, [failed], status)
    assert conditions(result.status)["Failed"] == ("True", "MasterFailed")
    [replica] = result.status["tasks"][0]["replicas"]
    assert replica["containers"] == [
        {"name": "python", "state": "terminated", "exitCode": 1, "reason": "Error"}
    ]


def test_an_evicted_replica_under_exit_code_is_restarted_and_the_event_says_why() -> None:
    job = spec("ExitCode", master=False, workers=1)
    running = replica_pod("worker", 0)
    status = settle(job, [running], REPLICA_SCOPE)
    evicted = view(None, {"reason": "Evicted", "message": "The node was low on resource: memory."})
    result = observe(job, [evicted], status, meta=REPLICA_SCOPE)
    assert result.status["phase"] == "Running"
    [event] = result.status_events
    assert (event.type, event.reason) == ("Warning", "RestartBackoff")
    assert event.message == (
        "restarting j-worker-0 (restart 1 in a row, 1 of backoffLimit 3) now after it failed "
        "(Evicted: The node was low on resource: memory.)"
    )
    # As a gang (a job not run by torchrun), the one Event says why too.
    [event] = observe(job, [evicted], settle(job, [running])).status_events
    assert (event.type, event.reason) == ("Warning", "GangRestarting")
    assert event.message == (
        "restarting every replica: j-worker-0 failed (Evicted: The node was low on resource: "
        "memory.) (restart 1 of backoffLimit 3)"
    )
