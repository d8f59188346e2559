"""The Argo CD health check (docs/argocd-health.lua), run by a real Lua interpreter on real jobs
read back from the apiserver in every phase: Pending and Resuming are Progressing, Running and
Succeeded Healthy, Paused Suspended, Failed Degraded, and a job whose pods the apiserver keeps
refusing (a ResourceQuota) Degraded rather than Progressing forever."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from kubernetes_asyncio import client
from support import ControlPlane
from support.argocd import health
from support.cluster import Job, condition
from support.jobs import JobBuilder
from support.processes import ServiceProcess


def one_replica(name: str, policy: str = "OnFailure") -> JobBuilder:
    return JobBuilder(name).replicas("worker", 1, restartPolicy=policy)


def test_a_status_of_an_older_generation_is_progressing() -> None:
    job: dict[str, Any] = {
        "metadata": {"generation": 3},
        "status": {"phase": "Running", "observedGeneration": 2},
    }
    assert health(job) == ("Progressing", "the status describes generation 2, the spec is 3")
    assert health({"metadata": {"generation": 1}})[0] == "Progressing"


async def test_every_phase_of_a_real_job(
    control_plane: ControlPlane,
    kube_client: client.ApiClient,
    admitted_namespace: str,
    reconciler: ServiceProcess,
) -> None:
    ns = admitted_namespace
    pause = {"pause": {"enabled": True}}
    pending = await Job(kube_client, ns, one_replica("pending").build()).create()
    running = await Job(kube_client, ns, one_replica("running").build()).create()
    ok = await Job(kube_client, ns, one_replica("ok").build()).create()
    bad = await Job(kube_client, ns, one_replica("bad", "Never").build()).create()
    paused = await Job(kube_client, ns, one_replica("paused").spec(runMode=pause).build()).create()
    resuming = await Job(
        kube_client, ns, one_replica("resuming").spec(runMode=pause).build()
    ).create()
    for job in (pending, running, ok, bad):
        await job.wait_pods({f"{job.name}-worker-0"})
    for job in (running, ok, bad):
        await job.run_all()
        await job.wait_phase("Running")
    await ok.kubelet.finish("ok-worker-0", 0)
    await bad.kubelet.finish("bad-worker-0", 1)
    await ok.wait_phase("Succeeded")
    await bad.wait_phase("Failed")
    await paused.wait_phase("Paused")
    await resuming.wait_phase("Paused")
    await resuming.patch_spec({"runMode": {"pause": {"enabled": False}}})
    await resuming.wait_pods({"resuming-worker-0"})
    await resuming.wait_phase("Resuming")

    seen = {job.name: health(await job.get()) for job in (pending, running, ok, bad)}
    seen |= {job.name: health(await job.get()) for job in (paused, resuming)}
    assert {name: status for name, (status, _) in seen.items()} == {
        "pending": "Progressing",
        "running": "Healthy",
        "ok": "Healthy",
        "bad": "Degraded",
        "paused": "Suspended",
        "resuming": "Progressing",
    }
    reason = condition(await bad.status(), "Failed")["reason"]
    assert seen["bad"][1].startswith(f"{reason}: "), seen["bad"]
    assert seen["ok"][1].startswith("MasterSucceeded"), seen["ok"]

    # No room for one more pod: the next job's pod is refused until the quota changes. (A
    # quota counts the pods that have not ended, once its controller has looked.)
    quota: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {"name": "full", "namespace": ns},
        "spec": {"hard": {"pods": "1000"}},
    }
    await asyncio.to_thread(control_plane.kubectl, "apply", "-f", "-", input=json.dumps(quota))

    async def used() -> str:
        said = await asyncio.to_thread(
            control_plane.kubectl,
            *("get", "resourcequota", "full", "-n", ns, "-o", "jsonpath={.status.used.pods}"),
        )
        return str(said.stdout.strip())

    async def counted() -> bool:
        return bool(await used())

    await pending.wait("the quota counted", counted)
    limit = await used()
    quota["spec"] = {"hard": {"pods": limit}}
    await asyncio.to_thread(control_plane.kubectl, "apply", "-f", "-", input=json.dumps(quota))

    async def full() -> bool:
        said = await asyncio.to_thread(
            control_plane.kubectl,
            *("get", "resourcequota", "full", "-n", ns, "-o", "jsonpath={.status.hard.pods}"),
        )
        return bool(said.stdout.strip() == limit)

    await pending.wait("the quota's new limit in force", full)
    blocked = await Job(kube_client, ns, one_replica("blocked").build()).create()

    async def refused() -> bool:
        conditions = (await blocked.status()).get("conditions") or []
        return any(c["type"] == "ReplicaFailure" and c["status"] == "True" for c in conditions)

    await blocked.wait("the pod refused", refused)
    stored = await blocked.get()
    assert stored["status"]["phase"] == "Pending"
    status, message = health(stored)
    assert status == "Degraded"
    assert message.startswith("PodCreationFailed: "), message
    assert "exceeded quota: full" in message, message
