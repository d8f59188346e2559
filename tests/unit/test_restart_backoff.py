"""Restarts wait: the delay rule, the plan that keeps a pod that ended until its delay has passed
(and says so in the status and an Event), the count of restarts in a row carried from pod to
status to pod, its reset after a long run, and how the wait leaves pause, deadline, success and
the backoff limit alone. The reason a container was killed (OOMKilled) is named."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

import pytest
from support.jobs import JobBuilder
from support.planning import (
    NOW,
    REPLICA_SCOPE,
    conditions,
    gone,
    replica_pod,
    services,
    settle,
    spec,
)

from torchjob.api import constants
from torchjob.api.objects import PodPhase
from torchjob.api.types import PyTorchTrainingJobSpec
from torchjob.api.validation import validate
from torchjob.lifecycle.backoff import RestartBackoff, RestartRules, next_in_a_row
from torchjob.lifecycle.observe import ContainerView, PodView, view_pod
from torchjob.lifecycle.plan import Plan, plan
from torchjob.lifecycle.round import Observed
from torchjob.lifecycle.times import seconds_text

ENDED = NOW - timedelta(seconds=3)  # the failed pod's finish time in most tests
RULE = RestartBackoff()


def running(kind: str, index: int, *, in_a_row: int = 0, backoff: int = 0) -> PodView:
    return replica_pod(
        kind,
        index,
        backoff_count=backoff,
        containers=(ContainerView("python", "running"),),
        training_container="python",
        consecutive_restarts=in_a_row,
    )


def ended(
    kind: str,
    index: int,
    code: int = 1,
    *,
    at: datetime = ENDED,
    ran: float = 5.0,
    reason: str | None = None,
    in_a_row: int = 0,
    deleting: bool = False,
) -> PodView:
    phase: PodPhase = "Succeeded" if code == 0 else "Failed"
    return replace(
        running(kind, index, in_a_row=in_a_row),
        phase=phase,
        exit_code=code,
        deleting=deleting,
        containers=(ContainerView("python", "terminated", code, reason or "Error"),),
        reason=reason,
        finished_at=at,
        ran_seconds=ran,
    )


def three(worker0: PodView | None = None) -> list[PodView]:
    return [running("master", 0), worker0 or running("worker", 0), running("worker", 1)]


def decide(
    job: PyTorchTrainingJobSpec,
    pods: list[PodView],
    status: dict[str, Any],
    now: datetime = NOW,
    rule: RestartBackoff = RULE,
) -> Plan:
    # Replicas restarted one by one, never escalated to the gang: the delay rule alone.
    alone = RestartRules(rule, replica_restarts_before_gang=1000)
    return plan(Observed.of_json(REPLICA_SCOPE, job, status, pods, services(job), now), alone)


def entry(status: dict[str, Any], name: str) -> dict[str, Any]:
    return next(r for t in status["tasks"] for r in t["replicas"] if r["name"] == name)


def settled(job: PyTorchTrainingJobSpec) -> dict[str, Any]:
    return settle(job, three(), REPLICA_SCOPE)


# --- the rule -----------------------------------------------------------------------------------


def test_the_delay_doubles_up_to_six_minutes() -> None:
    assert [RULE.delay(n) for n in range(1, 9)] == [10, 20, 40, 80, 160, 320, 360, 360]
    assert RestartBackoff(base=2).delay(3) == 8
    assert RestartBackoff(base=0).delay(50) == 0
    assert RULE.delay(10_000) == 360


@pytest.mark.parametrize(
    ("ran", "before", "expected"),
    [(5.0, 0, 1), (5.0, 3, 4), (None, 3, 4), (599.0, 2, 3), (600.0, 5, 1), (3600.0, 5, 1)],
)
def test_a_run_of_ten_minutes_starts_the_row_again(
    ran: float | None, before: int, expected: int
) -> None:
    assert next_in_a_row(replace(ended("worker", 0, in_a_row=before), ran_seconds=ran), RULE) == (
        expected
    )


def test_delays_read_as_people_write_them() -> None:
    assert [seconds_text(s) for s in (0.5, 2, 20, 60, 80, 360)] == [
        "0.5s",
        "2s",
        "20s",
        "1m",
        "1m20s",
        "6m",
    ]


# --- the wait -----------------------------------------------------------------------------------


def test_a_failed_replica_waits_then_is_deleted_then_recreated() -> None:
    job = spec("OnFailure")
    status = settled(job)
    failed = three(ended("worker", 0))

    waiting = decide(job, failed, status)
    assert waiting.delete_pods == [] and waiting.create_pods == []
    assert waiting.requeue_after == pytest.approx(7)
    failure = next(c for c in waiting.status["conditions"] if c["type"] == "ReplicaFailure")
    assert (failure["status"], failure["reason"]) == ("True", "RestartBackoff")
    assert failure["message"] == (
        "j-worker-0 failed with exit code 1; restarting j-worker-0 at 2026-01-01T12:00:07Z "
        "(10s after it ended, restart 1 in a row)"
    )
    assert entry(waiting.status, "j-worker-0")["consecutiveRestarts"] == 1
    assert [(e.type, e.reason, e.message) for e in waiting.status_events] == [
        (
            "Warning",
            "RestartBackoff",
            "restarting j-worker-0 (restart 1 in a row, 1 of backoffLimit 3) in 7s after exit "
            "code 1",
        )
    ]
    assert not waiting.status_can_wait

    # Later rounds while it waits: the same status, no second Event.
    again = decide(job, failed, waiting.status, NOW + timedelta(seconds=5))
    assert again.status == waiting.status
    assert again.status_events == []
    assert again.requeue_after == pytest.approx(2)

    due = decide(job, failed, waiting.status, NOW + timedelta(seconds=7))
    assert due.delete_pods == [("j-worker-0", "uid-worker-0")]
    assert due.requeue_after is None
    assert due.status_events == []

    gone = [running("master", 0), running("worker", 1)]
    recreate = decide(job, gone, due.status, NOW + timedelta(seconds=8))
    [created] = recreate.create_pods
    assert created.annotations[constants.ANNOTATION_CONSECUTIVE_RESTARTS] == "1"
    assert created.annotations[constants.ANNOTATION_BACKOFF_COUNT] == "1"
    assert recreate.status["backoffCount"] == 1
    assert entry(recreate.status, "j-worker-0") == {"name": "j-worker-0", "consecutiveRestarts": 1}
    assert conditions(recreate.status)["ReplicaFailure"] == ("False", "NoReplicaFailure")


def test_the_wait_is_read_off_the_pod_whatever_the_status_says() -> None:
    """A reconciler that restarted (or a status that was lost) waits all the same."""
    job = spec("OnFailure")
    failed = three(ended("worker", 0, in_a_row=2))
    fresh = decide(job, failed, {})
    assert fresh.delete_pods == []
    assert fresh.requeue_after == pytest.approx(37)
    assert entry(fresh.status, "j-worker-0")["consecutiveRestarts"] == 3


def test_the_count_is_carried_past_the_deletion() -> None:
    job = spec("OnFailure")
    status = settled(job)
    failed = three(ended("worker", 0, in_a_row=1))
    due = decide(job, failed, status, NOW + timedelta(seconds=30))
    assert due.delete_pods == [("j-worker-0", "uid-worker-0")]
    # While the kubelet takes the pod away, the status still carries the count.
    deleting = three(ended("worker", 0, in_a_row=1, deleting=True))
    held = decide(job, deleting, due.status, NOW + timedelta(seconds=31))
    assert entry(held.status, "j-worker-0")["consecutiveRestarts"] == 2
    gone = [running("master", 0), running("worker", 1)]
    recreate = decide(job, gone, held.status, NOW + timedelta(seconds=32))
    assert recreate.create_pods[0].annotations[constants.ANNOTATION_CONSECUTIVE_RESTARTS] == "2"
    # A crash between that status write and the creation: the next round creates, uncounted,
    # with the same count.
    retry = decide(job, gone, recreate.status, NOW + timedelta(seconds=33))
    assert retry.create_pods[0].annotations[constants.ANNOTATION_CONSECUTIVE_RESTARTS] == "2"
    assert retry.status["backoffCount"] == 1
    # The replacement runs: its own annotation keeps the count, whatever the status says.
    back = decide(job, three(running("worker", 0, in_a_row=2)), {}, NOW + timedelta(seconds=40))
    assert entry(back.status, "j-worker-0")["consecutiveRestarts"] == 2


@pytest.mark.parametrize(("in_a_row", "delay"), [(0, 10), (1, 20), (2, 40), (6, 360)])
def test_each_restart_in_a_row_waits_twice_as_long(in_a_row: int, delay: float) -> None:
    job = spec("OnFailure", runPolicy={"backoffLimit": 100})
    failed = three(ended("worker", 0, at=NOW, in_a_row=in_a_row))
    result = decide(job, failed, settled(job))
    assert result.requeue_after == pytest.approx(delay)
    assert f"in {seconds_text(delay)} after" in result.status_events[0].message


def test_a_replica_that_ran_ten_minutes_waits_the_base_delay_again() -> None:
    job = spec("OnFailure")
    failed = three(ended("worker", 0, at=NOW, ran=601.0, in_a_row=5))
    result = decide(job, failed, settled(job))
    assert result.requeue_after == pytest.approx(10)
    assert entry(result.status, "j-worker-0")["consecutiveRestarts"] == 1


def test_a_base_of_zero_restarts_at_once() -> None:
    job = spec("OnFailure")
    result = decide(job, three(ended("worker", 0, at=NOW)), settled(job), rule=RestartBackoff(0))
    assert result.delete_pods == [("j-worker-0", "uid-worker-0")]
    assert result.requeue_after is None
    assert [e.message for e in result.status_events] == [
        "restarting j-worker-0 (restart 1 in a row, 1 of backoffLimit 3) now after exit code 1"
    ]


def test_an_unknown_end_time_restarts_at_once() -> None:
    job = spec("OnFailure")
    failed = three(replace(ended("worker", 0), finished_at=None))
    assert decide(job, failed, settled(job)).delete_pods == [("j-worker-0", "uid-worker-0")]


def test_always_waits_before_restarting_a_worker_that_succeeded() -> None:
    job = spec("Always")
    result = decide(job, three(ended("worker", 0, 0)), settled(job))
    assert result.delete_pods == []
    assert result.requeue_after == pytest.approx(7)
    assert conditions(result.status)["ReplicaFailure"] == ("True", "RestartBackoff")
    [event] = result.status_events
    assert (event.type, event.message) == (
        "Normal",
        "restarting j-worker-0 (restart 1 in a row, 1 of backoffLimit 3) in 7s after it succeeded "
        "(restartPolicy Always)",
    )


def test_two_replicas_wait_and_the_nearest_restart_is_looked_at_first() -> None:
    job = spec("OnFailure")
    pods = [
        running("master", 0),
        ended("worker", 0, at=NOW - timedelta(seconds=1)),
        ended("worker", 1, at=NOW - timedelta(seconds=12), in_a_row=1),
    ]
    result = decide(job, pods, settled(job))
    assert result.requeue_after == pytest.approx(8)
    message = next(c for c in result.status["conditions"] if c["type"] == "ReplicaFailure")[
        "message"
    ]
    assert "restarting j-worker-0 at 2026-01-01T12:00:09Z" in message
    assert "restarting j-worker-1 at 2026-01-01T12:00:08Z" in message


# --- what the wait leaves alone -----------------------------------------------------------------


def test_the_deadline_is_looked_at_first_and_still_ends_the_job() -> None:
    job = spec("OnFailure", runPolicy={"activeDeadlineSeconds": 5, "backoffLimit": 3})
    status = settled(job)
    failed = three(ended("worker", 0, at=NOW))
    waiting = decide(job, failed, status)
    assert waiting.requeue_after == pytest.approx(5), "the deadline comes before the restart"
    late = decide(job, failed, waiting.status, NOW + timedelta(seconds=5))
    assert conditions(late.status)["Running"] == ("False", "DeadlineExceeded")
    assert late.create_pods == [] and late.requeue_after is None
    assert ("j-worker-0", "uid-worker-0") not in late.delete_pods
    done = decide(job, gone(late, failed), late.status, NOW + timedelta(seconds=6))
    assert done.status["phase"] == "Failed"
    assert conditions(done.status)["Failed"] == ("True", "DeadlineExceeded")
    assert done.create_pods == [] and done.delete_pods == [] and done.requeue_after is None


def test_pause_while_waiting_deletes_every_pod_and_resume_starts_the_row_again() -> None:
    job = spec("OnFailure")
    failed = three(ended("worker", 0, in_a_row=3))
    waiting = decide(job, failed, settled(job))
    paused = spec("OnFailure", runMode={"pause": {"enabled": True}})
    pausing = decide(paused, failed, waiting.status)
    assert len(pausing.delete_pods) == 3
    assert pausing.requeue_after is None
    assert pausing.status["phase"] == "Paused"
    assert "consecutiveRestarts" not in entry(pausing.status, "j-worker-0")
    empty = decide(paused, [], pausing.status)
    resuming = decide(spec("OnFailure"), [], empty.status)
    assert len(resuming.create_pods) == 3
    assert {
        p.annotations[constants.ANNOTATION_CONSECUTIVE_RESTARTS] for p in resuming.create_pods
    } == {"0"}
    assert resuming.status["backoffCount"] == 0


def test_the_master_succeeding_while_a_worker_waits_completes_the_job() -> None:
    job = spec("OnFailure")
    pods = [ended("master", 0, 0), ended("worker", 0), running("worker", 1)]
    result = decide(job, pods, settled(job))
    assert result.requeue_after is None
    # The worker still running is stopped; the one that failed is not restarted.
    assert result.delete_pods == [("j-worker-1", "uid-worker-1")] and result.create_pods == []
    assert all(e.reason != "RestartBackoff" for e in result.status_events)
    done = decide(job, gone(result, pods), result.status)
    assert done.status["phase"] == "Succeeded"
    assert done.requeue_after is None
    assert done.delete_pods == [] and done.create_pods == []
    assert all(e.reason != "RestartBackoff" for e in done.status_events)


def test_the_backoff_limit_fails_the_job_at_once_naming_the_last_failure() -> None:
    job = spec("ExitCode")
    status = settled(job)
    status["backoffCount"] = 3
    pods = three(ended("worker", 0, 137, reason="OOMKilled"))
    result = decide(job, pods, status)
    assert result.requeue_after is None, "no wait for a restart that will not be made"
    assert ("j-worker-0", "uid-worker-0") not in result.delete_pods
    done = decide(job, gone(result, pods), result.status)
    assert done.status["phase"] == "Failed"
    failed = next(c for c in done.status["conditions"] if c["type"] == "Failed")
    assert failed["reason"] == "BackoffLimitExceeded"
    assert failed["message"] == (
        "replica restarts reached backoffLimit (3); the last: "
        "j-worker-0 container python was OOMKilled (exit code 137)"
    )


# --- OOMKilled is named -------------------------------------------------------------------------


def test_oom_killed_is_restarted_under_exit_code_and_named() -> None:
    job = spec("ExitCode")
    result = decide(job, three(ended("worker", 0, 137, reason="OOMKilled")), settled(job))
    assert result.requeue_after == pytest.approx(7), "137 is retryable, OOMKilled or not"
    message = next(c for c in result.status["conditions"] if c["type"] == "ReplicaFailure")[
        "message"
    ]
    assert message.startswith("j-worker-0 container python was OOMKilled (exit code 137); ")
    assert [e.message for e in result.status_events] == [
        "restarting j-worker-0 (restart 1 in a row, 1 of backoffLimit 3) in 7s after container "
        "python was OOMKilled (exit code 137)"
    ]
    assert entry(result.status, "j-worker-0")["containers"] == [
        {"name": "python", "state": "terminated", "exitCode": 137, "reason": "OOMKilled"}
    ]


def test_an_oom_killed_master_that_is_not_restarted_fails_the_job_naming_it() -> None:
    job = spec("Never")
    pods = [ended("master", 0, 137, reason="OOMKilled"), running("worker", 0), running("worker", 1)]
    result = decide(job, pods, settled(job))
    said = "replica j-master-0 container python was OOMKilled (exit code 137) and is not restarted"
    assert [(e.type, e.reason, e.message) for e in result.status_events] == [
        (
            "Normal",
            "StoppingReplicas",
            f"{said}: stopping j-worker-0, j-worker-1 before the job is marked Failed",
        )
    ]
    done = decide(job, gone(result, pods), result.status)
    failed = next(c for c in done.status["conditions"] if c["type"] == "Failed")
    assert (failed["reason"], failed["message"]) == ("MasterFailed", said)
    assert [(e.type, e.reason, e.message) for e in done.status_events] == [
        ("Warning", "MasterFailed", said)
    ]


def raw_pod(state: dict[str, Any], pod_status: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "metadata": {
            "name": "j-worker-0",
            "uid": "u",
            "labels": {constants.LABEL_REPLICA_TYPE: "worker", constants.LABEL_REPLICA_INDEX: "0"},
            "annotations": {constants.ANNOTATION_CONSECUTIVE_RESTARTS: "4"},
        },
        "spec": {"containers": [{"name": "python"}]},
        "status": {
            "phase": "Failed",
            "startTime": "2026-01-01T11:00:00Z",
            "containerStatuses": [{"name": "python", "state": state}],
            **(pod_status or {}),
        },
    }


def test_view_pod_reads_the_end_how_long_it_ran_and_why() -> None:
    view = view_pod(
        raw_pod(
            {
                "terminated": {
                    "exitCode": 137,
                    "reason": "OOMKilled",
                    "startedAt": "2026-01-01T11:00:05Z",
                    "finishedAt": "2026-01-01T11:00:35Z",
                }
            }
        )
    )
    assert view is not None
    assert (view.exit_code, view.reason, view.training_container) == (137, "OOMKilled", "python")
    assert view.finished_at == datetime.fromisoformat("2026-01-01T11:00:35+00:00")
    assert view.ran_seconds == 30
    assert view.consecutive_restarts == 4
    assert view.containers == (ContainerView("python", "terminated", 137, "OOMKilled"),)


def test_view_pod_plain_reasons_and_never_started_containers() -> None:
    plain = view_pod(
        raw_pod(
            {
                "terminated": {
                    "exitCode": 128,
                    "reason": "Error",
                    "startedAt": "1970-01-01T00:00:00Z",
                    "finishedAt": "2026-01-01T11:00:35Z",
                }
            }
        )
    )
    assert plain is not None
    assert plain.reason is None, "Error says no more than the exit code"
    assert plain.ran_seconds == 0, "a container that never started did not run"
    evicted = view_pod(raw_pod({"waiting": {"reason": "ContainerCreating"}}, {"reason": "Evicted"}))
    assert evicted is not None
    assert (evicted.exit_code, evicted.reason, evicted.finished_at) == (None, "Evicted", None)


# --- a job's own delay --------------------------------------------------------------------------


@pytest.mark.parametrize(("seconds", "deleted"), [("0", True), ("2", True), ("60", False)])
def test_a_job_sets_its_own_restart_delay(seconds: str, deleted: bool) -> None:
    """Ended 3 s ago: a job's delay of 0 or 2 s has passed, its 60 s not (the default 10 s
    neither)."""
    job = spec()
    meta = {**REPLICA_SCOPE, "annotations": {**REPLICA_SCOPE["annotations"]}}
    meta["annotations"][constants.ANNOTATION_RESTART_BACKOFF] = seconds
    alone = RestartRules(RULE, replica_restarts_before_gang=1000)
    pods = three(ended("worker", 0))
    result = plan(Observed.of_json(meta, job, settled(job), pods, services(job), NOW), alone)
    assert (result.delete_pods == [("j-worker-0", "uid-worker-0")]) is deleted
    assert decide(job, pods, settled(job)).delete_pods == [], "the reconciler's 10 s"


@pytest.mark.parametrize("written", ["-1", "1.5", "soon", "9999999"])
def test_a_restart_delay_is_whole_seconds(written: str) -> None:
    job = (
        JobBuilder("j")
        .metadata(annotations={constants.ANNOTATION_RESTART_BACKOFF: written})
        .replicas("worker", 1)
        .build()
    )
    [error] = validate(job).errors
    assert constants.ANNOTATION_RESTART_BACKOFF in error.path
