"""Leader election on a real Lease: one leader among candidates, a takeover once a silent
leader's Lease expires, a faster one when the leader releases it, and a leader that loses its
Lease stops leading."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import pytest
from kubernetes_asyncio import client

from torchjob.kube.client import KubeClient
from torchjob.kube.leader import JITTER, LeaderElector

LEASE = "torchjob-test-leader"
LEASE_SECONDS = 4.0
RENEW_DEADLINE = 2.5
RETRY_SECONDS = 0.5
# The longest a candidate waits between two looks at the Lease.
POLL = RETRY_SECONDS * (1 + JITTER)


class Candidate:
    """One elector whose lead() records when it started and whether it was cancelled."""

    def __init__(
        self, api_client: KubeClient, namespace: str, identity: str, release: bool = True
    ) -> None:
        self.identity = identity
        self.elector = LeaderElector(
            api_client,
            namespace,
            LEASE,
            identity,
            lease_seconds=LEASE_SECONDS,
            renew_deadline=RENEW_DEADLINE,
            retry_seconds=RETRY_SECONDS,
            release_on_cancel=release,
        )
        self.leading = asyncio.Event()
        self.stopped_leading = asyncio.Event()
        self.task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self.task = asyncio.create_task(self.elector.run(self.lead), name=self.identity)

    async def lead(self) -> None:
        self.leading.set()
        try:
            await asyncio.Event().wait()
        finally:
            self.stopped_leading.set()

    async def stop(self) -> None:
        if self.task is not None:
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.task


@contextlib.asynccontextmanager
async def candidates(
    api_client: KubeClient, namespace: str, *, first_releases: bool = True
) -> AsyncIterator[tuple[Candidate, Candidate]]:
    """Two candidates; `first`'s election is started first, so it leads."""
    first = Candidate(api_client, namespace, "first", release=first_releases)
    second = Candidate(api_client, namespace, "second")
    try:
        first.start()
        await asyncio.wait_for(first.leading.wait(), timeout=60)
        second.start()
        yield first, second
    finally:
        await first.stop()
        await second.stop()


async def holder(api_client: client.ApiClient, namespace: str) -> str | None:
    lease = await client.CoordinationV1Api(api_client).read_namespaced_lease(LEASE, namespace)
    return lease.spec.holder_identity


async def seconds_until(event: asyncio.Event, timeout: float) -> float:
    started = time.monotonic()
    await asyncio.wait_for(event.wait(), timeout=timeout)
    return time.monotonic() - started


async def test_only_one_candidate_leads(
    kube_client: client.ApiClient, service_client: KubeClient, namespace: str
) -> None:
    async with candidates(service_client, namespace) as (first, second):
        # Long enough for the second to have tried many times, and past one lease duration.
        await asyncio.sleep(LEASE_SECONDS + POLL)
        assert first.elector.is_leader
        assert not second.elector.is_leader
        assert not second.leading.is_set()
        assert await holder(kube_client, namespace) == "first"


async def test_a_silent_leader_is_replaced_once_its_lease_expires(
    kube_client: client.ApiClient, service_client: KubeClient, namespace: str
) -> None:
    async with candidates(service_client, namespace, first_releases=False) as (first, second):
        await asyncio.sleep(POLL * 2)  # the second has seen the Lease being renewed
        await first.stop()
        assert first.stopped_leading.is_set()
        assert not first.elector.is_leader
        waited = await seconds_until(second.leading, timeout=60)
        assert second.elector.is_leader
        assert await holder(kube_client, namespace) == "second"
    # Not before the Lease could have expired (how soon after is the machine's speed, not a
    # property of the election).
    assert waited >= LEASE_SECONDS - POLL


async def test_a_released_lease_is_taken_over_without_waiting_for_it_to_expire(
    kube_client: client.ApiClient, service_client: KubeClient, namespace: str
) -> None:
    async with candidates(service_client, namespace) as (first, second):
        await asyncio.sleep(POLL * 2)
        await first.stop()
        # client-go's release: no holder and a duration already run out, so the next look at the
        # Lease takes it rather than waiting LEASE_SECONDS for it to expire.
        lease = await client.CoordinationV1Api(kube_client).read_namespaced_lease(LEASE, namespace)
        if lease.spec.holder_identity != "second":
            assert lease.spec.holder_identity == ""
            assert lease.spec.lease_duration_seconds == 1
        await asyncio.wait_for(second.leading.wait(), timeout=60)
        assert await holder(kube_client, namespace) == "second"


async def test_a_leader_that_loses_its_lease_stops_leading_and_returns(
    kube_client: client.ApiClient, service_client: KubeClient, namespace: str
) -> None:
    leading, cancelled = asyncio.Event(), asyncio.Event()

    async def lead() -> None:
        leading.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.set()
            raise

    election = asyncio.create_task(
        LeaderElector(
            service_client,
            namespace,
            LEASE,
            "leader",
            lease_seconds=LEASE_SECONDS,
            renew_deadline=RENEW_DEADLINE,
            retry_seconds=RETRY_SECONDS,
        ).run(lead)
    )
    try:
        await asyncio.wait_for(leading.wait(), timeout=60)
        await _take_lease(kube_client, namespace, "intruder")
        # It ends: bounded only so that a failure does not hang the session.
        await asyncio.wait_for(election, timeout=60)
    finally:
        election.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await election
    assert cancelled.is_set()
    # Lost leadership leaves the Lease alone: it is the intruder's now.
    assert await holder(kube_client, namespace) == "intruder"


async def _take_lease(api_client: client.ApiClient, namespace: str, identity: str) -> None:
    """Another holder writes the Lease, as if the leader's renewals had been lost for long."""
    now = datetime.now(UTC)
    patch = {
        "spec": {
            "holderIdentity": identity,
            "leaseDurationSeconds": 3600,
            "renewTime": (now + timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
        }
    }
    await client.CoordinationV1Api(api_client).patch_namespaced_lease(LEASE, namespace, patch)


def test_renewal_must_end_before_the_lease_expires(service_client: KubeClient) -> None:
    with pytest.raises(ValueError, match="renew_deadline"):
        LeaderElector(service_client, "ns", LEASE, "me", lease_seconds=10, renew_deadline=10)
