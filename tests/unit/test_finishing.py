"""How a job ends (lifecycle/finishing.py): once the planner decides how, the job's pods that
have not finished are stopped, the Running condition carries the ending meanwhile, and the job
is marked Succeeded or Failed, with Completed or Failed and completionTime, in the round that
sees them gone. Finished pods, deleted or not, hold nothing back; the housekeeper's clean-up
waits for the job to say it ended."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

from support.planning import (
    META,
    NOW,
    conditions,
    gone,
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
from torchjob.lifecycle.backoff import RestartRules
from torchjob.lifecycle.finishing import recorded_outcome
from torchjob.lifecycle.housekeeping import (
    HousekeepingObserved,
    HousekeepingPlan,
    Owned,
    TensorBoardObserved,
)
from torchjob.lifecycle.housekeeping import plan_housekeeping as housekeeping
from torchjob.lifecycle.nodes import NodesSeen, NodeView
from torchjob.lifecycle.observe import ContainerView, PodView
from torchjob.lifecycle.plan import Plan, plan
from torchjob.lifecycle.round import Observed

LATER = NOW + timedelta(seconds=30)
WORKERS = [("j-worker-0", "uid-worker-0"), ("j-worker-1", "uid-worker-1")]


def pod(kind: str, index: int, phase: PodPhase = "Running", code: int = 0, **extra: Any) -> PodView:
    finished = phase in ("Succeeded", "Failed")
    ended = (ContainerView("python", "terminated", code),) if finished else ()
    return replica_pod(
        kind, index, phase, exit_code=code if finished else None, containers=ended, **extra
    )


def running() -> list[PodView]:
    return [pod("master", 0), pod("worker", 0), pod("worker", 1)]


def master_ended(job: PyTorchTrainingJobSpec, phase: PodPhase = "Succeeded") -> list[PodView]:
    return [pod("master", 0, phase, 0 if phase == "Succeeded" else 1), *running()[1:]]


def stopping_round(job: PyTorchTrainingJobSpec, pods: list[PodView]) -> Plan:
    """The round that sees how the job ended, its replicas having run."""
    return observe(job, pods, settle(job, running()))


def test_the_master_succeeding_stops_the_workers_and_the_job_waits_for_them() -> None:
    job = spec()
    result = stopping_round(job, master_ended(job))
    assert sorted(result.delete_pods) == WORKERS
    assert result.create_pods == [] and result.requeue_after is None
    status = result.status
    assert status["phase"] == "Running"
    assert conditions(status)["Running"] == ("False", constants.REASON_MASTER_SUCCEEDED)
    assert "Completed" not in conditions(status) and "Failed" not in conditions(status)
    assert "completionTime" not in status
    assert [(e.type, e.reason, e.message) for e in result.status_events] == [
        (
            "Normal",
            constants.REASON_STOPPING,
            "master replica j-master-0 succeeded: stopping j-worker-0, j-worker-1 before the "
            "job is marked Succeeded",
        )
    ]
    assert recorded_outcome(status) is not None


def test_a_worker_still_terminating_holds_the_job_without_a_second_event_or_deletion() -> None:
    job = spec()
    pods = master_ended(job)
    first = stopping_round(job, pods)
    terminating = [pods[0], replace(pods[2], deleting=True)]  # worker-0 gone, worker-1 not yet
    second = observe(job, terminating, first.status, LATER)
    assert second.delete_pods == [] and second.create_pods == []
    assert second.status["phase"] == "Running"
    assert "Completed" not in conditions(second.status)
    assert "completionTime" not in second.status
    assert second.status_events == []
    assert second.status["conditions"] == first.status["conditions"]


def test_the_round_that_sees_them_gone_marks_the_job_succeeded() -> None:
    job = spec()
    pods = master_ended(job)
    first = stopping_round(job, pods)
    done = stopped(job, first, pods, LATER)
    assert done.delete_pods == [] and done.create_pods == []
    assert done.status["phase"] == "Succeeded"
    assert conditions(done.status)["Completed"] == ("True", constants.REASON_MASTER_SUCCEEDED)
    assert conditions(done.status)["Running"] == ("False", constants.REASON_MASTER_SUCCEEDED)
    assert done.status["completionTime"] == "2026-01-01T12:00:30Z"
    assert [(e.type, e.reason) for e in done.status_events] == [
        ("Normal", constants.REASON_MASTER_SUCCEEDED)
    ]
    # The pods stopped were not replicas about to be created: the job stays as it was set up.
    assert conditions(done.status)["Initialized"] == ("True", constants.REASON_CREATED)
    assert (done.status["aggregate"]["creating"], done.status["aggregate"]["deleted"]) == (0, 2)
    # And it is terminal: nothing more is decided.
    assert observe(job, gone(first, pods), done.status, LATER).status == done.status


def test_a_worker_that_succeeded_already_does_not_hold_the_job() -> None:
    job = spec()
    finished = [pod("master", 0, "Succeeded"), pod("worker", 0, "Succeeded"), pod("worker", 1)]
    result = stopping_round(job, finished)
    assert result.delete_pods == [("j-worker-1", "uid-worker-1")], "a finished pod is kept"
    done = observe(job, finished[:2], result.status, LATER)
    assert done.status["phase"] == "Succeeded"
    # Every replica finished: the job is marked at once, with no Event of stopping.
    all_done = [*finished[:2], pod("worker", 1, "Succeeded", deleting=True)]
    at_once = stopping_round(job, all_done)
    assert at_once.delete_pods == []
    assert at_once.status["phase"] == "Succeeded"
    assert "completionTime" in at_once.status
    assert constants.REASON_STOPPING not in [e.reason for e in at_once.status_events]


def test_a_failure_ends_the_same_way() -> None:
    job = spec("Never")
    pods = master_ended(job, "Failed")
    result = stopping_round(job, pods)
    assert sorted(result.delete_pods) == WORKERS
    assert result.status["phase"] == "Running"
    assert conditions(result.status)["Running"] == ("False", constants.REASON_MASTER_FAILED)
    assert conditions(result.status)["ReplicaFailure"] == ("True", constants.REASON_REPLICA_FAILED)
    assert "Failed" not in conditions(result.status)
    assert "completionTime" not in result.status
    assert [(e.type, e.reason) for e in result.status_events] == [
        ("Normal", constants.REASON_STOPPING)
    ]
    assert result.status_events[0].message.endswith("before the job is marked Failed")
    done = stopped(job, result, pods, LATER)
    assert done.status["phase"] == "Failed"
    assert conditions(done.status)["Failed"] == ("True", constants.REASON_MASTER_FAILED)
    assert done.status["completionTime"] == "2026-01-01T12:00:30Z"
    # The failure that ended the job is still told, though the pods are gone.
    assert conditions(done.status)["ReplicaFailure"] == ("True", constants.REASON_REPLICA_FAILED)
    assert [(e.type, e.reason) for e in done.status_events] == [
        ("Warning", constants.REASON_MASTER_FAILED)
    ]


def test_while_the_pods_stop_nothing_else_is_decided() -> None:
    """A worker that fails meanwhile is not restarted, a missing replica is not created, and a
    deadline that passes meanwhile does not change how the job ended."""
    job = spec("OnFailure", runPolicy={"activeDeadlineSeconds": 10})
    pods = master_ended(job)
    first = stopping_round(job, pods)
    crashed = [pods[0], pod("worker", 1, "Failed", 1, deleting=True)]
    meanwhile = observe(job, crashed, first.status, NOW + timedelta(hours=1))
    assert meanwhile.create_pods == [] and meanwhile.delete_pods == []
    assert meanwhile.status["backoffCount"] == 0
    assert meanwhile.status["phase"] == "Succeeded", "the pod that failed has finished"
    assert conditions(meanwhile.status)["Completed"] == ("True", constants.REASON_MASTER_SUCCEEDED)


def owned(view: PodView) -> Owned:
    return Owned(view.name, view.uid, view.deleting, view.phase, "rv")


def housekeeping_of(
    job: PyTorchTrainingJobSpec, status: dict[str, Any], pods: list[PodView]
) -> HousekeepingPlan:
    """The housekeeper's plan for the job of `status` whose replica pods are `pods`."""
    meta = {"name": "j", "namespace": "ns", "uid": "job-uid"}
    seen = [owned(p) for p in pods]
    return housekeeping(
        HousekeepingObserved(meta, job, status, seen, [], TensorBoardObserved(), LATER)
    )


