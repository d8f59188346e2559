"""Leader election on a coordination.k8s.io/v1 Lease, following client-go's algorithm.

kubernetes-asyncio's `leaderelection` is not used: it cannot release the Lease on shutdown (so a
successor waits a full lease duration), accepts only whole-second periods of at least one second,
and writes times the apiserver's MicroTime parser does not always accept.

A candidate takes the Lease when nobody holds it or when its holder has not renewed it for
`leaseDurationSeconds` as measured by this candidate's own monotonic clock (never by comparing
wall clocks across machines). Every write carries the resourceVersion it was based on, so of two
candidates racing for an expired Lease exactly one wins.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

import aiohttp
import structlog
from prometheus_client import Gauge

from torchjob.kube.client import KubeClient
from torchjob.kube.errors import Conflict, KubeError, NotFound
from torchjob.kube.resources import LEASES
from torchjob.kube.rest import Resources
from torchjob.lifecycle.times import format_micro_time

LOGGER_NAME = "torchjob.kube.leader"
log = structlog.get_logger(LOGGER_NAME)

# How much later than `retry_seconds` a candidate may poll, so candidates spread out.
JITTER = 0.2
RETRYABLE = (KubeError, aiohttp.ClientError, asyncio.TimeoutError, OSError)

IS_LEADER = Gauge(
    "torchjob_leader_election_is_leader",
    "1 while this process holds the Lease and may act, else 0",
    ["lease"],
)


# A coordination.k8s.io/v1 Lease, as the apiserver sends it.
Lease = dict[str, Any]


def _spec_of(lease: Lease) -> dict[str, Any]:
    spec = lease.get("spec")
    return spec if isinstance(spec, dict) else {}


def _version_of(lease: Lease) -> str | None:
    metadata = lease.get("metadata")
    version = metadata.get("resourceVersion") if isinstance(metadata, dict) else None
    return version if isinstance(version, str) else None


def _micro_time() -> str:
    return format_micro_time(datetime.now(UTC))


class LeaderElector:
    """One candidate for one Lease. `is_leader` is true only while `lead()` may act."""

    def __init__(
        self,
        api_client: KubeClient,
        namespace: str,
        lease_name: str,
        identity: str,
        *,
        lease_seconds: float = 15,
        renew_deadline: float = 10,
        retry_seconds: float = 2,
        release_on_cancel: bool = True,
    ) -> None:
        if not retry_seconds < renew_deadline < lease_seconds:
            # Renewal must give up (and stop lead()) before another candidate may take over.
            raise ValueError("need retry_seconds < renew_deadline < lease_seconds")
        # Plain REST calls on the Lease as JSON: the generated CoordinationV1Api and its models
        # (with the date parser they decode times with) would be loaded for these four calls.
        self._leases = Resources(api_client)
        self._namespace = namespace
        self._name = lease_name
        self._identity = identity
        self._lease_seconds = lease_seconds
        self._renew_deadline = renew_deadline
        self._retry_seconds = retry_seconds
        self._release_on_cancel = release_on_cancel
        self._is_leader = False
        self._observed_version: str | None = None
        self._observed_at = 0.0
        self._holder: str | None = None
        # The Lease as our last write of it left it: while it is ours, renewing it is one write.
        self._written: Lease | None = None
        self._gauge = IS_LEADER.labels(f"{namespace}/{lease_name}")
        self._gauge.set(0)
        # A lazy logger, so that logging configured after construction still applies.
        self._log = structlog.get_logger(
            LOGGER_NAME, lease=f"{namespace}/{lease_name}", identity=identity
        )

    @property
    def is_leader(self) -> bool:
        return self._is_leader

    async def run(self, lead: Callable[[], Awaitable[None]]) -> None:
        """Wait for the Lease, then run `lead()` while holding it.

        Returns when leadership is lost (after cancelling `lead()`), or when `lead()` returns; an
        exception from `lead()` is raised. On cancellation `lead()` is cancelled and the Lease is
        released so that a successor need not wait for it to expire.
        """
        await self._acquire()
        self._is_leader = True
        self._gauge.set(1)
        self._log.info("became leader")
        leading = asyncio.create_task(_call(lead), name=f"lead-{self._name}")
        renewing = asyncio.create_task(self._renew_until_lost(), name=f"renew-{self._name}")
        ending = "cancelled"
        try:
            done, _ = await asyncio.wait({leading, renewing}, return_when=asyncio.FIRST_COMPLETED)
            ending = "lost" if renewing in done else "finished"
        finally:
            await self._step_down(ending, leading, renewing)
        if ending == "lost":
            self._log.warning("lost leadership")
            _log_failure(leading)
        else:
            leading.result()

    async def _step_down(self, ending: str, *tasks: asyncio.Task[None]) -> None:
        self._is_leader = False
        self._gauge.set(0)
        for task in tasks:
            task.cancel()
        await asyncio.wait(tasks)
        # A lost Lease is someone else's by now; releasing it could only do harm.
        if ending == "finished" or (ending == "cancelled" and self._release_on_cancel):
            await self._release()

    async def _acquire(self) -> None:
        standing_by_for: str | None = None
        while True:
            if await self._try_acquire_or_renew():
                return
            if self._holder and self._holder != standing_by_for:
                standing_by_for = self._holder
                self._log.info(
                    "standing by; another candidate holds the lease", holder=self._holder
                )
            await asyncio.sleep(self._retry_seconds * random.uniform(1, 1 + JITTER))

    async def _renew_until_lost(self) -> None:
        """Renew every retry period; return once renewal has failed for `renew_deadline`."""
        renewed_at = time.monotonic()
        while True:
            await asyncio.sleep(self._retry_seconds)
            remaining = self._renew_deadline - (time.monotonic() - renewed_at)
            if remaining <= 0:
                return
            attempted_at = time.monotonic()
            try:
                async with asyncio.timeout(remaining):
                    renewed = await self._try_acquire_or_renew()
            except TimeoutError:
                renewed = False
            if renewed:
                renewed_at = attempted_at

    async def _try_acquire_or_renew(self) -> bool:
        if self._is_leader and self._written is not None:
            # client-go's fast path: renew the Lease as we last wrote it, without reading it
            # first; a Conflict (someone else wrote since) or any failure reads it again.
            try:
                await self._take(self._written)
                return True
            except RETRYABLE:
                self._written = None
        try:
            lease = await self._read()
            if lease is None:
                await self._create()
                return True
            if not self._may_take(lease):
                return False
            await self._take(lease)
            return True
        except Conflict:
            return False  # another candidate wrote first
        except RETRYABLE as error:
            self._log.warning(
                "could not acquire or renew the lease", error=f"{type(error).__name__}: {error}"
            )
            return False

    def _may_take(self, lease: Lease) -> bool:
        spec = _spec_of(lease)
        holder = spec.get("holderIdentity")
        self._holder = holder
        if not holder or holder == self._identity:
            return True
        version = _version_of(lease)
        if version != self._observed_version:
            # Any write to the Lease is its holder renewing: its expiry starts again now.
            self._observed_version = version
            self._observed_at = time.monotonic()
        duration = spec.get("leaseDurationSeconds") or 0
        return time.monotonic() > self._observed_at + duration

    async def _read(self) -> Lease | None:
        try:
            return await self._leases.get(LEASES, self._namespace, self._name)
        except NotFound:
            return None

    async def _create(self) -> None:
        now = _micro_time()
        # Sent as it is, with our exact MicroTime strings.
        body: Lease = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": self._name, "namespace": self._namespace},
            "spec": {
                "holderIdentity": self._identity,
                "leaseDurationSeconds": self._whole_lease_seconds(),
                "acquireTime": now,
                "renewTime": now,
                "leaseTransitions": 0,
            },
        }
        await self._leases.create(LEASES, self._namespace, body)

    async def _take(self, lease: Lease) -> None:
        now = _micro_time()
        spec: dict[str, Any] = {
            "leaseDurationSeconds": self._whole_lease_seconds(),
            "renewTime": now,
        }
        held = _spec_of(lease)
        if held.get("holderIdentity") != self._identity:
            transitions = held.get("leaseTransitions") or 0
            spec |= {
                "holderIdentity": self._identity,
                "acquireTime": now,
                "leaseTransitions": transitions + 1,
            }
        await self._patch(lease, spec)

    async def _release(self) -> None:
        """Give the Lease up if it is still ours; a failure only delays the successor."""
        try:
            async with asyncio.timeout(self._renew_deadline):
                lease = await self._read()
                if lease is None or _spec_of(lease).get("holderIdentity") != self._identity:
                    return
                # client-go's release: no holder, and a duration that has already run out.
                spec = {"holderIdentity": "", "leaseDurationSeconds": 1, "renewTime": _micro_time()}
                await self._patch(lease, spec)
            self._log.info("released the lease")
        except RETRYABLE as error:
            self._log.warning(
                "could not release the lease", error=f"{type(error).__name__}: {error}"
            )

    async def _patch(self, lease: Lease, spec: dict[str, Any]) -> None:
        # The resourceVersion makes the patch conditional: Conflict if anyone wrote since.
        version = _version_of(lease)
        body = {"metadata": {"resourceVersion": version}, "spec": spec}
        self._written = None
        written = await self._leases.patch(LEASES, self._namespace, self._name, body)
        if written:
            merged = {**_spec_of(lease), **spec}
            self._written = {"metadata": {"resourceVersion": written}, "spec": merged}

    def _whole_lease_seconds(self) -> int:
        return max(1, round(self._lease_seconds))


async def _call(lead: Callable[[], Awaitable[None]]) -> None:
    await lead()


def _log_failure(task: asyncio.Task[None]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.error("lead() failed while leadership was being lost", exc_info=task.exception())
