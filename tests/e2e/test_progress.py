"""The progress endpoint on the real control plane: the webhook as a process with the chart's
arguments, the reconciler making a job's pods, tokens minted for those pods by the apiserver
(TokenRequest, bound to the pod, as the kubelet's projected volume gets them), and reports sent
over TLS verified with the webhook's own CA. What a token may do is decided by the apiserver's
TokenReview and the pods it really has, not by anything this test stands in for."""

from __future__ import annotations

import math
import ssl
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest
from kubernetes_asyncio import client
from support import ControlPlane
from support.cluster import Job
from support.eventually import eventually
from support.jobs import JobBuilder
from support.operator import progress_port
from support.pods import bare_pod
from support.processes import ServiceProcess
from support.progress import endpoint_ca, pod_token
from support.tokens import expired_copy

from torchjob.api.job_api import TRAINING_JOB
from torchjob.api.progress import JobRef
from torchjob.kube.client import KubeClient

WRITE_SECONDS = 10.0  # the webhook's default --progress-write-seconds
REPORT = {"trainerStatus": {"progressPercentage": 42, "estimatedRemainingSeconds": 60}}


@pytest.fixture
async def endpoint(
    control_plane: ControlPlane,
    webhook_server: ServiceProcess,
    reconciler: ServiceProcess,
    tmp_path: Path,
) -> AsyncIterator[tuple[str, aiohttp.ClientSession]]:
    """The progress endpoint's base URL, and a session that verifies it with the webhook's CA."""
    ca = tmp_path / "ca.crt"
    ca.write_bytes(endpoint_ca(control_plane))
    context = ssl.create_default_context(cafile=str(ca))
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=context)) as session:
        yield f"https://127.0.0.1:{progress_port(webhook_server)}", session


async def _job_with_pod(
    kube_client: client.ApiClient, namespace: str, name: str
) -> tuple[Job, Any]:
    job = await Job(kube_client, namespace, JobBuilder(name).replicas("worker", 1).build()).create()
    pods = await job.wait_pods({f"{name}-worker-0"})
    return job, pods[f"{name}-worker-0"]


def _ref(job: Job) -> JobRef:
    return JobRef(TRAINING_JOB, job.namespace, job.name)


async def _post(
    session: aiohttp.ClientSession,
    url: str,
    token: str | None,
    body: bytes | None = None,
) -> tuple[int, dict[str, Any]]:
    headers = {"Content-Type": "application/json"}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    data = orjson.dumps(REPORT) if body is None else body
    async with session.post(url, data=data, headers=headers) as response:
        answer = await response.json(content_type=None)
        return response.status, answer


async def _trainer_status(job: Job) -> dict[str, Any]:
    return dict((await job.status()).get("trainerStatus") or {})


def _is_status(answer: dict[str, Any], code: int) -> bool:
    return (
        answer.get("kind") == "Status"
        and answer.get("apiVersion") == "v1"
        and answer.get("status") == "Failure"
        and answer.get("code") == code
        and bool(answer.get("message"))
    )


async def test_a_pods_report_is_written_into_its_jobs_status(
    kube_client: client.ApiClient,
    service_client: KubeClient,
    admitted_namespace: str,
    endpoint: tuple[str, aiohttp.ClientSession],
    webhook_server: ServiceProcess,
) -> None:
    base, session = endpoint
    job, pod = await _job_with_pod(kube_client, admitted_namespace, "reporting")
    token = await pod_token(service_client, admitted_namespace, pod, _ref(job).audience)
    code, answer = await _post(session, base + _ref(job).path, token)
    assert code == 200, answer
    written = answer["trainerStatus"]
    assert written["progressPercentage"] == 42
    assert written["estimatedRemainingSeconds"] == 60
    assert written["metrics"] is None

    async def shown() -> dict[str, Any]:
        return await _trainer_status(job)

    status = await eventually(shown, "status.trainerStatus")
    assert status == {k: v for k, v in written.items() if v is not None}
    assert webhook_server.samples("torchjob_progress_requests_total")['{code="200"}'] >= 1
    assert webhook_server.samples("torchjob_progress_writes_total")[""] >= 1


