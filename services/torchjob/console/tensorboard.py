"""A job's TensorBoard, opened from its page: the console passes each request on to the job's
TensorBoard Service, once a SelfSubjectAccessReview says the user may reach the namespace's
Services through the apiserver (`get services/proxy`, which `edit` grants and `view` does not),
and streams the answer back.

Why not through the apiserver's service proxy itself: TensorBoard answers its pages with
`Content-Encoding: identity`, and the apiserver's proxy, which rewrites the links of every HTML
page it passes, refuses any encoding but gzip and deflate: the page ends in a stream error. The
access review keeps the rule the apiserver would apply: a user reaches the TensorBoard exactly when
they could reach it through the apiserver.

Only what TensorBoard needs goes through: GET and HEAD, and POST for its data endpoints; of the
browser's headers only Accept, Accept-Encoding and Content-Type (never the console's cookie); of
the answer's, its status, encoding, Content-Type and caching headers."""

from __future__ import annotations

from collections.abc import AsyncIterator
from urllib.parse import quote

import aiohttp
from aiohttp import web

from torchjob.console.jobs import target
from torchjob.console.security import refusal
from torchjob.kube.errors import Forbidden
from torchjob.kube.resources import SERVICES
from torchjob.render.tensorboard import PORT, tensorboard_name

PASSED_REQUEST_HEADERS = ("Accept", "Content-Type", "Accept-Encoding")
PASSED_ANSWER_HEADERS = ("Content-Type", "Cache-Control", "ETag", "Last-Modified", "Expires")
# TensorBoard's pages and data can be slow to come while it loads its event files.
READ_SECONDS = 120.0
# What a path keeps unquoted when it is passed on (RFC 3986's pchar and "/").
PATH_CHARACTERS = "/:@!$&'()*+,;=-._~"
# The connections to TensorBoards: the console's own, since the apiserver's proxy cannot be used.
BOARDS = web.AppKey("tensorboards", aiohttp.ClientSession)


def board_url(namespace: str, job: str, path: str) -> str:
    """The job's TensorBoard Service (housekeeping renders it), by its cluster DNS name."""
    service = f"{tensorboard_name(job)}.{namespace}.svc"
    return f"http://{service}:{PORT}/{quote(path, safe=PATH_CHARACTERS)}"


async def tensorboard_sessions(app: web.Application) -> AsyncIterator[None]:
    """The cleanup context of the connections to TensorBoards."""
    app[BOARDS] = aiohttp.ClientSession(
        timeout=aiohttp.ClientTimeout(sock_connect=10, sock_read=READ_SECONDS),
        trust_env=False,
        auto_decompress=False,
    )
    yield
    await app[BOARDS].close()


async def tensorboard_proxy(request: web.Request) -> web.StreamResponse:
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
    headers = {h: request.headers[h] for h in PASSED_REQUEST_HEADERS if h in request.headers}
    # The answer is passed on as it comes, compressed only as the browser accepts.
    headers.setdefault("Accept-Encoding", "identity")
    data = await request.read() if request.method == "POST" else None
    url = board_url(namespace, name, request.match_info["path"])
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
        message = f"The TensorBoard of {name} does not answer yet ({error}); try again shortly."
        return refusal(request, 502, "TensorBoard unreachable", message)
