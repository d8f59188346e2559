"""The example job trains across real pods: two replicas, each torchrun with two processes, gloo on
CPU, ranks meeting at the master by its DNS name, placed together by kube-scheduler's gang
scheduling; its TensorBoard, reading the logs rank 0 wrote to a volume, answers HTTP on its
Service from inside the cluster."""

from __future__ import annotations

import json
import re
from typing import Any

import yaml
from support.controlplane import REPO_ROOT
from support.node import Node, host_path_claim, http_get_from_a_pod, wait_until

EXAMPLE_JOB = REPO_ROOT / "examples" / "mnist-ddp" / "job.yaml"
# The master is replica 0 of the example's only replica spec.
MASTER_POD = "mnist-ddp-worker-0"
LOGS_CLAIM = "training-logs"
TENSORBOARD_PORT = 6006


def example_job_with_tensorboard(image: str, claim: str) -> dict[str, Any]:
    """examples/mnist-ddp/job.yaml, its TensorBoard logs on a claim that a TensorBoard reads."""
    job: dict[str, Any] = yaml.safe_load(EXAMPLE_JOB.read_text())
    replica = job["spec"]["replicaSpecs"][0]
    pod_spec = replica["template"]["spec"]
    container = pod_spec["containers"][0]
    assert container["image"] == image, "job.yaml names the image make node-up builds"
    # train.py writes under runs/ in the working directory: put runs/ on the claim.
    container["volumeMounts"] = [{"name": "runs", "mountPath": "/workspace/runs"}]
    pod_spec["volumes"] = [{"name": "runs", "persistentVolumeClaim": {"claimName": claim}}]
    job["spec"]["tensorboardSpec"] = {
        "image": image,
        "trainingLogFilesets": [f"t9k://pvc/{claim}/mnist-ddp"],
    }
    return job


def test_the_example_trains_across_real_pods_and_its_tensorboard_answers(
    node: Node, node_namespace: str
) -> None:
    host_path_claim(node, node_namespace, LOGS_CLAIM)
    node.apply(node_namespace, example_job_with_tensorboard(node.example_image, LOGS_CLAIM))

    job = node.wait_for_phase(node_namespace, "mnist-ddp", ["Succeeded", "Failed"])

    logs = node.logs(node_namespace, MASTER_POD)
    assert job["status"]["phase"] == "Succeeded", logs[-3000:]
    accuracy = float(re.findall(r"test accuracy ([0-9.]+)", logs)[-1])
    assert accuracy >= 0.95
    # Four processes in all, two per replica: the DDP world the example asks for.
    assert "training on 4 process(es)" in logs
    assert job["status"].get("backoffCount", 0) == 0
    # The node serves Kubernetes' gang scheduling: the replicas were placed as one PodGroup.
    group = node.get("podgroups.scheduling.k8s.io", "mnist-ddp", node_namespace)
    assert group is not None, "the chart's default (auto) groups the job's pods natively"
    assert group["spec"]["schedulingPolicy"]["gang"]["minCount"] == 2
    scheduled = next(c for c in job["status"]["conditions"] if c["type"] == "Scheduled")
    assert (scheduled["status"], scheduled["reason"]) == ("True", "Scheduled")

    tensorboard = wait_until(
        "the TensorBoard ready", lambda: _ready_tensorboard(node, node_namespace)
    )
    url = f"http://{tensorboard}.{node_namespace}.svc:{TENSORBOARD_PORT}"
    runs = json.loads(http_get_from_a_pod(node, node_namespace, f"{url}/data/runs"))
    # TensorBoard found the event files rank 0 wrote to the claim.
    assert runs, "TensorBoard lists no run"


def _ready_tensorboard(node: Node, namespace: str) -> str | None:
    status = (node.job(namespace, "mnist-ddp").get("status") or {}).get("tensorboard") or {}
    if not status.get("ready"):
        return None
    return "mnist-ddp-tensorboard"
