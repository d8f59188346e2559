"""The gang restart limit on the real control plane, with a reconciler of its own that allows one
gang restart: a worker failing a second time fails the job with GangRestartLimitExceeded, and
the reconciler's failure counter names that reason. The test plays the kubelet."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from kubernetes_asyncio import client
from support import ControlPlane
from support.cluster import Job, condition
from support.eventually import eventually
from support.jobs import JobBuilder, names
from support.metrics import failures_counted
from support.operator import reconciler_kubeconfig, start_reconciler
from support.processes import ServiceProcess

from torchjob.api import constants


@pytest.fixture
def one_gang_restart(
    control_plane: ControlPlane, webhook_server: ServiceProcess, admitted_namespace: str
) -> Iterator[ServiceProcess]:
    process = start_reconciler(
        control_plane,
        reconciler_kubeconfig(control_plane),
        "r1",
        "--gang-restart-limit",
        "1",
        "--lease-name",
        f"gang-limit-{admitted_namespace}",
    )
    yield process
    process.close()


async def test_the_second_gang_restart_fails_the_job_and_is_counted_by_its_reason(
    kube_client: client.ApiClient, admitted_namespace: str, one_gang_restart: ServiceProcess
) -> None:
    manifest = (
        JobBuilder("limited")
        .replicas("worker", 2)
        .restart_policy("OnFailure")
        .run_policy(backoffLimit=4)
        .build()
    )
    job = await Job(kube_client, admitted_namespace, manifest).create()
    first = await job.wait_pods(names(job.name, "worker", 2))
    await job.run_all()
    await job.wait_phase("Running")
    await job.kubelet.finish(f"{job.name}-worker-1", 1)
    await job.wait_all_replaced(first, "every replica restarted once")
    await job.run_all()
    await job.wait_phase("Running")
    await job.kubelet.finish(f"{job.name}-worker-1", 1)

    failed = await job.wait_phase("Failed")
    reason = constants.REASON_GANG_RESTART_LIMIT_EXCEEDED
    assert condition(failed, "Failed")["reason"] == reason
    assert failed["gangRestarts"] == 1
    await eventually(
        lambda: failures_counted(one_gang_restart, admitted_namespace) == {reason: 1.0},
        f"the failure counted as {reason}",
        explain=lambda: failures_counted(one_gang_restart, admitted_namespace),
    )
