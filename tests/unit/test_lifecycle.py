"""The reconciler's decisions: restart policies x exit codes x roles, backoff, deadline, debug,
pause, elastic scaling and status transitions; status is a function of observations."""

from __future__ import annotations

import itertools
from datetime import timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.planning import (
    NOW,
    REPLICA_SCOPE,
    conditions,
    observe,
    replica_pod,
    services,
    settle,
    spec,
    stopped,
)

from torchjob.api import constants
from torchjob.api.objects import PodPhase
from torchjob.api.types import PyTorchTrainingJobSpec
from torchjob.lifecycle.observe import ContainerView, PodView, view_pod
from torchjob.lifecycle.plan import Plan

_uids = itertools.count()


def pod(
    kind: str,
    index: int,
    phase: PodPhase = "Running",
    exit_code: int | None = None,
    *,
    uid: str | None = None,
    backoff: int = 0,
    debug: bool = False,
    deleting: bool = False,
) -> PodView:
    containers: tuple[ContainerView, ...] = ()
    if phase in ("Succeeded", "Failed"):
        containers = (
            ContainerView("python", "terminated", exit_code if exit_code is not None else 0),
        )
    return replica_pod(
        kind,
        index,
        phase,
        uid=uid or f"uid-{kind}-{index}",
        exit_code=exit_code if phase == "Failed" else (0 if phase == "Succeeded" else None),
        deleting=deleting,
        backoff_count=backoff,
        debug=debug,
        containers=containers,
    )


def all_pods(job: PyTorchTrainingJobSpec, phase: PodPhase = "Running") -> list[PodView]:
    out = []
    for replica_spec in job.replica_specs or []:
        for index in range(replica_spec.replicas or 1):
            out.append(pod(replica_spec.type or "", index, phase))
    return out


# --- creation -----------------------------------------------------------------------------------


def test_new_job_creates_every_service_and_pod() -> None:
    job = spec()
    result = observe(job, [], svcs=frozenset())
    assert [(r.type, r.index, r.rank) for r in result.create_services] == [
        ("master", 0, 0),
        ("worker", 0, 1),
        ("worker", 1, 2),
    ]
    assert [p.annotations[constants.ANNOTATION_BACKOFF_COUNT] for p in result.create_pods] == [
        "0",
        "0",
        "0",
    ]
    assert result.status["phase"] == "Pending"
    assert result.status["startTime"] == "2026-01-01T12:00:00Z"
    assert result.status["aggregate"]["creating"] == 3
    assert conditions(result.status)["Initialized"] == ("False", "CreatingReplicas")


def test_the_status_of_fresh_creations_waits_for_them() -> None:
    """One status write a new job, made once its creations are observed; no event for a job
    that is merely pending."""
    job = spec()
    first = observe(job, [], svcs=frozenset())
    assert first.status_can_wait
    assert first.status_events == []
    created = [
        pod("master", 0, "Pending"),
        pod("worker", 0, "Pending"),
        pod("worker", 1, "Pending"),
    ]
    observed = observe(job, created)
    assert observed.create_pods == [] and observed.create_services == []
    assert not observed.status_can_wait
    assert observed.status["phase"] == "Pending"
    assert observed.status_events == []
    running = observe(job, all_pods(job), observed.status)
    assert [(e.type, e.reason) for e in running.status_events] == [("Normal", "JobRunning")]


def test_a_counted_restart_is_written_before_its_creation() -> None:
    job = spec()
    running = settle(job, all_pods(job), REPLICA_SCOPE)
    gone = [pod("master", 0), pod("worker", 1)]
    recreate = observe(job, gone, running, meta=REPLICA_SCOPE)
    assert len(recreate.create_pods) == 1
    assert recreate.status["backoffCount"] == 1
    assert not recreate.status_can_wait
    # A count only a pod carries (the status was lost) is written before any creation too.
    carried = observe(job, [pod("master", 0, backoff=2)], {}, meta=REPLICA_SCOPE)
    assert [p.annotations[constants.ANNOTATION_BACKOFF_COUNT] for p in carried.create_pods] == [
        "2",
        "2",
    ]
    assert not carried.status_can_wait


def test_all_running_is_running() -> None:
    job = spec()
    status = observe(job, all_pods(job)).status
    assert status["phase"] == "Running"
    assert conditions(status)["Running"] == ("True", "AllReplicasRunning")
    assert conditions(status)["Initialized"] == ("True", "ReplicasCreated")
    assert status["aggregate"]["running"] == 3


