"""A node dies under a running job, on the real control plane: fake Nodes, the test plays the
kubelet (tests/support/kubelet.py) and the node lifecycle controller. Node A's Ready goes Unknown
and its pods are deleted gracefully, so they stay Terminating (no kubelet confirms); the
reconciler (a node-lost grace of 2 seconds) force-deletes them, creates them again, and the job
succeeds on node B with no restart charged and a NodeLost Event naming the pods and the node."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from kubernetes_asyncio import client
from support import ControlPlane
from support.cluster import Cluster, Job, condition
from support.eventually import eventually
from support.jobs import JobBuilder, names
from support.operator import reconciler_kubeconfig, start_reconciler
from support.processes import ServiceProcess

from torchjob.api import constants

GRACE = 2  # seconds: the reconciler's --node-lost-grace here


def stamp() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@pytest.fixture
def watchful(
    control_plane: ControlPlane, webhook_server: ServiceProcess, admitted_namespace: str
) -> Iterator[ServiceProcess]:
    """A reconciler of this test alone, losing pods with a node after GRACE seconds."""
    process = start_reconciler(
        control_plane,
        reconciler_kubeconfig(control_plane),
        "r1",
        *("--node-lost-grace", str(GRACE), "--lease-name", f"nodes-{admitted_namespace}"),
    )
    yield process
    process.close()


class Nodes:
    """Fake Nodes with no kubelet; the test reports their Ready condition."""

    def __init__(self, api: client.ApiClient) -> None:
        self.core = client.CoreV1Api(api)
        self.names: list[str] = []

    async def add(self, name: str) -> str:
        create: Any = self.core.create_node  # a dict serves as the body
        await create({"metadata": {"name": name}})
        self.names.append(name)
        await self.ready(name, "True")
        return name

    async def ready(self, name: str, status: str) -> None:
        """What the kubelet reports (True), or the node lifecycle controller once the kubelet's
        lease expired (Unknown)."""
        condition = {
            "type": "Ready",
            "status": status,
            "reason": "KubeletReady" if status == "True" else "NodeStatusUnknown",
            "lastHeartbeatTime": stamp(),
            "lastTransitionTime": stamp(),
        }
        await self.core.patch_node_status(name, {"status": {"conditions": [condition]}})

    async def remove_all(self) -> None:
        for name in self.names:
            await self.core.delete_node(name)


@pytest.fixture
async def nodes(kube_client: client.ApiClient) -> AsyncIterator[Nodes]:
    made = Nodes(kube_client)
    yield made
    await made.remove_all()


async def bind(core: client.CoreV1Api, namespace: str, pod: str, node: str) -> None:
    """What the scheduler does: the pod is bound to `node`."""
    create: Any = core.create_namespaced_binding  # its answer is a Status, not a Binding
    target = {"metadata": {"name": pod}, "target": {"kind": "Node", "name": node}}
    await create(namespace, target, _preload_content=False)


async def test_pods_stuck_terminating_on_a_dead_node_are_replaced_uncharged(
    kube_client: client.ApiClient, admitted_namespace: str, watchful: ServiceProcess, nodes: Nodes
) -> None:
    ns = admitted_namespace
    core = client.CoreV1Api(kube_client)
    node_a, node_b = await nodes.add(f"{ns}-a"), await nodes.add(f"{ns}-b")
    manifest = (
        JobBuilder.example("basic")
        .restart_policy("OnFailure")
        .replica_count(2)
        .run_policy(backoffLimit=1)
        .build()
    )
    job = await Job(kube_client, ns, manifest).create()
    expected = names(job.name, "worker", 2)
    first = await job.wait_pods(expected)
    for name in expected:
        await bind(core, ns, name, node_a)
    await job.run_all()
    await job.wait_phase("Running")

    # Node A's kubelet goes silent: the node lifecycle controller marks it Unknown and its taint
    # manager deletes the pods gracefully; with no kubelet to confirm they stay Terminating.
    await nodes.ready(node_a, "Unknown")
    for name in expected:
        await core.delete_namespaced_pod(name, ns)
    stuck = await core.list_namespaced_pod(ns)
    assert all(p.metadata.deletion_timestamp for p in stuck.items if p.metadata.name in expected)

    replaced = {name: await job.wait_new_pod(name, first[name].metadata.uid) for name in expected}
    for name, pod in replaced.items():
        assert not pod.spec.node_name, "the replacement waits to be placed"
        annotations = pod.metadata.annotations
        assert annotations[constants.ANNOTATION_BACKOFF_COUNT] == "0", name
        await bind(core, ns, name, node_b)
    await job.run_all()
    await job.kubelet.finish(f"{job.name}-worker-0", 0)
    # The job has ended: its other worker is stopped before it says so. Node B is alive, so its
    # kubelet (the test) confirms the deletion.
    other = f"{job.name}-worker-1"

    async def terminating() -> bool:
        pod = await core.read_namespaced_pod(other, ns)
        return pod.metadata.deletion_timestamp is not None

    await job.wait(f"{other} being deleted", terminating)
    stopping = await job.status()
    assert stopping["phase"] == "Running"
    assert condition(stopping, "Running")["reason"] == constants.REASON_MASTER_SUCCEEDED
    assert not [c for c in stopping["conditions"] if c["type"] == "Completed"]
    await job.kubelet.confirm_deletion(other)
    status = await job.wait_phase("Succeeded")
    assert status["backoffCount"] == 0
    assert all(t["restartCount"] == 0 for t in status["tasks"])

    async def told() -> list[Any]:
        return await Cluster(kube_client, ns).events(job.name, constants.REASON_NODE_LOST)

    events = await eventually(told, "a NodeLost Event on the job")
    messages = " ".join(e.message for e in events)
    assert all(name in messages for name in expected) and node_a in messages
    assert all(e.type == "Warning" for e in events)

    async def stopping_told() -> list[Any]:
        return await Cluster(kube_client, ns).events(job.name, constants.REASON_STOPPING)

    [stopped] = await eventually(stopping_told, "a StoppingReplicas Event on the job")
    assert stopped.type == "Normal" and other in stopped.message
