"""A job's Resources tab: CPU and memory (and GPUs where the cluster reports them) of each replica
over time, drawn in the browser by static/resources.js with uPlot.

Two sources, and the page says which one it uses:
- metrics.k8s.io (the default): the job's PodMetrics read as the user every 15 s by an event
  stream, each sample appended by the page, which keeps the history while it is open;
- the cluster's Prometheus (`--prometheus-url`): the job's whole lifetime at once. Prometheus knows
  nothing of the user, so the console confines each query itself: built from the URL's namespace
  and job name only (both DNS labels, escaped), and run only after a SelfSubjectAccessReview says
  the user may get pods in that namespace."""

from __future__ import annotations

import asyncio
import datetime
from typing import Any

import aiohttp
import orjson
from aiohttp import web

from torchjob.api.constants import LABEL_JOB_NAME
from torchjob.api.names import is_dns_1123_label
from torchjob.console.keys import PAGES, SETTINGS, session_of
from torchjob.console.replicas import page_context, read_job, training_view
from torchjob.console.sse import event_stream
from torchjob.console.user_api import UserApi
from torchjob.kube.errors import KubeError
from torchjob.kube.resources import POD_METRICS, PODS
from torchjob.views.console import rows, series

SAMPLE_SECONDS = 15.0
PROMETHEUS_SECONDS = 30.0
NO_METRICS = (404, 503)
Object = dict[str, Any]


async def resources_page(request: web.Request) -> web.Response:
    """The charts' page. A finished job's pods are gone, and metrics.k8s.io keeps no history:
    without Prometheus the page says so instead of waiting for samples."""
    _, job = await read_job(request)
    prometheus = request.app[SETTINGS].prometheus_url
    base = request.path.rstrip("/")
    training = training_view(request.match_info.get("kind", "jobs"), job)
    row = rows.job_row(job)
    context = page_context(
        request,
        job,
        row=row,
        source="prometheus" if prometheus else "metrics",
        data_url=f"{base}/series" if prometheus else f"{base}/stream",
        bounds=orjson.dumps(series.pod_bounds(training)).decode(),
        collecting=bool(prometheus) or not row.finished,
    )
    return request.app[PAGES].response("resources.html", **context)


async def resources_stream(request: web.Request) -> web.StreamResponse:
    """A `sample` (JSON: time, cpu and memory by pod) every 15 s, read from metrics.k8s.io as
    the user; `unavailable` once when the cluster serves no metrics.k8s.io, `refused` when the
    apiserver refuses the user, `finished` when no pod reports and the job has finished; each
    ends the stream."""
    api = UserApi(session_of(request).client)
    namespace, name = request.match_info["namespace"], request.match_info["name"]
    query = {"labelSelector": f"{LABEL_JOB_NAME}={name}"}
    async with event_stream(request) as stream:
        while True:
            try:
                answer = await api.client.request_json(
                    "GET", POD_METRICS.path(namespace), query=query
                )
            except KubeError as error:
                event = "unavailable" if error.status in NO_METRICS else "refused"
                detail = {"status": error.status, "message": error.message}
                await stream.send(event, orjson.dumps(detail).decode())
                break
            now = datetime.datetime.now(datetime.UTC)
            await stream.send("sample", orjson.dumps(series.metrics_sample(answer, now)).decode())
            if not answer.get("items") and await _finished(request):
                await stream.send("finished", "")
                break
            await asyncio.sleep(SAMPLE_SECONDS)
    return stream.response


async def _finished(request: web.Request) -> bool:
    _, job = await read_job(request)
    return rows.job_row(job).finished


def problem(status: int, message: str) -> web.Response:
    return web.json_response({"error": message}, status=status, dumps=_dumps)


def _dumps(value: Any) -> str:
    return orjson.dumps(value).decode()


async def resources_series(request: web.Request) -> web.Response:
    """The job's charts over its lifetime from Prometheus, as JSON for the page's script."""
    prometheus = request.app[SETTINGS].prometheus_url
    namespace, name = request.match_info["namespace"], request.match_info["name"]
    if not prometheus:
        return problem(404, "the console reads no Prometheus (--prometheus-url is not set)")
    if not (is_dns_1123_label(namespace) and is_dns_1123_label(name)):
        return problem(404, "a namespace and a job name are DNS labels")
    api = UserApi(session_of(request).client)
    if not await api.may("get", PODS, namespace):
        return problem(403, f"you may not read the pods of namespace {namespace}")
    _, job = await read_job(request)
    training = training_view(request.match_info.get("kind", "jobs"), job)
    types = [str(r.get("type")) for r in (training.get("spec") or {}).get("replicaSpecs") or []]
    queries = series.prometheus_queries(namespace, name, types)
    start, end, step = series.query_window(job, datetime.datetime.now(datetime.UTC))
    window = {"start": f"{start:.3f}", "end": f"{end:.3f}", "step": str(step)}
    try:
        answers = await query_ranges(prometheus, queries, window)
    except (aiohttp.ClientError, TimeoutError, ValueError) as error:
        return problem(502, f"Prometheus at {prometheus} did not answer: {error}")
    charts = {chart: series.matrix_chart(answer) for chart, answer in answers.items()}
    return web.json_response({"source": "prometheus", "step": step, "charts": charts}, dumps=_dumps)


async def query_ranges(
    prometheus: str, queries: dict[str, str], window: dict[str, str]
) -> dict[str, Object]:
    """Each query's `query_range` answer, by chart name."""
    timeout = aiohttp.ClientTimeout(total=PROMETHEUS_SECONDS)
    async with aiohttp.ClientSession(timeout=timeout) as session:

        async def one(query: str) -> Object:
            async with session.get(
                f"{prometheus}/api/v1/query_range", params={"query": query, **window}
            ) as response:
                answer: Object = await response.json(loads=orjson.loads, content_type=None)
                if response.status >= 300 or answer.get("status") != "success":
                    raise ValueError(f"{response.status}: {answer.get('error') or answer}")
                return answer

        answers = await asyncio.gather(*(one(q) for q in queries.values()))
    return dict(zip(queries, answers, strict=True))
