"""Pods lost with their node (lifecycle/nodes.py): a pod whose node is gone, or not Ready past
the grace, is deleted and replaced without a charge to backoffLimit; one stuck being deleted on
an unreachable node is force-deleted; a NodeLost Event names the pod and the node once; every
DisruptionTarget reason is an ending of the cluster's, not charged."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

import pytest
from support.planning import META, NOW, REPLICA_SCOPE, observe, replica_pod, services, settle, spec

from torchjob.api import constants
from torchjob.api.types import PyTorchTrainingJobSpec
from torchjob.kube.slim import slim_node
from torchjob.lifecycle.nodes import NodesSeen, NodeView, view_node
from torchjob.lifecycle.observe import PodView, view_pod
from torchjob.lifecycle.plan import Plan, plan
from torchjob.lifecycle.round import Observed

GRACE = 60.0
HEALTHY = NodeView("a", "True", NOW - timedelta(hours=1))


def pod(kind: str, index: int, node: str = "a", *, deleting: bool = False) -> PodView:
    return replica_pod(kind, index, deleting=deleting, bound=bool(node), node=node)


def running(node: str = "a", *, deleting: bool = False) -> list[PodView]:
    return [pod("worker", i, node, deleting=deleting) for i in range(2)]


def job() -> PyTorchTrainingJobSpec:
    return spec(workers=2, master=False)


def round_on(
    pods: list[PodView],
    nodes: list[NodeView] | None,
    status: dict[str, Any],
    now: datetime = NOW,
    meta: dict[str, Any] = REPLICA_SCOPE,
) -> Plan:
    seen = None if nodes is None else NodesSeen({n.name: n for n in nodes}, GRACE)
    observed = Observed.of_json(meta, job(), status, pods, services(job()), now, nodes=seen)
    return plan(observed)


def lost_events(result: Plan) -> list[str]:
    return [e.message for e in result.events if e.reason == constants.REASON_NODE_LOST]


@pytest.fixture
def status() -> dict[str, Any]:
    """The status of the job with both workers running on node a."""
    return settle(job(), running())


def test_pods_on_a_ready_node_are_left_alone(status: dict[str, Any]) -> None:
    result = round_on(running(), [HEALTHY], status)
    assert result.delete_pods == result.force_delete_pods == []
    assert lost_events(result) == [] and result.requeue_after is None


def test_nothing_is_lost_where_nodes_are_not_watched(status: dict[str, Any]) -> None:
    result = round_on(running(), None, status)
    assert result.delete_pods == result.force_delete_pods == []


def test_a_node_not_ready_within_the_grace_is_looked_at_again_when_it_ends(
    status: dict[str, Any],
) -> None:
    node = NodeView("a", "Unknown", NOW - timedelta(seconds=45))
    result = round_on(running(), [node], status)
    assert result.delete_pods == [] and lost_events(result) == []
    assert result.requeue_after == pytest.approx(15)


@pytest.mark.parametrize("ready", ["False", "Unknown"])
def test_pods_of_a_node_not_ready_past_the_grace_are_deleted_and_told(
    status: dict[str, Any], ready: Any
) -> None:
    node = NodeView("a", ready, NOW - timedelta(seconds=61))
    result = round_on(running(), [node], status)
    assert result.delete_pods == [("j-worker-0", "uid-worker-0"), ("j-worker-1", "uid-worker-1")]
    assert result.force_delete_pods == []  # not yet being deleted: gracefully first
    told = lost_events(result)
    assert len(told) == 2 and all("node a has not been Ready for 1m1s" in m for m in told)
    assert "j-worker-0" in told[0] and "not counted as a restart" in told[0]
    # The uids are dropped with the status written before the deletions: not charged later.
    assert not result.status_can_wait
    assert all("uid" not in r for r in result.status["tasks"][0]["replicas"])


def test_a_pod_whose_node_does_not_exist_is_lost_at_once(status: dict[str, Any]) -> None:
    result = round_on(running(), [], status)
    assert len(result.delete_pods) == 2
    assert all("node a does not exist" in m for m in lost_events(result))


def test_a_node_being_deleted_is_gone(status: dict[str, Any]) -> None:
    result = round_on(running(deleting=True), [replace(HEALTHY, deleting=True)], status)
    assert len(result.force_delete_pods) == 2


@pytest.mark.parametrize(
    ("nodes", "forced"),
    [
        ([], True),  # the node is gone
        ([NodeView("a", "Unknown", NOW - timedelta(seconds=90))], True),  # its kubelet is silent
        ([NodeView("a", "False", NOW - timedelta(seconds=90))], False),  # its kubelet confirms
        ([NodeView("a", "Unknown", NOW - timedelta(seconds=30))], False),  # within the grace
    ],
)
def test_a_pod_stuck_terminating_on_an_unreachable_node_is_force_deleted(
    status: dict[str, Any], nodes: list[NodeView], forced: bool
) -> None:
    result = round_on(running(deleting=True), nodes, status)
    assert result.delete_pods == []
    expected = [("j-worker-0", "uid-worker-0"), ("j-worker-1", "uid-worker-1")] if forced else []
    assert result.force_delete_pods == expected


def test_the_replacement_of_a_lost_pod_is_not_charged(status: dict[str, Any]) -> None:
    lost = NodeView("a", "Unknown", NOW - timedelta(seconds=90))
    deleted = round_on(running(), [lost], status)
    # The next rounds: the pods are being deleted (no event again), then forced, then gone.
    stuck = round_on(running(deleting=True), [lost], deleted.status)
    assert lost_events(stuck) == []
    assert len(stuck.force_delete_pods) == 2
    gone = round_on([], [lost], stuck.status)
    assert len(gone.create_pods) == 2
    assert all(p.annotations[constants.ANNOTATION_BACKOFF_COUNT] == "0" for p in gone.create_pods)
    assert gone.status["backoffCount"] == 0
    assert gone.status["tasks"][0]["restartCount"] == 0


def test_pods_deleted_by_the_node_lifecycle_controller_are_told_once_and_not_charged(
    status: dict[str, Any],
) -> None:
    """The taint manager deleted them gracefully before the grace was over: they stay
    Terminating; once the grace is over they are lost, told and forced."""
    lost = NodeView("a", "Unknown", NOW - timedelta(seconds=90))
    result = round_on(running(deleting=True), [lost], status)
    assert len(lost_events(result)) == 2
    assert len(result.force_delete_pods) == 2
    again = round_on(running(deleting=True), [lost], result.status)
    assert lost_events(again) == []
    gone = round_on([], [lost], again.status)
    assert gone.status["backoffCount"] == 0 and len(gone.create_pods) == 2


def test_pods_on_another_node_are_not_lost_with_this_one(status: dict[str, Any]) -> None:
    lost = NodeView("a", "Unknown", NOW - timedelta(seconds=90))
    other = NodeView("b", "True", NOW - timedelta(hours=1))
    pods = [pod("worker", 0, "a"), pod("worker", 1, "b")]
    result = round_on(pods, [lost, other], status)
    assert result.delete_pods == [("j-worker-0", "uid-worker-0")]


def test_a_pod_not_placed_is_not_lost(status: dict[str, Any]) -> None:
    result = round_on(running(node=""), [], status)
    assert result.delete_pods == []


DISRUPTIONS = [
    "PreemptionByScheduler",
    "DeletionByTaintManager",
    "EvictionByEvictionAPI",
    "DeletionByPodGC",
    "TerminationByKubelet",
]


@pytest.mark.parametrize("reason", DISRUPTIONS)
def test_every_disruption_target_is_an_ending_not_charged(reason: str) -> None:
    failed = {
        "metadata": {
            "name": "j-worker-0",
            "uid": "uid-worker-0",
            "labels": {
                constants.LABEL_REPLICA_TYPE: "worker",
                constants.LABEL_REPLICA_INDEX: "0",
            },
        },
        "spec": {"containers": [{"name": "python"}], "nodeName": "a"},
        "status": {
            "phase": "Failed",
            "conditions": [{"type": "DisruptionTarget", "status": "True", "reason": reason}],
        },
    }
    seen = view_pod(failed)
    assert seen is not None and seen.preempted == reason and seen.node == "a"
    status = settle(job(), running())
    deleted = observe(job(), [seen, pod("worker", 1)], status, meta=REPLICA_SCOPE)
    assert deleted.delete_pods == [("j-worker-0", "uid-worker-0")]
    gone = observe(job(), [pod("worker", 1)], deleted.status, meta=REPLICA_SCOPE)
    assert len(gone.create_pods) == 1 and gone.status["backoffCount"] == 0


def test_a_disruption_target_not_true_is_no_ending() -> None:
    pod_object = {
        "metadata": {
            "name": "j-worker-0",
            "labels": {constants.LABEL_REPLICA_TYPE: "worker", constants.LABEL_REPLICA_INDEX: "0"},
        },
        "status": {
            "conditions": [
                {"type": "DisruptionTarget", "status": "False", "reason": "EvictionByEvictionAPI"}
            ]
        },
    }
    seen = view_pod(pod_object)
    assert seen is not None and seen.preempted is None


def full_node(ready: str | None, deleting: bool = False) -> dict[str, Any]:
    conditions = [
        {
            "type": kind,
            "status": "False",
            "lastHeartbeatTime": "2026-01-01T11:59:00Z",
            "lastTransitionTime": "2026-01-01T10:00:00Z",
            "reason": "KubeletHasSufficientMemory",
            "message": "kubelet has sufficient memory available",
        }
        for kind in ("MemoryPressure", "DiskPressure", "PIDPressure")
    ]
    if ready is not None:
        conditions.append(
            {
                "type": "Ready",
                "status": ready,
                "lastHeartbeatTime": "2026-01-01T11:59:00Z",
                "lastTransitionTime": "2026-01-01T11:00:00Z",
                "reason": "KubeletReady",
                "message": "kubelet is posting ready status",
            }
        )
    meta: dict[str, Any] = {
        "name": "a",
        "uid": "node-uid",
        "resourceVersion": "7",
        "labels": {"kubernetes.io/hostname": "a"},
        "annotations": {"node.alpha.kubernetes.io/ttl": "0"},
        "managedFields": [{"manager": "kubelet"}],
    }
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T11:30:00Z"
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": meta,
        "spec": {"podCIDR": "10.1.0.0/24", "taints": []},
        "status": {
            "conditions": conditions,
            "capacity": {"cpu": "16", "memory": "128Gi"},
            "images": [{"names": ["example:latest"], "sizeBytes": 10**9}],
            "addresses": [{"type": "InternalIP", "address": "10.0.0.1"}],
        },
    }


@pytest.mark.parametrize(
    ("ready", "deleting"), [("True", False), ("False", False), ("Unknown", True), (None, False)]
)
def test_a_slim_node_is_seen_as_the_full_one(ready: str | None, deleting: bool) -> None:
    node = full_node(ready, deleting)
    slim = slim_node(node)
    assert view_node(slim) == view_node(node)
    assert slim["metadata"] == {
        k: v
        for k, v in node["metadata"].items()
        if k in ("name", "resourceVersion", "deletionTimestamp")
    }
    assert "spec" not in slim and len(str(slim)) < len(str(node)) / 3
    seen = view_node(node)
    assert seen.ready == (ready or "Unknown") and seen.deleting == deleting
    assert seen.since == (NOW - timedelta(hours=1) if ready else None)


def test_a_pod_lost_with_its_node_restarts_a_gang_job_uncharged(status: dict[str, Any]) -> None:
    """A job not run by torchrun restarts as a gang: the replica on the lost node takes the
    others with it, and nothing is charged to backoffLimit."""
    lost = NodeView("a", "Unknown", NOW - timedelta(seconds=90))
    other = NodeView("b", "True", NOW - timedelta(hours=1))
    pods = [pod("worker", 0, "a"), pod("worker", 1, "b")]
    result = round_on(pods, [lost, other], status, meta=META)
    assert sorted(result.delete_pods) == [
        ("j-worker-0", "uid-worker-0"),
        ("j-worker-1", "uid-worker-1"),
    ]
    assert result.status["backoffCount"] == 0
    assert result.status["gangRestarts"] == 1
