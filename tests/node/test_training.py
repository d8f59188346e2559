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
from support.tables import printed_rows

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


def progress_shown(node: Node, namespace: str) -> dict[str, str] | None:
    """The columns of `kubectl get ptj mnist-ddp` once PROGRESS shows a value while it runs."""
    [cells] = printed_rows(node.kubectl("get", "ptj", "mnist-ddp", "-n", namespace).stdout)
    shown = cells["PROGRESS"] not in ("", "<none>") and cells["ETA"] not in ("", "<none>")
    return cells if cells["PHASE"] == "Running" and shown else None


def last_report(node: Node, namespace: str) -> dict[str, Any] | None:
    """The job's progress once its final report (100 %) is in status."""
    report = node.job(namespace, "mnist-ddp")["status"].get("trainerStatus") or {}
    return report if report.get("progressPercentage") == 100 else None


def test_the_example_trains_across_real_pods_and_its_tensorboard_answers(
    node: Node, node_namespace: str
) -> None:
    host_path_claim(node, node_namespace, LOGS_CLAIM)
    node.apply(node_namespace, example_job_with_tensorboard(node.example_image, LOGS_CLAIM))

    # kubectl shows the progress train.py reports while it trains.
    shown = wait_until("PROGRESS in kubectl get", lambda: progress_shown(node, node_namespace))
    assert 0 <= int(shown["PROGRESS"]) < 100 and int(shown["ETA"]) >= 0, shown
    job = node.wait_for_phase(node_namespace, "mnist-ddp", ["Succeeded", "Failed"])

    logs = node.logs(node_namespace, MASTER_POD)
    assert job["status"]["phase"] == "Succeeded", logs[-3000:]
    accuracy = float(re.findall(r"test accuracy ([0-9.]+)", logs)[-1])
    assert accuracy >= 0.95
    reported = wait_until("the last report", lambda: last_report(node, node_namespace))
    assert reported["progressPercentage"] == 100, reported
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
