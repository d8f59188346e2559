"""What the cluster commands send (cli/connection.py), against a stand-in apiserver: our client's
REST paths with every segment quoted, `torchjob-cli` as the field manager of every write, the
context and namespace a kubeconfig names, and a pod's log with the apiserver's options."""

from __future__ import annotations

import json
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml
from aiohttp import web

from torchjob.api import types
from torchjob.api.constants import LABEL_JOB_NAME
from torchjob.cli import connection
from torchjob.cli.connection import CliError, Target, connect
from torchjob.kube.credentials import Credentials, StaticToken, tls_context
from torchjob.kube.resources import JOBS

JOBS_IN_TEAM = JOBS.path("team")


@dataclass
class Seen:
    url: str = ""
    requests: list[dict[str, Any]] = field(default_factory=list)


SEEN = web.AppKey("seen", Seen)


async def _answer(request: web.Request) -> web.StreamResponse:
    body = await request.read()
    request.app[SEEN].requests.append(
        {
            "method": request.method,
            "path": request.raw_path.split("?")[0],
            "query": dict(request.query),
            "content_type": request.headers.get("Content-Type"),
            "authorization": request.headers.get("Authorization"),
            "body": orjson.loads(body) if body else None,
        }
    )
    if "/absent" in request.path:
        status = {"kind": "Status", "reason": "NotFound", "message": "not found"}
        return web.json_response({**status, "details": {"name": "absent"}}, status=404)
    if request.path.endswith("/log"):
        return web.Response(text="one\ntwo\n")
    return web.json_response({"metadata": {"name": "listed"}, "items": [{"kind": "Thing"}]})


@pytest.fixture
async def apiserver(tmp_path: Path) -> AsyncIterator[Seen]:
    app = web.Application()
    app[SEEN] = seen = Seen()
    app.router.add_route("*", "/{tail:.*}", _answer)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    seen.url = f"http://127.0.0.1:{runner.addresses[0][1]}"
    try:
        yield seen
    finally:
        await runner.cleanup()


def kubeconfig(path: Path, server: str, exec_user: dict[str, Any] | None = None) -> str:
    """Two contexts: the current one names no namespace, `team` names one and a token; and
    `sso`, whose user is `exec_user`, when one is given."""
    config: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": server}}],
        "users": [{"name": "nobody", "user": {}}, {"name": "bob", "user": {"token": "t"}}],
        "contexts": [
            {"name": "plain", "context": {"cluster": "c", "user": "nobody"}},
            {"name": "team", "context": {"cluster": "c", "user": "bob", "namespace": "team"}},
        ],
        "current-context": "plain",
    }
    if exec_user:
        config["users"].append({"name": "sso", "user": exec_user})
        config["contexts"].append({"name": "sso", "context": {"cluster": "c", "user": "sso"}})
    path.write_text(yaml.safe_dump(config))
    return str(path)


async def test_writes_are_ours_and_paths_quoted(apiserver: Seen, tmp_path: Path) -> None:
    target = Target(kubeconfig=kubeconfig(tmp_path / "config", apiserver.url), context="team")
    async with connect(target) as cluster:
        assert cluster.namespace == "team" and cluster.host == apiserver.url
        await cluster.create_job({"metadata": {"name": "train"}})
        await cluster.patch_job("train", {"spec": {"runMode": {"pause": {"enabled": True}}}})
        await cluster.delete_job("train")
        await cluster.get_job("a/b c")
    create, patch, delete, get = apiserver.requests
    assert (create["method"], create["path"]) == ("POST", JOBS_IN_TEAM)
    assert create["query"] == {"fieldManager": "torchjob-cli"}
    assert create["body"] == {"metadata": {"name": "train"}}
    assert create["authorization"] == "Bearer t"
    assert (patch["method"], patch["path"]) == ("PATCH", f"{JOBS_IN_TEAM}/train")
    assert patch["query"] == {"fieldManager": "torchjob-cli"}
    assert patch["content_type"] == "application/merge-patch+json"
    assert (delete["method"], delete["query"]) == ("DELETE", {"propagationPolicy": "Background"})
    assert get["path"] == f"/apis/{types.GROUP}/{types.VERSION}/namespaces/team/" + (
        f"{types.PLURAL}/a%2Fb%20c"
    )


