"""Gang restarts (lifecycle/gang.py): every replica stopped and created again together, charged
once; escalation from one replica's restarts in a row; the limit within a window."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from support.jobs import JobBuilder
from support.planning import (
    META,
    NOW,
    REPLICA_SCOPE,
    conditions,
    observe,
    replica_pod,
    settle,
    spec,
    stopped,
)

from torchjob.api import constants
from torchjob.api.validation import validate
from torchjob.lifecycle.backoff import RestartBackoff, RestartRules
from torchjob.lifecycle.observe import PodView
from torchjob.lifecycle.times import format_time

KEYS = (("master", 0), ("worker", 0), ("worker", 1))
ALL = [
    ("j-master-0", "uid-master-0"),
    ("j-worker-0", "uid-worker-0"),
    ("j-worker-1", "uid-worker-1"),
]


def pod(
    kind: str, index: int, phase: Any = "Running", code: int | None = None, **extra: Any
) -> PodView:
    return replica_pod(kind, index, phase, exit_code=code, **extra)


def gang(gen: int = 0, *, failed: bool = False, **how: Any) -> list[PodView]:
    """The three pods of gang `gen`; worker-0 failed with exit code 1 when `failed`, with the
    fields `how`."""
    pods = [pod(k, i, gang_restarts=gen) for k, i in KEYS]
    if failed or how:
        pods[1] = pod("worker", 0, "Failed", 1, gang_restarts=gen, **how)
    return pods


def test_a_failed_worker_restarts_every_replica_counted_once() -> None:
    job = spec()
    running = settle(job, gang())
    result = observe(job, gang(failed=True), running)
    status = result.status
    assert sorted(result.delete_pods) == ALL
    assert result.create_pods == []
    assert (status["backoffCount"], status["gangRestarts"]) == (1, 1)
    assert status["gangRestartTimes"] == [format_time(NOW)]
    assert [t["restartCount"] for t in status["tasks"]] == [0, 1]
    recorded = [r for t in status["tasks"] for r in t["replicas"]]
    assert all("uid" not in r for r in recorded), "recreations must not count again"
    assert conditions(status)["ReplicaFailure"] == ("True", constants.REASON_GANG_RESTARTING)
    [failure] = [c for c in status["conditions"] if c["type"] == "ReplicaFailure"]
    assert failure["message"] == (
        "restarting every replica together: j-worker-0 failed with exit code 1"
    ), "the failure is named once"
    assert not result.status_can_wait
    [event] = result.status_events
    assert (event.type, event.reason) == ("Warning", constants.REASON_GANG_RESTARTING)
    assert event.message == (
        "restarting every replica: j-worker-0 failed with exit code 1 (restart 1 of backoffLimit 3)"
    )


def test_while_the_gang_stops_nothing_is_created_charged_or_announced() -> None:
    job = spec()
    restarting = observe(job, gang(failed=True), settle(job, gang())).status
    # The others crash on the broken group while they stop; one is gone already.
    stopping = [
        pod("master", 0, "Failed", 1, deleting=True),
        pod("worker", 1, "Failed", 134),
    ]
    result = observe(job, stopping, restarting)
    assert result.create_pods == []
    assert result.delete_pods == [("j-worker-1", "uid-worker-1")]
    assert (result.status["backoffCount"], result.status["gangRestarts"]) == (1, 1)
    assert result.status_events == []
    assert conditions(result.status)["ReplicaFailure"][1] == constants.REASON_GANG_RESTARTING


def test_a_crash_between_the_status_and_the_deletions_is_safe() -> None:
    job = spec()
    restarting = observe(job, gang(failed=True), settle(job, gang())).status
    # The status was written; no pod was deleted: they are of the gang before, and go.
    result = observe(job, gang(failed=True), restarting)
    assert sorted(result.delete_pods) == ALL
    assert result.status["backoffCount"] == 1
    assert result.status_events == []


def test_the_new_gang_is_created_once_every_old_pod_is_gone() -> None:
    job = spec()
    restarting = observe(job, gang(failed=True), settle(job, gang())).status
    result = observe(job, [], restarting)
    assert [(p.replica.type, p.replica.index) for p in result.create_pods] == list(KEYS)
    for created in result.create_pods:
        assert created.annotations[constants.ANNOTATION_GANG_RESTARTS] == "1"
        assert created.annotations[constants.ANNOTATION_BACKOFF_COUNT] == "1"
    assert result.status["backoffCount"] == 1
    # The new gang runs: the job is running again, and the failure is over.
    running = observe(job, gang(1), result.status)
    assert running.delete_pods == []
    assert running.create_pods == []
    assert running.status["phase"] == "Running"
    assert conditions(running.status)["ReplicaFailure"][0] == "False"


def test_a_crash_after_some_of_the_new_gang_was_created_creates_the_rest_once() -> None:
    job = spec()
    restarting = observe(job, gang(failed=True), settle(job, gang())).status
    first = observe(job, [], restarting)
    # Only the first of the new gang was created; the next round wrote the status it saw.
    created = [pod("master", 0, gang_restarts=1, backoff_count=1)]
    seen = observe(job, created, first.status).status
    for status in (first.status, seen):
        result = observe(job, created, status)
        assert [(p.replica.type, p.replica.index) for p in result.create_pods] == list(KEYS[1:])
        for made in result.create_pods:
            assert made.annotations[constants.ANNOTATION_GANG_RESTARTS] == "1"
            assert made.annotations[constants.ANNOTATION_BACKOFF_COUNT] == "1"
        assert result.delete_pods == []
        assert (result.status["backoffCount"], result.status["gangRestarts"]) == (1, 1)
        assert [t["restartCount"] for t in result.status["tasks"]] == [0, 1]
        assert not [e for e in result.status_events if e.reason == constants.REASON_GANG_RESTARTING]


def test_the_restart_waits_for_its_delay() -> None:
    job = spec()
    rules = RestartRules(RestartBackoff(base=10))
    result = observe(job, gang(finished_at=NOW), settle(job, gang()), rules=rules)
    assert result.delete_pods == []
    assert result.requeue_after == 10
    assert conditions(result.status)["ReplicaFailure"][1] == constants.REASON_RESTART_BACKOFF
    later = observe(job, gang(finished_at=NOW), result.status, NOW + timedelta(seconds=10))
    assert sorted(later.delete_pods) == ALL


def test_a_preempted_pod_restarts_the_gang_uncharged() -> None:
    job = spec()
    pods = gang()
    pods[2] = pod("worker", 1, preempted="TerminationTarget")
    result = observe(job, pods, settle(job, gang()))
    assert sorted(result.delete_pods) == ALL
    assert (result.status["backoffCount"], result.status["gangRestarts"]) == (0, 1)
    assert "gangRestartTimes" not in result.status
    [event] = [e for e in result.status_events if e.reason == constants.REASON_GANG_RESTARTING]
    assert event.type == "Normal"


def test_a_replica_restarted_too_often_in_a_row_restarts_the_gang() -> None:
    job = spec()
    running = settle(job, gang(), REPLICA_SCOPE)
    twice = observe(job, gang(failed=True, consecutive_restarts=2), running, meta=REPLICA_SCOPE)
    assert twice.delete_pods == [("j-worker-0", "uid-worker-0")]
    thrice = observe(job, gang(failed=True, consecutive_restarts=3), running, meta=REPLICA_SCOPE)
    assert sorted(thrice.delete_pods) == ALL
    assert thrice.status["gangRestarts"] == 1
    [event] = thrice.status_events
    assert "after 3 restarts of it in a row" in event.message
    # The rule is a setting.
    patient = RestartRules(replica_restarts_before_gang=4)
    later = observe(
        job, gang(failed=True, consecutive_restarts=3), running, meta=REPLICA_SCOPE, rules=patient
    )
    assert later.delete_pods == [("j-worker-0", "uid-worker-0")]


def test_a_torchrun_job_restarts_a_replica_alone_unless_it_asks_for_the_gang() -> None:
    job = JobBuilder().replicas("worker", 3, container={"name": "python", "image": "i"})
    elastic = job.torchrun().decoded_spec()
    pods = [pod("worker", i) for i in range(3)]
    failed = [pods[0], pod("worker", 1, "Failed", 1), pods[2]]
    alone = observe(elastic, failed, settle(elastic, pods))
    assert alone.delete_pods == [("j-worker-1", "uid-worker-1")]
    asks = {**META, "annotations": {constants.ANNOTATION_RESTART_SCOPE: "Gang"}}
    together = observe(elastic, failed, settle(elastic, pods, asks), meta=asks)
    assert len(together.delete_pods) == 3


def test_the_gang_restart_limit_within_its_window_fails_the_job() -> None:
    job = spec(runPolicy={"backoffLimit": 10})
    recent = [format_time(NOW - timedelta(minutes=m)) for m in (50, 40, 30, 20, 10)]
    status = {**settle(job, gang()), "gangRestarts": 5, "gangRestartTimes": recent}
    result = observe(job, gang(5, failed=True), status)
    # No restart: the replicas that still run are stopped, and the job fails once they are gone.
    assert sorted(result.delete_pods) == [ALL[0], ALL[2]]
    assert result.status["gangRestarts"] == 5
    reason = constants.REASON_GANG_RESTART_LIMIT_EXCEEDED
    assert conditions(result.status)["Running"] == ("False", reason)
    done = stopped(job, result, gang(5, failed=True))
    assert conditions(done.status)["Failed"] == ("True", reason)
    assert done.status["gangRestarts"] == 5
    # An hour later the oldest is out of the window: the restart is made, the oldest forgotten.
    later = observe(job, gang(5, failed=True), status, NOW + timedelta(minutes=11))
    assert len(later.delete_pods) == 3
    assert later.status["gangRestartTimes"] == [
        *recent[1:],
        format_time(NOW + timedelta(minutes=11)),
    ]


def test_backoff_limit_still_bounds_gang_restarts() -> None:
    job = spec()
    status = {**settle(job, gang()), "backoffCount": 3}
    result = observe(job, gang(failed=True), status)
    assert sorted(result.delete_pods) == [ALL[0], ALL[2]], "only the replicas that still run"
    assert "gangRestarts" not in result.status and result.status["backoffCount"] == 3
    done = stopped(job, result, gang(failed=True))
    assert conditions(done.status)["Failed"] == ("True", constants.REASON_BACKOFF_LIMIT_EXCEEDED)


def test_the_annotations_are_checked() -> None:
    manifest = JobBuilder("j").replicas("worker", 1).build()
    annotations = manifest["metadata"].setdefault("annotations", {})
    annotations[constants.ANNOTATION_RESTART_SCOPE] = "Pod"
    annotations[constants.ANNOTATION_PROGRESS_DEADLINE] = "-5"
    errors = {e.path: e.message for e in validate(manifest).errors}
    scope = f"metadata.annotations[{constants.ANNOTATION_RESTART_SCOPE}]"
    deadline = f"metadata.annotations[{constants.ANNOTATION_PROGRESS_DEADLINE}]"
    assert errors[scope] == "'Pod' is not one of Replica, Gang"
    assert deadline in errors
    annotations[constants.ANNOTATION_RESTART_SCOPE] = "Gang"
    annotations[constants.ANNOTATION_PROGRESS_DEADLINE] = "0"
    assert validate(manifest).errors == []
