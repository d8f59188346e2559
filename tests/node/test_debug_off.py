"""Debug mode switched off with real containers: the debug pods are replaced by pods running the
training command, and while those are still starting the job does not claim to be running."""

from __future__ import annotations

import json
import time
from typing import Any

from support.node import Node, running, training_job, wait_until

from torchjob.api import constants

# Long enough that the replacement pods are seen starting; the test does not depend on how long.
SLOW_INIT = ["python", "-c", "import time; time.sleep(15)"]
TRAIN = ["-c", "print('trained')"]
SETTLE_TIMEOUT = 600.0


def debug_job(name: str, image: str) -> dict[str, Any]:
    manifest = training_job(name, image, TRAIN, replicas=2)
    replica = manifest["spec"]["replicaSpecs"][0]
    container = replica["template"]["spec"]["containers"][0]
    replica["template"]["spec"]["initContainers"] = [
        {
            "name": "prepare",
            "image": image,
            "command": SLOW_INIT,
            "resources": container["resources"],
        }
    ]
    manifest["spec"]["runMode"] = {
        "debug": {"enabled": True, "replicaSpecs": [{"type": "worker", "skipInitContainer": True}]}
    }
    return manifest


def current_pods(pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The pods made for the job as it is now (out of debug mode), not those being removed."""
    return [
        pod
        for pod in pods
        if constants.ANNOTATION_DEBUG not in (pod["metadata"].get("annotations") or {})
        and not pod["metadata"].get("deletionTimestamp")
    ]


def claims_running(job: dict[str, Any]) -> bool:
    status = job.get("status") or {}
    current = status.get("observedGeneration") == job["metadata"]["generation"]
    running_condition = any(
        c["type"] == "Running" and c["status"] == "True" for c in status.get("conditions") or []
    )
    return current and (status.get("phase") == "Running" or running_condition)


def test_a_job_leaving_debug_mode_is_not_running_until_its_new_pods_run(
    node: Node, node_namespace: str
) -> None:
    node.apply(node_namespace, debug_job("leaves-debug", node.base_image))
    wait_until(
        "both debug pods running",
        lambda: (
            all(running(pod, "python") for pod in node.job_pods(node_namespace, "leaves-debug"))
            and len(node.job_pods(node_namespace, "leaves-debug")) == 2
        ),
    )
    node.wait_for_phase(node_namespace, "leaves-debug", ["Running"])

    patch = {"spec": {"runMode": {"debug": {"enabled": False}}}}
    node.kubectl(
        "patch",
        "ptj",
        "leaves-debug",
        "-n",
        node_namespace,
        "--type=merge",
        "-p",
        json.dumps(patch),
    )

    seen_starting = False
    until = time.monotonic() + SETTLE_TIMEOUT
    while True:
        job = node.job(node_namespace, "leaves-debug")
        # Read after the job: a pod the job's status saw running can only be running or done.
        pods = current_pods(node.job_pods(node_namespace, "leaves-debug"))
        phases = sorted(pod.get("status", {}).get("phase", "") for pod in pods)
        if phases and "Pending" in phases:
            seen_starting = True
            assert not claims_running(job), (
                f"the job claims to run while its pods are {phases}: {job['status']}"
            )
        if job.get("status", {}).get("phase") in ("Succeeded", "Failed"):
            break
        assert time.monotonic() < until, f"the job did not end: {job.get('status')}"
        time.sleep(0.5)

    assert seen_starting, "the replacement pods were never seen starting"
    assert job["status"]["phase"] == "Succeeded", job["status"]
    assert all(pod["spec"]["initContainers"] for pod in pods), "the real pods run their init"
    debug = next(c for c in job["status"]["conditions"] if c["type"] == "Debug")
    assert (debug["status"], debug["reason"]) == ("False", constants.REASON_DEBUG_DISABLED)
    reasons = {event.get("reason") for event in node.events(node_namespace, "leaves-debug")}
    assert constants.REASON_DEBUG_DISABLED in reasons, reasons
