"""Records the pods of one job as a real kube-apiserver returns them, after each step a kubelet
would take, into pod_events.json beside this file: the job, then `{"type", "object"}` events,
every object as `kubectl get -o json --show-managed-fields` shows it. tests/unit/
test_slim_cache.py replays them. There is no node: the steps are status patches.

    .venv/bin/python tests/data/recorded/record_pod_events.py
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

TESTS_DIR = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(TESTS_DIR))

from support import ControlPlane  # noqa: E402
from support.jobs import JobBuilder  # noqa: E402
from support.operator import install_crds  # noqa: E402

from torchjob.api import constants, types  # noqa: E402
from torchjob.render.replica_objects import render_pod  # noqa: E402
from torchjob.render.topology import replicas_of  # noqa: E402

OUT = Path(__file__).with_name("pod_events.json")
NAMESPACE = "recorded"
STARTED = "2026-01-01T12:00:00Z"
ENDED = "2026-01-01T12:05:00Z"
TRAINER = {
    "name": "python",
    "image": "pytorch/pytorch:2.4.0-cuda12.1-cudnn9-runtime",
    "command": ["torchrun", "train.py"],
    "env": [{"name": "EPOCHS", "value": "10"}],
    "resources": {"limits": {"cpu": "2", "memory": "4Gi"}},
}
SIDECAR = {"name": "log-shipper", "image": "busybox", "command": ["sleep", "infinity"]}


def job_manifest() -> dict[str, Any]:
    """A master and two workers; the workers' pods have a sidecar before the training
    container, so the training container is found by its name."""
    job = JobBuilder("recorded", NAMESPACE)
    job.replicas("master", 1, container=TRAINER, restartPolicy="OnFailure")
    job.replicas("worker", 2, container=TRAINER, restartPolicy="OnFailure")
    job.pod_spec("worker", containers=[SIDECAR, TRAINER])
    return job.run_policy(backoffLimit=3).build()


def running(name: str) -> dict[str, Any]:
    return {
        "name": name,
        "ready": True,
        "restartCount": 0,
        "image": "i",
        "imageID": "",
        "state": {"running": {"startedAt": STARTED}},
    }


def terminated(name: str, code: int, reason: str, message: str | None = None) -> dict[str, Any]:
    ended: dict[str, Any] = {
        "exitCode": code,
        "reason": reason,
        "startedAt": STARTED,
        "finishedAt": ENDED,
    }
    if message:
        ended["message"] = message
    return {
        "name": name,
        "ready": False,
        "restartCount": 1,
        "image": "i",
        "imageID": "",
        "lastState": {"terminated": {**ended, "exitCode": 1, "reason": "Error"}},
        "state": {"terminated": ended},
    }


def steps(master: str, worker0: str, worker1: str) -> list[tuple[str, dict[str, Any]]]:
    """(pod, status) patches in order, as a kubelet would send them."""
    conditions = [
        {"type": kind, "status": "True", "lastTransitionTime": STARTED}
        for kind in ("PodScheduled", "Initialized", "ContainersReady", "Ready")
    ]
    waiting = {
        "name": "python",
        "ready": False,
        "restartCount": 0,
        "image": "i",
        "imageID": "",
        "state": {"waiting": {"reason": "ContainerCreating"}},
    }
    return [
        (master, {"phase": "Pending", "startTime": STARTED, "containerStatuses": [waiting]}),
        (
            master,
            {
                "phase": "Running",
                "conditions": conditions,
                "containerStatuses": [running("python")],
            },
        ),
        (
            worker0,
            {
                "phase": "Running",
                "startTime": STARTED,
                "podIP": "10.1.0.2",
                "containerStatuses": [running("log-shipper"), running("python")],
            },
        ),
        (
            worker1,
            {
                "phase": "Running",
                "startTime": STARTED,
                "containerStatuses": [running("log-shipper"), running("python")],
            },
        ),
        (
            worker1,
            {
                "phase": "Failed",
                "containerStatuses": [
                    running("log-shipper"),
                    terminated("python", 137, "OOMKilled"),
                ],
            },
        ),
        (
            worker0,
            {
                "phase": "Failed",
                "reason": "Evicted",
                "message": "The node was low on resource: memory. Threshold quantity: 100Mi.",
                "containerStatuses": [
                    terminated("log-shipper", 137, "ContainerStatusUnknown"),
                    terminated("python", 137, "ContainerStatusUnknown"),
                ],
            },
        ),
        (
            master,
            {
                "phase": "Failed",
                "containerStatuses": [
                    terminated(
                        "python",
                        128,
                        "ContainerCannotRun",
                        'exec: "pythonn": executable file not found in $PATH',
                    )
                ],
            },
        ),
        (
            master,
            {
                "phase": "Succeeded",
                "containerStatuses": [terminated("python", 0, "Completed")],
            },
        ),
    ]


class Recorder:
    def __init__(self, plane: ControlPlane) -> None:
        self.plane = plane
        self.events: list[dict[str, Any]] = []

    def kubectl_json(self, *args: str, input: str | None = None) -> dict[str, Any]:
        result = self.plane.kubectl(
            *args, "-n", NAMESPACE, "-o", "json", "--show-managed-fields", input=input
        )
        return dict(json.loads(result.stdout))

    def record(self, kind: str, pod: dict[str, Any]) -> None:
        self.events.append({"type": kind, "object": pod})

    def get(self, name: str) -> dict[str, Any]:
        return self.kubectl_json("get", "pod", name)

    def patch_status(self, name: str, status: dict[str, Any]) -> None:
        self.plane.kubectl(
            "patch", "pod", name, "-n", NAMESPACE, "--subresource=status", "--type=merge",
            "-p", json.dumps({"status": status}),
        )  # fmt: skip
        self.record("MODIFIED", self.get(name))


def main() -> None:
    with ControlPlane() as plane:
        install_crds(plane)
        plane.kubectl("create", "namespace", NAMESPACE)
        recorder = Recorder(plane)
        job = recorder.kubectl_json("create", "-f", "-", input=json.dumps(job_manifest()))
        spec = types.PyTorchTrainingJobSpec.from_dict(job["spec"], "spec")
        names = []
        for replica in replicas_of(spec):
            annotations = {constants.ANNOTATION_BACKOFF_COUNT: "0"}
            pod = render_pod(job["metadata"], spec, replica, annotations)
            created = recorder.kubectl_json("create", "-f", "-", input=json.dumps(pod))
            recorder.record("ADDED", created)
            names.append(created["metadata"]["name"])
        master, worker0, worker1 = names
        for name, status in steps(master, worker0, worker1):
            recorder.patch_status(name, status)
        # A deletion the pod's finalizer holds shows deletionTimestamp; then the pod is gone.
        finalizer = json.dumps({"metadata": {"finalizers": ["recorded.test/hold"]}})
        plane.kubectl("patch", "pod", worker1, "-n", NAMESPACE, "--type=merge", "-p", finalizer)
        recorder.record("MODIFIED", recorder.get(worker1))
        plane.kubectl("delete", "pod", worker1, "-n", NAMESPACE, "--wait=false")
        deleting = recorder.get(worker1)
        recorder.record("MODIFIED", deleting)
        release = json.dumps({"metadata": {"finalizers": None}})
        plane.kubectl("patch", "pod", worker1, "-n", NAMESPACE, "--type=merge", "-p", release)
        recorder.record("DELETED", deleting)
    OUT.write_text(json.dumps({"job": job, "events": recorder.events}, indent=1) + "\n")
    print(f"{len(recorder.events)} events written to {OUT}")


if __name__ == "__main__":
    main()
