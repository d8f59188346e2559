"""The progress deadline (lifecycle/no_progress.py): a job that reports progress and then falls
silent is restarted as a gang, or fails with NoProgress when no restart is allowed."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from typing import Any

from support.planning import (
    META,
    NOW,
    conditions,
    observe,
    replica_pod,
    settle,
    spec,
    stopped,
)

from torchjob.api import constants
from torchjob.lifecycle.backoff import RestartRules
from torchjob.lifecycle.observe import PodView
from torchjob.lifecycle.times import format_time

KEYS = (("master", 0), ("worker", 0), ("worker", 1))
STARTED = NOW - timedelta(hours=2)


def running(since: Any = STARTED) -> list[PodView]:
    return [replica_pod(k, i, running_since=since) for k, i in KEYS]


def reported(status: dict[str, Any], ago: timedelta) -> dict[str, Any]:
    """`status` with a progress report received `ago`."""
    report = {
        "progressPercentage": 42,
        "metrics": [{"name": "loss", "value": "0.25"}],
        "lastUpdatedTime": format_time(NOW - ago),
    }
    return {**status, "trainerStatus": report}


def test_a_silent_job_is_restarted_as_a_gang_with_an_event_naming_its_last_progress() -> None:
    job = spec()
    status = reported(settle(job, running()), timedelta(minutes=31))
    result = observe(job, running(), status)
    assert len(result.delete_pods) == 3
    assert (result.status["backoffCount"], result.status["gangRestarts"]) == (1, 1)
    [event] = result.status_events
    assert (event.type, event.reason) == ("Warning", constants.REASON_NO_PROGRESS)
    last = format_time(NOW - timedelta(minutes=31))
    assert event.message == (
        "restarting every replica: no progress reported for 31m, past the progress deadline "
        f"(1800s); the last report, at {last}: 42%, loss=0.25 (restart 1 of backoffLimit 3)"
    )


def test_before_the_deadline_the_job_is_looked_at_again_at_the_deadline() -> None:
    job = spec()
    status = reported(settle(job, running()), timedelta(minutes=20))
    result = observe(job, running(), status)
    assert result.delete_pods == []
    assert result.requeue_after == 600


def test_the_silence_counts_from_when_every_pod_ran() -> None:
    job = spec()
    status = reported(settle(job, running()), timedelta(hours=1))
    # The last pod started 5 minutes ago (a restart, say): 25 minutes are left.
    fresh = running(NOW - timedelta(minutes=5))
    result = observe(job, fresh, status)
    assert result.delete_pods == []
    assert result.requeue_after == 1500
    # While a pod is not running there is no deadline at all.
    pending = [*fresh[:2], replace(fresh[2], phase="Pending", running_since=None)]
    assert observe(job, pending, status).requeue_after is None


def test_no_report_no_deadline_and_zero_turns_it_off() -> None:
    job = spec()
    status = settle(job, running())
    assert observe(job, running(), status).requeue_after is None
    silent = reported(status, timedelta(hours=1))
    off = {**META, "annotations": {constants.ANNOTATION_PROGRESS_DEADLINE: "0"}}
    assert observe(job, running(), silent, meta=off).delete_pods == []
    assert (
        observe(job, running(), silent, rules=RestartRules(progress_deadline=0)).delete_pods == []
    )
    # The job's own deadline wins over the setting.
    short = {**META, "annotations": {constants.ANNOTATION_PROGRESS_DEADLINE: "60"}}
    recent = reported(status, timedelta(minutes=2))
    assert len(observe(job, running(), recent, meta=short).delete_pods) == 3


def test_a_job_that_may_not_restart_fails_with_no_progress() -> None:
    never = spec("Never")
    status = reported(settle(never, running()), timedelta(hours=1))
    stopping = observe(never, running(), status)
    # The silent replicas are stopped, not restarted; the job fails once they are gone.
    assert len(stopping.delete_pods) == 3
    assert "gangRestarts" not in stopping.status
    failed = stopped(never, stopping, running())
    assert conditions(failed.status)["Failed"] == ("True", constants.REASON_NO_PROGRESS)
    assert "restartPolicy Never" in next(
        c["message"] for c in failed.status["conditions"] if c["type"] == "Failed"
    )
    job = spec()
    spent = {**reported(settle(job, running()), timedelta(hours=1)), "backoffCount": 3}
    result = observe(job, running(), spent)
    assert len(result.delete_pods) == 3
    assert result.status["backoffCount"] == 3, "no restart is charged"
    done = stopped(job, result, running())
    assert conditions(done.status)["Failed"] == ("True", constants.REASON_NO_PROGRESS)


def test_pods_asked_to_restart_in_place_are_not_silent_until_they_have() -> None:
    """The gang restart in place asked every pod; until each has restarted, its training
    container's start is the one before: not a second silence."""
    job = spec()
    status = reported(settle(job, running()), timedelta(minutes=31))
    asked = [replace(p, in_place=True, restarts_asked=1, gang_restarts=1) for p in running()]
    after = {**status, "gangRestarts": 1, "backoffCount": 1}
    result = observe(job, asked, after)
    assert not result.restart_in_place and not result.delete_pods
    assert (result.status["gangRestarts"], result.status["backoffCount"]) == (1, 1)
