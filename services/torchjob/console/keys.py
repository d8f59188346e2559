"""What the console's application and its requests carry, under typed keys."""

from __future__ import annotations

from aiohttp import web

from torchjob.console.identity import ApiServer
from torchjob.console.sessions import Session, Sessions
from torchjob.console.settings import Settings
from torchjob.console.templating import Pages

SETTINGS = web.AppKey("settings", Settings)
API_SERVER = web.AppKey("api_server", ApiServer)
SESSIONS = web.AppKey("sessions", Sessions)
PAGES = web.AppKey("pages", Pages)

# The request's signed-in session (set by the sign-in middleware for every page but sign-in's).
SESSION = "torchjob.session"


def session_of(request: web.Request) -> Session:
    session: Session = request[SESSION]
    return session


# The headers every answer to the request gets when it is not one of the console's own origin
# (a TensorBoard host's): set by the middleware that tells the origin apart, read by the signal
# that puts headers on every answer.
ORIGIN_HEADERS = "torchjob.origin_headers"
