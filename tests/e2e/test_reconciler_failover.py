"""The reconciler killed with SIGKILL mid-job and started again finishes the job with no duplicate
pod and no lost status. Its own module: it kills and restarts its reconciler process."""

from __future__ import annotations

import asyncio

from kubernetes_asyncio import client
from support import ControlPlane
from support.operator import job_manifest, reconciler_kubeconfig, start_reconciler
from support.processes import ServiceProcess

from e2e.test_reconciler import Job, condition, names
from torchjob.api import constants


async def test_sigkill_mid_job_then_restart(
    control_plane: ControlPlane,
    kube_client: client.ApiClient,
    admitted_namespace: str,
    webhook_server: ServiceProcess,
) -> None:
    kubeconfig = reconciler_kubeconfig(control_plane)
    first = start_reconciler(control_plane, kubeconfig)
    try:
        manifest = job_manifest("basic")
        manifest["spec"]["replicaSpecs"][0]["restartPolicy"] = "ExitCode"
        job = await Job(kube_client, admitted_namespace, manifest).create()
        pods = await job.wait_pods(names(job.name, "worker", 4))
        await job.run_all()
        await job.wait_phase("Running")
        worker = f"{job.name}-worker-3"
        first.kill()
        # While no reconciler runs: a replica is killed and another pod runs on.
        await job.kubelet.finish(worker, 137)
        await asyncio.sleep(0.5)
    finally:
        first.close()
    second = start_reconciler(control_plane, kubeconfig)
    try:
        replacement = await job.wait_new_pod(worker, pods[worker].metadata.uid)
        assert replacement.metadata.annotations[constants.ANNOTATION_BACKOFF_COUNT] == "1"
        await job.kubelet.run(worker)
        await job.kubelet.finish(f"{job.name}-worker-0", 0)
        status = await job.wait_phase("Succeeded")
        assert condition(status, "Completed")["reason"] == "MasterSucceeded"
        assert status["backoffCount"] == 1
        listed = await job.core.list_namespaced_pod(
            admitted_namespace, label_selector=f"{constants.LABEL_JOB_NAME}={job.name}"
        )
        assert sorted(p.metadata.name for p in listed.items) == sorted(names(job.name, "worker", 4))
    finally:
        second.close()
