"""A job's Replicas tab: each replica with its pod's phase, restarts, node and last exit, kept live
over server-sent events from a watch of the job's pods made as the user; each links to its log
(logs.py)."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from torchjob.api.constants import LABEL_JOB_NAME
from torchjob.api.queries import training_container_in
from torchjob.console.jobs import ROUTE_APIS, target
from torchjob.console.keys import PAGES, session_of
from torchjob.console.sse import event_stream
from torchjob.console.user_api import UserApi
from torchjob.kube.follow import Snapshot
from torchjob.kube.resources import PODS
from torchjob.render.job_kinds import kind_of
from torchjob.views.console.rows import kubelet_message
from torchjob.views.summary import pod_phase, pod_reason, pod_restarts, replica_pods

Object = dict[str, Any]


@dataclass(frozen=True)
class ReplicaRow:
    replica: str  # type-index
    pod: str  # "" while the replica has no pod
    phase: str
    restarts: int
    node: str
    reason: str  # where the pod is now (pod_reason)
    last_exit: str  # how the training container's previous run ended, if it ran before
    message: str = ""  # what the kubelet said of it, whole (rows.kubelet_message)


def training_view(kind_route: str, job: Object) -> Object:
    """The job of the page's route as the PyTorchTrainingJob it runs as (its kind's reading)."""
    return kind_of(ROUTE_APIS[kind_route]).training_job(job)


def last_exit(pod: Object) -> str:
    """The training container's last termination (its `lastState`), as `reason (exit code N)`."""
    _, training = training_container_in(pod.get("spec") or {})
    name = (training or {}).get("name")
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        ended = (status.get("lastState") or {}).get("terminated")
        if status.get("name") == name and ended:
            return f"{ended.get('reason') or 'Terminated'} (exit code {ended.get('exitCode')})"
    return ""


def replica_rows(job: Object, pods: list[Object]) -> list[ReplicaRow]:
    """A row for every replica of the job's spec, in spec order, with or without a pod."""
    rows = []
    for replica, pod in replica_pods(job, pods):
        if pod is None:
            rows.append(ReplicaRow(replica, "", "No pod", 0, "", "", ""))
            continue
        rows.append(
            ReplicaRow(
                replica=replica,
                pod=str(pod["metadata"]["name"]),
                phase=pod_phase(pod),
                restarts=pod_restarts(pod),
                node=str((pod.get("spec") or {}).get("nodeName") or ""),
                reason=pod_reason(pod),
                last_exit=last_exit(pod),
                message=kubelet_message(pod),
            )
        )
    return rows


def apply_event(pods: dict[str, Object], kind: str, pod: Object) -> bool:
    """Apply a watch event to the pods by name; whether the table changed."""
    name = (pod.get("metadata") or {}).get("name")
    if not name or kind not in ("ADDED", "MODIFIED", "DELETED"):
        return False
    if kind == "DELETED":
        # A newer pod of the same name may already be there: only its own deletion removes it.
        if (pods.get(name, {}).get("metadata") or {}).get("uid") == pod["metadata"].get("uid"):
            del pods[name]
        return True
    pods[name] = pod
    return True


async def read_job(request: web.Request) -> tuple[UserApi, Object]:
    api, namespace, kind = target(request)
    job = await api.get(kind, namespace, request.match_info["name"])
    return api, job


async def list_pods(api: UserApi, namespace: str, job: str) -> tuple[dict[str, Object], str]:
    """The job's pods by name and the list's resourceVersion, to watch from."""
    answer = await api.list_objects(PODS, namespace, labelSelector=f"{LABEL_JOB_NAME}={job}")
    pods = {p["metadata"]["name"]: p for p in answer.get("items") or []}
    return pods, str(answer["metadata"].get("resourceVersion") or "")


def page_context(request: web.Request, job: Object, **more: Any) -> dict[str, Any]:
    return {
        "session": session_of(request),
        "namespace": request.match_info["namespace"],
        "route_kind": request.match_info.get("kind", "jobs"),
        "job": job,
        **more,
    }


async def replicas_page(request: web.Request) -> web.Response:
    api, job = await read_job(request)
    name = request.match_info["name"]
    pods, _ = await list_pods(api, request.match_info["namespace"], name)
    training = training_view(request.match_info.get("kind", "jobs"), job)
    rows = replica_rows(training, list(pods.values()))
    context = page_context(request, job, rows=rows)
    return request.app[PAGES].response("replicas.html", **context)


async def replicas_stream(request: web.Request) -> web.StreamResponse:
    """The replicas' table (`replicas`) again on every change of one of the job's pods."""
    api, job = await read_job(request)
    namespace, name = request.match_info["namespace"], request.match_info["name"]
    training = training_view(request.match_info.get("kind", "jobs"), job)
    pages = request.app[PAGES]
    pods: dict[str, Object] = {}
    news = api.follow(PODS, namespace, labelSelector=f"{LABEL_JOB_NAME}={name}")
    async with event_stream(request) as stream, contextlib.aclosing(news):
        async for news_item in news:
            if isinstance(news_item, Snapshot):
                pods = {pod["metadata"]["name"]: pod for pod in news_item.items}
            elif not apply_event(pods, news_item.type, news_item.object):
                continue
            rows = replica_rows(training, list(pods.values()))
            html = pages.text("fragments/replica_rows.html", rows=rows, namespace=namespace)
            await stream.send("replicas", html)
    return stream.response