# --- restart policy x exit code x role --------------------------------------------------------

RETRY = {130, 137, 143, 138}
CASES = [
    (policy, code, role)
    for policy in ("Never", "OnFailure", "Always", "ExitCode")
    for code in (1, 2, 130, 137, 138, 143, None)
    for role in ("master", "worker")
]


@pytest.mark.parametrize(("policy", "code", "role"), CASES)
def test_failed_replica(policy: str, code: int | None, role: str) -> None:
    job = spec(policy)
    pods = [
        p if p.replica_type != role or p.index != 0 else pod(role, 0, "Failed", code)
        for p in all_pods(job)
    ]
    if code is None:
        pods = [
            p
            if p.replica_type != role or p.index != 0
            else replica_pod(role, 0, "Failed", uid=p.uid, containers=())
            for p in pods
        ]
    status = settle(job, all_pods(job))
    result = observe(job, pods, status)
    retry = policy in ("OnFailure", "Always") or (
        policy == "ExitCode" and (code is None or code in RETRY)
    )
    if retry:
        # A job not run by torchrun restarts every replica together, counted once.
        assert sorted(result.delete_pods) == sorted((p.name, p.uid) for p in pods)
        assert (result.status["backoffCount"], result.status["gangRestarts"]) == (1, 1)
        assert result.status["phase"] == "Running"
        assert conditions(result.status)["ReplicaFailure"] == ("True", "GangRestarting")
        # Restarted alone, in the Replica scope.
        alone = observe(job, pods, settle(job, all_pods(job), REPLICA_SCOPE), meta=REPLICA_SCOPE)
        assert alone.delete_pods == [(f"j-{role}-0", f"uid-{role}-0")]
        assert conditions(alone.status)["ReplicaFailure"][0] == "True"
    else:
        # Not restarted: the failed pod is kept, the others that still run are stopped, and the
        # job says it failed once they are gone.
        reason = "MasterFailed" if role == "master" else "ReplicaFailed"
        assert sorted(result.delete_pods) == sorted(
            (p.name, p.uid) for p in pods if p.phase == "Running"
        )
        assert result.status["phase"] == "Running"
        assert conditions(result.status)["Running"] == ("False", reason)
        assert "Failed" not in conditions(result.status)
        done = stopped(job, result, pods)
        assert done.delete_pods == [] and done.create_pods == []
        assert done.status["phase"] == "Failed"
        assert conditions(done.status)["Failed"] == ("True", reason)
        assert any(e.type == "Warning" and e.reason == reason for e in done.status_events)
        assert not result.status_can_wait and not done.status_can_wait


def test_restart_is_counted_when_the_pod_is_recreated() -> None:
    job = spec("ExitCode")
    running = settle(job, all_pods(job), REPLICA_SCOPE)
    failed = [pod("master", 0), pod("worker", 0, "Failed", 137), pod("worker", 1)]
    deleting = observe(job, failed, running, meta=REPLICA_SCOPE)
    assert deleting.status["backoffCount"] == 0
    gone = [pod("master", 0), pod("worker", 1)]
    recreate = observe(job, gone, deleting.status, meta=REPLICA_SCOPE)
    assert [(p.replica.type, p.replica.index) for p in recreate.create_pods] == [("worker", 0)]
    assert recreate.create_pods[0].annotations[constants.ANNOTATION_BACKOFF_COUNT] == "1"
    assert recreate.status["backoffCount"] == 1
    assert recreate.status["tasks"][1]["restartCount"] == 1
    worker0 = recreate.status["tasks"][1]["replicas"][0]
    assert "uid" not in worker0, "the old uid is dropped with the same write that counts"
    # A crash after that status write and before the creation: the next round creates, uncounted.
    again = observe(job, gone, recreate.status, meta=REPLICA_SCOPE)
    assert again.create_pods[0].annotations[constants.ANNOTATION_BACKOFF_COUNT] == "1"
    assert again.status["backoffCount"] == 1


