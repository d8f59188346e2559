"""Signing in, and finding the signed-in user of every request.

Token mode: the user pastes a bearer token on the sign-in page (or an OIDC proxy in front sends
it as `Authorization: Bearer`); a SelfSubjectReview made with it says who it is, and a refused
token is refused here with the apiserver's answer. Proxy mode: a trusted authenticating proxy
names the user and groups in headers, and the console impersonates them; the chart lets only the
proxy reach the console then. Either way the browser gets a session cookie and nothing else, and
one session: signing in again, or the proxy naming another user, ends the browser's earlier one.

A request with an `Authorization: Bearer` header is the header's alone: its session is found by
the token's digest (opened by a SelfSubjectReview the first time), no cookie is read or set for
it, and a token the apiserver refuses is answered 401 without touching the browser's session.

The console never forwards a request's own headers to the apiserver: an `Impersonate-User` sent
by a browser is dropped with the rest, and in token mode the proxy headers are ignored."""

from __future__ import annotations

from urllib.parse import quote

import structlog
from aiohttp import web

from torchjob.console.identity import Identity, review, token_expiry
from torchjob.console.keys import API_SERVER, PAGES, SESSION, SESSIONS, SETTINGS, session_of
from torchjob.console.security import Handler, refusal
from torchjob.console.sessions import COOKIE, Session, digest
from torchjob.console.settings import AUTH_PROXY
from torchjob.kube.errors import Unauthorized

log = structlog.get_logger("torchjob.console")

# Pages any visitor may see: sign-in itself and the static files.
OPEN_PATHS = ("/sign-in", "/static/")
MAX_TOKEN_CHARS = 16384


def set_cookie(response: web.StreamResponse, session: Session) -> None:
    response.set_cookie(COOKIE, session.id, httponly=True, secure=True, samesite="Strict", path="/")


async def sign_in_page(request: web.Request) -> web.Response:
    if request.app[SETTINGS].auth_mode == AUTH_PROXY:
        raise web.HTTPFound("/")
    return request.app[PAGES].response("sign_in.html", message="", next=_next(request))


async def sign_in(request: web.Request) -> web.StreamResponse:
    form = await request.post()
    token = str(form.get("token") or "").strip().removeprefix("Bearer ").strip()
    pages = request.app[PAGES]
    if not _one_token(token):
        return pages.response(
            "sign_in.html", status=400, message="Paste one bearer token.", next=_next(request)
        )
    try:
        session = await _open_token_session(request, token)
    except Unauthorized:
        return pages.response(
            "sign_in.html",
            status=401,
            message="The cluster does not accept this token: it is unknown, forged or expired.",
            next=_next(request),
        )
    # One session per browser: the one it signed in with before ends here.
    if earlier := request.cookies.get(COOKIE):
        request.app[SESSIONS].close(earlier)
    response = web.HTTPSeeOther(_next(request))
    set_cookie(response, session)
    return response


async def sign_out(request: web.Request) -> web.StreamResponse:
    """Ends the request's session: the browser's, or the Authorization header's (whose request
    leaves the browser's cookie alone)."""
    session = session_of(request)
    request.app[SESSIONS].close(session.id)
    response = web.HTTPSeeOther("/sign-in")
    if not session.by_header:
        response.del_cookie(COOKIE, path="/")
    return response


