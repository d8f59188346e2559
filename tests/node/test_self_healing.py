"""Self-healing on real pods: a job that loses a replica recovers and still succeeds; a job that
stops reporting progress is restarted, then failed; a job whose pods cannot start says why within
seconds, then fails at its start deadline.

The light jobs (a hang, an image that cannot be pulled, a missing Secret) run in a namespace of
their own from the first test of this file on, beside the heavy ones, and a thread records every
condition they show; their tests, last in the file, judge what was recorded. Verdicts read the
API's own timestamps, never how long the test waited: the only times asserted are the bounds the
feature promises (a start failure said within 30 s of the job's creation, a failure not before
its deadline)."""

from __future__ import annotations

import re
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from support.example import (
    accuracy_logged,
    epochs_logged,
    epochs_resumed_from,
    example_container,
    example_job,
)
from support.jobs import JobBuilder
from support.node import (
    Node,
    all_logs,
    container_id,
    pod_log,
    restarts,
    running,
    small_resources,
    wait_until,
)

SCRIPTS = Path(__file__).parent / "scripts"
GLOO_STEPS = (SCRIPTS / "gloo_steps.py").read_text()
PROGRESS_THEN_HANG = (SCRIPTS / "progress_then_hang.py").read_text()

PROGRESS_DEADLINE = "batch.tensorstack.dev/progress-deadline-seconds"
START_DEADLINE = "batch.tensorstack.dev/start-deadline-seconds"
SERVICE_SCOPE = "batch.tensorstack.dev/service-scope"
START_DEADLINE_SECONDS = 60
# The promise: a start failure shows in a condition and a Warning Event this soon.
START_FAILURE_SAID_WITHIN = 30
MISSING_IMAGE = "localhost/torchjob/does-not-exist:0"
MISSING_SECRET = "does-not-exist"

Manifest = dict[str, Any]


def parse(timestamp: str) -> datetime:
    return datetime.fromisoformat(timestamp.replace("Z", "+00:00"))


def seconds_after_creation(job: Manifest, timestamp: str) -> float:
    return (parse(timestamp) - parse(job["metadata"]["creationTimestamp"])).total_seconds()


def conditions(job: Manifest) -> dict[str, Manifest]:
    return {c["type"]: c for c in (job.get("status") or {}).get("conditions") or []}


def finished(node: Node, namespace: str, name: str) -> Manifest:
    return node.wait_for_phase(namespace, name, ["Succeeded", "Failed"])


def job_events(node: Node, namespace: str, job: str) -> list[Manifest]:
    return node.events(namespace, job)


def event_time(event: Manifest) -> str:
    """When the Event was first recorded (events.k8s.io writes eventTime, core/v1 the others)."""
    return str(
        event.get("eventTime")
        or event.get("firstTimestamp")
        or event["metadata"]["creationTimestamp"]
    )


# -- the light jobs, recorded in the background ------------------------------------------------


@dataclass
class Recorder:
    """Polls the jobs of one namespace and keeps every distinct condition each has shown."""

    node: Node
    namespace: str
    seen: dict[str, list[Manifest]] = field(default_factory=dict)
    jobs: dict[str, Manifest] = field(default_factory=dict)
    stop: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def poll(self) -> None:
        while not self.stop.wait(1.0):
            try:
                jobs = self.node.objects("pytorchtrainingjobs", self.namespace)
            except Exception:  # a slow apiserver; the next poll tries again
                continue
            with self.lock:
                for job in jobs:
                    name = job["metadata"]["name"]
                    self.jobs[name] = job
                    known = self.seen.setdefault(name, [])
                    known += [c for c in conditions(job).values() if c not in known]

    def conditions_seen(self, job: str) -> list[Manifest]:
        with self.lock:
            return list(self.seen.get(job, []))


def hang_job(image: str) -> Manifest:
    """Reports three steps, then hangs; restarted once on no progress, then failed."""
    container = python_container(["-c", PROGRESS_THEN_HANG, "3"], image)
    return (
        JobBuilder("hangs")
        .metadata(annotations={PROGRESS_DEADLINE: "40"})
        .replicas("worker", 1, container=container, restartPolicy="OnFailure")
        .run_policy(backoffLimit=1, activeDeadlineSeconds=1800)
        .build()
    )


