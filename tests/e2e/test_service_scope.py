"""Service scope `Job` on the real control plane: one headless Service for the whole job, each
pod a hostname under it and the master's address its name there; the Service outlives a gang
restart, comes back when deleted, and goes with the job. The test plays the kubelet; name
resolution itself is shown on the real node (tests/node/test_self_healing.py, the gloo job)."""

from __future__ import annotations

import pytest
from kubernetes_asyncio import client
from support.cluster import Job
from support.eventually import eventually
from support.jobs import JobBuilder, names
from support.processes import ServiceProcess

from torchjob.api import constants


async def test_one_service_names_every_replica_through_a_gang_restart(
    kube_client: client.ApiClient, admitted_namespace: str, reconciler: ServiceProcess
) -> None:
    manifest = (
        JobBuilder("onesvc")
        .metadata(annotations={constants.ANNOTATION_SERVICE_SCOPE: constants.SERVICE_SCOPE_JOB})
        .replicas("master", 1)
        .replicas("worker", 2)
        .restart_policy("OnFailure")
        .run_policy(backoffLimit=3)
        .build()
    )
    job = await Job(kube_client, admitted_namespace, manifest).create()
    wanted = {f"{job.name}-master-0", *names(job.name, "worker", 2)}
    first = await job.wait_pods(wanted)
    await job.wait_services({job.name})
    master = f"{job.name}-master-0.{job.name}.{admitted_namespace}.svc"
    for name, pod in first.items():
        assert (pod.spec.hostname, pod.spec.subdomain) == (name, job.name)
        env = {e.name: e.value for e in pod.spec.containers[0].env}
        assert env["MASTER_ADDR"] == master, "the webhook gave the name under the job's Service"
    service = await job.core.read_namespaced_service(job.name, admitted_namespace)
    assert service.spec.selector == {constants.LABEL_JOB_NAME: job.name}
    assert service.spec.cluster_ip == "None" and service.spec.publish_not_ready_addresses

    # A failed worker restarts the gang (a plain job), counted once; the Service stays.
    await job.run_all()
    await job.wait_phase("Running")
    await job.kubelet.finish(f"{job.name}-worker-1", 1)
    second = await job.wait_all_replaced(first, "every pod created again")
    assert (await job.status())["gangRestarts"] == 1
    assert await job.services() == {job.name}
    kept = await job.core.read_namespaced_service(job.name, admitted_namespace)
    assert kept.metadata.uid == service.metadata.uid

    # A Service deleted under the job is created again.
    await job.core.delete_namespaced_service(job.name, admitted_namespace)

    async def recreated() -> bool:
        again = await job.core.list_namespaced_service(
            admitted_namespace, field_selector=f"metadata.name={job.name}"
        )
        return [s.metadata.uid for s in again.items] not in ([], [service.metadata.uid])

    await eventually(recreated, "the job's Service created again")
    await job.run_all()
    for name in sorted(second, reverse=True):  # the master last: it ends the job
        await job.kubelet.finish(name, 0)
    done = await job.wait_phase("Succeeded")
    assert (done["backoffCount"], done["gangRestarts"]) == (1, 1)

    await job.delete_foreground()
    await job.wait_services(set(), timeout=60)


async def test_the_scope_cannot_change_once_the_job_exists(
    kube_client: client.ApiClient, admitted_namespace: str, reconciler: ServiceProcess
) -> None:
    job = await Job(
        kube_client, admitted_namespace, JobBuilder("fixedsvc").replicas("worker", 1).build()
    ).create()
    with pytest.raises(client.ApiException) as refused:
        await job.patch_annotations({constants.ANNOTATION_SERVICE_SCOPE: "Job"})
    assert refused.value.status == 422
    said = str(refused.value.body)
    assert f"metadata.annotations[{constants.ANNOTATION_SERVICE_SCOPE}]" in said
    assert "is immutable" in said
