"""The job list and a job's page: read as the user, kept live over server-sent events from watches
made as the user, and the lifecycle buttons (pause, resume, delete) and the request for a
diagnosis shown only to a user the apiserver would let use them."""

from __future__ import annotations

import asyncio
import contextlib
import datetime
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode

from aiohttp import web

from torchjob.api.constants import ANNOTATION_DIAGNOSE, LABEL_JOB_NAME
from torchjob.api.job_api import JOB_APIS, TRAINING_JOB
from torchjob.console.keys import PAGES, SETTINGS, session_of
from torchjob.console.sse import EventStream, event_stream
from torchjob.console.user_api import UserApi
from torchjob.kube.errors import KubeError
from torchjob.kube.follow import Change, Snapshot
from torchjob.kube.informer import ResourceKind
from torchjob.kube.kueue import pending_workloads
from torchjob.kube.resources import EVENTS, JOBS, PODS, job_resource
from torchjob.lifecycle.times import format_micro_time
from torchjob.render.job_kinds import kind_of, opted_in_settings, served_apis
from torchjob.views import queue, summary
from torchjob.views.console import rows
from torchjob.views.console.diagnosis import agent_logs, diagnosis_shown
from torchjob.views.console.kind_forms import kind_form

PAGE_SIZE = 50
# The live list's rows are sent again at most this often.
ROWS_INTERVAL = 0.5
# A filtered page reads at most this many chunks of the list before it offers "more".
MAX_CHUNKS = 20
# The job API each route serves, and where its jobs live: torchjob's own jobs at `jobs`, every
# other kind (render/job_kinds.py) at its plural.
ROUTE_APIS = {"jobs": TRAINING_JOB, **{api.plural: api for api in JOB_APIS[1:]}}
ROUTE_KINDS = {route: job_resource(api) for route, api in ROUTE_APIS.items()}


def target(request: web.Request) -> tuple[UserApi, str, ResourceKind]:
    api = UserApi(session_of(request).client)
    kind = ROUTE_KINDS[request.match_info.get("kind", "jobs")]
    return api, request.match_info["namespace"], kind


async def read_page(
    api: UserApi, namespace: str, kind: ResourceKind, query: dict[str, str]
) -> tuple[list[rows.JobRow], str, str]:
    """One page of rows that pass the filters, the token of the rest ('' at the end), and the
    list's resourceVersion to watch from. The apiserver pages the list: a namespace of thousands
    of jobs costs one chunk per page."""
    phase, text = query.get("phase", ""), query.get("q", "")
    token = query.get("continue", "")
    found: list[rows.JobRow] = []
    version = ""
    for _ in range(MAX_CHUNKS):
        answer = await api.list_objects(
            kind, namespace, limit=str(PAGE_SIZE - len(found)), **{"continue": token}
        )
        version = version or str(answer["metadata"].get("resourceVersion") or "")
        found += [
            row
            for row in (rows.job_row(job) for job in answer.get("items") or [])
            if rows.matches(row, phase, text)
        ]
        token = str(answer["metadata"].get("continue") or "")
        if not token or len(found) >= PAGE_SIZE:
            break
    return found, token, version


async def job_list(request: web.Request) -> web.Response:
    api, namespace, kind = target(request)
    query = {key: request.query.get(key, "") for key in ("phase", "q", "continue")}
    (found, more, version), may = await asyncio.gather(
        read_page(api, namespace, kind, query),
        api.allowed(namespace, {"create": ("create", JOBS, "")}),
    )
    route = request.match_info.get("kind", "jobs")
    return request.app[PAGES].response(
        "jobs.html",
        session=session_of(request),
        namespace=namespace,
        route_kind=route,
        rows=found,
        query=query,
        phases=rows.PHASES[ROUTE_APIS[route]],
        next_page=urlencode({**query, "continue": more}) if more else "",
        stream_url=f"{request.path}/stream?{urlencode({**query, 'resourceVersion': version})}",
        may=may,
        kind_tabs=kind_tabs(opted_in_settings(request.app[SETTINGS])),
        create_query=create_query(route),
    )


def kind_tabs(opted_in: Collection[str]) -> dict[str, str]:
    """The list page's tab of each kind the console serves: its route and its name, plural."""
    served = served_apis(opted_in)
    return {route: kind_form(api).label + "s" for route, api in ROUTE_APIS.items() if api in served}


def create_query(route: str) -> str:
    """The Create button's query on a kind's list: the form of that kind (none for the first,
    the form's own default)."""
    first = next(iter(ROUTE_APIS))
    return "" if route == first else "?" + urlencode({"kind": ROUTE_APIS[route].kind})


