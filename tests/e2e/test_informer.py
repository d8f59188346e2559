"""The informer against a real apiserver: it reports adds, updates and deletes, indexes by owner,
survives an apiserver restart, and after a 410 Gone lists again and reports what was deleted while
it could not watch."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import urllib.parse
from collections.abc import AsyncIterator, Iterator
from typing import Any, cast

import aiohttp
import orjson
import pytest
from kubernetes_asyncio import client, config
from structlog.testing import capture_logs
from support import ControlPlane
from support.eventually import eventually
from support.informers import cache_contents, running

from torchjob.kube import kubeconfig
from torchjob.kube.client import KubeClient
from torchjob.kube.informer import Informer, KubeObject, ResourceKind, controller_uid

CONFIG_MAPS = ResourceKind("", "v1", "configmaps")
SELECTOR = "torchjob.test/informer=yes"
OWNER_INDEX = "owner"


def config_map(
    name: str,
    data: dict[str, str] | None = None,
    owner: client.V1OwnerReference | None = None,
    labelled: bool = True,
) -> client.V1ConfigMap:
    metadata = client.V1ObjectMeta(
        name=name,
        labels={"torchjob.test/informer": "yes"} if labelled else None,
        owner_references=[owner] if owner is not None else None,
    )
    return client.V1ConfigMap(metadata=metadata, data=data or {})


def owned_by(owner: client.V1ConfigMap, controller: bool = True) -> client.V1OwnerReference:
    return client.V1OwnerReference(
        api_version="v1",
        kind="ConfigMap",
        name=owner.metadata.name,
        uid=owner.metadata.uid,
        controller=controller,
    )


def name_of(obj: KubeObject) -> str:
    return str(obj["metadata"]["name"])


class Seen:
    """Every handler call, in order, as (what, name)."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str]] = []
        self.updates: list[tuple[KubeObject, KubeObject]] = []

    def informer(self, api_client: KubeClient, namespace: str, **options: Any) -> Informer:
        return Informer(
            api_client,
            CONFIG_MAPS,
            namespace=namespace,
            label_selector=SELECTOR,
            on_add=lambda obj: self.events.append(("add", name_of(obj))),
            on_update=self._updated,
            on_delete=lambda obj: self.events.append(("delete", name_of(obj))),
            **options,
        )

    def _updated(self, old: KubeObject, new: KubeObject) -> None:
        self.events.append(("update", name_of(new)))
        self.updates.append((old, new))


@contextlib.asynccontextmanager
async def api_client_for(plane: ControlPlane, server: str | None = None) -> AsyncIterator[Any]:
    api_client = await config.new_client_from_config(
        config_file=str(plane.kubeconfig), persist_config=False
    )
    if server is not None:
        api_client.configuration.host = server
    async with api_client:
        yield api_client


@contextlib.asynccontextmanager
async def service_client_for(plane: ControlPlane, server: str) -> AsyncIterator[KubeClient]:
    """Our client (as the services make one) of the control plane, through `server`."""
    credentials = await kubeconfig.load(str(plane.kubeconfig))
    async with KubeClient(dataclasses.replace(credentials, host=server)) as api_client:
        yield api_client


class Relay:
    """A TCP relay to the apiserver that can be cut (every connection dropped and new ones
    refused) and healed again, like a network partition."""

    def __init__(self, target: str) -> None:
        parsed = urllib.parse.urlsplit(target)
        self._target = (parsed.hostname or "127.0.0.1", parsed.port or 443)
        self._cut = False
        self._writers: set[asyncio.StreamWriter] = set()
        self._server: asyncio.Server | None = None
        self.url = ""

    async def __aenter__(self) -> Relay:
        self._server = await asyncio.start_server(self._relay, "127.0.0.1", 0)
        port = self._server.sockets[0].getsockname()[1]
        # The apiserver's certificate names 127.0.0.1 and ignores the port.
        self.url = f"https://127.0.0.1:{port}"
        return self

    async def __aexit__(self, *_: object) -> None:
        assert self._server is not None
        self._server.close()
        self.cut()
        await self._server.wait_closed()

    def cut(self) -> None:
        self._cut = True
        for writer in list(self._writers):
            writer.transport.abort()

    def heal(self) -> None:
        self._cut = False

    async def _relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self._cut:
            writer.transport.abort()
            return
        upstream_reader, upstream_writer = await asyncio.open_connection(*self._target)
        self._writers |= {writer, upstream_writer}
        try:
            await asyncio.gather(
                _pipe(reader, upstream_writer, writer),
                _pipe(upstream_reader, writer, upstream_writer),
            )
        finally:
            self._writers -= {writer, upstream_writer}


async def _pipe(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, reader_side: asyncio.StreamWriter
) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except OSError:
        pass
    finally:
        # Either direction ending ends the connection, as a partition would.
        writer.transport.abort()
        reader_side.transport.abort()


