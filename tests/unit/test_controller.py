"""run_workers: failures come back with growing backoff, terminal failures do not, a requested
requeue happens after its delay, and each reconcile logs under its own reconcile id. A round
that fails after its status write leaves its job no wait for that write."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any, cast

import orjson
import pytest
import structlog
from prometheus_client import REGISTRY
from structlog.testing import capture_logs
from support.eventually import eventually
from support.jobs import JobBuilder

from torchjob.api.job_api import TRAINING_JOB
from torchjob.kube.client import KubeClient
from torchjob.kube.controller import run_workers
from torchjob.kube.errors import Conflict, Forbidden
from torchjob.kube.informer import Informer
from torchjob.kube.reconcile import JobKey, Result, TerminalError
from torchjob.kube.workqueue import LOW, NORMAL, WorkQueue
from torchjob.reconciler.controller import Reconciler, job_update_matters
from torchjob.reconciler.executor import ReconcilerExecutor
from torchjob.reconciler.settings import parse

BACKOFF = 0.02


def new_queue() -> WorkQueue[str]:
    return WorkQueue(backoff_base=BACKOFF, backoff_cap=1.0)


@asynccontextmanager
async def workers(
    queue: WorkQueue[str], reconcile: Callable[[str], Awaitable[Result]], name: str, count: int = 2
) -> AsyncIterator[None]:
    running = asyncio.create_task(run_workers(queue, reconcile, count, name))
    try:
        yield
    finally:
        queue.shutdown()
        await asyncio.wait_for(running, timeout=5)


async def wait_for(condition: Callable[[], bool], within: float = 5.0) -> None:
    await eventually(condition, timeout=within, interval=0.005)


def reconciles(name: str, result: str) -> float:
    value = REGISTRY.get_sample_value(
        "torchjob_reconcile_total", {"controller": name, "result": result}
    )
    return value or 0.0


async def test_a_failing_reconcile_is_retried_with_growing_backoff() -> None:
    queue = new_queue()
    calls: list[float] = []

    async def reconcile(key: str) -> Result:
        calls.append(time.monotonic())
        if len(calls) < 4:
            raise RuntimeError("not yet")
        return Result()

    async with workers(queue, reconcile, "retries"):
        queue.add("ns/a")
        await wait_for(lambda: len(calls) == 4)
    gaps = [later - earlier for earlier, later in itertools.pairwise(calls)]
    for failures, gap in enumerate(gaps):
        assert gap >= BACKOFF * 2**failures * 0.99
    assert queue.retries("ns/a") == 0, "success did not forget the backoff"
    assert reconciles("retries", "error") == 3
    assert reconciles("retries", "success") == 1


async def test_a_terminal_error_is_not_retried() -> None:
    queue = new_queue()
    calls: list[str] = []

    async def reconcile(key: str) -> Result:
        calls.append(key)
        raise TerminalError("the object can never work")

    async with workers(queue, reconcile, "terminal"):
        queue.add("ns/a")
        await wait_for(lambda: len(calls) == 1)
        await asyncio.sleep(BACKOFF * 10)
    assert calls == ["ns/a"]
    assert queue.retries("ns/a") == 0
    assert reconciles("terminal", "terminal") == 1


async def test_requeue_after_runs_the_key_again_after_the_delay() -> None:
    queue = new_queue()
    calls: list[float] = []

    async def reconcile(key: str) -> Result:
        calls.append(time.monotonic())
        return Result(requeue_after=0.1) if len(calls) == 1 else Result()

    async with workers(queue, reconcile, "requeue"):
        queue.add("ns/a")
        await wait_for(lambda: len(calls) == 2)
        await asyncio.sleep(0.15)
    assert len(calls) == 2
    assert calls[1] - calls[0] >= 0.1 * 0.99
    assert reconciles("requeue", "requeue_after") == 1
    assert reconciles("requeue", "success") == 1


async def test_one_key_is_never_reconciled_twice_at_once() -> None:
    queue = new_queue()
    active: set[str] = set()
    overlaps: list[str] = []
    calls: list[str] = []

    async def reconcile(key: str) -> Result:
        if key in active:
            overlaps.append(key)
        active.add(key)
        calls.append(key)
        await asyncio.sleep(0.01)
        active.discard(key)
        return Result()

    async with workers(queue, reconcile, "exclusive", count=4):
        for _ in range(5):
            queue.add("ns/a")
            queue.add("ns/b")
            await asyncio.sleep(0.004)
        await wait_for(lambda: len(queue) == 0 and not active)
    assert overlaps == []
    assert set(calls) == {"ns/a", "ns/b"}


async def test_a_change_is_reconciled_while_every_other_worker_holds_new_work() -> None:
    """Low-priority keys (new jobs, whose rounds create everything) take every worker but one;
    a key added at the normal priority (a pod now Running) is reconciled by that one at once."""
    queue = new_queue()
    release = asyncio.Event()
    started: list[str] = []

    async def reconcile(key: str) -> Result:
        started.append(key)
        if key.startswith("new"):
            await release.wait()
        return Result()

    async with workers(queue, reconcile, "priority", count=3):
        for index in range(4):
            queue.add(f"new-{index}", LOW)
        await wait_for(lambda: started == ["new-0", "new-1"])
        queue.add("changed")
        await wait_for(lambda: "changed" in started)
        assert started == ["new-0", "new-1", "changed"], "a new job took the last worker"
        release.set()
        await wait_for(lambda: len(started) == 5)
    assert started[3:] == ["new-2", "new-3"]


async def test_each_reconcile_logs_under_its_own_reconcile_id() -> None:
    queue = new_queue()
    calls: list[str] = []

    async def reconcile(key: str) -> Result:
        calls.append(key)
        structlog.get_logger("test").info("reconciling")
        if len(calls) == 1:
            raise RuntimeError("first attempt fails")
        return Result()

    with capture_logs(processors=[structlog.contextvars.merge_contextvars]) as logs:
        async with workers(queue, reconcile, "logging"):
            queue.add("ns/a")
            await wait_for(lambda: len(calls) == 2)

    ours = [entry for entry in logs if entry.get("controller") == "logging"]
    reconciling = [entry for entry in ours if entry["event"] == "reconciling"]
    failure = next(entry for entry in ours if entry["event"] == "reconcile failed; retrying")
    assert [entry["key"] for entry in reconciling] == ["ns/a", "ns/a"]
    first, second = (entry["reconcile_id"] for entry in reconciling)
    assert first != second
    assert failure["reconcile_id"] == first
    assert "reconcile_id" not in structlog.contextvars.get_contextvars()


@pytest.mark.parametrize("count", [1, 3])
async def test_workers_stop_when_the_queue_shuts_down(count: int) -> None:
    queue = new_queue()

    async def reconcile(key: str) -> Result:
        return Result()

    running = asyncio.create_task(run_workers(queue, reconcile, count, f"stop-{count}"))
    await asyncio.sleep(0.01)
    queue.shutdown()
    await asyncio.wait_for(running, timeout=5)


async def test_queue_depth_is_exported_while_workers_run() -> None:
    queue = new_queue()
    release = asyncio.Event()

    async def reconcile(key: str) -> Result:
        await release.wait()
        return Result()

    def depth() -> float | None:
        return REGISTRY.get_sample_value("torchjob_workqueue_depth", {"controller": "depth"})

    for key in ("a", "b", "c"):
        queue.add(key)
    async with workers(queue, reconcile, "depth", count=1):
        await wait_for(lambda: depth() == 2)  # one key is with the worker
        release.set()
        await wait_for(lambda: depth() == 0)
    assert depth() is None


async def test_an_apiserver_refusal_is_logged_by_its_message_and_a_fault_by_its_traceback() -> None:
    queue = new_queue()
    failures = [Conflict(409, "Conflict", "the object has been modified"), KeyError("spec")]

    async def reconcile(key: str) -> Result:
        if failures:
            raise failures.pop(0)
        return Result()

    with capture_logs() as logs:
        async with workers(queue, reconcile, "failures"):
            queue.add("ns/a")
            await wait_for(lambda: reconciles("failures", "success") == 1)

    refused, fault = (entry for entry in logs if entry["event"] == "reconcile failed; retrying")
    assert refused["error"] == "Conflict: 409 Conflict: the object has been modified"
    assert refused["exc_info"] is False
    assert fault["error"] == "KeyError: 'spec'"
    assert fault["exc_info"] is True


def test_a_job_update_is_looked_at_for_what_the_planner_reads() -> None:
    """A status write is no news, except a job's first progress report, from which its progress
    deadline runs; a change of spec or annotations, and a deletion, are."""
    job = {"metadata": {"name": "j"}, "spec": {"a": 1}, "status": {"phase": "Running"}}
    written = {**job, "status": {"phase": "Running", "backoffCount": 1}}
    reported = {**job, "status": {"phase": "Running", "trainerStatus": {"progressPercentage": 5}}}
    later = {**job, "status": {"phase": "Running", "trainerStatus": {"progressPercentage": 9}}}
    annotated = {**job, "metadata": {"name": "j", "annotations": {"x": "1"}}}
    deleting = {**job, "metadata": {"name": "j", "deletionTimestamp": "2026-01-01T00:00:00Z"}}
    assert not job_update_matters(job, written)
    assert job_update_matters(written, reported)
    assert not job_update_matters(reported, later)
    assert job_update_matters(job, {**job, "spec": {"a": 2}})
    assert job_update_matters(job, annotated)
    assert job_update_matters(job, deleting)


class _JobCache:
    """The jobs informer's cache as the reconciler reads it: one job, by name."""

    def __init__(self, job: dict[str, Any]) -> None:
        self.job = job

    def get(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self.job if name == self.job["metadata"]["name"] else None


class _WriteSeenFirstThenRefused:
    """An executor whose status write the watch shows before the write's answer comes back
    (the cache moves on, then the write is expected), and whose next request, a deletion, the
    apiserver refuses."""

    def __init__(self, reconciler: Reconciler, cache: _JobCache) -> None:
        self.reconciler, self.cache = reconciler, cache

    async def execute(self, key: JobKey, job: dict[str, Any], *_: object) -> None:
        meta = {**job["metadata"], "resourceVersion": "2"}
        self.cache.job = {**job, "metadata": meta, "status": {"phase": "Running"}}
        self.reconciler.expectations.expect_status(key, "2")
        raise Forbidden(403, "Forbidden", "pods is forbidden: denied by a policy")


async def test_a_round_that_fails_after_its_status_write_leaves_no_wait_for_it() -> None:
    """A job whose round wrote its status and then failed is reconciled again at once (with
    backoff), not after its expectations expire: the cache already shows that write, and no
    later watch event will show it again."""
    job = JobBuilder("j").metadata(namespace="ns", uid="uid-j", resourceVersion="1")
    cache = _JobCache(job.replicas("worker", 2).build())
    reconciler = Reconciler(cast(KubeClient, None), parse([]))
    reconciler.job_informers[TRAINING_JOB] = cast(Informer, cache)
    reconciler.executor = cast(ReconcilerExecutor, _WriteSeenFirstThenRefused(reconciler, cache))
    key = JobKey.of(cache.job)
    with pytest.raises(Forbidden):
        await reconciler.reconcile(key)
    assert reconciler.expectations.satisfied(key), "waiting for a write the cache shows"


class _ListsOneJob:
    """An apiserver whose job list holds one job, and whose watches stay silent."""

    def __init__(self, job: dict[str, Any]) -> None:
        self.job = job

    async def request(self, method: str, path: str, **_: Any) -> bytes:
        page = {"kind": "PyTorchTrainingJobList", "items": [self.job]}
        return orjson.dumps({**page, "metadata": {"resourceVersion": "1"}})

    async def watch(self, path: str, query: Any, *, read_seconds: float) -> AsyncIterator[bytes]:
        await asyncio.Event().wait()
        yield b""


async def test_a_job_seen_for_the_first_time_waits_behind_changes() -> None:
    """Its round creates everything it owns: a job new to the cache is queued at low priority,
    which the worker kept for changes does not take."""
    job = JobBuilder("j").metadata(namespace="ns", uid="uid-j", resourceVersion="1").build()
    reconciler = Reconciler(cast(KubeClient, _ListsOneJob(job)), parse([]))
    listing = asyncio.create_task(reconciler.jobs.run())
    try:
        await asyncio.wait_for(reconciler.jobs.synced.wait(), timeout=5)
    finally:
        listing.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await listing
    reconciler.queue.add(JobKey("ns", "changed"))
    assert await reconciler.queue.get(NORMAL) == JobKey("ns", "changed")
    change_only = asyncio.create_task(reconciler.queue.get(NORMAL))
    assert await reconciler.queue.get() == JobKey.of(job)
    assert not change_only.done()
    change_only.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await change_only
