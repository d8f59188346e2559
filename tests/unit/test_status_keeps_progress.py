"""status.trainerStatus belongs to the progress endpoint, never to the reconciler: a status write
after a replica's restart, a pod's change or the job's end leaves it as it was, for a
PyTorchTrainingJob and for a Kubeflow PyTorchJob alike (status writes are JSON merge patches, so
a key the reconciler does not send is kept), and a report alone calls for no status write."""

from __future__ import annotations

import copy
from dataclasses import replace
from datetime import timedelta
from typing import Any, cast

import pytest
from support.planning import META, NOW, replica_pod, services, settle, spec

from torchjob.api.jsoncopy import merge_patched
from torchjob.api.kubeflow import KUBEFLOW_STATUS, STATUS_RECORD, as_run
from torchjob.api.types import PyTorchTrainingJobSpec
from torchjob.kube.client import KubeClient
from torchjob.kube.events import EventRecorder
from torchjob.kube.expectations import Expectations
from torchjob.kube.reconcile import JobKey
from torchjob.lifecycle.observe import ContainerView, PodView
from torchjob.lifecycle.plan import Plan, plan
from torchjob.lifecycle.round import Observed
from torchjob.lifecycle.status import ours
from torchjob.reconciler.executor import ReconcilerExecutor
from torchjob.render.scheduling import SchedulingSettings

PROGRESS = {
    "progressPercentage": 45,
    "estimatedRemainingSeconds": 120,
    "metrics": [{"name": "loss", "value": "0.25"}],
    "lastUpdatedTime": "2026-01-01T11:59:58Z",
}
LATER = NOW + timedelta(seconds=30)


class RecordingClient:
    """The apiserver as the executor reaches it: every request kept, every answer empty."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, str, Any]] = []

    async def request(
        self,
        method: str,
        path: str,
        *,
        query: Any = None,
        body: Any = None,
        content_type: str = "application/json",
        time_limits: Any = None,
    ) -> bytes:
        self.requests.append((method, path, copy.deepcopy(body)))
        return b"{}"

    def status_patches(self) -> list[dict[str, Any]]:
        return [
            body["status"]
            for method, path, body in self.requests
            if method == "PATCH" and path.endswith("/status")
        ]


def executor(client: RecordingClient) -> ReconcilerExecutor:
    api = cast(KubeClient, client)
    return ReconcilerExecutor(
        api, EventRecorder(api, "torchjob-reconciler", "test"), Expectations(), SchedulingSettings()
    )


def running(kind: str, index: int) -> PodView:
    running = (ContainerView("python", "running"),)
    return replica_pod(kind, index, containers=running, training_container="python")


def ended(kind: str, index: int, code: int) -> PodView:
    return replace(
        running(kind, index),
        phase="Succeeded" if code == 0 else "Failed",
        exit_code=code,
        containers=(ContainerView("python", "terminated", code, "Error" if code else "Completed"),),
        finished_at=NOW,
        ran_seconds=5.0,
    )


def pending(kind: str, index: int) -> PodView:
    return replace(running(kind, index), phase="Pending", containers=())


ALL_RUNNING = [running("master", 0), running("worker", 0), running("worker", 1)]
# What the reconciler sees next, each a reason to write the status again.
ROUNDS = {
    "a worker failed and is restarted": [
        running("master", 0),
        ended("worker", 0, 1),
        running("worker", 1),
    ],
    "a worker's pod was deleted": [running("master", 0), running("worker", 1)],
    "a worker is pending again": [running("master", 0), pending("worker", 0), running("worker", 1)],
    "the master succeeded": [ended("master", 0, 0), running("worker", 0), running("worker", 1)],
}


def decide(job: dict[str, Any], pods: list[PodView]) -> Plan:
    """The reconciler's plan for the job as it is stored (a PyTorchJob as the job it runs)."""
    run = as_run(job)
    assert run is not None
    job_spec = PyTorchTrainingJobSpec.from_dict(run["spec"], "spec")
    meta = run["metadata"]
    return plan(
        Observed.of_json(meta, job_spec, run.get("status"), pods, services(job_spec), LATER)
    )