async def test_adds_updates_and_deletes_are_reported_and_cached(
    kube_client: client.ApiClient, service_client: KubeClient, namespace: str
) -> None:
    core = client.CoreV1Api(kube_client)
    await core.create_namespaced_config_map(namespace, config_map("before", {"k": "v1"}))
    await core.create_namespaced_config_map(namespace, config_map("unlabelled", labelled=False))
    seen = Seen()
    async with running(seen.informer(service_client, namespace)) as informer:
        assert seen.events == [("add", "before")]
        await core.create_namespaced_config_map(namespace, config_map("later", {"k": "v1"}))
        await core.patch_namespaced_config_map("later", namespace, {"data": {"k": "v2"}})
        await core.delete_namespaced_config_map("before", namespace)
        await eventually(lambda: ("delete", "before") in seen.events)

        assert seen.events == [
            ("add", "before"),
            ("add", "later"),
            ("update", "later"),
            ("delete", "before"),
        ]
        old, new = seen.updates[0]
        assert (old["data"], new["data"]) == ({"k": "v1"}, {"k": "v2"})
        assert informer.get(namespace, "before") is None
        cached = informer.get(namespace, "later")
        assert cached is not None
        assert type(cached) is dict
        assert cached["data"] == {"k": "v2"}
        assert (cached["apiVersion"], cached["kind"]) == ("v1", "ConfigMap")
        assert "managedFields" not in cached["metadata"]
        assert [name_of(obj) for obj in cache_contents(informer, namespace)] == ["later"]
        assert [name_of(obj) for obj in cache_contents(informer)] == ["later"]
        assert cache_contents(informer, "elsewhere") == []


async def test_listed_objects_look_like_watched_ones(
    kube_client: client.ApiClient, service_client: KubeClient, namespace: str
) -> None:
    core = client.CoreV1Api(kube_client)
    await core.create_namespaced_config_map(namespace, config_map("listed"))
    seen = Seen()
    async with running(seen.informer(service_client, namespace, page_size=1)) as informer:
        await core.create_namespaced_config_map(namespace, config_map("watched"))
        await eventually(lambda: informer.get(namespace, "watched") is not None)
        listed, watched = informer.get(namespace, "listed"), informer.get(namespace, "watched")
        assert listed is not None and watched is not None
        assert listed.keys() == watched.keys()
        assert listed["metadata"].keys() == watched["metadata"].keys()


async def test_pages_of_a_large_list_are_all_cached(
    kube_client: client.ApiClient, service_client: KubeClient, namespace: str
) -> None:
    core = client.CoreV1Api(kube_client)
    names = [f"cm-{index}" for index in range(7)]
    await asyncio.gather(
        *(core.create_namespaced_config_map(namespace, config_map(name)) for name in names)
    )
    seen = Seen()
    async with running(seen.informer(service_client, namespace, page_size=3)) as informer:
        assert sorted(name_of(obj) for obj in cache_contents(informer, namespace)) == names
        assert sorted(name for _, name in seen.events) == names


async def test_index_by_controller_uid(
    kube_client: client.ApiClient, service_client: KubeClient, namespace: str
) -> None:
    core = client.CoreV1Api(kube_client)
    owner = await core.create_namespaced_config_map(namespace, config_map("owner"))
    for name in ("child-1", "child-2"):
        await core.create_namespaced_config_map(namespace, config_map(name, owner=owned_by(owner)))
    await core.create_namespaced_config_map(
        namespace, config_map("not-controlled", owner=owned_by(owner, controller=False))
    )
    seen = Seen()
    informer = seen.informer(service_client, namespace, indexers={OWNER_INDEX: controller_uid})

    def children() -> list[str]:
        return sorted(name_of(obj) for obj in informer.by_index(OWNER_INDEX, owner.metadata.uid))

    async with running(informer):
        assert children() == ["child-1", "child-2"]
        await core.delete_namespaced_config_map("child-1", namespace)
        await core.create_namespaced_config_map(
            namespace, config_map("child-3", owner=owned_by(owner))
        )
        await eventually(lambda: children() == ["child-2", "child-3"])
        # Losing its owner reference takes an object out of the index.
        patch = {"metadata": {"ownerReferences": None}}
        await core.patch_namespaced_config_map("child-2", namespace, patch)
        await eventually(lambda: children() == ["child-3"])
        assert informer.by_index(OWNER_INDEX, "no-such-uid") == []


async def test_recovers_from_an_apiserver_restart(
    control_plane: ControlPlane,
    kube_client: client.ApiClient,
    service_client: KubeClient,
    namespace: str,
) -> None:
    core = client.CoreV1Api(kube_client)
    await core.create_namespaced_config_map(namespace, config_map("before", {"k": "v1"}))
    seen = Seen()
    async with running(seen.informer(service_client, namespace, retry_cap=1.0)) as informer:
        try:
            # In threads: the informer must keep running while the apiserver goes and comes back.
            await asyncio.to_thread(control_plane.stop_apiserver)
        finally:
            await asyncio.to_thread(control_plane.start_apiserver)
        await core.create_namespaced_config_map(namespace, config_map("after"))
        await core.patch_namespaced_config_map("before", namespace, {"data": {"k": "v2"}})
        await eventually(lambda: {("add", "after"), ("update", "before")} <= set(seen.events))
        cached = informer.get(namespace, "before")
        assert cached is not None and cached["data"] == {"k": "v2"}
        assert ("delete", "before") not in seen.events


