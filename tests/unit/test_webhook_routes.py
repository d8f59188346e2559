"""The webhook's aiohttp routes, served for real on a loopback port: an answer that raises is a
refusal with a message, log lines carry the uid of the request being answered, and nothing of it
stays bound once it is answered."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import copy
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any
from unittest import mock

import orjson
import pytest
import structlog
from aiohttp import web
from aiohttp.streams import StreamReader
from aiohttp.test_utils import TestClient, TestServer, make_mocked_request
from support.webhook import KUBEFLOW_JOB, RECONCILER, admission_app, kubeflow_replica_pod, review
from support.webhook import serving as serving_app

from torchjob.runtime.logging import merge_request
from torchjob.webhook.app import ADMISSION_LOG, ADMISSIONS, Answer, _route

REVIEW = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}


async def _failing(_: web.Application, body: Any) -> dict[str, Any]:
    raise RuntimeError("boom")


def _logged_context() -> Any:
    """What a log line written now would carry of the context."""
    return merge_request(None, "info", structlog.contextvars.get_contextvars())


async def _context_echo(_: web.Application, body: Any) -> dict[str, Any]:
    bound = _logged_context()
    uid = body["request"]["uid"]
    response = {"uid": uid, "allowed": True, "warnings": [f"bound uid {bound.get('uid')}"]}
    return {**REVIEW, "response": response}


@contextlib.asynccontextmanager
async def serving(answer: Answer) -> AsyncIterator[Callable[[str], Awaitable[dict[str, Any]]]]:
    """`answer` behind the webhook's route on a loopback port; yields a function that posts a
    review with the given uid and returns the review that came back."""
    app = web.Application()
    app[ADMISSION_LOG] = structlog.get_logger().bind()
    app.router.add_post("/x", _route("x", answer))
    async with TestClient(TestServer(app)) as client:

        async def post(uid: str) -> dict[str, Any]:
            body = {**REVIEW, "request": {"uid": uid}}
            response = await client.post("/x", data=orjson.dumps(body))
            assert response.status == 200
            review: dict[str, Any] = orjson.loads(await response.read())
            return review

        yield post


@pytest.mark.asyncio
async def test_an_answer_that_raises_is_a_refusal_not_a_500() -> None:
    async with serving(_failing) as post:
        answer = (await post("u-1"))["response"]
    assert answer["uid"] == "u-1"  # the apiserver discards an answer to another uid
    assert answer["allowed"] is False
    assert answer["status"]["code"] == 500
    assert "see its log" in answer["status"]["message"]


@pytest.mark.asyncio
async def test_each_request_is_answered_with_its_own_uid_bound() -> None:
    async with serving(_context_echo) as post:
        warnings = [(await post(uid))["response"]["warnings"][0] for uid in ("first", "second")]
    assert warnings == ["bound uid first", "bound uid second"]


@pytest.mark.asyncio
async def test_the_request_binding_is_gone_once_answered() -> None:
    """Called in this test's own task: whatever the route left bound would still be here."""
    app = web.Application()
    app[ADMISSION_LOG] = structlog.get_logger().bind()
    for answer in (_context_echo, _failing):
        serve = _route("x", answer)
        await serve(posted(app, {**REVIEW, "request": {"uid": "u-2"}}))
        assert _logged_context().get("uid") is None


def posted(app: web.Application, review: dict[str, Any]) -> web.Request:
    """An aiohttp request carrying `review` as its body, for calling a route directly."""
    payload = StreamReader(mock.Mock(_reading_paused=False), 2**16, loop=asyncio.get_running_loop())
    payload.feed_data(orjson.dumps(review))
    payload.feed_eof()
    return make_mocked_request("POST", "/x", app=app, payload=payload)


# --- Kubeflow's PyTorchJob ------------------------------------------------------------------


@pytest.mark.asyncio
async def test_kubeflow_routes_default_and_validate_pytorchjobs() -> None:
    job = copy.deepcopy(KUBEFLOW_JOB)
    del job["spec"]["nprocPerNode"]
    bad = copy.deepcopy(KUBEFLOW_JOB)
    bad["spec"]["pytorchReplicaSpecs"]["Master"]["replicas"] = 2
    async with serving_app(admission_app()) as client:
        mutated = await _posted(client, "/mutate/pytorchjobs", review(job))
        valid = await _posted(client, "/validate/pytorchjobs", review(KUBEFLOW_JOB))
        invalid = await _posted(client, "/validate/pytorchjobs", review(bad))
    patch = orjson.loads(base64.b64decode(mutated["patch"]))
    assert patch == [{"op": "add", "path": "/spec/nprocPerNode", "value": "auto"}]
    assert valid["allowed"] is True
    assert invalid["allowed"] is False
    assert invalid["status"]["message"].startswith("PyTorchJob ns/j is invalid: ")
    assert "spec.pytorchReplicaSpecs.Master.replicas: must be 1" in invalid["status"]["message"]
    counted = {
        (sample.labels["endpoint"], sample.labels["outcome"])
        for metric in ADMISSIONS.collect()
        for sample in metric.samples
        if sample.name.endswith("_total") and sample.value
    }
    assert {
        ("mutate-kubeflow-jobs", "patched"),
        ("validate-kubeflow-jobs", "allowed"),
        ("validate-kubeflow-jobs", "denied"),
    } <= counted


@pytest.mark.asyncio
async def test_the_pod_route_rewrites_a_pytorchjobs_pod_from_its_cache() -> None:
    async with serving_app(admission_app(job=None)) as client:
        answer = await _posted(
            client, "/mutate/pods", review(kubeflow_replica_pod("master", 0), user=RECONCILER)
        )
    assert answer["allowed"] is True
    ops = {op["path"]: op["value"] for op in orjson.loads(base64.b64decode(answer["patch"]))}
    env = {e["name"]: e["value"] for e in ops["/spec/containers"][0]["env"]}
    assert env["RANK"] == "0"
    assert env["MASTER_ADDR"] == "j-master-0"


async def _posted(client: Any, path: str, body: dict[str, Any]) -> dict[str, Any]:
    response = await client.post(path, data=orjson.dumps(body))
    assert response.status == 200
    answer: dict[str, Any] = orjson.loads(await response.read())["response"]
    return answer