async def write(job: dict[str, Any], decision: Plan) -> dict[str, Any] | None:
    """What the executor sends as the job's status for `decision`; None when it sends nothing."""
    client = RecordingClient()
    run = as_run(job)
    assert run is not None
    await executor(client).write_planned_status(JobKey.of(job), run, decision)
    patches = client.status_patches()
    assert len(patches) <= 1
    return patches[0] if patches else None


def training_job() -> dict[str, Any]:
    """A PyTorchTrainingJob (a master, two workers) running, with a progress report."""
    job_spec = spec("OnFailure")
    manifest: dict[str, Any] = {
        "apiVersion": "batch.tensorstack.dev/v1beta1",
        "kind": "PyTorchTrainingJob",
        "metadata": dict(META),
        "spec": job_spec.to_dict(),
        "status": {**settle(job_spec, ALL_RUNNING), "trainerStatus": copy.deepcopy(PROGRESS)},
    }
    return manifest


async def kubeflow_job() -> dict[str, Any]:
    """A Kubeflow PyTorchJob (a Master, two Workers) running, with a progress report."""
    replica = {
        "restartPolicy": "OnFailure",
        "template": {"spec": {"containers": [{"name": "python", "image": "i"}]}},
    }
    job: dict[str, Any] = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": dict(META),
        "spec": {
            "pytorchReplicaSpecs": {
                "Master": {"replicas": 1, **replica},
                "Worker": {"replicas": 2, **replica},
            }
        },
    }
    first = await write(job, decide(job, ALL_RUNNING))
    assert first is not None
    job["status"] = {**merge_patched({}, first), "trainerStatus": copy.deepcopy(PROGRESS)}
    return job


def test_the_reconcilers_part_of_the_status_leaves_the_progress_out() -> None:
    status = {"phase": "Running", "tensorboard": {"ready": True}, "trainerStatus": PROGRESS}
    assert ours(status) == {"phase": "Running"}


@pytest.mark.parametrize("what", ROUNDS)
async def test_a_training_jobs_status_write_keeps_its_progress(what: str) -> None:
    job = training_job()
    decision = decide(job, ROUNDS[what])
    sent = await write(job, decision)
    assert sent is not None, f"{what}: the status did not change"
    assert "trainerStatus" not in sent
    assert merge_patched(job["status"], sent)["trainerStatus"] == PROGRESS


@pytest.mark.parametrize("what", ROUNDS)
async def test_a_kubeflow_jobs_status_write_keeps_its_progress(what: str) -> None:
    job = await kubeflow_job()
    decision = decide(job, ROUNDS[what])
    sent = await write(job, decision)
    assert sent is not None, f"{what}: the status did not change"
    assert "trainerStatus" not in sent
    assert "trainerStatus" not in sent[STATUS_RECORD]
    assert merge_patched(job["status"], sent)["trainerStatus"] == PROGRESS


async def test_a_report_alone_calls_for_no_status_write() -> None:
    """A job whose only news is its progress shows the reconciler's status already: nothing to
    write (else every report would bring a status write of the reconciler's too)."""
    for job in (training_job(), await kubeflow_job()):
        decision = decide(job, ALL_RUNNING)
        assert await write(job, decision) is None, job["kind"]


def test_the_kubeflow_job_runs_on_its_record_and_its_progress() -> None:
    """The lifecycle reads a PyTorchJob's last report (the progress deadline) where it reads a
    PyTorchTrainingJob's, beside the record; its status writes never carry it (above)."""
    job = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": dict(META)}
    job["status"] = {STATUS_RECORD: {"phase": "Running"}, "trainerStatus": PROGRESS}
    run = as_run(job)
    assert run is not None
    assert run["status"] == {"phase": "Running", "trainerStatus": PROGRESS}
    assert ours(run["status"]) == {"phase": "Running"}
    assert run[KUBEFLOW_STATUS]["trainerStatus"] == PROGRESS
