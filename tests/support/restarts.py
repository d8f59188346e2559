"""A plain gloo job on the real node that loses a worker's container, and how long until every
rank trains again: shared by tests/node/test_in_place.py and tests/bench/in_place.py."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from support.jobs import JobBuilder
from support.node import Node, container_id, running, small_resources, wait_until
from torchjob.api import constants

GLOO_STEPS = (Path(__file__).parents[1] / "node" / "scripts" / "gloo_steps.py").read_text()
POLL = 0.2  # seconds between looks while timing a restart

Manifest = dict[str, Any]


def gloo_job(
    image: str, name: str, steps: int, *, in_place: bool = True, kubeflow: bool = False
) -> Manifest:
    """A master and two workers doing `steps` gloo all_reduces a second apart (no torchrun: a
    gang restart), restarted at once (delay 0), in place unless told not to; a Kubeflow
    PyTorchJob with `kubeflow`, else a PyTorchTrainingJob (under one headless Service)."""
    container = {
        "name": training_container(kubeflow),
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        "command": ["python"],
        "args": ["-c", GLOO_STEPS, str(steps), "1"],
        "resources": small_resources({"cpu": "500m", "memory": "1Gi"}),
    }
    annotations = {
        constants.ANNOTATION_RESTART_BACKOFF: "0",
        constants.ANNOTATION_RESTART_IN_PLACE: "true" if in_place else "false",
    }
    if kubeflow:
        return pytorchjob(name, container, annotations)
    annotations[constants.ANNOTATION_SERVICE_SCOPE] = constants.SERVICE_SCOPE_JOB
    return (
        JobBuilder(name)
        .metadata(annotations=annotations)
        .replicas("master", 1, container=container, restartPolicy="OnFailure")
        .replicas("worker", 2, container=container, restartPolicy="OnFailure")
        .run_policy(backoffLimit=4, activeDeadlineSeconds=1800)
        .build()
    )


def pytorchjob(name: str, container: Manifest, annotations: dict[str, str]) -> Manifest:
    def replicas(count: int) -> Manifest:
        template = {"spec": {"containers": [container]}}
        return {"replicas": count, "restartPolicy": "OnFailure", "template": template}

    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": name, "annotations": annotations},
        "spec": {
            "runPolicy": {"backoffLimit": 4, "activeDeadlineSeconds": 1800},
            "pytorchReplicaSpecs": {"Master": replicas(1), "Worker": replicas(2)},
        },
    }


def training_container(kubeflow: bool) -> str:
    return "pytorch" if kubeflow else "python"


def pods_by_name(node: Node, namespace: str, job: str) -> dict[str, Manifest]:
    return {p["metadata"]["name"]: p for p in node.job_pods(namespace, job)}


def training_since(pod: Manifest, container: str) -> datetime | None:
    """When the pod's running `container` started (the kubelet's second)."""
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        started = ((status.get("state") or {}).get("running") or {}).get("startedAt")
        if status["name"] == container and started:
            return datetime.fromisoformat(started.replace("Z", "+00:00"))
    return None


def wait_stepping(
    node: Node, namespace: str, job: str, container: str, replicas: int, step: int
) -> None:
    """Every replica's log shows `step`."""

    def stepping() -> bool:
        pods = pods_by_name(node, namespace, job)
        return len(pods) == replicas and all(
            f"step {step}\n" in logs(node, namespace, name, container) for name in pods
        )

    wait_until(f"every replica of {job} at step {step}", stepping)


def logs(node: Node, namespace: str, pod: str, container: str) -> str:
    """The container's log; "" while it has not started."""
    return node.kubectl("logs", "-n", namespace, pod, "-c", container, check=False).stdout


def kill_training(node: Node, namespace: str, pod_name: str, container: str) -> float:
    """SIGKILL the pod's training `container` from the host, as the OOM killer or a crash would
    (exit code 137); the wall-clock time just before."""
    pod = node.pod_when(namespace, pod_name, "training", lambda pod: running(pod, container))
    killed_at = time.time()
    node.ctr("tasks", "kill", "--signal", "SIGKILL", container_id(pod, container))
    return killed_at


def seconds_to_train_again(
    node: Node, namespace: str, job: str, container: str, replicas: int, killed_at: float
) -> float:
    """From `killed_at` until, in one look, every replica's training container started after the
    kill and did a first step (`step 1` in its log); looked at every POLL seconds."""
    since = datetime.fromtimestamp(int(killed_at), UTC)  # the kubelet writes whole seconds

    def all_stepping() -> bool:
        pods = pods_by_name(node, namespace, job)
        fresh = [
            n
            for n, p in pods.items()
            if (started := training_since(p, container)) and started >= since
        ]
        if len(pods) != replicas or len(fresh) != replicas:
            return False
        logs = first_steps(node, namespace, job, container)
        return all(name in logs for name in fresh)

    wait_until(f"every replica of {job} training again", all_stepping, interval=POLL)
    return time.time() - killed_at


def first_steps(node: Node, namespace: str, job: str, container: str) -> set[str]:
    """The pods whose running training container's log shows `step 1` (one kubectl call)."""
    selector = f"{constants.LABEL_JOB_NAME}={job}"
    result = node.kubectl(
        "logs",
        "-n",
        namespace,
        "-l",
        selector,
        "-c",
        container,
        "--prefix",
        "--tail=-1",
        check=False,
    )
    return {
        line.split("/")[1]
        for line in result.stdout.splitlines()
        if line.startswith("[pod/") and line.endswith("] step 1")
    }
