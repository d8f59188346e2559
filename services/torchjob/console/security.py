"""What every answer of the console holds to: headers that keep its pages from being framed or
fed scripts from elsewhere, a change accepted only from the console's own pages (Origin), and the
apiserver's refusals shown as such, without the request's details.

A change is any method but GET and HEAD. A browser sends Origin with every such request (a form's
POST and htmx's alike); its absence, or another origin, is refused before the session is even
looked up. SameSite=Strict on the session cookie refuses a cross-site request a second time.

The headers are set as each answer is prepared (`secure_headers`, on the application's
`on_response_prepare` signal), so that every answer of the console's origin has them: a page, a
stream, a download, a redirect or error raised as an exception. Nothing served from this origin
is exempt from the policy: content that brings its own scripts must be served from an origin of
its own, by an application of its own with its own signal."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from urllib.parse import urlsplit

import structlog
from aiohttp import web

from torchjob.console.keys import ORIGIN_HEADERS, PAGES, SETTINGS
from torchjob.kube.errors import KubeError

log = structlog.get_logger("torchjob.console")

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
SAFE_METHODS = frozenset({"GET", "HEAD"})

HEADERS = {
    # Scripts and styles of the console's own files only; no inline script can run.
    "Content-Security-Policy": (
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'"
    ),
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    # no-referrer would make Chromium send `Origin: null` with a form, which the check refuses.
    "Referrer-Policy": "same-origin",
}
# Kept when the answer chose its own (the static files).
DEFAULT_HEADERS = {"Cache-Control": "no-store"}


def origin_of(request: web.Request) -> str:
    """The origin a page of this console has: --external-url's, else the request's Host's."""
    external = request.app[SETTINGS].external_url
    if external:
        url = urlsplit(external)
        return f"{url.scheme}://{url.netloc}"
    return f"{request.scheme}://{request.host}"


def same_origin(request: web.Request) -> str | None:
    """None when the request came from one of the console's pages, else why it is refused."""
    origin = request.headers.get("Origin")
    if not origin or origin == "null":
        return (
            "the request carries no Origin header, so it cannot be told to come from this console"
        )
    expected = origin_of(request)
    # Behind a TLS-terminating proxy the console sees http://; the host must still match.
    if origin != expected and urlsplit(origin).netloc != urlsplit(expected).netloc:
        return f"the request came from {origin}, not from this console"
    return None


async def secure_headers(request: web.Request, response: web.StreamResponse) -> None:
    """For `on_response_prepare`: the policy on every answer, whatever its handler set; an
    answer of another origin served by this process gets that origin's own (ORIGIN_HEADERS)."""
    response.headers.update(request.get(ORIGIN_HEADERS, HEADERS))
    for name, value in DEFAULT_HEADERS.items():
        response.headers.setdefault(name, value)


@web.middleware
async def check_origin(request: web.Request, handler: Handler) -> web.StreamResponse:
    if request.method not in SAFE_METHODS:
        problem = same_origin(request)
        if problem:
            log.warning("change refused", path=request.path, reason=problem)
            return refusal(request, 403, "Refused", problem)
    return await handler(request)


@web.middleware
async def show_errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    """The apiserver's refusal, its HTTP status and message, in place of the page; a body too
    large, with what the limit is."""
    try:
        return await handler(request)
    except KubeError as error:
        return refusal(request, error.status, error.reason or "Error", error.message)
    except web.HTTPRequestEntityTooLarge:
        limit = request.app[SETTINGS].max_body_bytes
        return refusal(
            request,
            413,
            "Too large",
            f"the form is larger than the console accepts ({limit} bytes)",
        )


def refusal(request: web.Request, status: int, reason: str, message: str) -> web.Response:
    """An error page (or, for a request made by htmx, the fragment shown in its place)."""
    template = "fragments/error.html" if request.headers.get("HX-Request") else "error.html"
    response = request.app[PAGES].response(
        template, status=status, status_code=status, reason=reason, message=message
    )
    if request.headers.get("HX-Request"):
        # htmx swaps no error answer by default; this one is meant to be shown.
        response.headers["HX-Retarget"] = request.headers.get("HX-Target-Error", "#messages")
        response.headers["HX-Reswap"] = "innerHTML"
    return response
