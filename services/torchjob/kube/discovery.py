"""Which optional APIs the apiserver serves: the PodGroup kinds gang scheduling can use."""

from __future__ import annotations

import aiohttp

from torchjob.kube.client import KubeClient
from torchjob.kube.errors import NotFound
from torchjob.render.scheduling import GROUP_KINDS, GangMode, GroupKind

DISCOVERY_TIMEOUT = 30.0


async def serves(api: KubeClient, kind: GroupKind) -> bool:
    """The apiserver serves `kind`'s resource in its group version (a 404 says it does not)."""
    try:
        served = await api.request_json(
            "GET",
            f"/apis/{kind.group}/{kind.version}",
            time_limits=aiohttp.ClientTimeout(total=DISCOVERY_TIMEOUT),
        )
    except NotFound:
        return False
    return any(r.get("name") == kind.plural for r in served.get("resources") or ())


async def served_gang_modes(api: KubeClient) -> frozenset[GangMode]:
    """The gang-scheduling modes whose PodGroup kind the apiserver serves."""
    return frozenset([mode for mode, kind in GROUP_KINDS.items() if await serves(api, kind)])
