"""The housekeeper as a process, with the webhook and the reconciler, on the real control plane
(kube-controller-manager turns the TensorBoard's Deployment into a ReplicaSet and a pod, and
collects what a deleted job owned); the test plays the kubelet by patching pod status. The
housekeeper runs with exactly the RBAC the chart grants it."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes_asyncio import client
from support import ControlPlane
from support.cluster import Cluster, Job
from support.eventually import eventually
from support.jobs import names
from support.operator import housekeeper_kubeconfig, start_housekeeper
from support.processes import ServiceProcess
from support.scenarios import TB_IMAGE, restricted_job, ttl_deletes_everything

from torchjob.api import constants, types


@pytest.fixture(scope="module")
def housekeeper(control_plane: ControlPlane, crd: None) -> Iterator[ServiceProcess]:
    process = start_housekeeper(housekeeper_kubeconfig(control_plane))
    yield process
    process.close()


async def tensorboard_status(job: Job) -> dict[str, Any]:
    return dict((await job.status()).get("tensorboard") or {})


async def test_tensorboard_follows_the_job(
    control_plane: ControlPlane,
    kube_client: client.ApiClient,
    admitted_namespace: str,
    reconciler: ServiceProcess,
    housekeeper: ServiceProcess,
) -> None:
    # The TensorBoard's pod must pass the restricted Pod Security Standard to exist at all.
    control_plane.kubectl(
        "label", "namespace", admitted_namespace, "pod-security.kubernetes.io/enforce=restricted"
    )
    tensorboard_spec = {
        "image": TB_IMAGE,
        "trainingLogFilesets": ["t9k://pvc/claim-a/log"],
        "logDir": {"pvc": [{"name": "claim-b", "subPath": ["run1", "run2"]}]},
        "resources": {"limits": {"cpu": "1", "memory": "1Gi"}},
    }
    manifest = restricted_job("tb").spec(tensorboardSpec=tensorboard_spec).build()
    job = await Job(kube_client, admitted_namespace, manifest).create()
    cluster = Cluster(kube_client, admitted_namespace)
    tb_name = f"{job.name}-tensorboard"
    uid = (await job.get())["metadata"]["uid"]

    deployment = await eventually(lambda: cluster.deployment(tb_name), "the Deployment")
    [owner] = deployment.metadata.owner_references
    assert (owner.uid, owner.controller, owner.block_owner_deletion) == (uid, True, True)
    container = deployment.spec.template.spec.containers[0]
    assert container.image == TB_IMAGE
    assert container.args[:2] == [
        "--logdir_spec",
        "claim-a/log:/logs/claim-a/log,claim-b/run1:/logs/claim-b/run1,"
        "claim-b/run2:/logs/claim-b/run2",
    ]
    assert container.resources.limits == {"cpu": "1", "memory": "1Gi"}
    claims = {
        v.persistent_volume_claim.claim_name: v.persistent_volume_claim.read_only
        for v in deployment.spec.template.spec.volumes
        if v.persistent_volume_claim
    }
    assert claims == {"claim-a": True, "claim-b": True}
    await eventually(lambda: _has(cluster.service_names(), tb_name), "the Service")
    service = await cluster.core.read_namespaced_service(tb_name, admitted_namespace)
    assert service.spec.type == "ClusterIP" and service.spec.cluster_ip

    [pod] = await eventually(lambda: cluster.tensorboard_pods(job.name), "the TensorBoard's pod")
    assert constants.LABEL_JOB_NAME not in pod.metadata.labels
    pending = await eventually(lambda: _reason_is(job, "PodPending"), "a reason")
    assert pending["ready"] is False and pending["message"]
    url = f"http://{tb_name}.{admitted_namespace}.svc:6006/"
    await job.kubelet.run(pod.metadata.name, ready=True)
    assert await eventually(lambda: _tensorboard_is(job, {"ready": True, "url": url}), "ready")

    # A changed image rolls the Deployment: a new pod, ready again once the kubelet says so.
    await job.patch_spec({"tensorboardSpec": {**tensorboard_spec, "image": "tensorboard:2.16"}})
    new_pod = await eventually(lambda: _new_pod(cluster, job.name, pod), "the rolled pod")
    assert new_pod.spec.containers[0].image == "tensorboard:2.16"
    assert (await tensorboard_status(job))["ready"] is False
    await job.kubelet.run(new_pod.metadata.name, ready=True)
    await eventually(lambda: _tensorboard_is(job, {"ready": True, "url": url}), "ready again")
    assert len(await cluster.events(job.name, constants.REASON_TENSORBOARD_CREATED)) == 1
    assert len(await cluster.events(job.name, constants.REASON_TENSORBOARD_UPDATED)) == 1

    # Kept after the job ends, its status untouched by the reconciler's final status.
    await job.wait_pods(names(job.name, "worker", 3))
    await job.run_all()
    await job.kubelet.finish(f"{job.name}-worker-0", 0)
    await job.wait_phase("Succeeded")
    await asyncio.sleep(1)
    assert await cluster.deployment(tb_name) is not None
    assert await tensorboard_status(job) == {"ready": True, "url": url}

    # ... and removed with the job.
    await job.objects.delete_namespaced_custom_object(
        types.GROUP, types.VERSION, admitted_namespace, types.PLURAL, job.name
    )
    await eventually(lambda: _none(cluster.deployment(tb_name)), "the Deployment gone", timeout=60)
    await eventually(
        lambda: _lacks(cluster.service_names(), tb_name), "the Service gone", timeout=60
    )


async def _has(names_: Any, name: str) -> bool:
    return name in await names_


async def _lacks(names_: Any, name: str) -> bool:
    return name not in await names_


async def _none(value: Any) -> bool:
    return await value is None


async def _reason_is(job: Job, reason: str) -> dict[str, Any] | None:
    status = await tensorboard_status(job)
    return status if status.get("reason") == reason else None


async def _tensorboard_is(job: Job, expected: dict[str, Any]) -> bool:
    return await tensorboard_status(job) == expected


async def _new_pod(cluster: Cluster, job: str, old: Any) -> Any:
    pods = [p for p in await cluster.tensorboard_pods(job) if p.metadata.uid != old.metadata.uid]
    return pods[0] if pods else None


# What each policy leaves of worker-0 (the master, finished), worker-1 (succeeded) and worker-2
# and of their three Services. Worker-2, still running when the master ended, is stopped by the
# reconciler before the job says it ended, whatever the policy: Unfinished finds it gone.
LEFT = {
    "None": ({0, 1}, True),
    "All": (set(), False),
    "Unfinished": ({0, 1}, True),
}


@pytest.mark.parametrize("exit_code", [0, 1], ids=["after-success", "after-failure"])
async def test_clean_up_policies(
    kube_client: client.ApiClient,
    admitted_namespace: str,
    reconciler: ServiceProcess,
    housekeeper: ServiceProcess,
    exit_code: int,
) -> None:
    cluster = Cluster(kube_client, admitted_namespace)
    jobs = {
        policy: await Job(
            kube_client,
            admitted_namespace,
            restricted_job(policy.lower()).run_policy(cleanUpPolicy=policy).build(),
        ).create()
        for policy in LEFT
    }
    for job in jobs.values():
        await job.wait_pods(names(job.name, "worker", 3))
        await job.run_all()
        await job.kubelet.finish(f"{job.name}-worker-1", 0)
        await job.kubelet.finish(f"{job.name}-worker-0", exit_code)
    phase = "Succeeded" if exit_code == 0 else "Failed"
    for job in jobs.values():
        await job.wait_phase(phase)
    for policy in ("All", "Unfinished"):
        job = jobs[policy]
        pods, services = LEFT[policy]
        await job.wait_pods({f"{job.name}-worker-{i}" for i in pods})
        expected = names(job.name, "worker", 3) if services else set()
        await eventually(functools.partial(_services_are, job, expected), f"{policy}: services")
    [event] = await cluster.events(jobs["All"].name, constants.REASON_CLEAN_UP)
    assert event.message.startswith("cleanUpPolicy All: deleting")
    # The reconciler counts cleaned-up replicas as deleted; the job's phase stays as it was.
    await eventually(functools.partial(_deleted_counted, jobs["All"], 3), "aggregate")
    assert (await jobs["All"].status())["phase"] == phase
    # None acts by doing nothing: after the others were cleaned up, nothing of it has gone but
    # the pod the reconciler stopped.
    await asyncio.sleep(1)
    kept = jobs["None"]
    assert set(await kept.pods()) == {f"{kept.name}-worker-{i}" for i in LEFT["None"][0]}
    assert await kept.services() == names(kept.name, "worker", 3)
    assert await cluster.events(kept.name, constants.REASON_CLEAN_UP) == []


async def _deleted_counted(job: Job, count: int) -> bool:
    aggregate = (await job.status()).get("aggregate") or {}
    return bool(aggregate.get("deleted") == count and aggregate.get("creating") == 0)


async def _services_are(job: Job, expected: set[str]) -> bool:
    return await job.services() == expected


async def test_ttl_deletes_the_job_and_everything_it_owns(
    kube_client: client.ApiClient,
    admitted_namespace: str,
    reconciler: ServiceProcess,
    housekeeper: ServiceProcess,
) -> None:
    await ttl_deletes_everything(kube_client, admitted_namespace)
