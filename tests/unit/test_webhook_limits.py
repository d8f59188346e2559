"""What one admission request may cost the webhook, served for real on a loopback port: a body
larger than the apiserver sends is refused unread, a half-sent one is cut off, bodies in flight
are bounded (with room kept for ordinary ones), and a handler out of time is answered for. No
assertion is about speed: each says what answer comes back, and the generous waits only keep a
broken server from hanging the suite."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import orjson
import pytest
from aiohttp import web
from support.webhook import (
    JOB,
    RECONCILER,
    admission_app,
    half_sent,
    padded_job,
    replica_pod,
    review,
    serving,
    status_line,
)

from torchjob.api import admission
from torchjob.kube.client import KubeClient
from torchjob.kube.credentials import Credentials, StaticToken, tls_context
from torchjob.webhook import settings as webhook_settings
from torchjob.webhook.admission import routes as webhook_routes
from torchjob.webhook.admission.bounds import (
    INLINE_BYTES,
    MAX_JOB_LOOKUPS,
    SMALL_RESERVE_BYTES,
    Admissions,
    TooLate,
    Work,
)
from torchjob.webhook.admission.keys import ADMISSIONS_BOUND
from torchjob.webhook.admission.routes import Answer, Route
from torchjob.webhook.keys import API
from torchjob.webhook.settings import Limits

VALIDATE = "/validate/pytorchtrainingjobs"
SMALL = Limits(
    max_body_bytes=256 * 1024,
    max_inflight_bytes=512 * 1024,
    read_timeout_seconds=0.5,
    handler_timeout_seconds=1.0,
)
WAIT = 30  # seconds: only a server that never answers takes this long


async def test_an_ordinary_admission_is_answered() -> None:
    async with serving(admission_app(SMALL)) as client:
        response = await client.post(VALIDATE, data=orjson.dumps(review(JOB)))
        assert response.status == 200
        assert (await response.json())["response"]["allowed"] is True


async def test_a_body_larger_than_the_bound_is_refused_before_it_is_sent() -> None:
    """Only the headers go out: the 413 comes from the Content-Length alone."""
    async with (
        serving(admission_app(SMALL)) as client,
        half_sent(client, VALIDATE, SMALL.max_body_bytes + 1) as reader,
    ):
        assert await asyncio.wait_for(status_line(reader), WAIT) == 413


async def test_a_chunked_body_larger_than_the_bound_is_refused() -> None:
    async def chunks() -> Any:
        for _ in range(SMALL.max_body_bytes // 65536 + 2):
            yield b" " * 65536

    async with serving(admission_app(SMALL)) as client:
        response = await client.post(VALIDATE, data=chunks())
        assert response.status == 413


async def test_a_half_sent_body_is_cut_off() -> None:
    async with serving(admission_app(SMALL)) as client:
        async with half_sent(client, VALIDATE, 10_000) as reader:
            assert await asyncio.wait_for(status_line(reader), WAIT) == 408
            # ...and the connection is closed, not held open for the rest of the body.
            await asyncio.wait_for(reader.read(), WAIT)
            assert reader.at_eof()
        assert client.app is not None
        assert client.app[ADMISSIONS_BOUND].inflight == 0


async def test_bodies_beyond_the_bound_in_flight_are_told_to_retry() -> None:
    """Two half-sent bodies of the largest size fill the budget: a third large one is refused
    with a 429 that says when to retry (client-go, and so the apiserver, retries it), while an
    ordinary one still fits in the room kept for small bodies."""
    limits = Limits(
        max_body_bytes=256 * 1024,
        max_inflight_bytes=512 * 1024,
        read_timeout_seconds=20,
        handler_timeout_seconds=20,
    )
    async with serving(admission_app(limits)) as client:
        assert client.app is not None
        bound = client.app[ADMISSIONS_BOUND]
        async with (
            half_sent(client, VALIDATE, limits.max_body_bytes),
            half_sent(client, VALIDATE, limits.max_body_bytes),
        ):
            await _until(lambda: bound.inflight == limits.max_inflight_bytes)
            large = orjson.dumps(review(padded_job(200 * 1024)))
            response = await client.post(VALIDATE, data=large)
            assert response.status == 429
            assert response.headers["Retry-After"] == "1"
            ordinary = await client.post(VALIDATE, data=orjson.dumps(review(JOB)))
            assert ordinary.status == 200
            assert (await ordinary.json())["response"]["allowed"] is True
        await _until(lambda: bound.inflight == 0)


async def test_an_admission_with_no_room_left_is_told_to_retry_unanswered() -> None:
    """An ordinary admission holds its share of the bound only while it is answered, but needs
    the room for one: one byte short of it, the admission is refused with a 429 and the answer is
    not called; with just the room, it is answered, and its share given back."""
    called: list[str] = []

    def answer(_: web.Application, body: Any, __: Any) -> dict[str, Any]:
        called.append("answer")
        return {"response": {"uid": body["request"]["uid"], "allowed": True}}

    app = admission_app(SMALL)
    app.router.add_post("/x", Route("x", answer).serve)
    bound = app[ADMISSIONS_BOUND]
    body = orjson.dumps(review(JOB))
    full = SMALL.max_inflight_bytes + SMALL_RESERVE_BYTES
    async with serving(app) as client:
        bound.inflight = full - len(body) + 1
        refused = await client.post("/x", data=body)
        assert refused.status == 429
        assert refused.headers["Retry-After"] == "1"
        assert called == []
        assert bound.inflight == full - len(body) + 1
        bound.inflight = full - len(body)
        answered = await client.post("/x", data=body)
        assert answered.status == 200
        assert (await answered.json())["response"]["allowed"] is True
        assert called == ["answer"]
        assert bound.inflight == full - len(body)
        bound.inflight = 0


async def test_a_large_body_is_answered_off_the_loop() -> None:
    """A body above the inline size is parsed and validated in the worker thread."""
    threads: list[str] = []
    real = admission.handle

    def spy(body: Any, handler: Any) -> dict[str, Any]:
        threads.append(threading.current_thread().name)
        return real(body, handler)

    async with serving(admission_app(SMALL)) as client:
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(webhook_routes, "handle", spy)
            for job in (JOB, padded_job(INLINE_BYTES * 2)):
                response = await client.post(VALIDATE, data=orjson.dumps(review(job)))
                assert (await response.json())["response"]["allowed"] is True
    assert threads[0] == threading.current_thread().name
    assert threads[1].startswith("admission")


# -- a handler out of time ------------------------------------------------------------------------


async def test_a_handler_out_of_time_is_refused_with_the_uid() -> None:
    async def stuck(_: web.Application, body: Any, work: Work) -> None:
        async with work.handler_timeout():
            await asyncio.sleep(3600)
        raise AssertionError("not reached")

    def unreached(_: web.Application, body: Any, __: Any) -> dict[str, Any]:
        raise AssertionError("not reached")

    app = admission_app(SMALL)
    app.router.add_post("/x", Route("x", unreached, look_up=stuck).serve)
    async with serving(app) as client:
        response = await asyncio.wait_for(client.post("/x", data=orjson.dumps(review(JOB))), WAIT)
        assert response.status == 200
        answer = (await response.json())["response"]
        assert answer["uid"] == "r1"
        assert answer["allowed"] is False
        assert answer["status"]["code"] == 504
        assert "within 1s" in answer["status"]["message"]


async def test_slow_work_in_the_worker_neither_holds_the_loop_nor_the_answer() -> None:
    """A large body whose validation takes longer than the handler timeout (a deliberately slow
    validator in the worker thread): its answer is a timely refusal, a small admission sent
    meanwhile is answered, and the budget comes back only once the worker lets go of the body."""
    release = threading.Event()

    def slow(body: Any, handler: Any) -> dict[str, Any]:
        release.wait(WAIT)
        return {"response": {"uid": "late", "allowed": True}}

    def answer(_: web.Application, body: Any, __: Any) -> dict[str, Any]:
        return slow(body, None)

    def quick(_: web.Application, body: Any, __: Any) -> dict[str, Any]:
        return {"response": {"uid": body["request"]["uid"], "allowed": True}}

    app = _one_route(answer, SMALL)
    app.router.add_post("/quick", Route("quick", quick).serve)
    async with serving(app) as client:
        bound = app[ADMISSIONS_BOUND]
        large = orjson.dumps(review(padded_job(INLINE_BYTES * 2)))
        slow_answer = asyncio.create_task(client.post("/x", data=large))
        await _until(lambda: bound.inflight > INLINE_BYTES)
        small = await asyncio.wait_for(client.post("/quick", data=orjson.dumps(review(JOB))), WAIT)
        assert (await small.json())["response"]["allowed"] is True
        response = await asyncio.wait_for(slow_answer, WAIT)
        refused = (await response.json())["response"]
        assert (refused["allowed"], refused["status"]["code"]) == (False, 504)
        assert bound.inflight == len(large), "the worker still holds the body"
        release.set()
        await _until(lambda: bound.inflight == 0)


async def test_work_the_worker_reaches_too_late_is_dropped() -> None:
    bound = Admissions(SMALL)
    try:
        work = Work(bound, INLINE_BYTES * 2, timeout=0)
        ran: list[bool] = []
        with pytest.raises(TooLate):
            await work.compute(lambda: ran.append(True))
        assert ran == []
    finally:
        bound.close()


def _one_route(answer: Answer, limits: Limits) -> web.Application:
    app = admission_app(limits)
    app.router.add_post("/x", Route("x", answer).serve)
    return app


async def _until(condition: Any) -> None:
    deadline = time.monotonic() + WAIT
    while not condition():
        assert time.monotonic() < deadline, "condition never held"
        await asyncio.sleep(0.01)


async def test_a_large_body_of_nothing_but_empty_objects_is_refused_unparsed() -> None:
    """`[{},{},...]` would take 24 times its size once parsed."""
    dense = b'{"request":{"uid":"d","object":[' + b"{}," * (INLINE_BYTES // 3) + b"{}]}}"
    async with serving(admission_app(SMALL)) as client:
        response = await client.post(VALIDATE, data=dense)
        assert response.status == 400
        assert "objects and arrays" in await response.text()


async def test_pods_of_uncached_jobs_wait_on_a_bounded_number_of_lookups() -> None:
    """Each such pod holds its parsed body while the job is fetched: beyond the bound, the pod
    is refused with a 429 the reconciler retries, and nothing is fetched."""
    app = admission_app(SMALL, job=None)
    async with serving(app) as client:
        app[ADMISSIONS_BOUND].lookups = MAX_JOB_LOOKUPS
        pod = review(replica_pod(), user=RECONCILER)
        response = await client.post("/mutate/pods", data=orjson.dumps(pod))
        answer = (await response.json())["response"]
        assert (answer["allowed"], answer["status"]["code"]) == (False, 429)
        assert "not cached yet" in answer["status"]["message"]


@pytest.mark.parametrize(
    "argv",
    [
        ["--max-body-bytes", "100"],
        ["--max-inflight-bytes", "1048576"],  # below the default largest body
        ["--read-timeout-seconds", "5"],  # above the default handler timeout
        ["--handler-timeout-seconds", "0"],
    ],
)
def test_inconsistent_limits_are_refused_at_start(argv: list[str]) -> None:
    with pytest.raises(SystemExit):
        webhook_settings.parse(argv)


def test_limits_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TORCHJOB_WEBHOOK_MAX_BODY_BYTES", "2097152")
    monkeypatch.setenv("TORCHJOB_WEBHOOK_HANDLER_TIMEOUT", "8")
    limits = webhook_settings.parse([]).limits
    assert (limits.max_body_bytes, limits.handler_timeout_seconds) == (2097152, 8.0)
    assert limits.loop_stall_seconds > limits.handler_timeout_seconds


async def test_a_pod_whose_job_lookup_hangs_is_answered_at_the_handler_timeout() -> None:
    """The apiserver accepts the job's GET and never answers: the pod route arms the handler
    timeout before it waits, and the pod is refused in time with its uid."""
    accepted: list[asyncio.StreamWriter] = []

    async def silent(_: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted.append(writer)

    apiserver = await asyncio.start_server(silent, "127.0.0.1", 0)
    port = apiserver.sockets[0].getsockname()[1]
    credentials = Credentials(f"http://127.0.0.1:{port}", tls_context(), StaticToken(None))
    app = admission_app(SMALL, job=None)
    app[API] = KubeClient(credentials)
    try:
        async with serving(app) as client:
            pod = review(replica_pod(), user=RECONCILER)
            response = await asyncio.wait_for(
                client.post("/mutate/pods", data=orjson.dumps(pod)), WAIT
            )
            answer = (await response.json())["response"]
        assert accepted, "the job was not looked up"
        assert answer["uid"] == "r1"
        assert (answer["allowed"], answer["status"]["code"]) == (False, 504)
    finally:
        await app[API].close()
        apiserver.close()
        for writer in accepted:
            writer.close()
        await apiserver.wait_closed()


async def test_a_large_job_validated_too_slowly_is_refused_at_the_handler_timeout(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The validation route as served: a large body is answered in the worker thread, and the
    timeout armed before it waits still refuses it in time when the work there runs long."""
    release = threading.Event()

    def slow(body: Any, handler: Any) -> dict[str, Any]:
        release.wait(WAIT)
        return admission.handle(body, handler)

    monkeypatch.setattr(webhook_routes, "handle", slow)
    try:
        async with serving(admission_app(SMALL)) as client:
            large = orjson.dumps(review(padded_job(INLINE_BYTES * 2)))
            response = await asyncio.wait_for(client.post(VALIDATE, data=large), WAIT)
            answer = (await response.json())["response"]
            assert (answer["allowed"], answer["status"]["code"]) == (False, 504)
            assert answer["uid"] == "r1"
    finally:
        release.set()