def test_pod_deleted_from_outside_is_recreated_and_counted() -> None:
    job = spec()
    running = settle(job, all_pods(job), REPLICA_SCOPE)
    result = observe(job, [pod("master", 0), pod("worker", 1)], running, meta=REPLICA_SCOPE)
    assert [(p.replica.type, p.replica.index) for p in result.create_pods] == [("worker", 0)]
    assert result.status["backoffCount"] == 1
    # In the Gang scope its replacement could not join the others: every replica restarts.
    gang = observe(job, [pod("master", 0), pod("worker", 1)], settle(job, all_pods(job)))
    assert gang.create_pods == []
    assert sorted(gang.delete_pods) == [
        ("j-master-0", "uid-master-0"),
        ("j-worker-1", "uid-worker-1"),
    ]
    assert (gang.status["backoffCount"], gang.status["gangRestarts"]) == (1, 1)


def test_backoff_count_survives_in_pod_annotations() -> None:
    job = spec()
    pods = [pod("master", 0), pod("worker", 0, backoff=2), pod("worker", 1)]
    assert observe(job, pods, {}).status["backoffCount"] == 2


def test_backoff_exhaustion_fails_the_job() -> None:
    job = spec("OnFailure")
    status = settle(job, all_pods(job))
    status["backoffCount"] = 3
    pods = [pod("master", 0), pod("worker", 0, "Failed", 1), pod("worker", 1)]
    result = observe(job, pods, status)
    assert ("j-worker-0", "uid-worker-0") not in result.delete_pods, "not restarted"
    done = stopped(job, result, pods)
    assert done.status["phase"] == "Failed"
    assert conditions(done.status)["Failed"] == ("True", "BackoffLimitExceeded")


def master_succeeded(job: PyTorchTrainingJobSpec) -> Plan:
    """The plan once the master of a settled job has succeeded, its workers still running and
    then stopped."""
    status = settle(job, all_pods(job))
    pods = [pod("master", 0, "Succeeded"), pod("worker", 0), pod("worker", 1)]
    return stopped(job, observe(job, pods, status), pods, NOW + timedelta(seconds=5))


def test_master_success_completes_the_job() -> None:
    job = spec()
    status = settle(job, all_pods(job))
    pods = [pod("master", 0, "Succeeded"), pod("worker", 0), pod("worker", 1)]
    stopping = observe(job, pods, status)
    assert sorted(stopping.delete_pods) == [
        ("j-worker-0", "uid-worker-0"),
        ("j-worker-1", "uid-worker-1"),
    ]
    assert "Completed" not in conditions(stopping.status)
    result = master_succeeded(job)
    assert result.status["phase"] == "Succeeded"
    assert conditions(result.status)["Completed"] == ("True", "MasterSucceeded")
    assert result.status["completionTime"] == "2026-01-01T12:00:05Z"
    assert result.create_pods == []
    assert result.delete_pods == []


def test_always_restarts_a_finished_worker() -> None:
    job = spec("Always")
    status = settle(job, all_pods(job), REPLICA_SCOPE)
    result = observe(
        job,
        [pod("master", 0), pod("worker", 0, "Succeeded"), pod("worker", 1)],
        status,
        meta=REPLICA_SCOPE,
    )
    assert result.delete_pods == [("j-worker-0", "uid-worker-0")]


def test_without_master_type_the_first_replica_decides() -> None:
    job = spec(master=False)
    status = settle(job, all_pods(job))
    pods = [pod("worker", 0, "Succeeded"), pod("worker", 1)]
    result = observe(job, pods, status)
    assert result.delete_pods == [("j-worker-1", "uid-worker-1")]
    assert conditions(result.status)["Running"] == ("False", "MasterSucceeded")
    assert stopped(job, result, pods).status["phase"] == "Succeeded"


def test_terminal_job_is_never_acted_on() -> None:
    job = spec()
    done = master_succeeded(job).status
    later = observe(job, [pod("master", 0, "Succeeded")], done, now=NOW + timedelta(hours=1))
    assert later.create_pods == []
    assert later.delete_pods == []
    assert later.create_services == []
    assert later.status["phase"] == "Succeeded"
    assert later.status["conditions"] == done["conditions"]


def test_pods_cleaned_up_after_the_end_count_as_deleted_not_creating() -> None:
    job = spec()
    done = master_succeeded(job).status
    assert done["aggregate"]["creating"] == 0
    cleaned = observe(job, [], done, now=NOW + timedelta(minutes=1)).status
    assert cleaned["aggregate"]["deleted"] == 3
    assert cleaned["aggregate"]["creating"] == 0


# --- deadline -----------------------------------------------------------------------------------


