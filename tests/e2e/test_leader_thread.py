"""Leader election in a thread of its own (kube/leader_thread.py), as the reconciler and the
housekeeper run it: a leader whose own loop is held by CPU work for longer than the renew
deadline keeps its Lease; a lost Lease ends the run once lead() has ended; a cancelled run
releases the Lease."""

from __future__ import annotations

import asyncio
import contextlib
import time
from datetime import UTC, datetime, timedelta

from kubernetes_asyncio import client
from support import ControlPlane

from torchjob.kube.client import KubeClient, new_kube_client
from torchjob.kube.leader import LeaderElector
from torchjob.kube.leader_thread import ElectionThread

LEASE = "torchjob-test-leader-thread"
LEASE_SECONDS = 3.0
RENEW_DEADLINE = 2.0
RETRY_SECONDS = 0.4


def election(control_plane: ControlPlane, namespace: str) -> ElectionThread:
    def elector_of(lease_api: KubeClient) -> LeaderElector:
        return LeaderElector(
            lease_api,
            namespace,
            LEASE,
            "leader",
            lease_seconds=LEASE_SECONDS,
            renew_deadline=RENEW_DEADLINE,
            retry_seconds=RETRY_SECONDS,
        )

    return ElectionThread(lambda: new_kube_client(str(control_plane.kubeconfig)), elector_of)


async def lease_spec(api_client: client.ApiClient, namespace: str) -> client.V1LeaseSpec:
    lease = await client.CoordinationV1Api(api_client).read_namespaced_lease(LEASE, namespace)
    return lease.spec


async def test_a_leader_whose_loop_is_held_keeps_its_lease_and_releases_it_when_cancelled(
    control_plane: ControlPlane, kube_client: client.ApiClient, namespace: str
) -> None:
    elected = election(control_plane, namespace)
    leading, go, held = asyncio.Event(), asyncio.Event(), asyncio.Event()

    async def lead() -> None:
        leading.set()
        await go.wait()
        # CPU work that never yields (a big list decoded, a plan over a thousand pods), for
        # longer than a renewal may fail before the leader gives up.
        time.sleep(RENEW_DEADLINE * 2.5)  # noqa: ASYNC251 (the loop held, on purpose)
        held.set()
        await asyncio.Event().wait()

    run = asyncio.create_task(elected.run(lead))
    try:
        await asyncio.wait_for(leading.wait(), timeout=60)
        renewed_before = (await lease_spec(kube_client, namespace)).renew_time
        go.set()
        await asyncio.wait_for(held.wait(), timeout=60)
        await asyncio.sleep(0)
        assert not run.done(), "leadership was lost while the loop was held"
        assert elected.is_leader
        spec = await lease_spec(kube_client, namespace)
        assert spec.holder_identity == "leader"
        assert spec.renew_time > renewed_before
    finally:
        run.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await run
    assert not elected.is_leader
    assert (await lease_spec(kube_client, namespace)).holder_identity == ""


async def test_a_lost_lease_ends_the_run_once_lead_has_ended(
    control_plane: ControlPlane, kube_client: client.ApiClient, namespace: str
) -> None:
    elected = election(control_plane, namespace)
    leading, ended = asyncio.Event(), asyncio.Event()

    async def lead() -> None:
        leading.set()
        try:
            await asyncio.Event().wait()
        finally:
            await asyncio.sleep(0.2)  # stopping takes a while: the run waits for it
            ended.set()

    run = asyncio.create_task(elected.run(lead))
    try:
        await asyncio.wait_for(leading.wait(), timeout=60)
        now = datetime.now(UTC) + timedelta(hours=1)
        patch = {
            "spec": {
                "holderIdentity": "intruder",
                "leaseDurationSeconds": 3600,
                "renewTime": now.strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
            }
        }
        await client.CoordinationV1Api(kube_client).patch_namespaced_lease(LEASE, namespace, patch)
        await asyncio.wait_for(run, timeout=60)  # bounded only so that a failure ends
    finally:
        run.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await run
    assert ended.is_set()
    assert not elected.is_leader
    assert (await lease_spec(kube_client, namespace)).holder_identity == "intruder"
