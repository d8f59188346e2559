"""The Replicas tab and the log view without a cluster: a row for each replica of the spec, a
watch event applied to the pods by name (a newer pod of the same name outlives its predecessor's
deletion), and a followed log read from an apiserver that streams it: lines escaped and batched,
a cut-off last line kept, what became of the pod when the log ends."""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator
from typing import Any, cast

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from torchjob.console import logs
from torchjob.console.replicas import ReplicaRow, apply_event, replica_rows
from torchjob.console.sse import EventStream
from torchjob.console.user_api import UserApi
from torchjob.kube.client import KubeClient
from torchjob.kube.credentials import Credentials, StaticToken

JOB = {
    "metadata": {"name": "j"},
    "spec": {
        "replicaSpecs": [{"type": "master", "replicas": 1}, {"type": "worker", "replicas": 2}]
    },
}


def pod(name: str, uid: str = "u1", **status: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "uid": uid},
        "spec": {"nodeName": "node-a", "containers": [{"name": "python"}]},
        "status": status,
    }


def test_a_row_for_every_replica_with_or_without_its_pod() -> None:
    exited = {"terminated": {"reason": "OOMKilled", "exitCode": 137}}
    worker = pod(
        "j-worker-0",
        phase="Running",
        containerStatuses=[
            {"name": "python", "restartCount": 1, "state": {"running": {}}, "lastState": exited}
        ],
    )
    rows = replica_rows(JOB, [worker, pod("j-tensorboard-x", phase="Running")])
    assert [r.replica for r in rows] == ["master-0", "worker-0", "worker-1"]
    assert rows[0] == ReplicaRow("master-0", "", "No pod", 0, "", "", "")
    assert rows[1] == ReplicaRow(
        "worker-0", "j-worker-0", "Running", 1, "node-a", "", "OOMKilled (exit code 137)"
    )


def test_a_newer_pod_of_the_same_name_outlives_the_deletion_of_the_old_one() -> None:
    pods: dict[str, Any] = {}
    assert apply_event(pods, "ADDED", pod("j-worker-0", "old"))
    assert apply_event(pods, "MODIFIED", pod("j-worker-0", "new"))
    assert apply_event(pods, "DELETED", pod("j-worker-0", "old"))
    assert pods["j-worker-0"]["metadata"]["uid"] == "new"
    assert apply_event(pods, "DELETED", pod("j-worker-0", "new"))
    assert pods == {}
    assert not apply_event(pods, "BOOKMARK", {"metadata": {"resourceVersion": "9"}})


class Recorded:
    def __init__(self) -> None:
        self.sent: list[tuple[str, str]] = []

    async def send(self, event: str, data: str) -> None:
        self.sent.append((event, data))


async def streamed_log(request: web.Request) -> web.StreamResponse:
    if request.match_info["pod"] == "secret":
        return web.json_response(
            {"kind": "Status", "code": 403, "reason": "Forbidden", "message": "pods/log refused"},
            status=403,
        )
    assert request.query["follow"] == "true" and request.query["tailLines"] == "1000"
    response = web.StreamResponse(headers={"Content-Type": "text/plain"})
    await response.prepare(request)
    for chunk in (b"epoch 1 <loss> 0.9\nepo", b"ch 2 & done\n\n", b"cut off"):
        await response.write(chunk)
    await response.write_eof()
    return response


async def read_pod(request: web.Request) -> web.Response:
    name = request.match_info["pod"]
    if name == "gone":
        return web.json_response({"kind": "Status", "code": 404, "reason": "NotFound"}, status=404)
    finished = {"terminated": {"reason": "Completed", "exitCode": 0}}
    return web.json_response(
        pod(
            name, "u1", phase="Succeeded", containerStatuses=[{"name": "python", "state": finished}]
        )
    )


@pytest.fixture
async def client() -> AsyncIterator[KubeClient]:
    app = web.Application()
    app.router.add_get("/api/v1/namespaces/ns/pods/{pod}/log", streamed_log)
    app.router.add_get("/api/v1/namespaces/ns/pods/{pod}", read_pod)
    async with TestServer(app) as server:
        credentials = Credentials(
            str(server.make_url("")).rstrip("/"), ssl.create_default_context(), StaticToken("t")
        )
        async with KubeClient(credentials) as kube:
            yield kube


async def test_a_followed_log_reaches_the_page_escaped_and_whole(client: KubeClient) -> None:
    stream = Recorded()
    query = {"container": "python", "tailLines": "1000", "follow": "true"}
    path = logs.log_path("ns", "j-worker-0")
    status, problem = await logs.follow_once(client, cast(EventStream, stream), path, query)
    assert (status, problem) == (0, "")
    text = "".join(data for _, data in stream.sent)
    assert text == "".join(
        f'<span class="ln">{line}\n</span>'
        for line in ("epoch 1 &lt;loss&gt; 0.9", "epoch 2 &amp; done", "", "cut off")
    )
    assert {event for event, _ in stream.sent} == {"line"}


def test_a_lines_time_is_set_apart_and_shown_to_the_millisecond() -> None:
    shown = logs.html_lines("2026-01-01T00:00:05.123456789Z step <1>\nno time here\n")
    assert shown == (
        '<span class="ln"><time class="stamp" datetime="2026-01-01T00:00:05.123456789Z">'
        "2026-01-01 00:00:05.123Z</time> step &lt;1&gt;\n</span>"
        '<span class="ln">no time here\n</span>'
    )


async def test_a_refused_log_is_the_apiservers_refusal(client: KubeClient) -> None:
    stream = Recorded()
    path = logs.log_path("ns", "secret")
    status, problem = await logs.follow_once(client, cast(EventStream, stream), path, {})
    assert (status, problem) == (403, "pods/log refused")
    assert stream.sent == []


async def test_what_became_of_the_pod_when_its_log_ended(client: KubeClient) -> None:
    api = UserApi(client)
    gone = await logs.pod_verdict(api, "ns", "gone", "u1", "python")
    assert gone["final"] and gone["gone"] and not gone["newer"]
    replaced = await logs.pod_verdict(api, "ns", "j-worker-0", "u0", "python")
    assert replaced["gone"] and replaced["newer"]
    exited = await logs.pod_verdict(api, "ns", "j-worker-0", "u1", "python")
    assert exited == {"final": True, "message": "The container exited (Completed, exit code 0)."}
