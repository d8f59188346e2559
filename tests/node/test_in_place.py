"""Restarts in place on the real node (Kubernetes 1.37: container restart rules and
RestartAllContainers on by default): a plain gloo job, as a PyTorchTrainingJob and as a Kubeflow
PyTorchJob, whose worker's training container is SIGKILLed restarts every replica where it
stands: the same pods on the same node, each training container started again, one gang restart
charged once, and the job then succeeds. How fast, against recreation: tests/bench/in_place.py."""

from __future__ import annotations

from typing import Any

import pytest
from support.node import Node, restarts, wait_until
from support.restarts import (
    gloo_job,
    kill_training,
    pods_by_name,
    seconds_to_train_again,
    training_container,
    wait_stepping,
)

from torchjob.api import constants
from torchjob.api.kubeflow import STATUS_RECORD

STEPS = 30
REPLICAS = 3


@pytest.mark.parametrize("kubeflow", [False, True], ids=["PyTorchTrainingJob", "PyTorchJob"])
def test_a_lost_worker_restarts_every_replica_in_place(
    node: Node, node_namespace: str, kubeflow: bool
) -> None:
    name, container = ("kf-in-place" if kubeflow else "in-place"), training_container(kubeflow)
    node.apply(node_namespace, gloo_job(node.example_image, name, STEPS, kubeflow=kubeflow))
    wait_stepping(node, node_namespace, name, container, REPLICAS, 3)
    before = pods_by_name(node, node_namespace, name)

    killed_at = kill_training(node, node_namespace, f"{name}-worker-1", container)
    seconds_to_train_again(node, node_namespace, name, container, REPLICAS, killed_at)

    after = pods_by_name(node, node_namespace, name)
    assert {n: p["metadata"]["uid"] for n, p in after.items()} == {
        n: p["metadata"]["uid"] for n, p in before.items()
    }, "the same pods"
    assert {p["spec"]["nodeName"] for p in after.values()} == {node.node_name}
    for pod_name, pod in after.items():
        assert restarts(pod) > restarts(before[pod_name]), pod_name
        assert pod["metadata"]["annotations"][constants.ANNOTATION_GANG_RESTARTS] == "1"

    status = finished(node, node_namespace, name, kubeflow)
    assert status["phase"] == "Succeeded", status
    assert (status["gangRestarts"], status["backoffCount"]) == (1, 1), status
    events = node.events(node_namespace, name)
    said = [e["message"] for e in events]
    assert any(
        m.startswith(
            f"restarting every replica in place: {name}-worker-1 failed with exit code 137"
        )
        for m in said
    ), said
    # Each pod was created once: a repeated Event is counted, not written again.
    created = sum(e.get("count") or 1 for e in events if e["message"].startswith("Created pod: "))
    assert created == REPLICAS, said


def finished(node: Node, namespace: str, name: str, kubeflow: bool) -> dict[str, Any]:
    """The lifecycle's record of the job once it ended (a PyTorchJob keeps it in its status)."""

    def record() -> dict[str, Any] | None:
        if kubeflow:
            job = node.get("pytorchjobs.kubeflow.org", name, namespace) or {}
            status = (job.get("status") or {}).get(STATUS_RECORD) or {}
        else:
            status = node.job(namespace, name).get("status") or {}
        return status if status.get("phase") in ("Succeeded", "Failed") else None

    return wait_until(f"{name} ended", record)