def test_deadline_requeues_then_fails_and_stops_pods() -> None:
    job = spec(runPolicy={"activeDeadlineSeconds": 60})
    status = settle(job, all_pods(job))
    before = observe(job, all_pods(job), status, now=NOW + timedelta(seconds=20))
    assert before.requeue_after == pytest.approx(40)
    pods = [pod("master", 0), pod("worker", 0, "Succeeded"), pod("worker", 1)]
    after = observe(job, pods, status, now=NOW + timedelta(seconds=61))
    assert sorted(after.delete_pods) == [
        ("j-master-0", "uid-master-0"),
        ("j-worker-1", "uid-worker-1"),
    ]
    assert conditions(after.status)["Running"] == ("False", "DeadlineExceeded")
    assert after.requeue_after is None
    done = stopped(job, after, pods, NOW + timedelta(seconds=62))
    assert done.status["phase"] == "Failed"
    assert conditions(done.status)["Failed"] == ("True", "DeadlineExceeded")


# --- debug, pause, elastic ----------------------------------------------------------------------


def test_debug_pods_are_marked_and_never_restarted() -> None:
    job = spec(runMode={"debug": {"enabled": True}})
    created = observe(job, [])
    assert all(p.annotations[constants.ANNOTATION_DEBUG] == "true" for p in created.create_pods)
    debug_pods = [pod(p.replica.type, p.replica.index, debug=True) for p in created.create_pods]
    debug_pods[1] = pod("worker", 0, "Failed", 1, debug=True)
    result = observe(job, debug_pods, created.status)
    assert result.delete_pods == []
    assert result.create_pods == []


def test_switching_debug_off_replaces_debug_pods_uncounted() -> None:
    job = spec()
    debug_pods = [
        pod("master", 0, debug=True),
        pod("worker", 0, debug=True),
        pod("worker", 1, debug=True),
    ]
    result = observe(job, debug_pods, settle(job, debug_pods))
    assert len(result.delete_pods) == 3
    again = observe(job, [], result.status)
    assert len(again.create_pods) == 3
    assert again.status["backoffCount"] == 0


def test_debug_running_reason() -> None:
    job = spec(runMode={"debug": {"enabled": True}})
    debug_pods = [
        pod("master", 0, debug=True),
        pod("worker", 0, debug=True),
        pod("worker", 1, debug=True),
    ]
    status = observe(job, debug_pods).status
    assert conditions(status)["Running"] == ("True", "Debug")


def test_pause_deletes_pods_and_resume_recreates_them_uncounted() -> None:
    running = spec()
    status = settle(running, all_pods(running))
    paused = spec(runMode={"pause": {"enabled": True}})
    pausing = observe(paused, all_pods(paused), status)
    assert len(pausing.delete_pods) == 3
    assert not pausing.status_can_wait
    assert pausing.status["phase"] == "Paused"
    assert pausing.status["startTime"] == status["startTime"]
    empty = observe(paused, [], pausing.status)
    assert empty.create_pods == []
    resumed = spec(runMode={"pause": {"enabled": False}})
    resuming = observe(resumed, [], empty.status)
    assert len(resuming.create_pods) == 3
    assert resuming.status_can_wait
    assert [e.reason for e in resuming.status_events] == ["JobResuming"]
    assert all(p.annotations[constants.ANNOTATION_RESUMING] == "true" for p in resuming.create_pods)
    assert resuming.status["phase"] == "Resuming"
    assert resuming.status["backoffCount"] == 0
    back = observe(resumed, all_pods(resumed), resuming.status)
    assert back.status["phase"] == "Running"
    assert conditions(back.status)["Paused"] == ("False", "Resumed")


