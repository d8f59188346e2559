"""The progress deadline on the real control plane: a job whose last progress report grows older
than its deadline while its pods run has every replica restarted together, with a NoProgress
Event naming the report, and fails with reason NoProgress when it goes silent again with no
restart left. The test plays the kubelet, and writes the report into the job's status as the
progress endpoint does (a merge patch of status.trainerStatus): the reconciler must notice the
job's first report, which comes as a status write of someone else's."""

from __future__ import annotations

from datetime import UTC, datetime

from kubernetes_asyncio import client
from support.cluster import Cluster, Job, condition
from support.eventually import eventually
from support.jobs import JobBuilder, names
from support.metrics import failures_counted
from support.processes import ServiceProcess

from torchjob.api import constants


async def report(job: Job, percentage: int) -> None:
    """A progress report as the endpoint writes it."""
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    trainer = {
        "progressPercentage": percentage,
        "metrics": [{"name": "loss", "value": "0.5"}],
        "lastUpdatedTime": now,
    }
    await job.patch_status({"trainerStatus": trainer})


async def test_a_silent_job_is_restarted_then_failed_with_no_progress(
    kube_client: client.ApiClient, admitted_namespace: str, reconciler: ServiceProcess
) -> None:
    manifest = (
        JobBuilder("silent")
        .metadata(annotations={constants.ANNOTATION_PROGRESS_DEADLINE: "3"})
        .replicas("worker", 2)
        .restart_policy("OnFailure")
        .run_policy(backoffLimit=1)
        .build()
    )
    job = await Job(kube_client, admitted_namespace, manifest).create()
    workers = names(job.name, "worker", 2)
    first = await job.wait_pods(workers)
    await job.run_all()
    await job.wait_phase("Running")
    await report(job, 20)

    await job.wait_all_replaced(first, "every replica restarted for its silence")
    status = await job.status()
    assert (status["backoffCount"], status["gangRestarts"]) == (1, 1)
    cluster = Cluster(kube_client, admitted_namespace)
    [silence] = await cluster.events(job.name, constants.REASON_NO_PROGRESS)
    assert silence.type == "Warning" and "20%" in silence.message, silence.message

    await job.run_all()  # silent again, with backoffLimit spent
    failed = await job.wait_phase("Failed")
    assert condition(failed, "Failed")["reason"] == constants.REASON_NO_PROGRESS
    assert failed["trainerStatus"]["progressPercentage"] == 20
    await eventually(
        lambda: failures_counted(reconciler, admitted_namespace) == {"NoProgress": 1.0},
        "the failure counted as NoProgress",
        explain=lambda: failures_counted(reconciler, admitted_namespace),
    )
