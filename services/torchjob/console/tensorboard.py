"""A job's TensorBoard, opened from its page, never in the console's origin.

A TensorBoard serves whatever its job's owner put in it (`tensorboardSpec.image` is theirs), so
its pages must not run where the console's session works. With `--tensorboard-url` set
(https://tb.example.com), the console's TensorBoard link checks, as the user, that the job has a
TensorBoard and that they may reach the namespace's Services through the apiserver (`get
services/proxy`, which `edit` grants and `view` does not), and sends the browser to the job's own
host, https://<label>.tb.example.com, with a ticket (board_passes.py). That host, served by this
process but answered by `board_host` before any of the console's middlewares, trades the ticket
for a cookie of its own and passes requests on to the job's TensorBoard pod. Without the setting
nothing is passed on: the page says how to reach the TensorBoard with `torchjob tensorboard`.

The pod is found as the user, by ownership, and reached by its IP: a Ready pod controlled by a
ReplicaSet controlled by the Deployment `<job>-tensorboard` controlled by the job (its uid). The
Service is never used: its owner's tenant may point its selector, or EndpointSlices of their own,
anywhere.

Only what TensorBoard needs goes through: GET and HEAD, and POST (from its own origin) for its
data endpoints; of the browser's headers only Accept, Accept-Encoding and Content-Type (never a
cookie); of the answer's, its status, encoding, Content-Type and caching headers."""

from __future__ import annotations

import asyncio
import ipaddress
import time
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import quote, urlencode, urlsplit

import aiohttp
from aiohttp import web

from torchjob.api.constants import LABEL_TENSORBOARD
from torchjob.console.board_passes import Board, BoardPasses, Grant
from torchjob.console.jobs import target
from torchjob.console.keys import ORIGIN_HEADERS, PAGES, SESSIONS, SETTINGS, session_of
from torchjob.console.security import Handler, refusal
from torchjob.console.user_api import UserApi
from torchjob.kube.errors import Forbidden, NotFound
from torchjob.kube.informer import controller_uid
from torchjob.kube.resources import DEPLOYMENTS, PODS, REPLICASETS, SERVICES
from torchjob.render.tensorboard import PORT, tensorboard_name, tensorboard_url

PASSED_REQUEST_HEADERS = ("Accept", "Content-Type", "Accept-Encoding")
PASSED_ANSWER_HEADERS = ("Content-Type", "Cache-Control", "ETag", "Last-Modified", "Expires")
# Every answer of a TensorBoard host: framed by its own pages only (TensorBoard's plugins are
# frames of its own), nothing sniffed, no window of another origin kept, nothing read across.
BOARD_HEADERS = {
    "Content-Security-Policy": "frame-ancestors 'self'",
    "X-Frame-Options": "SAMEORIGIN",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cross-Origin-Opener-Policy": "same-origin",
    "Cross-Origin-Resource-Policy": "same-origin",
}
BOARD_METHODS = frozenset({"GET", "HEAD", "POST"})
PASS_COOKIE = "torchjob-tensorboard"
OPEN_PATH = "/.torchjob/open"
# TensorBoard's pages and data can be slow to come while it loads its event files.
READ_SECONDS = 120.0
# How long a pod found for a pass is used before it is looked for again (a roll replaces it).
ADDRESS_SECONDS = 10.0
# What a path keeps unquoted when it is passed on (RFC 3986's pchar and "/").
PATH_CHARACTERS = "/:@!$&'()*+,;=-._~"
BOARDS = web.AppKey("tensorboards", aiohttp.ClientSession)
PASSES = web.AppKey("tensorboard_passes", BoardPasses)


async def tensorboard_sessions(app: web.Application) -> AsyncIterator[None]:
    """The cleanup context of the connections to TensorBoards and of their passes."""
    app[PASSES] = BoardPasses()
    app[BOARDS] = aiohttp.ClientSession(
        timeout=aiohttp.ClientTimeout(sock_connect=10, sock_read=READ_SECONDS),
        trust_env=False,
        auto_decompress=False,
    )
    yield
    await app[BOARDS].close()