def test_the_housekeepers_clean_up_waits_for_the_job_to_say_it_ended() -> None:
    job = spec("Never", runPolicy={"cleanUpPolicy": "All"})
    pods = master_ended(job)
    first = stopping_round(job, pods)
    assert housekeeping_of(job, first.status, pods).delete_pods == []
    done = stopped(job, first, pods, LATER)
    left = gone(first, pods)
    assert housekeeping_of(job, done.status, left).delete_pods == [
        ("j-master-0", "uid-master-0", "rv")
    ]
    # Nor does its TTL run before: it runs from the completionTime written once they are gone.
    brief = spec("Never", runPolicy={"ttlSecondsAfterFinished": 0})
    first = stopping_round(brief, pods)
    assert not housekeeping_of(brief, first.status, pods).delete_job
    assert housekeeping_of(brief, stopped(brief, first, pods, LATER).status, left).delete_job


def on_node(view: PodView, node: str) -> PodView:
    return replace(view, bound=True, node=node)


def round_with_nodes(
    job: PyTorchTrainingJobSpec,
    pods: list[PodView],
    status: dict[str, Any],
    nodes: list[NodeView],
    now: datetime = LATER,
) -> Plan:
    seen = NodesSeen({n.name: n for n in nodes}, 60.0)
    return plan(Observed.of_json(META, job, status, pods, services(job), now, nodes=seen))