async def job_list_stream(request: web.Request) -> web.StreamResponse:
    """The list kept live: after any change to the namespace's jobs (seen by a watch made as the
    user), the page's rows read again and sent whole (`job-rows`), at most every
    ROWS_INTERVAL seconds however many jobs change: a busy namespace costs each open page one
    list a beat, and a row can never miss its last change."""
    api, namespace, kind = target(request)
    pages = request.app[PAGES]
    query = {key: request.query.get(key, "") for key in ("phase", "q", "continue")}
    version = request.query.get("resourceVersion", "")
    await api.list_objects(kind, namespace, limit="1")  # a refusal answers the request itself
    changed = asyncio.Event()
    async with event_stream(request) as stream, asyncio.TaskGroup() as group:
        group.create_task(_watch_changes(api, namespace, kind, version, changed))
        while True:
            await changed.wait()
            changed.clear()
            found, _, _ = await read_page(api, namespace, kind, query)
            context = {"rows": found, "namespace": namespace, "query": query}
            route = request.match_info.get("kind", "jobs")
            await stream.send(
                "job-rows", pages.text("fragments/job_rows.html", **context, route_kind=route)
            )
            await asyncio.sleep(ROWS_INTERVAL)
    return stream.response


async def _watch_changes(
    api: UserApi, namespace: str, kind: ResourceKind, version: str, changed: asyncio.Event
) -> None:
    """Sets `changed` on every change of the namespace's jobs from `version` on; a list made
    again after the version expired counts as one (kube/follow.py)."""
    async with contextlib.aclosing(api.follow(kind, namespace, since=version, limit="1")) as news:
        async for _ in news:
            changed.set()


async def job_page(request: web.Request) -> web.Response:
    api, namespace, kind = target(request)
    name = request.match_info["name"]
    job = await api.get(kind, namespace, name)
    events, may, said = await asyncio.gather(
        api.events_of(namespace, name),
        api.allowed(
            namespace,
            {"patch": ("patch", kind, ""), "delete": ("delete", kind, "")},
        ),
        pods_say(api, job),
    )
    context = _job_context(request, job, events, may, said)
    return request.app[PAGES].response("job.html", **context)


@dataclass(frozen=True)
class PodsSay:
    kubelet: list[tuple[str, str]]  # pod, what its kubelet said
    queue: str | None  # where the job waits in its Kueue queue (views/queue.py)
    # replica, pod, its restart agent's log page: where a diagnosis's stacks are
    agent_logs: list[tuple[str, str, str]] = field(default_factory=list)


async def pods_say(api: UserApi, job: dict[str, Any]) -> PodsSay:
    """What the job's pods tell its page, read as the user: while its replicas cannot start (its
    StartFailure condition), what the kubelet said of each, whole (the condition's message is
    cut short); while it waits for Kueue's admission, its place in its queue (Kueue's
    visibility API); once it has a diagnosis, the log pages of its pods' restart agents.
    Nothing otherwise, or when the user may not list pods."""
    cannot_start = summary.start_failure(rows.training_view(job)) is not None
    diagnosed = diagnosis_shown(job).latest is not None
    if not cannot_start and not diagnosed and not queue.waiting_for_admission(job):
        return PodsSay([], None)
    meta = job["metadata"]
    selector = f"{LABEL_JOB_NAME}={meta['name']}"
    try:
        answer = await api.list_objects(PODS, meta["namespace"], labelSelector=selector)
    except KubeError:
        return PodsSay([], None)
    pods = answer.get("items") or []
    said = rows.kubelet_messages(pods) if cannot_start else []
    logs = agent_logs(meta["namespace"], pods) if diagnosed else []
    where = queue.queued(job, pods)
    if where is None:
        return PodsSay(said, None, logs)
    pending, problem = await pending_workloads(api.client, meta["namespace"], where.queue)
    return PodsSay(said, queue.position_text(where, pending, problem), logs)


def _job_context(
    request: web.Request,
    job: dict[str, Any],
    events: list[dict[str, Any]],
    may: dict[str, bool],
    said: PodsSay,
) -> dict[str, Any]:
    return {
        "session": session_of(request),
        "namespace": request.match_info["namespace"],
        "route_kind": request.match_info.get("kind", "jobs"),
        "job": job,
        "row": rows.job_row(job),
        "container": rows.training_container(job),
        "command": rows.command_line(job),
        "pending": rows.pending_reason(job),
        "kubelet_said": said.kubelet,
        "queue": said.queue,
        "diagnosis": diagnosis_shown(job),
        "agent_logs": said.agent_logs,
        "events": events,
        "may": may,
        "job_label": LABEL_JOB_NAME,
    }