async def test_lists_namespaces_and_the_missing(apiserver: Seen, tmp_path: Path) -> None:
    path = kubeconfig(tmp_path / "config", apiserver.url)
    async with connect(Target(kubeconfig=path, all_namespaces=True)) as cluster:
        assert cluster.namespace == "default"
        assert await cluster.job_pods("train") == [{"kind": "Thing"}]
        assert await cluster.pods(field="status.phase!=Succeeded", all_namespaces=False)
        assert await cluster.pod_metrics() == [{"kind": "Thing"}]
        assert await cluster.get_pod("absent") is None
        with pytest.raises(CliError, match="not a name"):
            await cluster.get_job("..")
    everywhere, here, metrics, absent = apiserver.requests
    assert everywhere["path"] == "/api/v1/pods"
    assert everywhere["query"] == {"labelSelector": f"{LABEL_JOB_NAME}=train"}
    assert here["path"] == "/api/v1/namespaces/default/pods"
    assert here["query"] == {"fieldSelector": "status.phase!=Succeeded"}
    assert metrics["path"] == "/apis/metrics.k8s.io/v1beta1/pods"
    assert absent["path"] == "/api/v1/namespaces/default/pods/absent"
    assert absent["authorization"] is None


async def test_a_log_is_read_with_the_options_given(apiserver: Seen, tmp_path: Path) -> None:
    target = Target(kubeconfig=kubeconfig(tmp_path / "config", apiserver.url), namespace="ns")
    query = {"container": "pytorch", "follow": "true", "tailLines": "5"}
    async with connect(target) as cluster, cluster.pod_log("train-worker-0", query) as log:
        assert await log.read() == b"one\ntwo\n"
    with pytest.raises(CliError, match="pod ns/absent does not exist"):
        async with connect(target) as cluster, cluster.pod_log("absent", {}):
            pass
    sent = apiserver.requests[0]
    assert sent["path"] == "/api/v1/namespaces/ns/pods/train-worker-0/log"
    assert sent["query"] == query


async def test_an_unknown_context_says_how_to_choose(apiserver: Seen, tmp_path: Path) -> None:
    target = Target(kubeconfig=kubeconfig(tmp_path / "config", apiserver.url), context="prod")
    with pytest.raises(CliError, match=r"no cluster to talk to.*'prod'.*--context NAME"):
        async with connect(target):
            pass


async def test_an_exec_plugin_of_the_chosen_context_signs_in(
    apiserver: Seen, tmp_path: Path
) -> None:
    """A user whose credentials an exec plugin prints is loaded by kubernetes-asyncio's loader
    (in kube/kubeconfig.py), for the context chosen; the requests are still our client's."""
    plugin = tmp_path / "plugin.py"
    credential = {
        "apiVersion": "client.authentication.k8s.io/v1beta1",
        "kind": "ExecCredential",
        "status": {"token": "from-plugin"},
    }
    plugin.write_text(f"print({json.dumps(json.dumps(credential))})\n")
    exec_user = {
        "apiVersion": "client.authentication.k8s.io/v1beta1",
        "command": sys.executable,
        "args": [str(plugin)],
    }
    path = kubeconfig(tmp_path / "config", apiserver.url, {"exec": exec_user})
    async with connect(Target(kubeconfig=path, context="sso")) as cluster:
        await cluster.list_jobs()
    assert apiserver.requests[-1]["authorization"] == "Bearer from-plugin"
    assert apiserver.requests[-1]["path"] == JOBS.path("default")


async def test_in_a_pod_without_a_kubeconfig_the_service_account_is_used(
    apiserver: Seen, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.kube/config
    monkeypatch.setenv("KUBECONFIG", "")
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1")
    pod_account = Credentials(apiserver.url, tls_context(), StaticToken("pod"))
    monkeypatch.setattr(connection, "in_cluster", lambda: pod_account)
    async with connect(Target()) as cluster:
        await cluster.nodes()
    assert apiserver.requests[-1]["authorization"] == "Bearer pod"
    # With a kubeconfig named, one that cannot be read is said, not replaced by the pod's.
    with pytest.raises(CliError, match="no cluster to talk to: cannot read the kubeconfig"):
        async with connect(Target(kubeconfig=str(tmp_path / "absent"))):
            pass
