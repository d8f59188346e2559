"""The webhook's admission routes on a loopback port, as `init_app` wires them but without a
cluster: the pod route reads its job from a fixed stand-in for the job cache. Plain HTTP (the
limits under test sit behind TLS, not in it), and raw connections for bodies sent slowly or only
in part."""

from __future__ import annotations

import asyncio
import contextlib
import copy
import dataclasses
from collections.abc import AsyncIterator
from typing import Any

import orjson
import structlog
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from torchjob.api import constants
from torchjob.kube.informer import Informer, KubeObject
from torchjob.webhook import settings as webhook_settings
from torchjob.webhook.app import (
    ADMISSION_LOG,
    ADMISSIONS_BOUND,
    DECODED_JOBS,
    JOBS,
    SETTINGS,
    Admissions,
    DecodedJobs,
    add_admission_routes,
)
from torchjob.webhook.settings import Limits

RECONCILER = "system:serviceaccount:torchjob:torchjob-reconciler"
ROUTES = ("/mutate/pytorchtrainingjobs", "/validate/pytorchtrainingjobs", "/mutate/pods")
JOB: dict[str, Any] = {
    "apiVersion": "batch.tensorstack.dev/v1beta1",
    "kind": "PyTorchTrainingJob",
    "metadata": {"name": "j", "namespace": "ns", "uid": "job-uid"},
    "spec": {
        "replicaSpecs": [
            {
                "type": "worker",
                "replicas": 2,
                "template": {
                    "spec": {"containers": [{"name": "python", "image": "i", "args": ["t.py"]}]}
                },
            }
        ]
    },
}


class FixedJobs(Informer):
    """A job cache that holds `job` under every name."""

    def __init__(self, job: KubeObject | None) -> None:
        self._job = job

    def get(self, namespace: str, name: str) -> KubeObject | None:
        return self._job


def admission_app(limits: Limits | None = None, job: KubeObject | None = JOB) -> web.Application:
    limits = limits or Limits()
    settings = dataclasses.replace(
        webhook_settings.parse(["--pod-creators", RECONCILER]), limits=limits
    )
    app = web.Application(client_max_size=limits.max_body_bytes)
    app[SETTINGS] = settings
    app[DECODED_JOBS] = DecodedJobs()
    app[JOBS] = FixedJobs(job)
    app[ADMISSIONS_BOUND] = Admissions(limits)
    app[ADMISSION_LOG] = structlog.get_logger("test").bind()
    add_admission_routes(app)
    return app


@contextlib.asynccontextmanager
async def serving(app: web.Application) -> AsyncIterator[TestClient[web.Request, web.Application]]:
    """`app` on a loopback port, served with the options `python -m torchjob.webhook` uses."""
    server = TestServer(app)
    await server.start_server(lingering_time=0)
    async with TestClient(server) as client:
        try:
            yield client
        finally:
            app[ADMISSIONS_BOUND].close()


def review(
    obj: Any, operation: str = "CREATE", old: Any = None, user: str = "alice", uid: str = "r1"
) -> dict[str, Any]:
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": uid,
            "operation": operation,
            "namespace": "ns",
            "name": "j",
            "userInfo": {"username": user},
            "object": obj,
            "oldObject": old,
        },
    }


def replica_pod() -> dict[str, Any]:
    labels = {
        constants.LABEL_JOB_NAME: "j",
        constants.LABEL_REPLICA_TYPE: "worker",
        constants.LABEL_REPLICA_INDEX: "1",
    }
    owner = {
        "apiVersion": "batch.tensorstack.dev/v1beta1",
        "kind": "PyTorchTrainingJob",
        "name": "j",
        "uid": "job-uid",
        "controller": True,
    }
    return {
        "metadata": {"name": "j-worker-1", "labels": labels, "ownerReferences": [owner]},
        "spec": copy.deepcopy(JOB["spec"]["replicaSpecs"][0]["template"]["spec"]),
    }


def padded_job(size: int) -> dict[str, Any]:
    """The job with an annotation that brings its review to about `size` bytes."""
    job = copy.deepcopy(JOB)
    base = len(orjson.dumps(review(job)))
    job["metadata"]["annotations"] = {"pad": "x" * max(0, size - base - 20)}
    return job


@contextlib.asynccontextmanager
async def half_sent(
    client: TestClient[web.Request, web.Application], path: str, length: int, sent: bytes = b"{"
) -> AsyncIterator[asyncio.StreamReader]:
    """A POST announcing `length` bytes of body and sending only `sent`; yields the reader of
    the connection, closed when the block ends."""
    reader, writer = await asyncio.open_connection(client.host, client.port)
    head = (
        f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        f"Content-Length: {length}\r\n\r\n"
    )
    writer.write(head.encode() + sent)
    await writer.drain()
    try:
        yield reader
    finally:
        writer.close()
        with contextlib.suppress(ConnectionError):
            await writer.wait_closed()


async def status_line(reader: asyncio.StreamReader) -> int:
    """The status of the HTTP response on `reader` (0 when the connection closed unanswered)."""
    line = await reader.readline()
    return int(line.split()[1]) if line else 0