@web.middleware
async def require_session(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Sets the request's session, or sends the browser to sign in. A session whose token the
    apiserver stops accepting ends here."""
    if request.path.startswith(OPEN_PATHS):
        return await handler(request)
    if _bearer_token(request) is not None and request.app[SETTINGS].auth_mode != AUTH_PROXY:
        return await _as_bearer(request, handler)
    session, fresh = await _session_of(request)
    settings = request.app[SETTINGS]
    if session is None and settings.auth_mode == AUTH_PROXY:
        return refusal(
            request,
            401,
            "Unauthorized",
            f"the authenticating proxy in front of the console named no user "
            f"({settings.proxy_user_header})",
        )
    if session is None:
        if request.headers.get("HX-Request"):
            return web.Response(status=401, headers={"HX-Redirect": "/sign-in"})
        raise web.HTTPSeeOther(
            f"/sign-in?next={quote(request.path_qs)}" if request.path != "/" else "/sign-in"
        )
    response = await _handle_as(request, handler, session)
    if fresh:
        set_cookie(response, session)
    return response


async def _handle_as(
    request: web.Request, handler: Handler, session: Session
) -> web.StreamResponse:
    """The handler's answer as `session`; the apiserver's 401 ends the session."""
    request[SESSION] = session
    structlog.contextvars.bind_contextvars(user=session.identity.username)
    try:
        return await handler(request)
    except Unauthorized:
        request.app[SESSIONS].close(session.id)
        if session.by_header:
            return _bearer_refused(request)
        raise web.HTTPSeeOther("/sign-in") from None
    finally:
        structlog.contextvars.unbind_contextvars("user")


async def _as_bearer(request: web.Request, handler: Handler) -> web.StreamResponse:
    """The request as the holder of its Authorization header, whatever cookie it also has."""
    token = _bearer_token(request) or ""
    if not _one_token(token):
        return _bearer_refused(request)
    session = request.app[SESSIONS].find_by_header(digest(token))
    if session is None:
        try:
            session = await _open_token_session(request, token, by_header=True)
        except Unauthorized:
            return _bearer_refused(request)
    return await _handle_as(request, handler, session)


def _one_token(token: str) -> bool:
    """Whether `token` can be a bearer token: an empty one would be sent as no token at all."""
    return bool(token) and len(token) <= MAX_TOKEN_CHARS and not any(c.isspace() for c in token)


def _bearer_token(request: web.Request) -> str | None:
    header = request.headers.get("Authorization", "")
    if not header.startswith("Bearer "):
        return None
    return header.removeprefix("Bearer ").strip()


def _bearer_refused(request: web.Request) -> web.Response:
    response = refusal(
        request, 401, "Unauthorized", "the cluster does not accept the Authorization header's token"
    )
    response.headers["WWW-Authenticate"] = "Bearer"
    return response


async def _session_of(request: web.Request) -> tuple[Session | None, bool]:
    """The request's cookie session, and whether it was opened for this request (proxy mode:
    the proxy named a user other than the cookie's, whose session ends)."""
    app = request.app
    session = app[SESSIONS].find(request.cookies.get(COOKIE))
    if app[SETTINGS].auth_mode != AUTH_PROXY:
        return session, False
    identity = _proxied_identity(request)
    if identity is None:
        return None, False
    key = digest(f"{identity.username}\n{','.join(identity.groups)}")
    if session is not None and session.credential_digest == key:
        return session, False
    if session is not None:
        app[SESSIONS].close(session.id)
    client = app[API_SERVER].impersonating(identity)
    return app[SESSIONS].open(identity, client, key), True


async def _open_token_session(
    request: web.Request, token: str, *, by_header: bool = False
) -> Session:
    client = request.app[API_SERVER].as_token_holder(token)
    try:
        identity = await review(client)
    except BaseException:
        await client.close()
        raise
    log.info("signed in", user=identity.username)
    return request.app[SESSIONS].open(
        identity, client, digest(token), token_expiry(token), by_header=by_header
    )


def _proxied_identity(request: web.Request) -> Identity | None:
    settings = request.app[SETTINGS]
    user = request.headers.get(settings.proxy_user_header, "").strip()
    if not user:
        return None
    groups = request.headers.get(settings.proxy_groups_header, "")
    return Identity(user, tuple(g.strip() for g in groups.split(",") if g.strip()))


def after_sign_in(target: str) -> str:
    """Where to go after signing in: a path of this console only. `//host` and `/\\host` would be
    another site to a browser (it reads a backslash as a slash), and so would any control
    character it strips."""
    own_path = target.startswith("/") and target[1:2] not in ("/", "\\")
    if not own_path or any(ord(c) < 0x20 or c == "\\" for c in target):
        return "/"
    return target


def _next(request: web.Request) -> str:
    return after_sign_in(request.query.get("next", "/"))
