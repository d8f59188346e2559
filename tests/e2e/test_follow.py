"""kube/follow.py, as the console follows with it, on a real apiserver: a watch that loses the
apiserver is made again from where it was; when the version it held has expired meanwhile (etcd
compacted while the apiserver was down) the answer is 410 Gone, and the follow lists once again
and goes on watching, losing and repeating nothing.

A watch from resourceVersion "1" is no way to get a 410 here: this apiserver replays every event
since then (its history is short and not yet compacted)."""

from __future__ import annotations

import asyncio
import contextlib

from support import ControlPlane

from torchjob.console.user_api import UserApi
from torchjob.kube.client import KubeClient
from torchjob.kube.follow import Change, Snapshot
from torchjob.kube.informer import ResourceKind

CONFIG_MAPS = ResourceKind("", "v1", "configmaps")


def config_map(name: str) -> dict[str, object]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}}


def added(news_item: Snapshot | Change) -> str:
    """The name of the object a Change added."""
    assert isinstance(news_item, Change) and news_item.type == "ADDED", news_item
    return str(news_item.object["metadata"]["name"])


def names(snapshot: Snapshot) -> set[str]:
    return {item["metadata"]["name"] for item in snapshot.items}


async def test_an_expired_version_lists_once_again_and_the_watch_goes_on(
    control_plane: ControlPlane, service_client: KubeClient, namespace: str
) -> None:
    api = UserApi(service_client)
    await api.create(CONFIG_MAPS, namespace, config_map("before"))
    news = api.follow(CONFIG_MAPS, namespace)
    async with contextlib.aclosing(news):
        first = await anext(news)
        assert isinstance(first, Snapshot) and names(first) == {"before"}
        await api.create(CONFIG_MAPS, namespace, config_map("watched"))
        assert added(await anext(news)) == "watched"

        await asyncio.to_thread(control_plane.stop_apiserver)
        try:
            # Every resourceVersion a client holds is now too old to watch from.
            await asyncio.to_thread(control_plane.compact_etcd)
        finally:
            await asyncio.to_thread(control_plane.start_apiserver)
        await api.create(CONFIG_MAPS, namespace, config_map("while-away"))

        relisted = await anext(news)
        assert isinstance(relisted, Snapshot), relisted
        assert names(relisted) == {"before", "watched", "while-away"}
        await api.create(CONFIG_MAPS, namespace, config_map("after"))
        assert added(await anext(news)) == "after"
