"""Our API client (kube/client.py) against a local HTTPS server standing in for the apiserver:
credentials from a kubeconfig (files, inline data, relative paths, a token file) or from a pod's
service account, requests and their errors, and watches read a line at a time."""

from __future__ import annotations

import base64
import contextlib
import os
import ssl
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml
from aiohttp import web
from support.pki import CertAndKey, issue_client_cert, issue_serving_cert, new_ca

from torchjob.kube import credentials, kubeconfig
from torchjob.kube.client import KubeClient, lines_of, new_kube_client
from torchjob.kube.errors import Conflict, Gone, KubeError, NotFound, from_status


@dataclass
class Apiserver:
    """What the stand-in answers, and what it was sent."""

    url: str
    seen: list[dict[str, Any]] = field(default_factory=list)


APISERVER = web.AppKey("apiserver", Apiserver)


@dataclass(frozen=True)
class Pki:
    directory: Path
    ca: CertAndKey
    client: CertAndKey

    @property
    def ca_file(self) -> Path:
        return self.directory / "ca.crt"


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    directory = tmp_path_factory.mktemp("pki")
    ca = new_ca()
    ca.write(directory / "ca.crt", directory / "ca.key")
    issue_serving_cert(ca, "apiserver").write(directory / "server.crt", directory / "server.key")
    client = issue_client_cert(ca, "admin", ["system:masters"])
    client.write(directory / "client.crt", directory / "client.key")
    return Pki(directory, ca, client)


async def _answer(request: web.Request) -> web.StreamResponse:
    apiserver = request.app[APISERVER]
    peer = request.transport.get_extra_info("peercert") if request.transport else None
    apiserver.seen.append(
        {
            "method": request.method,
            "path": request.path,
            "query": dict(request.query),
            "headers": dict(request.headers),
            "body": await request.read(),
            "client_cert": bool(peer),
        }
    )
    if request.path.endswith("/absent"):
        status = {"kind": "Status", "reason": "NotFound", "message": 'pods "absent" not found'}
        return web.json_response(status, status=404)
    if request.method == "POST":
        return web.json_response({"reason": "AlreadyExists", "message": "exists"}, status=409)
    if request.query.get("watch") == "true":
        return await _watch(request)
    return web.json_response({"kind": "PodList", "items": []})


async def _watch(request: web.Request) -> web.StreamResponse:
    response = web.StreamResponse()
    await response.prepare(request)
    added = orjson.dumps({"type": "ADDED", "object": {"metadata": {"name": "a" * 5000}}})
    # One event split across writes, then two in one write, then a blank keep-alive line.
    await response.write(added[:100])
    await response.write(added[100:] + b"\n")
    gone = {"type": "ERROR", "object": {"kind": "Status", "code": 410, "reason": "Expired"}}
    await response.write(b'{"type": "BOOKMARK"}\n' + orjson.dumps(gone) + b"\n\n")
    await response.write_eof()
    return response


@pytest.fixture
async def apiserver(pki: Pki) -> AsyncIterator[Apiserver]:
    tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=str(pki.ca_file))
    tls.load_cert_chain(pki.directory / "server.crt", pki.directory / "server.key")
    tls.verify_mode = ssl.CERT_OPTIONAL
    app = web.Application()
    app[APISERVER] = apiserver = Apiserver("")
    app.router.add_route("*", "/{tail:.*}", _answer)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=tls)
    await site.start()
    apiserver.url = f"https://127.0.0.1:{runner.addresses[0][1]}"
    try:
        yield apiserver
    finally:
        await runner.cleanup()


def write_kubeconfig(
    path: Path, server: str, user: dict[str, Any], cluster: dict[str, Any]
) -> Path:
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": server, **cluster}}],
        "users": [{"name": "u", "user": user}],
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "x",
    }
    path.write_text(yaml.safe_dump(config))
    return path


def b64(path: Path) -> str:
    return base64.b64encode(path.read_bytes()).decode()


async def test_a_kubeconfig_with_files_named_relative_to_it(apiserver: Apiserver, pki: Pki) -> None:
    user = {"client-certificate": "client.crt", "client-key": "client.key"}
    cluster = {"certificate-authority": "ca.crt"}
    path = write_kubeconfig(pki.directory / "kubeconfig", apiserver.url, user, cluster)
    async with await new_kube_client(str(path)) as api:
        assert await api.request_json("GET", "/api/v1/pods") == {"kind": "PodList", "items": []}
    assert apiserver.seen[-1]["client_cert"] is True
    assert "Authorization" not in apiserver.seen[-1]["headers"]


