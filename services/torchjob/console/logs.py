"""A pod's log, read as the user: a page that streams it live (`follow`) over server-sent events,
the previous container's log, and the whole log as a download.

A followed log ends when the container stops, when the pod goes, or when the connection drops.
The console then looks at the pod: gone (or replaced by a newer pod of the same name) means its log
went with it, and the page says so; a container that exited is said to have exited, with its reason
and exit code; anything else (a container not started yet, a dropped connection) is followed again
a moment later, from where it stopped."""

from __future__ import annotations

import asyncio
import datetime
import html
import re
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import quote, urlencode

import aiohttp
from aiohttp import web

from torchjob.api.constants import LABEL_JOB_NAME
from torchjob.api.objects import FINISHED_POD_PHASES
from torchjob.api.queries import training_container_in
from torchjob.console.keys import PAGES, session_of
from torchjob.console.sse import EventStream, event_stream
from torchjob.console.user_api import UserApi
from torchjob.kube.client import KubeClient
from torchjob.kube.errors import KubeError, NotFound, from_status
from torchjob.kube.resources import PODS
from torchjob.views.console import rows
from torchjob.views.summary import pod_phase

TAIL_LINES = "1000"
# A log that stays silent this long is asked for again (from where it stopped), not given up.
SILENT_SECONDS = 300.0
RETRY_SECONDS = 2.0
Object = dict[str, Any]
# The time the apiserver puts before each line (`timestamps=true`): RFC 3339, nanoseconds, UTC.
STAMP = re.compile(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(\.\d+)?Z")


def log_path(namespace: str, pod: str) -> str:
    return PODS.object_path(namespace, pod, "log")


def chosen_container(pod: Object, asked: str) -> str:
    """The container asked for if the pod has it, else the training container."""
    spec = pod.get("spec") or {}
    names = [
        c.get("name") for c in (spec.get("containers") or []) + (spec.get("initContainers") or [])
    ]
    if asked in names:
        return asked
    _, training = training_container_in(spec)
    return str((training or {}).get("name") or "")


def container_ended(pod: Object, container: str) -> str:
    """`reason, exit code N` when the container has stopped for good, else ''."""
    status = pod.get("status") or {}
    every = (status.get("containerStatuses") or []) + (status.get("initContainerStatuses") or [])
    for state in every:
        ended = (state.get("state") or {}).get("terminated")
        if state.get("name") == container and ended:
            return f"{ended.get('reason') or 'Terminated'}, exit code {ended.get('exitCode')}"
    if status.get("phase") in FINISHED_POD_PHASES:
        return str(status.get("reason") or status.get("phase"))
    return ""


async def job_replicas(api: UserApi, namespace: str, job: str) -> list[tuple[str, str]]:
    """The pods of the job's replicas (rows.replica_choices); none without a job or the right to
    list pods."""
    if not job:
        return []
    try:
        answer = await api.list_objects(PODS, namespace, labelSelector=f"{LABEL_JOB_NAME}={job}")
    except KubeError:
        return []
    return rows.replica_choices(answer.get("items") or [])


async def log_page(request: web.Request) -> web.Response:
    api = UserApi(session_of(request).client)
    namespace, name = request.match_info["namespace"], request.match_info["pod"]
    pod = await api.get(PODS, namespace, name)
    job_name = str((pod["metadata"].get("labels") or {}).get(LABEL_JOB_NAME) or "")
    replicas = await job_replicas(api, namespace, job_name)
    # Another rank of the same job: only a pod of the list just read, never a name as sent.
    chosen = request.query.get("replica", name)
    if chosen != name and chosen in (pod_name for pod_name, _ in replicas):
        raise web.HTTPSeeOther(f"/ns/{namespace}/pods/{quote(chosen, safe='')}/log")
    container = chosen_container(pod, request.query.get("container", ""))
    previous = request.query.get("previous") == "true"
    base = f"/ns/{namespace}/pods/{name}/log"
    query = {"container": container, "uid": str(pod["metadata"].get("uid") or "")}
    if previous:
        query["previous"] = "true"
    spec = pod.get("spec") or {}
    return request.app[PAGES].response(
        "log.html",
        session=session_of(request),
        namespace=namespace,
        pod=pod,
        job_name=job_name,
        replicas=replicas,
        containers=[c.get("name") for c in spec.get("containers") or []],
        container=container,
        previous=previous,
        base=base,
        stream_url=f"{base}/stream?{urlencode(query)}",
        download_url=f"{base}/download?{urlencode({k: v for k, v in query.items() if k != 'uid'})}",
        previous_url=f"{base}?{urlencode({'container': container, 'previous': 'true'})}",
        follow_url=f"{base}?{urlencode({'container': container})}",
    )


def html_lines(text: str) -> str:
    """Each line of the log as an element of its own (the page filters them), its time apart."""
    return "".join(_html_line(line) for line in text.splitlines())


def _html_line(line: str) -> str:
    stamp, _, rest = line.partition(" ")
    found = STAMP.fullmatch(stamp)
    if not found:
        return f'<span class="ln">{html.escape(line, quote=False)}\n</span>'
    shown = f"{found[1].replace('T', ' ')}{(found[2] or '')[:4]}Z"
    return (
        f'<span class="ln"><time class="stamp" datetime="{html.escape(stamp)}">{shown}</time> '
        f"{html.escape(rest, quote=False)}\n</span>"
    )


async def log_chunks(
    client: KubeClient, path: str, query: dict[str, str], read_seconds: float
) -> AsyncIterator[bytes]:
    """The log's bytes as the apiserver sends them; its refusal raises as our KubeError."""
    headers = {"Accept": "text/plain, */*"}
    async with client.open(
        "GET", path, query=query, headers=headers, read_seconds=read_seconds
    ) as response:
        if response.status >= 300:
            raise from_status(response.status, response.reason, await response.read())
        async for chunk in response.content.iter_any():
            yield chunk


async def send_log(stream: EventStream, chunks: AsyncIterator[bytes]) -> None:
    """Each complete line to the page as it comes (the lines of a chunk in one message), the
    last one when the log ends."""
    rest = b""
    async for chunk in chunks:
        whole, newline, rest = (rest + chunk).rpartition(b"\n")
        if newline:
            await stream.send("line", html_lines((whole + b"\n").decode(errors="replace")))
    if rest:
        await stream.send("line", html_lines(rest.decode(errors="replace") + "\n"))


async def log_stream(request: web.Request) -> web.StreamResponse:
    api = UserApi(session_of(request).client)
    namespace, name = request.match_info["namespace"], request.match_info["pod"]
    container, uid = request.query.get("container", ""), request.query.get("uid", "")
    previous = request.query.get("previous") == "true"
    pages = request.app[PAGES]
    query = {"container": container, "tailLines": TAIL_LINES, "timestamps": "true"}
    if previous:
        query["previous"] = "true"
    else:
        query["follow"] = "true"
    async with event_stream(request) as stream:
        while True:
            status, problem = await follow_once(
                api.client, stream, log_path(namespace, name), query
            )
            if status in (401, 403):
                refused = f"The cluster refused to show this log ({status}): {problem}"
                await stream.send(
                    "log-status", pages.text("fragments/log_status.html", message=refused)
                )
                break
            if previous:
                end = problem or "The end of the previous container's log."
                await stream.send(
                    "log-status", pages.text("fragments/log_status.html", message=end)
                )
                break
            verdict = await pod_verdict(api, namespace, name, uid, container)
            if verdict["final"]:
                await stream.send("log-status", pages.text("fragments/log_status.html", **verdict))
                break
            if waiting := verdict["message"] or (problem and f"Waiting for the log: {problem}"):
                await stream.send(
                    "log-status", pages.text("fragments/log_status.html", message=waiting)
                )
            await asyncio.sleep(RETRY_SECONDS)
            # Followed again from the moment it stopped: lines of that second may come twice.
            query.pop("tailLines", None)
            query["sinceTime"] = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        # The page closes its end (sse-close): reconnecting would read the log again.
        await stream.send("log-end", "")
    return stream.response


async def follow_once(
    client: KubeClient, stream: EventStream, path: str, query: dict[str, str]
) -> tuple[int, str]:
    """Stream the log until it ends; the apiserver's status and message when it refused to send
    it, (0, '') when it ended by itself or the connection dropped."""
    try:
        await send_log(stream, log_chunks(client, path, query, SILENT_SECONDS))
    except KubeError as error:
        return error.status, error.message or f"{error.status} {error.reason}"
    except (TimeoutError, aiohttp.ClientPayloadError, aiohttp.ClientConnectionError):
        pass
    return 0, ""


async def pod_verdict(api: UserApi, namespace: str, name: str, uid: str, container: str) -> Object:
    """What became of the pod whose log stopped: `final` when following it again is pointless."""
    try:
        pod = await api.get(PODS, namespace, name)
    except NotFound:
        return {"final": True, "gone": True, "name": name, "newer": False, "namespace": namespace}
    if uid and pod["metadata"].get("uid") != uid:
        return {"final": True, "gone": True, "name": name, "newer": True, "namespace": namespace}
    ended = container_ended(pod, container)
    if ended:
        return {"final": True, "message": f"The container exited ({ended})."}
    return {"final": False, "message": container_waiting(pod, container)}


def container_waiting(pod: Object, container: str) -> str:
    """Why the container has no log to follow yet, '' when it runs."""
    status = pod.get("status") or {}
    for state in status.get("containerStatuses") or []:
        if state.get("name") == container and "running" in (state.get("state") or {}):
            return ""
        waiting = (state.get("state") or {}).get("waiting")
        if state.get("name") == container and waiting:
            return f"Waiting for the container {container} to start ({waiting.get('reason')})."
    return f"Waiting for the container {container} to start (the pod is {pod_phase(pod)})."


async def log_download(request: web.Request) -> web.StreamResponse:
    """The whole log as a text file, streamed as the apiserver sends it."""
    api = UserApi(session_of(request).client)
    namespace, name = request.match_info["namespace"], request.match_info["pod"]
    container = request.query.get("container", "")
    previous = request.query.get("previous") == "true"
    query = {"container": container, **({"previous": "true"} if previous else {})}
    chunks = log_chunks(api.client, log_path(namespace, name), query, 60.0)
    first = await anext(chunks, b"")  # a refusal raises here, before the answer starts
    filename = "-".join(p for p in (name, container, "previous" if previous else "") if p)
    response = web.StreamResponse(
        headers={
            "Content-Type": "text/plain; charset=utf-8",
            "Content-Disposition": f'attachment; filename="{filename}.log"',
        }
    )
    await response.prepare(request)
    await response.write(first)
    async for chunk in chunks:
        await response.write(chunk)
    await response.write_eof()
    return response