# -- on the console's origin ----------------------------------------------------------------------


async def open_tensorboard(request: web.Request) -> web.StreamResponse:
    """The job's TensorBoard link: to its own host with a ticket, or how to reach it."""
    api, namespace, kind = target(request)
    name = request.match_info["name"]
    job = await api.get(kind, namespace, name)
    if not (job.get("spec") or {}).get("tensorboardSpec"):
        message = f"The job {name} has no TensorBoard: its spec has no tensorboardSpec."
        return refusal(request, 404, "No TensorBoard", message)
    if not await api.may("get", SERVICES, namespace, "proxy"):
        message = (
            f"you may not reach the Services of {namespace} (get services/proxy), "
            "so not the job's TensorBoard either"
        )
        raise Forbidden(403, "Forbidden", message)
    base = request.app[SETTINGS].tensorboard_url
    if not base:
        return request.app[PAGES].response(
            "tensorboard.html",
            session=session_of(request),
            namespace=namespace,
            route_kind=request.match_info.get("kind", "jobs"),
            job=job,
            address=tensorboard_url(job["metadata"]),
            service=tensorboard_name(name),
            port=PORT,
        )
    board = Board(namespace, name, str(job["metadata"]["uid"]), request.match_info["kind"])
    passes = request.app[PASSES]
    ticket = passes.issue(board, session_of(request).id)
    url = urlsplit(base)
    where = f"{url.scheme}://{passes.label(board)}.{url.netloc}{OPEN_PATH}"
    raise web.HTTPSeeOther(f"{where}?{urlencode({'ticket': ticket})}")


# -- on a TensorBoard's own origin ----------------------------------------------------------------


def board_label(request: web.Request) -> str | None:
    """The job label of a request to a TensorBoard host (`<label>.<domain>`), else None."""
    base = request.app[SETTINGS].tensorboard_url
    domain = urlsplit(base).hostname if base else None
    host = urlsplit(f"//{request.host}").hostname or ""
    if not domain or not host.endswith(f".{domain}"):
        return None
    return host.removesuffix(f".{domain}")


@web.middleware
async def board_host(request: web.Request, handler: Handler) -> web.StreamResponse:
    """A request to a TensorBoard host is answered here, before the console's own middlewares:
    it never reaches the console's routes or its session."""
    label = board_label(request)
    if label is None:
        return await handler(request)
    # The headers of this origin, put on every answer by the console's signal.
    request[ORIGIN_HEADERS] = BOARD_HEADERS
    try:
        return await _board_answer(request, label)
    except web.HTTPException as error:
        return error


def _plain(status: int, message: str) -> web.Response:
    return web.Response(status=status, text=message + "\n", headers={"Cache-Control": "no-store"})


async def _board_answer(request: web.Request, label: str) -> web.StreamResponse:
    if request.method not in BOARD_METHODS:
        return _plain(405, "A TensorBoard is read with GET, HEAD and POST.")
    if request.method == "POST" and urlsplit(request.headers.get("Origin", "")).netloc != (
        request.host
    ):
        return _plain(403, "A change comes from this TensorBoard's own pages only.")
    passes = request.app[PASSES]
    if request.path == OPEN_PATH:
        return _redeem(request, passes, label)
    sessions = request.app[SESSIONS]
    pass_id = request.cookies.get(PASS_COOKIE)
    grant = passes.find(pass_id, label, lambda session_id: sessions.find(session_id) is not None)
    session = sessions.find(grant.session_id) if grant else None
    if grant is None or session is None:
        return _plain(401, "Open this TensorBoard again from its job's page in the console.")
    address = await _address(grant, UserApi(session.client))
    if address is None:
        name = grant.board.name
        return _plain(503, f"The TensorBoard of {name} has no ready pod yet; try again shortly.")
    return await _pass_on(request, address, grant)