def test_a_pod_stuck_terminating_on_a_lost_node_is_force_deleted_and_does_not_hold_the_job() -> (
    None
):
    job = spec()
    pods = [on_node(p, "a") for p in master_ended(job)]
    pods[2] = on_node(pods[2], "b")
    first = stopping_round(job, pods)
    terminating = [pods[0], replace(pods[2], deleting=True)]
    # Node b stopped reporting 30s ago: its grace has 30s to run, and the job looks again then.
    unknown = NodeView("b", "Unknown", LATER - timedelta(seconds=30))
    ready = NodeView("a", "True", NOW - timedelta(hours=1))
    waiting = round_with_nodes(job, terminating, first.status, [ready, unknown])
    assert waiting.force_delete_pods == [] and waiting.delete_pods == []
    assert waiting.requeue_after == 30
    assert "Completed" not in conditions(waiting.status)
    # Past its grace, no kubelet will confirm the deletion: the pod is force-deleted.
    later = LATER + timedelta(seconds=30)
    lost = round_with_nodes(job, terminating, first.status, [ready, unknown], later)
    assert lost.force_delete_pods == [("j-worker-1", "uid-worker-1")]
    assert lost.requeue_after is None
    # A node that is gone: at once.
    gone_node = round_with_nodes(job, terminating, first.status, [ready])
    assert gone_node.force_delete_pods == [("j-worker-1", "uid-worker-1")]
    # The job is marked once the pod is gone.
    done = round_with_nodes(job, [pods[0]], lost.status, [ready], later)
    assert done.status["phase"] == "Succeeded"


def test_with_a_success_grace_the_others_may_finish_on_their_own_first() -> None:
    """The reconciler's --success-grace: a worker about to exit 0 when the master succeeds is
    not killed (its log stays with the pods cleanUpPolicy None keeps); past it, it is stopped."""
    job = spec()
    rules = RestartRules(success_grace=30)
    ended = master_ended(job)
    first = observe(job, ended, settle(job, running()), rules=rules)
    assert first.delete_pods == [] and first.requeue_after == 30
    assert first.status["phase"] == "Running"
    [told] = [e for e in first.status_events if e.reason == constants.REASON_STOPPING]
    assert "waiting up to 30s" in told.message
    later = observe(job, ended, first.status, LATER, rules=rules)
    assert sorted(later.delete_pods) == WORKERS
    assert later.status["phase"] == "Running", "Succeeded once they are gone"
