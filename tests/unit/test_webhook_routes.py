"""The webhook's aiohttp routes, served for real on a loopback port: an answer that raises is a
refusal with a message, log lines carry the uid of the request being answered, and nothing of it
stays bound once it is answered."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import copy
from collections.abc import AsyncIterator
from typing import Any, Protocol
from unittest import mock

import orjson
import pytest
import structlog
from aiohttp import web
from aiohttp.streams import StreamReader
from aiohttp.test_utils import TestClient, TestServer, make_mocked_request
from prometheus_client import REGISTRY
from structlog.testing import capture_logs
from support.webhook import KUBEFLOW_JOB, RECONCILER, admission_app, kubeflow_replica_pod, review
from support.webhook import serving as serving_app

from torchjob.runtime.logging import merge_request
from torchjob.webhook.admission.bounds import Admissions, Work
from torchjob.webhook.admission.keys import ADMISSION_LOG, ADMISSIONS_BOUND
from torchjob.webhook.admission.routes import ADMISSIONS, Answer, LookUp, Route
from torchjob.webhook.settings import Limits

REVIEW = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}


def _failing(_: web.Application, body: Any, __: Any) -> dict[str, Any]:
    raise RuntimeError("boom")


def _logged_context() -> Any:
    """What a log line written now would carry of the context."""
    return merge_request(None, "info", structlog.contextvars.get_contextvars())


def _context_echo(_: web.Application, body: Any, found: Any) -> dict[str, Any]:
    bound = _logged_context()
    uid = body["request"]["uid"]
    warnings = [f"bound uid {bound.get('uid')}"]
    if found is not None:
        warnings.append(f"looked up {found}")
    return {**REVIEW, "response": {"uid": uid, "allowed": True, "warnings": warnings}}


async def _context_look_up(_: web.Application, body: Any, work: Work) -> Any:
    """A look-up that waits, and finds the uid bound while it does."""
    async with work.handler_timeout():
        await asyncio.sleep(0)
    return f"with bound uid {_logged_context().get('uid')}"


async def _failing_look_up(_: web.Application, body: Any, work: Work) -> Any:
    raise RuntimeError("boom in the look-up")


class Post(Protocol):
    async def __call__(self, uid: str, **fields: Any) -> dict[str, Any]: ...


def _bare_app() -> web.Application:
    """An application with no route yet, bounded by the default limits."""
    app = web.Application()
    app[ADMISSION_LOG] = structlog.get_logger().bind()
    app[ADMISSIONS_BOUND] = Admissions(Limits())
    return app


@contextlib.asynccontextmanager
async def serving(answer: Answer, look_up: LookUp | None = None) -> AsyncIterator[Post]:
    """`answer` (after `look_up`) behind the webhook's route on a loopback port; yields a
    function that posts a review with the given uid (and further request `fields`) and returns
    the review that came back."""
    app = _bare_app()
    app.router.add_post("/x", Route("x", answer, look_up).serve)
    try:
        async with TestClient(TestServer(app)) as client:

            async def post(uid: str, **fields: Any) -> dict[str, Any]:
                body = {**REVIEW, "request": {"uid": uid, **fields}}
                response = await client.post("/x", data=orjson.dumps(body))
                assert response.status == 200
                review: dict[str, Any] = orjson.loads(await response.read())
                return review

            yield post
    finally:
        app[ADMISSIONS_BOUND].close()


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
    app = _bare_app()
    try:
        for answer in (_context_echo, _failing):
            serve = Route("x", answer).serve
            await serve(posted(app, {**REVIEW, "request": {"uid": "u-2"}}))
            assert _logged_context().get("uid") is None
    finally:
        app[ADMISSIONS_BOUND].close()


def posted(app: web.Application, review: dict[str, Any]) -> web.Request:
    """An aiohttp request carrying `review` as its body, all of it arrived, for calling a route
    directly."""
    data = orjson.dumps(review)
    payload = StreamReader(mock.Mock(_reading_paused=False), 2**16, loop=asyncio.get_running_loop())
    payload.feed_data(data)
    payload.feed_eof()
    headers = {"Content-Length": str(len(data))}
    return make_mocked_request("POST", "/x", headers=headers, app=app, payload=payload)


# --- the look-up before the answer ----------------------------------------------------------


def _allowing(_: web.Application, body: Any, __: Any) -> dict[str, Any]:
    return {**REVIEW, "response": {"uid": body["request"]["uid"], "allowed": True}}


@pytest.mark.asyncio
async def test_a_look_up_that_raises_is_a_refusal_with_the_uid() -> None:
    with capture_logs(processors=[merge_request]) as logs:
        async with serving(_allowing, look_up=_failing_look_up) as post:
            answer = (await post("u-3"))["response"]
    assert answer["uid"] == "u-3"
    assert answer["allowed"] is False  # not answered by the allowing `answer`
    assert answer["status"]["code"] == 500
    assert answer["status"]["reason"] == "InternalError"
    assert "see its log" in answer["status"]["message"]
    [failed] = [line for line in logs if line["event"] == "admission handler failed"]
    assert failed["log_level"] == "error"
    assert failed["exc_info"] is True
    assert failed["uid"] == "u-3"


@pytest.mark.asyncio
async def test_a_look_up_that_waits_leaves_the_body_parsed_once_to_the_answer() -> None:
    seen: list[tuple[str, Any]] = []

    async def look_up(_: web.Application, body: Any, work: Work) -> Any:
        seen.append(("look-up", body))
        async with work.handler_timeout():
            await asyncio.sleep(0)
        return "found"

    def answer(_: web.Application, body: Any, found: Any) -> dict[str, Any]:
        seen.append(("answer", body))
        request = body["request"]
        response = {"uid": request["uid"], "allowed": True, "warnings": [request["pad"], found]}
        return {**REVIEW, "response": response}

    pad = "p" * 8192
    before = _answered("x", "allowed")
    async with serving(answer, look_up=look_up) as post:
        response = (await post("u-4", pad=pad))["response"]
    assert (response["uid"], response["allowed"]) == ("u-4", True)
    assert response["warnings"] == [pad, "found"]
    assert [by for by, _ in seen] == ["look-up", "answer"]
    assert seen[0][1] is seen[1][1], "the body was parsed again"
    assert _answered("x", "allowed") == before + 1


def _answered(endpoint: str, outcome: str) -> float:
    labels = {"endpoint": endpoint, "outcome": outcome}
    return REGISTRY.get_sample_value("torchjob_admission_requests_total", labels) or 0.0


@pytest.mark.asyncio
async def test_each_request_looked_up_has_its_own_uid_bound() -> None:
    async with serving(_context_echo, look_up=_context_look_up) as post:
        warnings = [(await post(uid))["response"]["warnings"] for uid in ("third", "fourth")]
    assert warnings == [
        ["bound uid third", "looked up with bound uid third"],
        ["bound uid fourth", "looked up with bound uid fourth"],
    ]


@pytest.mark.asyncio
async def test_every_route_leaves_nothing_bound_once_answered() -> None:
    """Called in this test's own task, as above; whether answered, refused for raising, or
    answered after a look-up that waited, nothing stays bound, nor any of the bound taken."""
    app = _bare_app()
    admissions = app[ADMISSIONS_BOUND]
    routes = (
        Route("x", _context_echo),
        Route("x", _failing),
        Route("x", _allowing, look_up=_failing_look_up),
        Route("x", _context_echo, look_up=_context_look_up),
    )
    try:
        for route in routes:
            response = await route.serve(posted(app, {**REVIEW, "request": {"uid": "u-5"}}))
            assert response.status == 200
            assert isinstance(response.body, bytes)
            assert orjson.loads(response.body)["response"]["uid"] == "u-5"
            assert _logged_context().get("uid") is None
            assert admissions.inflight == 0
    finally:
        admissions.close()


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
