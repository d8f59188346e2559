"""Arbitrary bodies to the admission routes of a webhook served on a loopback port: random bytes,
random JSON, AdmissionReview-shaped JSON around random objects, deep nesting, wrong types, bodies
cut short and bodies large enough for the worker thread. None gets a 5xx, every one gets an
answer (a well-formed AdmissionReview carrying the request's uid, when the status is 200), and no
request holds the event loop for as long as the handler timeout.

The loop's longest stall is measured by a task on it that wakes every 10 ms; the bound it is held
to is the handler timeout (4s), hundreds of times what an inline request takes (bodies over 64 KiB
are answered off the loop), so a busy machine does not make it fail."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from support.webhook import (
    JOB,
    RECONCILER,
    ROUTES,
    ServerThread,
    admission_app,
    padded_job,
    production_logging,
    replica_pod,
    review,
)

from torchjob.webhook.admission.bounds import INLINE_BYTES
from torchjob.webhook.settings import Limits

LIMITS = Limits()

SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**64 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20)
)
JSON = st.recursive(
    SCALARS,
    lambda inner: (
        st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=12), inner, max_size=5)
    ),
    max_leaves=40,
)
KEYS = st.sampled_from(
    [
        "apiVersion",
        "kind",
        "metadata",
        "name",
        "namespace",
        "labels",
        "annotations",
        "ownerReferences",
        "uid",
        "controller",
        "spec",
        "replicaSpecs",
        "template",
        "containers",
        "type",
        "replicas",
        "args",
        "command",
        "env",
        "torchrunConfig",
        "elastic",
        "runPolicy",
        "runMode",
        "restartPolicy",
        "batch.tensorstack.dev/job-name",
    ]
)
SHAPED = st.recursive(
    JSON,
    lambda inner: st.dictionaries(KEYS, inner, max_size=5) | st.lists(inner, max_size=3),
    max_leaves=60,
)
OBJECTS = st.one_of(
    SHAPED,
    st.just(JOB),
    st.just(replica_pod()),
    st.builds(
        lambda extra: {**JOB, "spec": {**JOB["spec"], **extra}}, st.dictionaries(KEYS, SHAPED)
    ),
    st.builds(lambda spec: {**replica_pod(), "spec": spec}, SHAPED),
)


@st.composite
def reviews(draw: st.DrawFn) -> Any:
    body = review(
        draw(OBJECTS),
        operation=draw(st.sampled_from(["CREATE", "UPDATE", "DELETE", "CONNECT", ""])),
        old=draw(st.none() | OBJECTS),
        user=draw(st.sampled_from([RECONCILER, "alice", ""])),
    )
    request = body["request"]
    # Wrong types where the review's own fields are.
    for key in draw(st.lists(st.sampled_from(sorted(request)), max_size=3)):
        request[key] = draw(JSON)
    if draw(st.booleans()):
        body[draw(st.sampled_from(["request", "apiVersion", "kind"]))] = draw(JSON)
    return body


def nested(depth: int, opening: bytes, closing: bytes) -> bytes:
    return opening * depth + b"1" + closing * depth


NESTING = st.integers(min_value=1, max_value=3000).flatmap(
    lambda depth: st.sampled_from(
        [
            nested(depth, b"[", b"]"),
            nested(depth, b'{"a":', b"}"),
            b'{"request":{"uid":"deep","object":' + nested(depth, b'{"spec":', b"}") + b"}}",
            b'{"request":{"uid":"deep","object":{"spec":{"replicaSpecs":'
            + nested(depth, b"[", b"]")
            + b"}}}}",
        ]
    )
)
LARGE = st.integers(min_value=INLINE_BYTES + 1, max_value=512 * 1024).map(
    lambda size: orjson.dumps(review(padded_job(size), uid="large"))
)
BODIES = st.one_of(
    st.binary(max_size=2048),
    JSON.map(orjson.dumps),
    reviews().map(orjson.dumps),
    NESTING,
    LARGE,
    st.tuples(reviews().map(orjson.dumps), st.floats(0, 1)).map(
        lambda cut: cut[0][: int(len(cut[0]) * cut[1])]  # cut short: not JSON any more
    ),
)


@pytest.fixture(scope="module")
def webhook() -> Iterator[ServerThread]:
    with (
        production_logging(),
        ServerThread(admission_app(LIMITS, job=copy.deepcopy(JOB))) as server,
    ):
        yield server


@settings(
    max_examples=400,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(route=st.sampled_from(ROUTES), body=BODIES)
def test_no_body_gets_a_5xx_or_holds_the_loop(
    webhook: ServerThread, route: str, body: bytes
) -> None:
    status, payload = webhook.post(route, body)
    event(f"HTTP {status}")
    assert status < 500, payload
    if status == 200:
        answer = orjson.loads(payload)
        assert answer["apiVersion"] == "admission.k8s.io/v1"
        assert answer["kind"] == "AdmissionReview"
        response = answer["response"]
        assert isinstance(response["allowed"], bool)
        if not response["allowed"]:
            assert response["status"]["message"]
        event("allowed" if response["allowed"] else f"refused {response['status']['code']}")
        uid = _uid_of(body)
        if uid:
            assert response["uid"] == uid
    else:
        assert status in (400, 408, 413, 429), (status, payload)
    assert webhook.max_lag < LIMITS.handler_timeout_seconds


def _uid_of(body: bytes) -> str | None:
    try:
        decoded = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    request = decoded.get("request") if isinstance(decoded, dict) else None
    uid = request.get("uid") if isinstance(request, dict) else None
    return uid if isinstance(uid, str) else None