async def test_resumes_the_watch_after_a_dropped_connection(
    control_plane: ControlPlane, kube_client: client.ApiClient, namespace: str
) -> None:
    core = client.CoreV1Api(kube_client)
    for name in ("stays", "goes"):
        await core.create_namespaced_config_map(namespace, config_map(name))
    seen = Seen()
    with capture_logs() as logs:
        async with (
            Relay(control_plane.server) as relay,
            service_client_for(control_plane, relay.url) as relayed,
            running(seen.informer(relayed, namespace, retry_cap=0.5)),
        ):
            relay.cut()
            await core.delete_namespaced_config_map("goes", namespace)
            await core.create_namespaced_config_map(namespace, config_map("arrived"))
            await asyncio.sleep(1)  # a few failed reconnections
            relay.heal()
            await eventually(lambda: len(seen.events) == 4)

    assert seen.events[2:] == [("delete", "goes"), ("add", "arrived")]
    events = [entry["event"] for entry in logs]
    assert "list or watch failed; retrying" in events
    # The watch cache still holds the missed events: they are replayed, nothing is re-listed.
    assert events.count("listed") == 1


# -- 410 Gone ------------------------------------------------------------------------------------
#
# The apiserver's watch cache keeps minutes of history, so an informer's resourceVersion is not
# "too old" within a test's lifetime. A control plane of its own with no watch cache for
# ConfigMaps (watches go to etcd) and a one-second etcd compaction makes any resourceVersion
# expire in seconds; a relay between informer and apiserver that the test can cut keeps the
# informer from watching while objects are deleted and history is compacted.


@pytest.fixture(scope="module")
def compacting_control_plane() -> Iterator[ControlPlane]:
    with ControlPlane(
        controllers=("serviceaccount-controller", "serviceaccount-token-controller"),
        announce=lambda _: None,
        extra_apiserver_args=("--watch-cache-sizes=configmaps#0", "--etcd-compaction-interval=1s"),
    ) as plane:
        yield plane


async def watch_error_code(api_client: Any, namespace: str, resource_version: str) -> int | None:
    """The status code a watch from `resource_version` fails with, or None if it starts."""
    listing = client.CoreV1Api(api_client).list_namespaced_config_map(
        namespace,
        watch=True,
        resource_version=resource_version,
        timeout_seconds=1,
        _preload_content=False,
    )
    # Without preloading, the client returns the HTTP response itself.
    response = cast(aiohttp.ClientResponse, await listing)
    async with response:
        if response.status != 200:
            return int(response.status)
        for line in (await response.read()).splitlines():
            event = orjson.loads(line)
            if event["type"] == "ERROR":
                return int(event["object"]["code"])
    return None


async def test_after_410_gone_lists_again_and_reports_deletions_missed(
    compacting_control_plane: ControlPlane,
) -> None:
    plane = compacting_control_plane
    async with api_client_for(plane) as admin, Relay(plane.server) as relay:
        core = client.CoreV1Api(admin)
        namespace = "informer-gone"
        await core.create_namespace(
            client.V1Namespace(metadata=client.V1ObjectMeta(name=namespace))
        )
        for name in ("stays", "goes"):
            await core.create_namespaced_config_map(namespace, config_map(name))

        seen = Seen()
        with capture_logs() as logs:
            async with (
                service_client_for(plane, relay.url) as relayed,
                running(seen.informer(relayed, namespace, retry_cap=0.5)) as informer,
            ):
                relay.cut()
                await core.delete_namespaced_config_map("goes", namespace)
                arrived = await core.create_namespaced_config_map(namespace, config_map("arrived"))
                # The informer's resourceVersion is older than any write made after the cut.
                newest_unseen = str(int(arrived.metadata.resource_version) - 1)
                await _until_compacted(admin, namespace, newest_unseen)
                relay.heal()

                await eventually(lambda: ("delete", "goes") in seen.events)
                await eventually(lambda: ("add", "arrived") in seen.events)
                names = sorted(name_of(obj) for obj in cache_contents(informer, namespace))

    assert names == ["arrived", "stays"]
    assert sorted(seen.events) == [
        ("add", "arrived"),
        ("add", "goes"),
        ("add", "stays"),
        ("delete", "goes"),
    ]
    assert any(entry["event"] == "resource version expired; listing again" for entry in logs)


async def _until_compacted(api_client: Any, namespace: str, resource_version: str) -> None:
    async def compacted() -> bool:
        return await watch_error_code(api_client, namespace, resource_version) == 410

    await eventually(compacted, "etcd history compacted", interval=0.5)
