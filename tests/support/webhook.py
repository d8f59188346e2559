"""The webhook's admission routes on a loopback port, as `init_app` wires them but without a
cluster: the pod route reads its job from a fixed stand-in for the job cache. Plain HTTP (the
limits under test sit behind TLS, not in it), and raw connections for bodies sent slowly or only
in part."""

from __future__ import annotations

import asyncio
import contextlib
import copy
import dataclasses
import http.client
import logging
import threading
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import orjson
import structlog
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from torchjob.api import constants, job_api
from torchjob.kube.informer import Informer, KubeObject
from torchjob.runtime import logging as runtime_logging
from torchjob.webhook import settings as webhook_settings
from torchjob.webhook.admission.bounds import Admissions
from torchjob.webhook.admission.job_cache import DecodedJobs
from torchjob.webhook.admission.keys import ADMISSION_LOG, ADMISSIONS_BOUND, DECODED_JOBS
from torchjob.webhook.admission.routes import add_admission_routes, admission_routes
from torchjob.webhook.keys import JOB_CACHES, SETTINGS
from torchjob.webhook.settings import Limits

RECONCILER = "system:serviceaccount:torchjob:torchjob-reconciler"
# Every admission route, each job kind's among them (JobKind.admission).
ROUTES = tuple(admission_routes())
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


# A Kubeflow PyTorchJob as stored (defaulted): a Master and two Workers.
KUBEFLOW_JOB: dict[str, Any] = {
    "apiVersion": "kubeflow.org/v1",
    "kind": "PyTorchJob",
    "metadata": {"name": "j", "namespace": "ns", "uid": "kubeflow-uid"},
    "spec": {
        "nprocPerNode": "auto",
        "runPolicy": {"cleanPodPolicy": "None", "suspend": False},
        "pytorchReplicaSpecs": {
            kind: {
                "replicas": replicas,
                "restartPolicy": "OnFailure",
                "template": {
                    "spec": {
                        "containers": [
                            {"name": "pytorch", "image": "i", "command": ["python3", "t.py"]},
                            {"name": "sidecar", "image": "s"},
                        ]
                    }
                },
            }
            for kind, replicas in (("Master", 1), ("Worker", 2))
        },
    },
}


class FixedJobs(Informer):
    """A job cache that holds `job` under every name."""

    def __init__(self, job: KubeObject | None) -> None:
        self._job = job
        self._json = None if job is None else orjson.dumps(job)

    def get(self, namespace: str, name: str) -> KubeObject | None:
        return self._job

    def get_json(self, namespace: str, name: str) -> bytes | None:
        return self._json


def admission_app(
    limits: Limits | None = None,
    job: KubeObject | None = JOB,
    kubeflow_job: KubeObject | None = KUBEFLOW_JOB,
) -> web.Application:
    limits = limits or Limits()
    settings = dataclasses.replace(
        webhook_settings.parse(["--pod-creators", RECONCILER]), limits=limits
    )
    app = web.Application(client_max_size=limits.max_body_bytes)
    app[SETTINGS] = settings
    app[DECODED_JOBS] = DecodedJobs()
    caches: dict[job_api.JobApi, Informer] = {
        job_api.TRAINING_JOB: FixedJobs(job),
        job_api.KUBEFLOW_JOB: FixedJobs(kubeflow_job),
    }
    app[JOB_CACHES] = caches
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


def replica_pod(owner_uid: str = "job-uid") -> dict[str, Any]:
    labels = {
        constants.LABEL_JOB_NAME: "j",
        constants.LABEL_REPLICA_TYPE: "worker",
        constants.LABEL_REPLICA_INDEX: "1",
    }
    owner = {
        "apiVersion": "batch.tensorstack.dev/v1beta1",
        "kind": "PyTorchTrainingJob",
        "name": "j",
        "uid": owner_uid,
        "controller": True,
    }
    return {
        "metadata": {"name": "j-worker-1", "labels": labels, "ownerReferences": [owner]},
        "spec": copy.deepcopy(JOB["spec"]["replicaSpecs"][0]["template"]["spec"]),
    }


def kubeflow_replica_pod(
    kind: str = "worker", index: int = 0, owner_uid: str = "kubeflow-uid"
) -> dict[str, Any]:
    """The pod the reconciler makes for replica `index` of type `kind` of KUBEFLOW_JOB."""
    labels = {
        constants.LABEL_JOB_NAME: "j",
        constants.LABEL_REPLICA_TYPE: kind,
        constants.LABEL_REPLICA_INDEX: str(index),
    }
    owner = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "name": "j",
        "uid": owner_uid,
        "controller": True,
    }
    template = KUBEFLOW_JOB["spec"]["pytorchReplicaSpecs"][kind.title()]["template"]
    return {
        "metadata": {"name": f"j-{kind}-{index}", "labels": labels, "ownerReferences": [owner]},
        "spec": copy.deepcopy(template["spec"]),
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


class ServerThread:
    """`app` served on a loopback port by an event loop in a thread of its own, for tests that
    post synchronously (hypothesis drives plain functions). `max_lag` is the longest the loop
    went without running a task that wakes every 10 ms: how long any request held the loop."""

    def __init__(self, app: web.Application) -> None:
        self.app = app
        self.port = 0
        self.max_lag = 0.0
        self._loop = asyncio.new_event_loop()
        self._started = threading.Event()
        self._stop: asyncio.Event | None = None
        self._thread = threading.Thread(target=self._run, name="webhook-under-test", daemon=True)

    def __enter__(self) -> ServerThread:
        self._thread.start()
        if not self._started.wait(30):
            raise RuntimeError("the webhook under test did not start")
        return self

    def __exit__(self, *_: object) -> None:
        stop = self._stop
        if stop is not None:
            self._loop.call_soon_threadsafe(stop.set)
        self._thread.join(30)

    def _run(self) -> None:
        self._loop.run_until_complete(self._serve())
        self._loop.close()

    async def _serve(self) -> None:
        self._stop = asyncio.Event()
        runner = web.AppRunner(self.app, access_log=None, lingering_time=0)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        self.port = runner.addresses[0][1]  # port 0: the one the kernel chose
        lag = asyncio.create_task(self._watch_lag())
        self._started.set()
        try:
            await self._stop.wait()
        finally:
            lag.cancel()
            await runner.cleanup()
            self.app[ADMISSIONS_BOUND].close()

    async def _watch_lag(self) -> None:
        every = 0.01
        while True:
            before = time.monotonic()
            await asyncio.sleep(every)
            self.max_lag = max(self.max_lag, time.monotonic() - before - every)

    def post(self, path: str, body: bytes, timeout: float = 30) -> tuple[int, bytes]:
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            connection.request("POST", path, body, {"Content-Type": "application/json"})
            response = connection.getresponse()
            return response.status, response.read()
        finally:
            connection.close()


@contextlib.contextmanager
def production_logging() -> Iterator[None]:
    """structlog configured as the services configure it (`runtime.logging`: JSON, tracebacks
    formatted as text), to the stdlib loggers pytest captures, for the length of the block. The
    default renders tracebacks with their locals, which can hold the loop for seconds on a large
    body: a cost of the tests, not of the webhook. Loggers bound before the block keep theirs."""
    saved = structlog.get_config()
    structlog.configure(
        processors=[*runtime_logging.SHARED_PROCESSORS, structlog.processors.JSONRenderer()],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.make_filtering_bound_logger(logging.INFO),
        cache_logger_on_first_use=False,
    )
    try:
        yield
    finally:
        structlog.configure(**saved)
