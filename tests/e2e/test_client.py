"""Our API client against the real apiserver: its client-side rate limit on fake time (requests
beyond the burst wait for tokens, a watch does not), and the apiserver's refusals as our errors."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import orjson
import pytest
from support import ControlPlane
from support.eventually import eventually
from support.fake_time import FakeTime, settle

from torchjob.kube.client import KubeClient, TokenBucket, new_kube_client
from torchjob.kube.errors import Conflict, Invalid, NotFound


async def test_requests_beyond_the_burst_wait_and_watches_do_not(
    control_plane: ControlPlane, namespace: str
) -> None:
    fake = FakeTime()
    api = await new_kube_client(str(control_plane.kubeconfig), qps=1, burst=2)
    api.limiter = TokenBucket(1, 2, clock=fake.clock, sleep=fake.sleep)
    async with api:

        async def read() -> Any:
            return await api.request_json("GET", f"/api/v1/namespaces/{namespace}")

        reads = [asyncio.create_task(read()) for _ in range(4)]

        def answered() -> int:
            return sum(task.done() for task in reads)

        await eventually(lambda: answered() == 2)
        # A watch is one long request: it starts with the bucket empty and two requests waiting.
        path = f"/api/v1/namespaces/{namespace}/configmaps"
        async with contextlib.aclosing(
            api.watch(path, {"timeoutSeconds": "1"}, read_seconds=10)
        ) as lines:
            assert [line async for line in lines] == []
        await settle()
        assert answered() == 2, "requests went out without a token"

        await fake.advance(1)
        await eventually(lambda: answered() == 3)
        await fake.advance(1)
        await eventually(lambda: answered() == 4)
        for task in reads:
            assert task.result()["metadata"]["name"] == namespace


async def test_no_qps_means_no_limiter(control_plane: ControlPlane) -> None:
    api = await new_kube_client(str(control_plane.kubeconfig))
    async with api:
        assert isinstance(api, KubeClient)
        assert api.limiter is None


async def test_refusals_are_our_errors_and_answers_are_json(
    service_client: KubeClient, namespace: str
) -> None:
    config_maps = f"/api/v1/namespaces/{namespace}/configmaps"
    body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"k": "v"}}
    created = await service_client.request_json("POST", config_maps, body=body)
    assert created["data"] == {"k": "v"}
    with pytest.raises(Conflict) as conflict:
        await service_client.request("POST", config_maps, body=body)
    assert conflict.value.reason == "AlreadyExists" and conflict.value.status == 409
    with pytest.raises(NotFound):
        await service_client.request("GET", f"{config_maps}/absent")
    with pytest.raises(Invalid):
        await service_client.request("POST", config_maps, body={**body, "metadata": {"name": "A"}})
    patch = [{"op": "replace", "path": "/data/k", "value": "w"}]
    patched = await service_client.request_json(
        "PATCH", f"{config_maps}/c", body=patch, content_type="application/json-patch+json"
    )
    assert patched["data"] == {"k": "w"}


async def test_a_watch_streams_one_line_an_event(
    service_client: KubeClient, namespace: str
) -> None:
    config_maps = f"/api/v1/namespaces/{namespace}/configmaps"
    listed = await service_client.request_json("GET", config_maps)
    version = listed["metadata"]["resourceVersion"]
    query = {"resourceVersion": version, "timeoutSeconds": "5"}
    async with contextlib.aclosing(
        service_client.watch(config_maps, query, read_seconds=10)
    ) as lines:
        body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "w"}}
        await service_client.request("POST", config_maps, body=body)
        event = orjson.loads(await anext(lines))
    assert (event["type"], event["object"]["metadata"]["name"]) == ("ADDED", "w")