def _redeem(request: web.Request, passes: BoardPasses, label: str) -> web.StreamResponse:
    redeemed = passes.redeem(request.query.get("ticket", ""), label)
    if redeemed is None:
        return _plain(401, "This link has expired or was used; open the TensorBoard again.")
    pass_id, _ = redeemed
    response = web.Response(status=303, headers={"Location": "/"})
    # Host-only: no other job's host, and not the console, ever gets it. Lax: the first page
    # comes by a navigation from the console's origin.
    response.set_cookie(PASS_COOKIE, pass_id, httponly=True, secure=True, samesite="Lax", path="/")
    return response


async def _address(grant: Grant, api: UserApi) -> str | None:
    if grant.address and time.monotonic() - grant.found_at < ADDRESS_SECONDS:
        return grant.address
    try:
        address = await board_address(api, grant.board)
    except (NotFound, Forbidden):
        address = None
    grant.address, grant.found_at = address or "", time.monotonic()
    return address


async def board_address(api: UserApi, board: Board) -> str | None:
    """The IP of a Ready pod of the job's TensorBoard, read as the user: None when there is none."""
    deployment = await api.get(DEPLOYMENTS, board.namespace, tensorboard_name(board.name))
    if controller_uid(deployment) != [board.uid]:
        return None
    selector = f"{LABEL_TENSORBOARD}={board.name}"
    sets, pods = await asyncio.gather(
        api.list_objects(REPLICASETS, board.namespace, labelSelector=selector),
        api.list_objects(PODS, board.namespace, labelSelector=selector),
    )
    return owned_pod_address(deployment, sets.get("items") or [], pods.get("items") or [])


def owned_pod_address(
    deployment: dict[str, Any], replica_sets: list[dict[str, Any]], pods: list[dict[str, Any]]
) -> str | None:
    """The IP of a Ready pod whose ReplicaSet the Deployment controls; labels pick nothing."""
    owner = str(deployment["metadata"]["uid"])
    sets = {str(s["metadata"]["uid"]) for s in replica_sets if controller_uid(s) == [owner]}
    for pod in pods:
        if controller_uid(pod)[:1] and controller_uid(pod)[0] in sets and _serving(pod):
            return str(pod["status"]["podIP"])
    return None


def _serving(pod: dict[str, Any]) -> bool:
    """Ready, not going, on a pod network of its own (a host-network pod's IP is its node's)."""
    status = pod.get("status") or {}
    if pod["metadata"].get("deletionTimestamp") or (pod.get("spec") or {}).get("hostNetwork"):
        return False
    try:
        ipaddress.ip_address(str(status.get("podIP") or ""))
    except ValueError:
        return False
    conditions = status.get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def pod_url(address: str, path: str) -> str:
    host = f"[{address}]" if ipaddress.ip_address(address).version == 6 else address
    return f"http://{host}:{PORT}/{quote(path.lstrip('/'), safe=PATH_CHARACTERS)}"


async def _pass_on(request: web.Request, address: str, grant: Grant) -> web.StreamResponse:
    headers = {h: request.headers[h] for h in PASSED_REQUEST_HEADERS if h in request.headers}
    # The answer is passed on as it comes, compressed only as the browser accepts.
    headers.setdefault("Accept-Encoding", "identity")
    data = await request.read() if request.method == "POST" else None
    url = pod_url(address, request.path)
    try:
        async with request.app[BOARDS].request(
            request.method, url, params=dict(request.query), data=data, headers=headers
        ) as answer:
            response = web.StreamResponse(status=answer.status)
            for header in (*PASSED_ANSWER_HEADERS, "Content-Encoding"):
                if header in answer.headers:
                    response.headers[header] = answer.headers[header]
            await response.prepare(request)
            async for chunk in answer.content.iter_any():
                await response.write(chunk)
            await response.write_eof()
            return response
    except (aiohttp.ClientConnectionError, TimeoutError) as error:
        grant.address = ""  # looked for again on the next request
        name = grant.board.name
        return _plain(502, f"The TensorBoard of {name} does not answer yet ({error}).")
