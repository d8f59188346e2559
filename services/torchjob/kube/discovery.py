"""Which optional APIs the apiserver serves: the PodGroup kinds gang scheduling can use."""

from __future__ import annotations

import aiohttp
import orjson
from kubernetes_asyncio import client

from torchjob.kube.client import reply_body
from torchjob.kube.errors import NotFound, translated
from torchjob.render.scheduling import GROUP_KINDS, GangMode, GroupKind

DISCOVERY_TIMEOUT = 30.0


async def serves(api: client.ApiClient, kind: GroupKind) -> bool:
    """The apiserver serves `kind`'s resource in its group version (a 404 says it does not)."""
    try:
        async with translated():
            body = await reply_body(
                api.call_api(
                    f"/apis/{kind.group}/{kind.version}",
                    "GET",
                    header_params={"Accept": "application/json"},
                    auth_settings=["BearerToken"],
                    _preload_content=False,
                    _request_timeout=aiohttp.ClientTimeout(total=DISCOVERY_TIMEOUT),
                )
            )
    except NotFound:
        return False
    return any(r.get("name") == kind.plural for r in orjson.loads(body).get("resources") or ())


async def served_gang_modes(api: client.ApiClient) -> frozenset[GangMode]:
    """The gang-scheduling modes whose PodGroup kind the apiserver serves."""
    return frozenset([mode for mode, kind in GROUP_KINDS.items() if await serves(api, kind)])
