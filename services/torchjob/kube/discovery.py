"""Which optional APIs the apiserver serves: the PodGroup kinds gang scheduling can use."""

from __future__ import annotations

import aiohttp
import orjson
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from torchjob.kube.errors import from_api_exception, translated
from torchjob.render.scheduling import GROUP_KINDS, GangMode, GroupKind

DISCOVERY_TIMEOUT = 30.0


async def serves(api: client.ApiClient, kind: GroupKind) -> bool:
    """The apiserver serves `kind`'s resource in its group version (a 404 says it does not)."""
    async with translated():
        response: aiohttp.ClientResponse = await api.call_api(
            f"/apis/{kind.group}/{kind.version}",
            "GET",
            header_params={"Accept": "application/json"},
            auth_settings=["BearerToken"],
            _preload_content=False,
            _request_timeout=aiohttp.ClientTimeout(total=DISCOVERY_TIMEOUT),
        )
    try:
        body = await response.read()
    finally:
        response.release()
    if response.status == 404:
        return False
    if response.status >= 300:
        error = ApiException(status=response.status, reason=response.reason)
        error.body = body
        raise from_api_exception(error)
    return any(r.get("name") == kind.plural for r in orjson.loads(body).get("resources") or ())


async def served_gang_modes(api: client.ApiClient) -> frozenset[GangMode]:
    """The gang-scheduling modes whose PodGroup kind the apiserver serves."""
    return frozenset([mode for mode, kind in GROUP_KINDS.items() if await serves(api, kind)])