async def test_a_kubeconfig_with_inline_data_and_a_token(
    apiserver: Apiserver, pki: Pki, tmp_path: Path
) -> None:
    user = {
        "client-certificate-data": b64(pki.directory / "client.crt"),
        "client-key-data": b64(pki.directory / "client.key"),
        "token": "secret",
    }
    cluster = {"certificate-authority-data": b64(pki.ca_file)}
    path = write_kubeconfig(tmp_path / "kubeconfig", apiserver.url, user, cluster)
    async with await new_kube_client(str(path)) as api:
        await api.request("GET", "/api/v1/pods", query={"labelSelector": "a=b,c in (d)"})
    seen = apiserver.seen[-1]
    assert seen["client_cert"] is True
    assert seen["headers"]["Authorization"] == "Bearer secret"
    assert seen["query"] == {"labelSelector": "a=b,c in (d)"}


async def test_an_untrusted_apiserver_is_refused(apiserver: Apiserver, tmp_path: Path) -> None:
    path = write_kubeconfig(tmp_path / "kubeconfig", apiserver.url, {"token": "t"}, {})
    async with await new_kube_client(str(path)) as api:
        with pytest.raises(ssl.SSLCertVerificationError):
            await api.request("GET", "/api/v1/pods")
    insecure = {"insecure-skip-tls-verify": True}
    path = write_kubeconfig(tmp_path / "kubeconfig", apiserver.url, {"token": "t"}, insecure)
    async with await new_kube_client(str(path)) as api:
        await api.request("GET", "/api/v1/pods")


async def test_other_authentication_is_loaded_by_kubernetes_asyncio(
    apiserver: Apiserver, pki: Pki, tmp_path: Path
) -> None:
    user = {"username": "bob", "password": "pw"}
    cluster = {"certificate-authority": str(pki.ca_file)}
    path = write_kubeconfig(tmp_path / "kubeconfig", apiserver.url, user, cluster)
    async with await new_kube_client(str(path)) as api:
        await api.request("GET", "/api/v1/pods")
    expected = "Basic " + base64.b64encode(b"bob:pw").decode()
    assert apiserver.seen[-1]["headers"]["Authorization"] == expected


async def test_refusals_are_our_errors_with_the_apiserver_reason(
    apiserver: Apiserver, pki: Pki
) -> None:
    async with client_of(apiserver, pki) as api:
        with pytest.raises(NotFound) as missing:
            await api.request("GET", "/api/v1/namespaces/ns/pods/absent")
        assert (missing.value.reason, missing.value.message) == (
            "NotFound",
            'pods "absent" not found',
        )
        with pytest.raises(Conflict):
            await api.request("POST", "/api/v1/namespaces/ns/pods", body={"kind": "Pod"})
    posted = apiserver.seen[-1]
    assert orjson.loads(posted["body"]) == {"kind": "Pod"}
    assert posted["headers"]["Content-Type"] == "application/json"


async def test_a_watch_yields_whole_lines_however_they_arrive(
    apiserver: Apiserver, pki: Pki
) -> None:
    async with client_of(apiserver, pki) as api:
        watch = api.watch("/api/v1/pods", {"resourceVersion": "7"}, read_seconds=5)
        async with contextlib.aclosing(watch) as lines:
            events = [orjson.loads(line) async for line in lines]
    assert [event["type"] for event in events] == ["ADDED", "BOOKMARK", "ERROR"]
    assert len(events[0]["object"]["metadata"]["name"]) == 5000
    assert apiserver.seen[-1]["query"] == {"resourceVersion": "7", "watch": "true"}


def test_gone_is_raised_for_a_410() -> None:
    error = from_status(410, "Gone", orjson.dumps({"reason": "Expired", "message": "too old"}))
    assert isinstance(error, Gone) and error.reason == "Expired"
    assert type(from_status(500, "Internal Server Error", b"not json")) is KubeError


@contextlib.asynccontextmanager
async def client_of(apiserver: Apiserver, pki: Pki) -> AsyncIterator[KubeClient]:
    tls = credentials.tls_context(ca_file=str(pki.ca_file))
    token = credentials.StaticToken("t")
    async with KubeClient(credentials.Credentials(apiserver.url, tls, token)) as api:
        yield api


def test_in_cluster_reads_the_service_account_and_the_service_address(
    pki: Pki, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "ca.crt").write_bytes(pki.ca_file.read_bytes())
    (tmp_path / "token").write_text("first\n")
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "fd00::1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")
    found = credentials.in_cluster(tmp_path)
    assert found.host == "https://[fd00::1]:443"
    assert found.token.authorization() == "Bearer first"
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST")
    with pytest.raises(credentials.ConfigError, match="KUBERNETES_SERVICE_HOST"):
        credentials.in_cluster(tmp_path)


