"""Workers that drain a work queue into a reconcile function, in controller-runtime's shape: a
failed reconcile is retried with per-key backoff, a terminal one is not, and a successful one may
ask to run again after a delay."""

from __future__ import annotations

import asyncio
import time
import uuid

import aiohttp
import structlog
from prometheus_client import Counter, Gauge, Histogram

from torchjob.kube.errors import KubeError
from torchjob.kube.reconcile import K, Reconcile, TerminalError
from torchjob.kube.workqueue import NORMAL, QueueShutDown, WorkQueue

log = structlog.get_logger("torchjob.kube.controller")

# Failures the apiserver or the network report, which a retry is there for: logged with their
# message, not a traceback, which would say nothing more and bury real faults.
EXPECTED_FAILURES = (KubeError, aiohttp.ClientError, TimeoutError)

RECONCILES = Counter(
    "torchjob_reconcile_total", "Reconciles finished, by outcome", ["controller", "result"]
)
RECONCILE_SECONDS = Histogram(
    "torchjob_reconcile_duration_seconds",
    "Time one reconcile took",
    ["controller"],
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
)
QUEUE_DEPTH = Gauge(
    "torchjob_workqueue_depth", "Keys ready and waiting for a worker", ["controller"]
)


async def run_workers(
    queue: WorkQueue[K], reconcile: Reconcile[K], workers: int, name: str
) -> None:
    """Run `workers` concurrent workers until cancelled or until the queue is shut down. With
    more than one, the first takes no key of low priority (kube/workqueue.py): however many long
    rounds of new work the others are in, a change is reconciled as soon as it is seen."""
    QUEUE_DEPTH.labels(name).set_function(lambda: len(queue))
    try:
        async with asyncio.TaskGroup() as group:
            for index in range(workers):
                least = NORMAL if index == 0 and workers > 1 else None
                group.create_task(
                    _work(queue, reconcile, name, least), name=f"{name}-worker-{index}"
                )
    finally:
        QUEUE_DEPTH.remove(name)


async def _work(queue: WorkQueue[K], reconcile: Reconcile[K], name: str, least: int | None) -> None:
    while True:
        try:
            key = await queue.get(least)
        except QueueShutDown:
            return
        try:
            await _reconcile_one(queue, reconcile, name, key)
        finally:
            queue.done(key)


async def _reconcile_one(queue: WorkQueue[K], reconcile: Reconcile[K], name: str, key: K) -> None:
    reconcile_id = str(uuid.uuid4())
    with structlog.contextvars.bound_contextvars(
        controller=name, key=str(key), reconcile_id=reconcile_id
    ):
        started = time.perf_counter()
        outcome = await _outcome_of(queue, reconcile, key)
        RECONCILE_SECONDS.labels(name).observe(time.perf_counter() - started)
        RECONCILES.labels(name, outcome).inc()


async def _outcome_of(queue: WorkQueue[K], reconcile: Reconcile[K], key: K) -> str:
    """Reconcile `key`, schedule what follows, and name the outcome for the metrics."""
    try:
        result = await reconcile(key)
    except TerminalError:
        queue.forget(key)
        log.error("reconcile failed; not retrying", exc_info=True)
        return "terminal"
    except Exception as error:
        retries = queue.retries(key)
        queue.add_rate_limited(key)
        expected = isinstance(error, EXPECTED_FAILURES)
        log.warning(
            "reconcile failed; retrying",
            retries=retries,
            backoff=queue.backoff(retries),
            error=f"{type(error).__name__}: {error}",
            exc_info=not expected,
        )
        return "error"
    queue.forget(key)
    if result.requeue_after is None:
        return "success"
    queue.add_after(key, result.requeue_after)
    return "requeue_after"
