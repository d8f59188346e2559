"""The housekeeper killed with SIGKILL half-way through a clean-up and started again finishes it
and repeats nothing: no second deletion, event, TensorBoard or status write. Its own module: it
starts and kills its own housekeeper processes.

The first housekeeper may not delete Services, so it is caught for certain between deleting the
pods and deleting the Services, and is killed there."""

from __future__ import annotations

import pytest
from kubernetes_asyncio import client
from support import ControlPlane
from support.cluster import Cluster, Job
from support.eventually import eventually
from support.jobs import names
from support.operator import Rules, housekeeper_kubeconfig, start_housekeeper
from support.processes import ServiceProcess
from support.scenarios import TB_IMAGE, restricted_job

from torchjob.api import constants

LIMITED = "housekeeper-limited"  # a ServiceAccount with the chart's housekeeper RBAC, but ...


def without_service_deletion(chart_rules: Rules) -> Rules:
    """... the chart's cluster-wide rules without deleting Services."""
    rules = []
    for rule in chart_rules:
        if rule["apiGroups"] == [""] and rule["resources"] == ["services"]:
            rule = {**rule, "verbs": [v for v in rule["verbs"] if v != "delete"]}
        rules.append(rule)
    return rules


def actions(process: ServiceProcess) -> dict[str, float]:
    samples = process.samples("torchjob_housekeeper_actions_total")  # by '{action="..."}'
    return {labels[len('{action="') : -len('"}')]: value for labels, value in samples.items()}


@pytest.mark.usefixtures("reconciler")
async def test_killed_mid_clean_up_then_restarted_does_nothing_twice(
    control_plane: ControlPlane, kube_client: client.ApiClient, admitted_namespace: str
) -> None:
    await _scenario(control_plane, kube_client, admitted_namespace)


async def _scenario(control_plane: ControlPlane, api: client.ApiClient, namespace: str) -> None:
    cluster = Cluster(api, namespace)
    manifest = restricted_job("restart").run_policy(cleanUpPolicy="All").tensorboard(image=TB_IMAGE)
    job = Job(api, namespace, manifest.build())
    tb_name = f"{job.name}-tensorboard"
    first = start_housekeeper(
        housekeeper_kubeconfig(control_plane, LIMITED, without_service_deletion)
    )
    try:
        await job.create()
        replicas = names(job.name, "worker", 3)
        await job.wait_pods(replicas)
        [tb_pod] = await eventually(
            lambda: cluster.tensorboard_pods(job.name), "the TensorBoard's pod"
        )
        await job.kubelet.run(tb_pod.metadata.name, ready=True)
        await eventually(lambda: _tensorboard_ready(job), "the TensorBoard ready")
        await job.run_all()
        # Every replica finishes (the first last: it ends the job), so the clean-up finds all
        # three pods: a replica still running when the job ends is stopped by the reconciler.
        for name in sorted(replicas, reverse=True):
            await job.kubelet.finish(name, 0)
        await job.wait_phase("Succeeded")
        await job.wait_pods(set())
        await eventually(lambda: cluster.events(job.name, "CleanUp"), "the clean-up event")
        assert await job.services() == replicas, "Services may not be deleted by this one"
        first.kill()
    finally:
        first.close()
    deployment = await cluster.deployment(tb_name)

    second = start_housekeeper(housekeeper_kubeconfig(control_plane))
    try:
        await eventually(lambda: _no_services(job), "the Services deleted")
        await eventually(lambda: _counted(second, "service_deleted", 3), "the count")
        done = actions(second)
        assert done == {"service_deleted": 3}, f"only the rest of the clean-up: {done}"
    finally:
        second.close()
    [event] = await cluster.events(job.name, constants.REASON_CLEAN_UP)
    assert event.message == "cleanUpPolicy All: deleting 3 pods and 3 Services of the finished job"
    assert (event.count or 1) == 1 and event.series is None
    assert len(await cluster.events(job.name, constants.REASON_TENSORBOARD_CREATED)) == 1
    after = await cluster.deployment(tb_name)
    assert (after.metadata.uid, after.metadata.generation) == (
        deployment.metadata.uid,
        deployment.metadata.generation,
    )
    assert tb_name in await cluster.service_names(), "the TensorBoard outlives the clean-up"
    assert (await job.status())["tensorboard"]["ready"] is True


async def _tensorboard_ready(job: Job) -> bool:
    return bool(((await job.status()).get("tensorboard") or {}).get("ready"))


async def _no_services(job: Job) -> bool:
    return not await job.services()


async def _counted(process: ServiceProcess, action: str, count: float) -> bool:
    return actions(process).get(action) == count