def test_a_token_file_is_read_again_a_minute_after_it_was_read(tmp_path: Path) -> None:
    now = [0.0]
    path = tmp_path / "token"
    path.write_text("first")
    token = credentials.TokenFile(path, clock=lambda: now[0])
    path.write_text("rotated")
    now[0] = credentials.TOKEN_REREAD_SECONDS - 1
    assert token.authorization() == "Bearer first"
    now[0] = credentials.TOKEN_REREAD_SECONDS
    assert token.authorization() == "Bearer rotated"
    # Missing for the instant the kubelet swaps it: the token read before still serves.
    path.unlink()
    now[0] = 3 * credentials.TOKEN_REREAD_SECONDS
    assert token.authorization() == "Bearer rotated"
    # Read while it is being written by a tool that does not swap it, or not text: the same.
    for unusable in (b"", b"\xff\xfe"):
        path.write_bytes(unusable)
        now[0] += credentials.TOKEN_REREAD_SECONDS
        assert token.authorization() == "Bearer rotated"
    path.write_text("")
    with pytest.raises(credentials.ConfigError, match="empty"):
        credentials.TokenFile(path)


async def test_a_kubeconfig_token_file_and_a_missing_context(tmp_path: Path) -> None:
    (tmp_path / "token").write_text("from-file")
    path = write_kubeconfig(
        tmp_path / "kubeconfig", "https://apiserver:6443/", {"tokenFile": "token"}, {}
    )
    loaded = await kubeconfig.load(str(path))
    assert loaded.host == "https://apiserver:6443"
    assert loaded.token.authorization() == "Bearer from-file"
    config = yaml.safe_load(path.read_text())
    path.write_text(yaml.safe_dump({**config, "current-context": "elsewhere"}))
    with pytest.raises(credentials.ConfigError, match="elsewhere"):
        await kubeconfig.load(str(path))


async def test_a_watch_stream_is_cut_into_lines_however_it_is_chunked() -> None:
    events = [b'{"type":"ADDED","n":%d,"pad":"%s"}' % (n, b"x" * (n * 37)) for n in range(40)]
    stream = b"\n".join(events) + b"\n\n"
    for size in (1, 3, 16, 1000, len(stream)):
        pieces = [stream[i : i + size] for i in range(0, len(stream), size)]

        async def chunks(parts: list[bytes] = pieces) -> AsyncIterator[bytes]:
            for part in parts:
                yield part

        assert [line async for line in lines_of(chunks())] == events, size

    async def cut_off() -> AsyncIterator[bytes]:
        yield b'{"a":1}\n{"b":'

    assert [line async for line in lines_of(cut_off())] == [b'{"a":1}']


async def test_a_context_chosen_by_name_and_the_namespace_it_names(
    apiserver: Apiserver, tmp_path: Path
) -> None:
    path = write_kubeconfig(tmp_path / "kubeconfig", "https://current:6443", {"token": "a"}, {})
    config = yaml.safe_load(path.read_text())
    config["clusters"].append({"name": "c2", "cluster": {"server": "https://other:6443"}})
    config["users"].append({"name": "u2", "user": {"token": "b"}})
    chosen = {"cluster": "c2", "user": "u2", "namespace": "team"}
    config["contexts"].append({"name": "y", "context": chosen})
    path.write_text(yaml.safe_dump(config))

    current, other = await kubeconfig.load(str(path)), await kubeconfig.load(str(path), "y")
    assert (current.host, current.token.authorization()) == ("https://current:6443", "Bearer a")
    assert (other.host, other.token.authorization()) == ("https://other:6443", "Bearer b")
    assert kubeconfig.context_namespace(str(path), "y") == "team"
    assert kubeconfig.context_namespace(str(path)) is None
    assert kubeconfig.context_namespace(str(path), "absent") is None
    assert kubeconfig.context_namespace(str(tmp_path / "absent")) is None
    with pytest.raises(credentials.ConfigError, match="absent"):
        await kubeconfig.load(str(path), "absent")

    # A context kubernetes-asyncio loads (here, of two files) is chosen by name as well, and its
    # refusal is our ConfigError.
    config["users"][1]["user"] = {"username": "bob", "password": "pw"}
    config["clusters"][1]["cluster"] = {"server": apiserver.url, "insecure-skip-tls-verify": True}
    path.write_text(yaml.safe_dump(config))
    both = f"{path}{os.pathsep}{tmp_path / 'absent'}"
    loaded = await kubeconfig.load(both, "y")
    assert loaded.host == apiserver.url
    assert loaded.token.authorization() == "Basic " + base64.b64encode(b"bob:pw").decode()
    with pytest.raises(credentials.ConfigError, match="nowhere"):
        await kubeconfig.load(both, "nowhere")
