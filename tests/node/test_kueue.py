"""Real Kueue (v0.17, `make kueue-build`, tests/support/kueue.py) on the real node, beside the
chart's webhook and reconciler: two tenants' LocalQueues on one ClusterQueue whose CPU quota fits
one of two jobs. The example trains in the first tenant's queue at low priority; the second
tenant's job of high priority preempts it. The example waits in its queue (its place shown),
uncharged, and once the other job is done it is admitted again, resumes from the checkpoint it
wrote to its volume and succeeds. A thread samples the ClusterQueue and the example's pods
together, so that the quota is seen to pass to the other job only after the example's pods have
stopped.

Everything Kueue does here is done by Kueue, everything else by kube-scheduler and the kubelet."""

from __future__ import annotations

import contextlib
import functools
import secrets
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from support.controlplane import KubectlError
from support.example import (
    accuracy_logged,
    epochs_logged,
    epochs_resumed_from,
    example_container,
    example_job,
)
from support.jobs import JobBuilder
from support.kueue import (
    MANAGED_LABEL,
    KueueManager,
    QuotaSample,
    cluster_queue,
    condition_status,
    quota_sample,
)
from support.kueue_jobs import release_leftovers
from support.node import (
    Node,
    all_logs,
    host_path_claim,
    ok,
    release_claims,
    torchjob,
    wait_until,
)

from torchjob.api import constants
from torchjob.render.scheduling import KUEUE_PRIORITY_LABEL, KUEUE_QUEUE_LABEL

QUEUE = "training"  # each tenant's LocalQueue
EXAMPLE = "mnist-ddp"
PREEMPTOR = "preemptor"
EPOCHS = 30
CLAIM = "runs"
# Each job is two replicas of half a CPU (the example's requests) and 50m more each for the pod's
# restart agent (render/in_place.py: a sidecar's requests add to the pod's): the quota fits one
# job. Its memory is covered too (the pods ask for some), never the bound.
QUOTA_CPU, JOB_CPU, QUOTA_MEMORY = "1100m", 1.1, "16Gi"
# The preemptor runs until the test writes this file on its claim.
STOP_FILE = "/stop/now"
Manifest = dict[str, Any]


@pytest.fixture(scope="module")
def kueue(node: Node) -> Iterator[KueueManager]:
    manager = KueueManager(node).start()
    yield manager
    manager.close()


@pytest.fixture
def tenants(node: Node, kueue: KueueManager) -> Iterator[tuple[str, str]]:
    """Two namespaces that Kueue manages (the chart's webhook admits in every namespace)."""
    names = tuple(f"kueue-{tenant}-{secrets.token_hex(3)}" for tenant in ("a", "b"))
    for name in names:
        node.kubectl("create", "namespace", name)
        node.kubectl("label", "namespace", name, f"{MANAGED_LABEL}=on")
        wait_until(
            f"the default ServiceAccount of {name}",
            functools.partial(node.get, "serviceaccount", "default", name),
        )
    yield names[0], names[1]
    for name in names:
        release_leftovers(node, name)
        release_claims(node, name)


def queued(job: Manifest, priority: str) -> Manifest:
    """`job` in the LocalQueue QUEUE, its pods of the WorkloadPriorityClass `priority`."""
    job["metadata"].setdefault("labels", {})[KUEUE_QUEUE_LABEL] = QUEUE
    for replica in job["spec"]["replicaSpecs"]:
        replica["template"].setdefault("metadata", {})["labels"] = {KUEUE_PRIORITY_LABEL: priority}
    return job


def preemptible_example(priority: str) -> Manifest:
    """The example, its checkpoints and logs on the claim CLAIM, which outlives its pods."""
    job = queued(example_job(EPOCHS), priority)
    example_container(job)["volumeMounts"] = [{"name": "runs", "mountPath": "/workspace/runs"}]
    pod_spec = job["spec"]["replicaSpecs"][0]["template"]["spec"]
    pod_spec["volumes"] = [{"name": "runs", "persistentVolumeClaim": {"claimName": CLAIM}}]
    return job


def preemptor(image: str, priority: str) -> Manifest:
    """Two replicas of the example's size that run until the file STOP_FILE exists on the claim
    CLAIM, which the test writes once it has read where the preempted example waits."""
    wait = f"import os, time\nwhile not os.path.exists({STOP_FILE!r}): time.sleep(1)\n"
    container = {
        "name": "python",
        "image": image,
        "command": ["python", "-c", wait],
        "resources": {"requests": {"cpu": "500m", "memory": "256Mi"}},
        "volumeMounts": [{"name": "stop", "mountPath": str(Path(STOP_FILE).parent)}],
    }
    job = (
        JobBuilder(PREEMPTOR)
        .replicas("worker", 2, container=container)
        .pod_spec(volumes=[{"name": "stop", "persistentVolumeClaim": {"claimName": CLAIM}}])
        .build()
    )
    return queued(job, priority)


@dataclass(frozen=True)
class Sample:
    quota: QuotaSample
    preempted_running: int  # the example's first pods not yet stopped
    preemptor_reserved: bool  # the preemptor's Workload holds quota


