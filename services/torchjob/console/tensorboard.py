"""A job's TensorBoard, opened from its page: the console passes each request on, as the user, to
the apiserver's proxy of the TensorBoard's Service, so the apiserver decides whether the user may
reach it (`services/proxy` in the namespace), and streams the answer back.

Only what TensorBoard needs goes through: GET and HEAD, and POST for its data endpoints; of the
browser's headers only Accept and Content-Type (never the console's cookie); of the answer's, its
status, Content-Type and caching headers. The apiserver's own refusals (a JSON Status) are shown as
the console's error page. The apiserver rewrites absolute links of a proxied HTML page to its own
proxy path; those are turned into the console's path again."""

from __future__ import annotations

from urllib.parse import quote

from aiohttp import web

from torchjob.console.jobs import target
from torchjob.console.keys import PAGES, session_of
from torchjob.kube.errors import from_status
from torchjob.render.tensorboard import PORT, tensorboard_name

PASSED_REQUEST_HEADERS = ("Accept", "Content-Type")
PASSED_ANSWER_HEADERS = ("Content-Type", "Cache-Control", "ETag", "Last-Modified", "Expires")
# TensorBoard's pages and data can be slow to come while it loads its event files.
READ_SECONDS = 120.0


def proxy_base(namespace: str, job: str) -> str:
    """The apiserver's proxy of the job's TensorBoard Service (housekeeping renders it)."""
    service = f"{tensorboard_name(job)}:{PORT}"
    return f"/api/v1/namespaces/{namespace}/services/{service}/proxy/"


def is_api_status(content_type: str, body: bytes) -> bool:
    """Whether an answer is the apiserver's own Status (a refusal), not TensorBoard's."""
    return content_type.startswith("application/json") and b'"kind":"Status"' in body.replace(
        b" ", b""
    )


async def tensorboard_proxy(request: web.Request) -> web.StreamResponse:
    api, namespace, kind = target(request)
    name = request.match_info["name"]
    job = await api.get(kind, namespace, name)
    if not (job.get("spec") or {}).get("tensorboardSpec"):
        return request.app[PAGES].response(
            "error.html",
            status=404,
            session=session_of(request),
            status_code=404,
            reason="No TensorBoard",
            message=f"The job {name} has no TensorBoard: its spec has no tensorboardSpec.",
        )
    base = proxy_base(namespace, name)
    path = base + quote(request.match_info["path"], safe="/:@!$&'()*+,;=-._~")
    headers = {h: request.headers[h] for h in PASSED_REQUEST_HEADERS if h in request.headers}
    data = await request.read() if request.method == "POST" else None
    client = api.client
    query = dict(request.query)
    async with client.open(
        request.method, path, query=query, data=data, headers=headers, read_seconds=READ_SECONDS
    ) as answer:
        content_type = answer.headers.get("Content-Type", "")
        if answer.status >= 400 and content_type.startswith("application/json"):
            body = await answer.read()
            if is_api_status(content_type, body):
                raise from_status(answer.status, answer.reason, body)
            return web.Response(status=answer.status, body=body, content_type="application/json")
        console_base = (
            f"/ns/{namespace}/{request.match_info.get('kind', 'jobs')}/{name}/tensorboard/"
        )
        response = web.StreamResponse(status=answer.status)
        for header in PASSED_ANSWER_HEADERS:
            if header in answer.headers:
                response.headers[header] = answer.headers[header]
        if location := answer.headers.get("Location"):
            response.headers["Location"] = location.replace(base, console_base)
        if content_type.startswith("text/html"):
            page = (await answer.read()).replace(base.encode(), console_base.encode())
            response.content_length = len(page)
            await response.prepare(request)
            await response.write(page)
        else:
            await response.prepare(request)
            async for chunk in answer.content.iter_any():
                await response.write(chunk)
        await response.write_eof()
        return response
