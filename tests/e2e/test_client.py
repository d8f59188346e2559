"""The API client's client-side rate limit against the real apiserver, on fake time: requests
beyond the burst wait for tokens, a watch does not."""

from __future__ import annotations

import asyncio
from typing import Any, cast

import aiohttp
from kubernetes_asyncio import client
from support import ControlPlane
from support.eventually import eventually
from support.fake_time import FakeTime, settle

from torchjob.kube.client import RateLimitedApiClient, TokenBucket, new_api_client


async def test_requests_beyond_the_burst_wait_and_watches_do_not(
    control_plane: ControlPlane, namespace: str
) -> None:
    fake = FakeTime()
    api = await new_api_client(str(control_plane.kubeconfig), qps=1, burst=2)
    assert isinstance(api, RateLimitedApiClient)
    api.limiter = TokenBucket(1, 2, clock=fake.clock, sleep=fake.sleep)
    async with api:
        core = client.CoreV1Api(api)

        async def read() -> Any:
            return await core.read_namespace(namespace)

        reads = [asyncio.create_task(read()) for _ in range(4)]

        def answered() -> int:
            return sum(task.done() for task in reads)

        await eventually(lambda: answered() == 2)
        # A watch is one long request: it starts with the bucket empty and two requests waiting.
        watching = core.list_namespaced_config_map(
            namespace, watch=True, timeout_seconds=1, _preload_content=False
        )
        response = cast(aiohttp.ClientResponse, await watching)
        async with response:
            assert response.status == 200
            await response.read()
        await settle()
        assert answered() == 2, "requests went out without a token"

        await fake.advance(1)
        await eventually(lambda: answered() == 3)
        await fake.advance(1)
        await eventually(lambda: answered() == 4)
        for task in reads:
            namespace_object: Any = task.result()
            assert namespace_object.metadata.name == namespace


async def test_no_qps_means_no_limiter(control_plane: ControlPlane) -> None:
    api = await new_api_client(str(control_plane.kubeconfig))
    async with api:
        assert isinstance(api, RateLimitedApiClient)
        assert api.limiter is None
