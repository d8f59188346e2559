"""A late master: the worker starts while the master pod has no IP (it is held back from the
scheduler by a scheduling gate), and the job still succeeds without a restart and without the
training script retrying name resolution: the worker waits for the master's name before torchrun
starts."""

from __future__ import annotations

from typing import Any

from support.jobs import JobBuilder
from support.node import Node, running

from torchjob.api import constants

HOLD = "torchjob.test/hold-the-master"


def late_master_job(image: str) -> dict[str, Any]:
    """A master and a worker training the example with torchrun; the master held back."""
    container = {
        "name": "python",
        "image": image,
        "workingDir": "/workspace",
        "args": ["train.py", "--epochs", "2", "--log_dir", "runs/late"],
        "resources": {
            "requests": {"cpu": "250m", "memory": "512Mi"},
            "limits": {"cpu": "1", "memory": "2Gi"},
        },
    }
    return (
        JobBuilder("late")
        # Placed as a group, the worker would wait for the master: a late master is what a job
        # placed pod by pod (a cluster without gang scheduling) must survive.
        .metadata(annotations={constants.ANNOTATION_GANG_SCHEDULING: "none"})
        .replicas("master", 1, container=container)
        .replicas("worker", 1, container=container)
        .pod_spec("master", schedulingGates=[{"name": HOLD}])
        .torchrun(procPerNode="1")
        .run_policy(backoffLimit=3, activeDeadlineSeconds=1800)
        .build()
    )


def test_workers_started_before_the_master_has_an_ip_still_succeed(
    node: Node, node_namespace: str
) -> None:
    node.apply(node_namespace, late_master_job(node.example_image))

    worker = node.pod_when(
        node_namespace, "late-worker-0", "has an IP", lambda pod: bool(pod["status"].get("podIP"))
    )
    master = node.get("pod", "late-master-0", node_namespace)
    assert master is not None
    assert not master["status"].get("podIP"), "the master is held back: it has no IP yet"
    # The worker waits for the master's name instead of starting (and failing) torchrun.
    assert not running(worker, "python")

    node.kubectl(
        "patch", "pod", "late-master-0", "-n", node_namespace, "--type=json",
        "-p", '[{"op": "remove", "path": "/spec/schedulingGates"}]',
    )  # fmt: skip

    job = node.wait_for_phase(node_namespace, "late", ["Succeeded", "Failed"])
    assert job["status"]["phase"] == "Succeeded", node.logs(node_namespace, "late-master-0")
    assert job["status"].get("backoffCount", 0) == 0
    assert "test accuracy" in node.logs(node_namespace, "late-master-0")
