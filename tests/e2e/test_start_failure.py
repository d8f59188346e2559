"""Start failures on the real control plane (the test plays the kubelet): a replica whose
container cannot start gives the job a StartFailure condition and a Warning Event naming the
replica and the kubelet's words; at the job's start deadline (its annotation, a few seconds here)
the job fails with the start failure's reason and its pods are deleted."""

from __future__ import annotations

import pytest
from kubernetes_asyncio import client
from support import ControlPlane
from support.cluster import Cluster, Job, condition
from support.eventually import eventually
from support.jobs import JobBuilder, names
from support.metrics import failures_counted
from support.processes import ServiceProcess
from support.tables import printed_rows

from torchjob.api import constants

DEADLINE = 4  # seconds: the job's start-deadline annotation


@pytest.mark.parametrize(
    ("said", "message", "reason"),
    [
        ("ImagePullBackOff", 'Back-off pulling image "nope:1"', "ImagePullFailed"),
        ("CreateContainerConfigError", 'secret "missing" not found', "ContainerConfigInvalid"),
    ],
)
async def test_a_replica_that_cannot_start_is_named_then_fails_the_job_at_its_deadline(
    control_plane: ControlPlane,
    kube_client: client.ApiClient,
    admitted_namespace: str,
    reconciler: ServiceProcess,
    said: str,
    message: str,
    reason: str,
) -> None:
    manifest = (
        JobBuilder.example("basic")
        .metadata(annotations={constants.ANNOTATION_START_DEADLINE: str(DEADLINE)})
        .replica_count(2)
        .build()
    )
    job = await Job(kube_client, admitted_namespace, manifest).create()
    await job.wait_pods(names(job.name, "worker", 2))
    worker = f"{job.name}-worker-1"
    await job.kubelet.run(f"{job.name}-worker-0")
    await job.kubelet.cannot_start(worker, said, message)

    told = f"replica {worker} cannot start: {said}: {message}"
    cluster = Cluster(kube_client, admitted_namespace)

    async def warned() -> bool:
        events = await cluster.events(job.name, reason)
        return any(e.type == "Warning" and e.message == told for e in events)

    await job.wait(f"a Warning Event {told!r}", warned)
    shown = control_plane.kubectl("get", "pytorchtrainingjob", job.name, "-n", job.namespace)
    assert list(printed_rows(shown.stdout)[0])[:3] == ["NAME", "PHASE", "START"], shown.stdout
    assert printed_rows(shown.stdout)[0]["START"] == reason, shown.stdout
    status = await job.wait_phase("Failed")
    start = condition(status, "StartFailure")
    assert (start["status"], start["reason"], start["message"]) == ("True", reason, told)
    failed = condition(status, "Failed")
    assert failed["reason"] == reason
    await eventually(
        lambda: failures_counted(reconciler, admitted_namespace) == {reason: 1.0},
        f"the failure counted as {reason}",
        explain=lambda: failures_counted(reconciler, admitted_namespace),
    )
    assert failed["message"] == f"the start deadline ({DEADLINE}s) passed: {told}"
    await job.wait_pods(set())  # the running replica and the one that never started

    async def failed_event() -> bool:
        events = await cluster.events(job.name, reason)
        return any(e.message == failed["message"] for e in events)

    await eventually(failed_event, "the Failed condition's Event")