def test_elastic_scale_up_and_down() -> None:
    def elastic(replicas: int) -> PyTorchTrainingJobSpec:
        return spec(
            master=False,
            workers=replicas,
            torchrunConfig={"enabled": True},
            elastic={"enabled": True, "minReplicas": 1, "maxReplicas": 4},
        )

    status = settle(elastic(2), all_pods(elastic(2)))
    up = observe(elastic(4), all_pods(elastic(2)), status, svcs=services(elastic(2)))
    assert [(p.replica.type, p.replica.index) for p in up.create_pods] == [
        ("worker", 2),
        ("worker", 3),
    ]
    assert len(up.create_services) == 2
    assert up.delete_services == []
    assert [(e.reason, e.message) for e in up.status_events] == [
        ("ReplicasScaled", "worker: from 2 to 4 replicas")
    ]
    scaled_up = observe(elastic(4), all_pods(elastic(4)), status).status
    down = observe(elastic(1), all_pods(elastic(4)), scaled_up, svcs=services(elastic(4)))
    assert down.delete_pods == [
        ("j-worker-3", "uid-worker-3"),
        ("j-worker-2", "uid-worker-2"),
        ("j-worker-1", "uid-worker-1"),
    ]
    assert down.delete_services == ["j-worker-3", "j-worker-2", "j-worker-1"]
    assert not down.status_can_wait
    assert [len(t["replicas"]) for t in down.status["tasks"]] == [1]
    assert [(e.reason, e.message) for e in down.status_events] == [
        ("ReplicasScaled", "worker: from 4 to 1 replicas")
    ]
    # Once the status says so, the same observation raises no second event.
    assert observe(elastic(1), all_pods(elastic(1)), down.status).status_events == []


def test_elastic_job_survives_a_permanent_worker_failure_above_min() -> None:
    job = spec(
        "Never",
        master=False,
        workers=3,
        torchrunConfig={"enabled": True},
        elastic={"enabled": True, "minReplicas": 2, "maxReplicas": 3},
    )
    status = settle(job, all_pods(job))
    result = observe(
        job, [pod("worker", 0), pod("worker", 1), pod("worker", 2, "Failed", 1)], status
    )
    assert result.status["phase"] == "Running"
    below = [pod("worker", 0), pod("worker", 1, "Failed", 1), pod("worker", 2, "Failed", 1)]
    result = observe(job, below, status)
    assert result.delete_pods == [("j-worker-0", "uid-worker-0")]
    assert stopped(job, result, below).status["phase"] == "Failed"


# --- status is a function of observations -------------------------------------------------------

PHASES = st.sampled_from(["Pending", "Running", "Succeeded", "Failed"])


@settings(max_examples=200, deadline=None)
@given(
    phases=st.lists(PHASES, min_size=3, max_size=3),
    codes=st.lists(st.sampled_from([1, 137, 143]), min_size=3, max_size=3),
    order=st.permutations([0, 1, 2]),
    policy=st.sampled_from(["Never", "OnFailure", "ExitCode", "Always"]),
)
def test_same_observations_same_plan_in_any_order(
    phases: list[PodPhase], codes: list[int], order: list[int], policy: str
) -> None:
    job = spec(policy)
    keys = [("master", 0), ("worker", 0), ("worker", 1)]
    pods = [pod(k, i, phases[n], codes[n]) for n, (k, i) in enumerate(keys)]
    status = settle(job, all_pods(job))
    first = observe(job, pods, status)
    second = observe(job, [pods[i] for i in order], status)
    assert first.status == second.status
    assert sorted(first.delete_pods) == sorted(second.delete_pods)
    assert first.create_pods == second.create_pods
    if not first.delete_pods and not first.create_pods:
        assert observe(job, pods, first.status).status == first.status, "status must settle"


def test_conditions_keep_their_transition_time() -> None:
    job = spec()
    first = observe(job, all_pods(job))
    later = observe(job, all_pods(job), first.status, now=NOW + timedelta(minutes=5))
    assert later.status["conditions"] == first.status["conditions"]
    assert later.status == first.status


def test_view_pod_reads_labels_annotations_and_exit_code() -> None:
    raw = {
        "metadata": {
            "name": "j-worker-1",
            "uid": "u",
            "labels": {constants.LABEL_REPLICA_TYPE: "worker", constants.LABEL_REPLICA_INDEX: "1"},
            "annotations": {constants.ANNOTATION_BACKOFF_COUNT: "2"},
        },
        "spec": {"containers": [{"name": "side"}, {"name": "python"}]},
        "status": {
            "phase": "Failed",
            "containerStatuses": [
                {"name": "side", "state": {"terminated": {"exitCode": 0}}},
                {"name": "python", "state": {"terminated": {"exitCode": 137}}},
            ],
        },
    }
    view = view_pod(raw)
    assert view is not None
    assert (view.replica_type, view.index, view.phase, view.exit_code, view.backoff_count) == (
        "worker",
        1,
        "Failed",
        137,
        2,
    )
    assert view_pod({"metadata": {"name": "x"}}) is None