async def job_stream(request: web.Request) -> web.StreamResponse:
    """The job's page kept live: its status part (`job-status`) on every change of the job,
    its Events (`job-events`) on every Event about it, `job-gone` once it is deleted."""
    api, namespace, kind = target(request)
    pages = request.app[PAGES]
    await api.get(kind, namespace, request.match_info["name"])  # a refusal answers the request
    may = await api.allowed(
        namespace, {"patch": ("patch", kind, ""), "delete": ("delete", kind, "")}
    )
    async with event_stream(request) as stream, asyncio.TaskGroup() as group:
        group.create_task(_follow_job(request, api, stream, pages, may))
        group.create_task(_follow_events(request, api, stream, pages))
    return stream.response


async def _follow_job(
    request: web.Request, api: UserApi, stream: EventStream, pages: Any, may: dict[str, bool]
) -> None:
    _, namespace, kind = target(request)
    name = request.match_info["name"]
    news = api.follow(kind, namespace, fieldSelector=f"metadata.name={name}")
    async with contextlib.aclosing(news):
        async for news_item in news:
            if isinstance(news_item, Snapshot):
                job = news_item.items[0] if news_item.items else None
            else:
                job = None if news_item.type == "DELETED" else news_item.object
            if job is None:
                await stream.send("job-gone", pages.text("fragments/job_gone.html", name=name))
                return
            await _send_status(request, api, stream, job, may)


async def _send_status(
    request: web.Request,
    api: UserApi,
    stream: EventStream,
    job: dict[str, Any],
    may: dict[str, bool],
) -> None:
    context = _job_context(request, job, [], may, await pods_say(api, job))
    await stream.send("job-status", request.app[PAGES].text("fragments/job_status.html", **context))


async def _follow_events(
    request: web.Request, api: UserApi, stream: EventStream, pages: Any
) -> None:
    namespace, name = request.match_info["namespace"], request.match_info["name"]
    news = api.follow(EVENTS, namespace, fieldSelector=f"regarding.name={name}", limit="1")
    async with contextlib.aclosing(news):
        async for news_item in news:
            if isinstance(news_item, Change) and news_item.type == "DELETED":
                continue  # an Event that expired: the page keeps what it showed
            events = await api.events_of(namespace, name)
            await stream.send("job-events", pages.text("fragments/job_events.html", events=events))


async def job_action(request: web.Request) -> web.StreamResponse:
    """Pause, resume or delete, as the user; the apiserver's refusal is shown as such."""
    api, namespace, kind = target(request)
    name, action = request.match_info["name"], request.match_info["action"]
    form = await request.post()
    if action == "delete":
        if form.get("confirm") != name:
            raise web.HTTPBadRequest(text="type the job's name to confirm its deletion")
        await api.delete(kind, namespace, name)
        response = web.HTTPSeeOther(f"/ns/{namespace}/jobs")
        if request.headers.get("HX-Request"):
            return web.Response(status=204, headers={"HX-Redirect": f"/ns/{namespace}/jobs"})
        raise response
    # What pausing means is the job kind's; the page offers it only when it stops running
    # replicas (rows.JobRow.pausable), and the apiserver decides whether the user may.
    patch = kind_of(ROUTE_APIS[request.match_info.get("kind", "jobs")]).pause_patch(
        action == "pause"
    )
    await api.patch(kind, namespace, name, patch)
    if request.headers.get("HX-Request"):
        return web.Response(status=204)
    raise web.HTTPSeeOther(f"/ns/{namespace}/{request.match_info.get('kind', 'jobs')}/{name}")


async def diagnose(request: web.Request) -> web.StreamResponse:
    """Ask for a diagnosis of where the job's training processes are, as the user: its
    ANNOTATION_DIAGNOSE set to the time now (each new value asks one, lifecycle/diagnosis.py);
    the apiserver's refusal is shown as such. The page's status says it was asked, and then
    what the reconciler found, as the job changes."""
    api, namespace, kind = target(request)
    name = request.match_info["name"]
    asked = format_micro_time(datetime.datetime.now(datetime.UTC))
    await api.patch(
        kind, namespace, name, {"metadata": {"annotations": {ANNOTATION_DIAGNOSE: asked}}}
    )
    if request.headers.get("HX-Request"):
        return web.Response(status=204)
    raise web.HTTPSeeOther(f"/ns/{namespace}/{request.match_info.get('kind', 'jobs')}/{name}")