@dataclass
class QueueWatch:
    """Samples, every second, the preemptor's Workloads, the ClusterQueue and the example's
    first pods, read in that order: a first pod only ever stops, so one seen running in a
    sample was running when the sample's other reads were made."""

    node: Node
    queue: str
    tenants: tuple[str, str]
    first_pods: set[str] = field(default_factory=set)
    samples: list[Sample] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)
    error: BaseException | None = None

    def poll(self) -> None:
        while not self.stop.wait(1.0):
            try:
                self.samples.append(self.sample())
            except (KubectlError, subprocess.TimeoutExpired):  # a slow apiserver: next time
                continue
            except Exception as error:  # said by every later read of the samples
                self.error = error
                return

    def sample(self) -> Sample:
        low, high = self.tenants
        workloads = self.node.objects("workloads.kueue.x-k8s.io", high)
        reserved = any(condition_status(w, "QuotaReserved") == "True" for w in workloads)
        status = (self.node.get("clusterqueue", self.queue) or {}).get("status") or {}
        running = [
            pod
            for pod in self.node.objects("pods", low)
            if pod["metadata"]["uid"] in self.first_pods
            and (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
        ]
        return Sample(quota_sample(status), len(running), reserved)

    def taken(self) -> list[Sample]:
        """The samples so far; raises what stopped the sampling, if anything did."""
        if self.error is not None:
            raise AssertionError("sampling the ClusterQueue failed") from self.error
        return list(self.samples)

    @classmethod
    @contextlib.contextmanager
    def started(cls, node: Node, queue: str, tenants: tuple[str, str]) -> Iterator[QueueWatch]:
        watch = cls(node, queue, tenants)
        thread = threading.Thread(target=watch.poll, daemon=True)
        thread.start()
        try:
            yield watch
        finally:
            watch.stop.set()
            thread.join()


def waiting_for_admission(job: Manifest) -> bool:
    conditions = (job.get("status") or {}).get("conditions") or ()
    return any(
        c["type"] == "Scheduled" and c.get("reason") == constants.REASON_WAITING_FOR_ADMISSION
        for c in conditions
    )


def assert_waits_its_turn(node: Node, namespace: str, preemptor_ns: str) -> None:
    """The preempted example says it waits in its queue, where, and who preempted it; it is
    not charged."""
    job = node.job_when(namespace, EXAMPLE, "waiting for admission", waiting_for_admission)
    assert job["status"].get("backoffCount", 0) == 0
    scheduled = next(c for c in job["status"]["conditions"] if c["type"] == "Scheduled")
    assert scheduled["status"] == "False" and f"queue {QUEUE}" in scheduled["message"]
    workload = node.get("workloads.kueue.x-k8s.io", PREEMPTOR, preemptor_ns)
    assert workload is not None
    said = " ".join(
        e.get("message") or e.get("note") or ""
        for e in node.events(namespace, EXAMPLE)
        if e.get("reason") == constants.REASON_PREEMPTED
    )
    assert "Preempted to accommodate a workload" in said, said
    assert workload["metadata"]["uid"] in said, said  # the preemptor, named as Kueue names it
    expected = f"{QUEUE}, 1st of 1 waiting in it (1st in its ClusterQueue)"
    shown = ok(torchjob(node, namespace, "get", EXAMPLE))
    assert f"Queue:       {expected}\n" in shown, shown


def assert_quota_passed_only_once_stopped(samples: list[Sample]) -> None:
    """While any of the example's first pods still ran, the ClusterQueue held its quota for the
    example alone; it never held more than its quota."""
    assert any(s.preempted_running for s in samples), "no sample saw the first pods run"
    assert any(s.preemptor_reserved for s in samples), "no sample saw the preemptor admitted"
    for sample in samples:
        assert sample.quota.reserved_cpu <= JOB_CPU, sample
        if sample.preempted_running:
            assert not sample.preemptor_reserved, sample
            assert sample.quota.reserved_cpu == JOB_CPU, sample


def test_kueue_preempts_the_example_which_waits_its_turn_and_resumes_from_its_checkpoint(
    node: Node, tenants: tuple[str, str]
) -> None:
    low, high = tenants
    host_path_claim(node, low, CLAIM)
    stop = host_path_claim(node, high, CLAIM) / Path(STOP_FILE).name
    tenant_queues = dict.fromkeys(tenants, QUEUE)
    with (
        cluster_queue(node, low, QUOTA_CPU, tenant_queues, QUOTA_MEMORY) as queue,
        QueueWatch.started(node, queue, tenants) as watch,
    ):
        node.apply(low, preemptible_example(f"{low}-low"))
        wait_until(
            "an epoch past the second logged",
            lambda: max(epochs_logged(all_logs(node, low, EXAMPLE)), default=0) > 2,
        )
        watch.first_pods = {pod["metadata"]["uid"] for pod in node.job_pods(low, EXAMPLE)}
        wait_until(
            "a sample of the first pods running",
            lambda: any(s.preempted_running for s in watch.taken()),
        )
        node.apply(high, preemptor(node.example_image, f"{low}-high"))
        node.wait_for_phase(high, PREEMPTOR, ["Running"])
        assert_waits_its_turn(node, low, high)
        stop.touch()
        done = node.wait_for_phase(high, PREEMPTOR, ["Succeeded", "Failed"])
        assert done["status"]["phase"] == "Succeeded"
        job = node.wait_for_phase(low, EXAMPLE, ["Succeeded", "Failed"])
        wait_until(
            "the ClusterQueue holding no quota",
            lambda: (taken := watch.taken()) and taken[-1].quota.reserved_cpu == 0,
        )

    logs = all_logs(node, low, EXAMPLE)
    assert job["status"]["phase"] == "Succeeded", logs[-4000:]
    assert job["status"].get("backoffCount", 0) == 0
    assert not watch.first_pods & {p["metadata"]["uid"] for p in node.job_pods(low, EXAMPLE)}
    resumed = epochs_resumed_from(logs)
    assert resumed and min(resumed) > 2, logs[-4000:]
    # Its last epoch trained or, had it trained them all before it was stopped, checkpointed.
    assert max([*epochs_logged(logs), *resumed]) == EPOCHS
    assert accuracy_logged(logs) >= 0.95
    assert_quota_passed_only_once_stopped(watch.taken())
