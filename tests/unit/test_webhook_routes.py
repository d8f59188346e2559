"""The webhook's aiohttp routes, served for real on a loopback port: an answer that raises is a
refusal with a message, and log lines carry the uid of the request being answered."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
import structlog
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from torchjob.webhook.app import ADMISSION_LOG, _route

REVIEW = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}


async def _failing(_: web.Application, body: Any) -> dict[str, Any]:
    raise RuntimeError("boom")


async def _context_echo(_: web.Application, body: Any) -> dict[str, Any]:
    bound = structlog.contextvars.get_contextvars()
    uid = body["request"]["uid"]
    response = {"uid": uid, "allowed": True, "warnings": [f"bound uid {bound.get('uid')}"]}
    return {**REVIEW, "response": response}


async def _client(app: web.Application) -> TestClient[Any, Any]:
    client = TestClient(TestServer(app))
    await client.start_server()
    return client


@pytest.mark.asyncio
async def test_an_answer_that_raises_is_a_refusal_not_a_500() -> None:
    app = web.Application()
    app[ADMISSION_LOG] = structlog.get_logger().bind()
    app.router.add_post("/x", _route("x", _failing))
    client = await _client(app)
    try:
        body = {**REVIEW, "request": {"uid": "u-1"}}
        response = await client.post("/x", data=orjson.dumps(body))
        review = orjson.loads(await response.read())
    finally:
        await client.close()
    assert response.status == 200
    answer = review["response"]
    assert answer["allowed"] is False
    assert answer["status"]["code"] == 500
    assert "see its log" in answer["status"]["message"]


@pytest.mark.asyncio
async def test_each_request_is_answered_with_its_own_uid_bound() -> None:
    app = web.Application()
    app[ADMISSION_LOG] = structlog.get_logger().bind()
    app.router.add_post("/x", _route("x", _context_echo))
    client = await _client(app)
    try:
        warnings = []
        for uid in ("first", "second"):
            body = {**REVIEW, "request": {"uid": uid}}
            # One connection for both: aiohttp answers them in the same task and context.
            response = await client.post("/x", data=orjson.dumps(body))
            warnings.append(orjson.loads(await response.read())["response"]["warnings"][0])
    finally:
        await client.close()
    assert warnings == ["bound uid first", "bound uid second"]
