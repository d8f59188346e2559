"""Scenarios run both by the e2e suite (the services as tests/support/operator.py runs them) and
on the chart as installed (tests/chart/test_installed.py)."""

from __future__ import annotations

import asyncio
import subprocess

from kubernetes_asyncio import client

from support.cluster import Cluster, Job, condition
from support.controlplane import ControlPlane
from support.eventually import TIMEOUT, eventually
from support.jobs import JobBuilder, names
from torchjob.api import constants, types
from torchjob.render.in_place import AGENT

TB_IMAGE = "t9kpublic/tensorboard:2.11.0"


async def happy_path(
    control_plane: ControlPlane,
    kube_client: client.ApiClient,
    admitted_namespace: str,
    in_place: bool = False,
) -> None:
    """A torchrun job through the webhook and the reconciler, to success; `in_place`: the
    webhook makes pods restart in place."""
    job = await Job(
        kube_client, admitted_namespace, JobBuilder.example("torchrun").build()
    ).create()
    expected = names(job.name, "worker", 4)
    pods = await job.wait_pods(expected)
    await job.wait_services(expected)
    master = pods[f"{job.name}-worker-0"]
    assert master.metadata.labels[constants.LABEL_JOB_ROLE] == "master"
    assert master.metadata.owner_references[0].controller is True
    assert master.spec.restart_policy == "Never"
    assert master.spec.containers[0].command[0] == "torchrun", (
        "the webhook rewrote the reconciler's pod"
    )
    # Then the restart agent where the webhook makes pods restart in place (the chart's default).
    wait, *after = master.spec.init_containers
    assert (wait.name, wait.image) == ("wait-for-master", master.spec.containers[0].image)
    assert [c.name for c in after] == ([AGENT] if in_place else [])
    assert wait.command[:2] == ["python", "-c"]
    assert wait.env[0].value == f"{job.name}-worker-0.{admitted_namespace}.svc"
    assert (await job.status())["phase"] == "Pending"
    await job.run_all()
    status = await job.wait_phase("Running")
    assert condition(status, "Running")["reason"] == "AllReplicasRunning"
    await job.kubelet.finish(f"{job.name}-worker-0", 0)
    wait = await kubectl_wait(control_plane, job, "--for=condition=Completed")
    assert "condition met" in wait.stdout
    status = await job.status()
    assert status["phase"] == "Succeeded"
    assert condition(status, "Completed")["reason"] == "MasterSucceeded"
    assert status["completionTime"]
    table = await asyncio.to_thread(
        control_plane.kubectl, "get", "ptj", job.name, "-n", admitted_namespace
    )
    assert "Succeeded" in table.stdout


async def master_failure(
    control_plane: ControlPlane, kube_client: client.ApiClient, admitted_namespace: str
) -> None:
    """The master exits with 1: the job fails."""
    manifest = JobBuilder.example("basic").restart_policy("Never").replica_count(2).build()
    job = await Job(kube_client, admitted_namespace, manifest).create()
    await job.wait_pods(names(job.name, "worker", 2))
    await job.run_all()
    await job.kubelet.finish(f"{job.name}-worker-0", 1)
    wait = await kubectl_wait(control_plane, job, "--for=jsonpath={.status.phase}=Failed")
    assert wait.returncode == 0
    status = await job.status()
    assert condition(status, "Failed")["reason"] == "MasterFailed"
    assert "exit code 1" in condition(status, "Failed")["message"]


async def kubectl_wait(
    control_plane: ControlPlane, job: Job, condition: str
) -> subprocess.CompletedProcess[str]:
    """`kubectl wait ptj/<job> <condition>`, as a user would wait for the job, as long as any
    test waits for what it expects (support.eventually.TIMEOUT)."""
    return await asyncio.to_thread(
        control_plane.kubectl,
        *("wait", "ptj", job.name, "-n", job.namespace, condition, f"--timeout={TIMEOUT:.0f}s"),
        timeout=TIMEOUT + 30,
    )


async def ttl_deletes_everything(kube_client: client.ApiClient, namespace: str) -> None:
    """A job with a TensorBoard and a TTL runs, succeeds, and is deleted with all it owns."""
    admitted_namespace = namespace
    cluster = Cluster(kube_client, admitted_namespace)
    manifest = (
        restricted_job("ttl").run_policy(ttlSecondsAfterFinished=2).tensorboard(image=TB_IMAGE)
    ).build()
    job = await Job(kube_client, admitted_namespace, manifest).create()
    await job.wait_pods(names(job.name, "worker", 3))
    await eventually(lambda: cluster.tensorboard_pods(job.name), "the TensorBoard's pod")
    await job.run_all()
    await job.kubelet.finish(f"{job.name}-worker-0", 0)
    finished = await job.wait_phase("Succeeded")
    assert finished["completionTime"]
    jobs = await job.objects.list_namespaced_custom_object(
        types.GROUP, types.VERSION, admitted_namespace, types.PLURAL
    )
    assert [j["metadata"]["name"] for j in jobs["items"]] == [job.name]

    async def job_gone() -> bool:
        listed = await job.objects.list_namespaced_custom_object(
            types.GROUP, types.VERSION, admitted_namespace, types.PLURAL
        )
        return not listed["items"]

    async def pods_gone() -> bool:
        return not await job.pods()

    async def services_gone() -> bool:
        return not await cluster.service_names()

    async def tensorboard_gone() -> bool:
        return await cluster.deployment(f"{job.name}-tensorboard") is None

    async def tensorboard_pod_gone() -> bool:
        return not await cluster.tensorboard_pods(job.name)

    await eventually(job_gone, "the job deleted")
    await eventually(pods_gone, "its pods gone", timeout=60)
    await eventually(services_gone, "its Services gone", timeout=60)
    await eventually(tensorboard_gone, "its TensorBoard gone", timeout=60)
    await eventually(tensorboard_pod_gone, "its TensorBoard's pod gone", timeout=60)
    [event] = await cluster.events(job.name, constants.REASON_TTL_EXPIRED)
    assert "ttlSecondsAfterFinished (2s)" in event.message


def restricted_job(name: str, replicas: int = 3, restart: str = "Never") -> JobBuilder:
    """`replicas` workers of the basic example (worker-0 is the master) whose pods pass the
    restricted Pod Security Standard."""
    return (
        JobBuilder.example("basic", name)
        .replica_count(replicas)
        .restart_policy(restart)
        .restricted()
    )