def unstartable_job(name: str, image: str, **container_fields: Any) -> Manifest:
    container = {**python_container(["-c", "print('started')"], image), **container_fields}
    return (
        JobBuilder(name)
        .metadata(annotations={START_DEADLINE: str(START_DEADLINE_SECONDS)})
        .replicas("worker", 1, container=container, restartPolicy="OnFailure")
        .run_policy(backoffLimit=3, activeDeadlineSeconds=1800)
        .build()
    )


def python_container(args: list[str], image: str) -> Manifest:
    return {
        "name": "python",
        "image": image,
        "imagePullPolicy": "IfNotPresent",  # no registry is reachable from the node
        "command": ["python"],
        "args": args,
        "resources": small_resources({"cpu": "500m", "memory": "256Mi"}),
    }


@pytest.fixture(scope="module", autouse=True)
def light_jobs(node: Node) -> Iterator[Recorder]:
    namespace = f"self-healing-light-{uuid.uuid4().hex[:6]}"
    node.kubectl("create", "namespace", namespace)
    secret = {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": MISSING_SECRET, "key": "t"}}}
    node.apply(
        namespace,
        hang_job(node.base_image),
        unstartable_job("bad-image", MISSING_IMAGE),
        unstartable_job("no-secret", node.base_image, env=[secret]),
    )
    recorder = Recorder(node, namespace)
    thread = threading.Thread(target=recorder.poll, name="light-jobs", daemon=True)
    thread.start()
    yield recorder
    recorder.stop.set()
    thread.join()
    node.kubectl("delete", "namespace", namespace, "--wait=false")


# -- the example loses a replica -----------------------------------------------------------------


def lose(node: Node, namespace: str, how: str, pod_name: str) -> None:
    if how == "pod-deleted":
        node.kubectl("delete", "pod", pod_name, "-n", namespace, "--wait=false")
        return
    # Killed on the host, as the OOM killer or a crash would: exit code 137.
    pod = node.pod_when(namespace, pod_name, "running", lambda pod: running(pod, "python"))
    node.ctr("tasks", "kill", "--signal", "SIGKILL", container_id(pod, "python"))


@pytest.mark.parametrize("how", ["pod-deleted", "container-killed"])
def test_the_example_survives_a_lost_replica(node: Node, node_namespace: str, how: str) -> None:
    epochs = 30
    job = example_job(epochs)
    container = example_container(job)
    assert container["image"] == node.example_image, "job.yaml names the image make node-up builds"
    node.apply(node_namespace, job)
    wait_until(
        "an epoch past the second logged",
        lambda: max(epochs_logged(all_logs(node, node_namespace, "mnist-ddp")), default=0) > 2,
    )

    before = node.get("pod", "mnist-ddp-worker-1", node_namespace)
    assert before is not None
    lose(node, node_namespace, how, "mnist-ddp-worker-1")
    if how == "container-killed":
        # Restarted in place by its rule (render/in_place.py): the same pod, its container again.
        node.pod_when(
            node_namespace,
            "mnist-ddp-worker-1",
            "its training container restarted in place",
            lambda pod: pod["metadata"]["uid"] == before["metadata"]["uid"] and restarts(pod) > 0,
        )

    job = finished(node, node_namespace, "mnist-ddp")
    logs = all_logs(node, node_namespace, "mnist-ddp")
    assert job["status"]["phase"] == "Succeeded", logs[-4000:]
    assert accuracy_logged(logs) >= 0.95
    # Every rank resumed from the surviving replica's checkpoint, not from the beginning.
    resumed = epochs_resumed_from(logs)
    assert resumed and min(resumed) > 1, logs[-4000:]
    assert max(epochs_logged(logs)) == epochs


# -- a plain gloo job loses a worker -------------------------------------------------------------


def gloo_job(node: Node, steps: int) -> Manifest:
    """Master and two workers, plain python (no torchrun: restarted as a gang by default),
    named under one headless Service for the job: they find each other through the node's
    DNS by their hostnames under it, before the gang restart and after."""
    container = {
        **python_container(["-c", GLOO_STEPS, str(steps), "1"], node.example_image),
        "resources": small_resources({"cpu": "500m", "memory": "1Gi"}),
    }
    return (
        JobBuilder("gloo")
        .metadata(annotations={SERVICE_SCOPE: "Job"})
        .replicas("master", 1, container=container, restartPolicy="OnFailure")
        .replicas("worker", 2, container=container, restartPolicy="OnFailure")
        .run_policy(backoffLimit=4, activeDeadlineSeconds=1800)
        .build()
    )


def test_a_gloo_job_recovers_from_a_lost_worker_by_one_gang_restart(
    node: Node, node_namespace: str
) -> None:
    steps = 40
    node.apply(node_namespace, gloo_job(node, steps))
    worker = "gloo-worker-1"
    wait_until(
        "step 8 in worker-1's log", lambda: "step 8\n" in pod_log(node, node_namespace, worker)
    )

    node.kubectl("delete", "pod", worker, "-n", node_namespace, "--grace-period=0", "--force")

    job = finished(node, node_namespace, "gloo")
    master_log = pod_log(node, node_namespace, "gloo-master-0")
    assert job["status"]["phase"] == "Succeeded", master_log[-3000:]
    # One failure: one gang restart, charged once, however many replicas crashed with it.
    assert job["status"]["gangRestarts"] == 1, job["status"]
    assert job["status"]["backoffCount"] == 1, job["status"]
    assert f"step {steps}\n" in master_log and "done" in master_log
    services = node.kubectl("get", "services", "-n", node_namespace, "-o", "name").stdout.split()
    assert [s for s in services if s.startswith("service/gloo")] == ["service/gloo"]


# -- the light jobs' verdicts ----------------------------------------------------------------------


def test_a_job_that_stops_reporting_progress_is_restarted_then_failed(
    node: Node, light_jobs: Recorder
) -> None:
    namespace = light_jobs.namespace
    job = finished(node, namespace, "hangs")

    assert job["status"]["phase"] == "Failed"
    assert conditions(job)["Failed"]["reason"] == "NoProgress", job["status"]
    assert job["status"]["gangRestarts"] == 1, job["status"]
    reasons = [event.get("reason") for event in job_events(node, namespace, "hangs")]
    assert "NoProgress" in reasons, reasons
    # It had reported before it hung: the deadline counts from its last report.
    assert (job["status"].get("trainerStatus") or {}).get("metrics"), job["status"]


@pytest.mark.parametrize(
    ("name", "reason"),
    [("bad-image", "ImagePullFailed"), ("no-secret", "ContainerConfigInvalid")],
)
def test_a_job_whose_pods_cannot_start_says_why_then_fails(
    node: Node, light_jobs: Recorder, name: str, reason: str
) -> None:
    namespace = light_jobs.namespace
    job = finished(node, namespace, name)

    said = [
        c
        for c in light_jobs.conditions_seen(name)
        if (c["type"], c["status"], c.get("reason")) == ("StartFailure", "True", reason)
    ]
    assert said, light_jobs.conditions_seen(name)
    assert seconds_after_creation(job, said[0]["lastTransitionTime"]) <= START_FAILURE_SAID_WITHIN
    # The kubelet's message, naming what is missing.
    assert "does-not-exist" in said[0]["message"], said[0]
    warnings = [
        event
        for event in job_events(node, namespace, name)
        if event.get("type") == "Warning" and event.get("reason") == reason
    ]
    assert warnings, job_events(node, namespace, name)
    first = min(seconds_after_creation(job, event_time(e)) for e in warnings)
    assert first <= START_FAILURE_SAID_WITHIN, warnings
    assert re.search(r"worker[- ]0", warnings[0].get("message") or ""), warnings[0]

    # At its deadline, not before: failed with the same reason, its pods deleted.
    assert job["status"]["phase"] == "Failed"
    failed = conditions(job)["Failed"]
    assert failed["reason"] == reason, job["status"]
    assert seconds_after_creation(job, failed["lastTransitionTime"]) >= START_DEADLINE_SECONDS - 1
    wait_until("the job's pods deleted", lambda: not node.job_pods(namespace, name), timeout=120)
