"""Kubeflow's PyTorchJob manifests run to Succeeded on the real node: the example of Kubeflow's
documentation (two Workers) and both manifests of the guide the project was specified from (one
Worker; the job as written, and as `kubectl get -o yaml` exported it), unchanged but for what
this machine cannot give them: the image (no registry is reachable, and the Kubeflow example's
image downloads FashionMNIST from the internet) is the example image, and the command runs the
example's training script. Each replica is plain python: ranks meet at `<job>-master-0` through
the MASTER_ADDR, MASTER_PORT, WORLD_SIZE and RANK Kubeflow's environment gives them."""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from support.node import Node, wait_until

DATA = Path(__file__).parents[1] / "data" / "kubeflow"
MANIFESTS = {
    "pytorch-simple.yaml": 2,  # Workers
    "pytorch-simple-namespaced.yaml": 1,
    "pytorch-simple-stored.yaml": 1,
}
# What the apiserver sets on an object: an exported manifest is applied without it.
SERVER_SET = ("creationTimestamp", "generation", "resourceVersion", "uid")


def runnable_here(manifest: dict[str, Any], image: str) -> dict[str, Any]:
    """The manifest with the example image and the example's training script for one epoch."""
    job = copy.deepcopy(manifest)
    job.pop("status", None)
    meta = job["metadata"]
    for key in (*SERVER_SET, "namespace"):
        meta.pop(key, None)
    for replica in job["spec"]["pytorchReplicaSpecs"].values():
        for container in replica["template"]["spec"]["containers"]:
            container["image"] = image
            container["imagePullPolicy"] = "IfNotPresent"
            container["workingDir"] = "/workspace"
            container["command"] = ["python", "train.py", "--epochs", "1"]
            container["resources"] = {"requests": {"cpu": "200m", "memory": "512Mi"}}
    return job


def pytorchjob(node: Node, namespace: str, name: str) -> dict[str, Any]:
    job = node.get("pytorchjobs.kubeflow.org", name, namespace)
    assert job is not None, f"PyTorchJob {namespace}/{name} is gone"
    return job


def finished(job: dict[str, Any]) -> bool:
    return any(
        c.get("type") in ("Succeeded", "Failed") and c.get("status") == "True"
        for c in (job.get("status") or {}).get("conditions") or []
    )


@pytest.mark.parametrize("file", sorted(MANIFESTS))
def test_a_kubeflow_manifest_runs_to_succeeded(node: Node, node_namespace: str, file: str) -> None:
    manifest = yaml.safe_load((DATA / file).read_text())
    name = manifest["metadata"]["name"]
    node.apply(node_namespace, runnable_here(manifest, node.example_image))

    job = wait_until(
        f"PyTorchJob {name} finished",
        lambda: j if finished(j := pytorchjob(node, node_namespace, name)) else None,
    )

    master = f"{name}-master-0"
    logs = node.logs(node_namespace, master)
    conditions = [(c["type"], c["status"]) for c in job["status"]["conditions"]]
    assert conditions[-1] == ("Succeeded", "True"), (conditions, logs[-3000:])
    assert ("Created", "True") in conditions and ("Running", "False") in conditions
    workers = MANIFESTS[file]
    assert f"training on {1 + workers} process(es)" in logs, logs[-3000:]
    statuses = job["status"]["replicaStatuses"]
    assert statuses["Master"]["succeeded"] == 1
    assert statuses["Worker"]["selector"] == (
        f"training.kubeflow.org/job-name={name},"
        "training.kubeflow.org/operator-name=pytorchjob-controller,"
        "training.kubeflow.org/replica-type=worker"
    )
    assert job["status"]["completionTime"] >= job["status"]["startTime"]
    # The guide's way to find the master's pod, and `kubectl get pytorchjobs` showing its state.
    selector = (
        f"training.kubeflow.org/job-name={name},training.kubeflow.org/replica-type=master,"
        "training.kubeflow.org/replica-index=0"
    )
    pods = node.objects("pods", node_namespace, selector)
    assert [p["metadata"]["name"] for p in pods] == [master]
    table = node.kubectl("get", "pytorchjobs", "-n", node_namespace).stdout
    assert re.search(rf"^{name}\s+Succeeded\s", table, re.MULTILINE), table
    env = {e["name"]: e.get("value") for e in pods[0]["spec"]["containers"][0]["env"]}
    assert env["MASTER_ADDR"] == master and env["WORLD_SIZE"] == str(1 + workers)
    assert job["status"]["torchjob"].get("backoffCount", 0) == 0
