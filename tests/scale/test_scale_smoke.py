"""A smoke of the scale tier (tests/support/scale.py, docs/scale.md) at the size `make test`
affords: 100 kwok nodes beside the real kube-scheduler, one torchrun job of 200 workers that must
all start together (one native PodGroup of 200), created by the reconciler and placed whole,
then restarted whole when one worker fails. The figures are the benchmarks'
(tests/bench/scale.py); this shows that the tier, the webhook and the reconciler still work
together at a size beyond the e2e tier's, and fails when they do not."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes_asyncio import client
from support.bench import admin_client, new_namespace, watch
from support.eventually import eventually
from support.operator import (
    reconciler_kubeconfig,
    start_reconciler,
    start_webhook,
    stop_webhook,
)
from support.scale import EXIT_CODE_ANNOTATION, ScaleTier
from support.scale_bench import Progress, big_job, create_custom_object

from torchjob.kube.resources import JOBS, PODS
from torchjob.render.topology import replica_name

NODES, WORKERS = 100, 200
TIMEOUT = 240.0


@pytest.fixture(scope="module")
def tier() -> Iterator[ScaleTier]:
    with ScaleTier(NODES) as started:
        yield started


@contextlib.contextmanager
def services(tier: ScaleTier) -> Iterator[None]:
    with contextlib.ExitStack() as stack:
        webhook = start_webhook(tier.plane)
        stack.callback(stop_webhook, tier.plane, webhook)
        kubeconfig = reconciler_kubeconfig(tier.plane)
        reconciler = start_reconciler(tier.plane, kubeconfig, "smoke", "--restart-backoff", "0")
        stack.callback(reconciler.close)
        yield


async def test_a_200_worker_gang_is_placed_whole_and_restarted_whole(tier: ScaleTier) -> None:
    namespace = new_namespace(tier.plane, "smoke")
    progress = Progress(WORKERS)
    with services(tier):
        async with (
            await admin_client(tier.plane) as user,
            watch(user, PODS, namespace, progress.seen, progress.gone),
        ):
            progress.start()
            await create_custom_object(user, JOBS, namespace, big_job("big", WORKERS))
            await eventually(
                progress.all_running.is_set, "every worker Running", timeout=TIMEOUT,
                explain=progress.counts,
            )  # fmt: skip
            first = set(progress.uids.values())
            await job_says(user, namespace, lambda s: s.get("phase") == "Running")
            progress.restart()
            failed = {"metadata": {"annotations": {EXIT_CODE_ANNOTATION: "1"}}}
            core = client.CoreV1Api(user)
            await core.patch_namespaced_pod(replica_name("big", "worker", 1), namespace, failed)
            await eventually(
                progress.all_running.is_set, "every replacement Running", timeout=TIMEOUT,
                explain=progress.counts,
            )  # fmt: skip
            assert not first & set(progress.uids.values())  # every worker was replaced
            status = await job_says(user, namespace, lambda s: s.get("gangRestarts") == 1)
    assert status["phase"] == "Running"
    assert status["backoffCount"] == 1


async def job_says(user: client.ApiClient, namespace: str, check: Any) -> dict[str, Any]:
    """The job's status, once `check` holds for it."""
    objects = client.CustomObjectsApi(user)
    seen: dict[str, Any] = {}

    async def holds() -> bool:
        job = await objects.get_namespaced_custom_object(
            JOBS.group, JOBS.version, namespace, JOBS.plural, "big"
        )
        seen.update(job.get("status") or {})
        return bool(check(seen))

    await eventually(holds, "the job's status", timeout=TIMEOUT, explain=lambda: str(seen))
    return seen
