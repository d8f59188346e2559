"""A gang restart on the real control plane: a job not run by torchrun whose worker fails has
every replica stopped and created again together, counted once, and then succeeds. The test
plays the kubelet."""

from __future__ import annotations

from collections import Counter

from kubernetes_asyncio import client
from support.cluster import Cluster, Job
from support.eventually import TIMEOUT, eventually
from support.jobs import JobBuilder, names
from support.processes import ServiceProcess

from torchjob.api import constants


async def test_a_failed_worker_restarts_the_gang_once_and_the_job_succeeds(
    kube_client: client.ApiClient, admitted_namespace: str, reconciler: ServiceProcess
) -> None:
    manifest = (
        JobBuilder("gang")
        .replicas("worker", 3)
        .restart_policy("OnFailure")
        .run_policy(backoffLimit=4)
        .build()
    )
    job = await Job(kube_client, admitted_namespace, manifest).create()
    workers = names(job.name, "worker", 3)
    first = await job.wait_pods(workers)
    await job.run_all()
    await job.wait_phase("Running")
    await job.kubelet.finish(f"{job.name}-worker-1", 1)

    second = await job.wait_all_replaced(first, "every pod created again")
    for pod in second.values():
        assert pod.metadata.annotations[constants.ANNOTATION_GANG_RESTARTS] == "1"
        assert pod.metadata.annotations[constants.ANNOTATION_BACKOFF_COUNT] == "1"
    status = await job.status()
    assert (status["backoffCount"], status["gangRestarts"]) == (1, 1)
    assert [t["restartCount"] for t in status["tasks"]] == [1]

    await job.run_all()
    await job.wait_phase("Running")
    # The others ran on: nothing more is restarted.
    assert {n: p.metadata.uid for n, p in (await job.pods()).items()} == {
        n: p.metadata.uid for n, p in second.items()
    }
    for name in sorted(workers, reverse=True):  # the first replica last: it ends the job
        await job.kubelet.finish(name, 0)
    done = await job.wait_phase("Succeeded")
    assert (done["backoffCount"], done["gangRestarts"]) == (1, 1)

    cluster = Cluster(kube_client, admitted_namespace)

    async def creations() -> Counter[str]:
        """Pod creations by Event message; a repeat joins the first one's series."""
        created = await cluster.events(job.name, constants.REASON_SUCCESSFUL_CREATE)
        counts: Counter[str] = Counter()
        for event in created:
            if event.message.startswith("Created pod: "):
                counts[event.message] += event.series.count if event.series else 1
        return counts

    async def recorded() -> bool:
        return sum((await creations()).values()) >= 6

    await eventually(recorded, "the creations as Events", timeout=TIMEOUT)
    per_pod = await creations()
    assert per_pod == {f"Created pod: {n}": 2 for n in workers}, "each pod recreated once"
    [restart] = await cluster.events(job.name, constants.REASON_GANG_RESTARTING)
    assert restart.type == "Warning"
    assert restart.message == (
        f"restarting every replica: {job.name}-worker-1 failed with exit code 1 "
        "(restart 1 of backoffLimit 4)"
    )