async def test_refusals(
    kube_client: client.ApiClient,
    service_client: KubeClient,
    admitted_namespace: str,
    endpoint: tuple[str, aiohttp.ClientSession],
    control_plane: ControlPlane,
) -> None:
    base, session = endpoint
    ns = admitted_namespace
    job_a, pod_a = await _job_with_pod(kube_client, ns, "a")
    job_b, pod_b = await _job_with_pod(kube_client, ns, "b")
    url_a, url_b = base + _ref(job_a).path, base + _ref(job_b).path
    token_a = await pod_token(service_client, ns, pod_a, _ref(job_a).audience)
    # A's own token replayed to B's URL: B's audience is not the token's.
    code, answer = await _post(session, url_b, token_a)
    assert code == 401 and _is_status(answer, 401), answer
    # A token of B's audience for A's pod: the apiserver vouches for it, but A's pod is not B's.
    forged_for_b = await pod_token(service_client, ns, pod_a, _ref(job_b).audience)
    code, answer = await _post(session, url_b, forged_for_b)
    assert code == 403 and _is_status(answer, 403), answer
    assert (
        answer["message"]
        == f"the token's pod a-worker-0 does not belong to PyTorchTrainingJob {ns}/b"
    )
    # Another audience altogether.
    other = await pod_token(service_client, ns, pod_a, "https://kubernetes.default.svc")
    code, answer = await _post(session, url_a, other)
    assert code == 401 and _is_status(answer, 401), answer
    # A pod of no job, with the job's audience.
    stray = await _stray_pod(kube_client, ns)
    code, answer = await _post(
        session, url_a, await pod_token(service_client, ns, stray, _ref(job_a).audience)
    )
    assert code == 403 and _is_status(answer, 403), answer
    # No token.
    code, answer = await _post(session, url_a, None)
    assert code == 401 and _is_status(answer, 401), answer
    # An expired token, signed with the control plane's real key.
    expired = _expired(control_plane, token_a)
    code, answer = await _post(session, url_a, expired)
    assert code == 401 and _is_status(answer, 401), answer
    await _bodies_refused(session, url_a, token_a)
    assert pod_b.metadata.name == "b-worker-0"
    assert not await _trainer_status(job_a) and not await _trainer_status(job_b)


async def _bodies_refused(session: aiohttp.ClientSession, url: str, token: str) -> None:
    code, answer = await _post(session, url, token, b"x" * (70 * 1024))
    assert code == 413 and _is_status(answer, 413), answer
    code, answer = await _post(session, url, token, b'{"trainerStatus": ')
    assert (code, answer.get("message")) == (400, "malformed JSON"), answer
    body = orjson.dumps({"trainerStatus": {"progressPercentage": 150}})
    code, answer = await _post(session, url, token, body)
    assert code == 422 and "trainerStatus.progressPercentage" in answer["message"], answer
    async with session.get(url) as response:
        assert response.status == 405


async def _stray_pod(kube_client: client.ApiClient, namespace: str) -> Any:
    core = client.CoreV1Api(kube_client)
    manifest: Any = bare_pod("stray", container="c", image="i")
    return await core.create_namespaced_pod(namespace, manifest)


def _expired(control_plane: ControlPlane, token: str) -> str:
    """`token`, expired, signed with the service-account key the apiserver trusts."""
    return expired_copy(token, (control_plane.ca_file.parent / "sa.key").read_bytes())


async def test_a_flood_is_rate_limited_and_coalesced(
    kube_client: client.ApiClient,
    service_client: KubeClient,
    admitted_namespace: str,
    endpoint: tuple[str, aiohttp.ClientSession],
    webhook_server: ServiceProcess,
) -> None:
    """100 reports in a row from one pod: beyond the burst most are 429, and the status is
    written at most once per write interval, ending with the last report accepted."""
    base, session = endpoint
    job, pod = await _job_with_pod(kube_client, admitted_namespace, "flood")
    token = await pod_token(service_client, admitted_namespace, pod, _ref(job).audience)
    writes_before = webhook_server.samples("torchjob_progress_writes_total").get("", 0.0)
    started = time.monotonic()
    codes, last = [], None
    for percent in range(100):
        body = orjson.dumps({"trainerStatus": {"progressPercentage": percent}})
        code, answer = await _post(session, base + _ref(job).path, token, body)
        codes.append(code)
        if code == 200:
            last = answer["trainerStatus"]
        else:
            assert code == 429 and _is_status(answer, 429), answer
    assert codes.count(200) >= 10 and codes.count(429) >= 50, codes
    assert last is not None

    async def final() -> bool:
        return await _trainer_status(job) == {k: v for k, v in last.items() if v is not None}

    await eventually(final, "the last accepted report in status", explain=lambda: last)
    elapsed = time.monotonic() - started
    writes = webhook_server.samples("torchjob_progress_writes_total")[""] - writes_before
    assert 1 <= writes <= math.ceil(elapsed / WRITE_SECONDS) + 1, (writes, elapsed)


async def test_no_report_for_a_finished_job(
    kube_client: client.ApiClient,
    service_client: KubeClient,
    admitted_namespace: str,
    endpoint: tuple[str, aiohttp.ClientSession],
) -> None:
    base, session = endpoint
    job, pod = await _job_with_pod(kube_client, admitted_namespace, "done")
    token = await pod_token(service_client, admitted_namespace, pod, _ref(job).audience)
    await job.run_all()
    await job.wait_phase("Running")
    await job.kubelet.finish(pod.metadata.name, 0)
    await job.wait_phase("Succeeded")

    async def conflict() -> tuple[int, dict[str, Any]] | None:
        code, answer = await _post(session, base + _ref(job).path, token)
        return (code, answer) if code == 409 else None

    _, answer = await eventually(conflict, "a 409 for the finished job", interval=1.0)
    assert answer["message"] == "the job has finished" and _is_status(answer, 409)
