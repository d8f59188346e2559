"""The namespaces page: those the user may list jobs in."""

from __future__ import annotations

import asyncio

from aiohttp import web

from torchjob.api.names import is_dns_1123_label
from torchjob.console.keys import PAGES, SETTINGS, session_of
from torchjob.console.user_api import UserApi
from torchjob.kube.errors import Forbidden
from torchjob.kube.informer import ResourceKind
from torchjob.kube.resources import JOBS

NAMESPACES = ResourceKind("", "v1", "namespaces")


async def namespaces_page(request: web.Request) -> web.Response:
    """Every namespace the user may list; a user who may not list namespaces (most tenants) is
    offered the configured ones and their own ServiceAccount's, each kept only where they may
    list jobs."""
    session = session_of(request)
    api = UserApi(session.client)
    listed = True
    try:
        answer = await api.list_objects(NAMESPACES, None)
        names = [str(ns["metadata"]["name"]) for ns in answer.get("items") or []]
    except Forbidden:
        listed = False
        names = list(request.app[SETTINGS].namespaces)
        own = session.identity.service_account_namespace
        if own and own not in names:
            names.append(own)
    allowed = await asyncio.gather(*(api.may("list", JOBS, name) for name in names))
    usable = sorted(name for name, ok in zip(names, allowed, strict=True) if ok)
    return request.app[PAGES].response(
        "namespaces.html", session=session, namespaces=usable, listed=listed
    )


async def go_to_namespace(request: web.Request) -> web.Response:
    """The jobs of a namespace the user typed (one they may not list among the others)."""
    name = request.query.get("namespace", "").strip()
    if not is_dns_1123_label(name):
        raise web.HTTPSeeOther("/")
    raise web.HTTPSeeOther(f"/ns/{name}/jobs")
