"""Signed-in users, kept in the console's memory: the browser holds only a random session id, in an
HttpOnly, Secure, SameSite=Strict cookie; the token it stands for never goes back to the browser.

A session ends when it has not been used for `idle` seconds, `max_age` seconds after sign-in, when
its token expires, on sign-out, on another sign-in in the same browser, or when the apiserver
refuses its token; its open streams (`streaming`) end with it. A stream is one long request that
the apiserver checked once, when it began: while a session has streams open, its token is
checked again every sweep (`check_streaming`), so that a revoked token stops its live pages.

A session opened for an `Authorization: Bearer` header (`by_header`) is found by the token's
digest and never by a cookie. Sessions live in one process: a restarted console signs everyone
out, and several replicas need sticky sessions."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import secrets
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field

import structlog

from torchjob.console.identity import Identity, review
from torchjob.kube.client import KubeClient
from torchjob.kube.errors import Unauthorized

log = structlog.get_logger("torchjob.console")

COOKIE = "torchjob-console-session"
Clock = Callable[[], float]
TokenCheck = Callable[[KubeClient], Awaitable[object]]


@dataclass
class Session:
    id: str
    identity: Identity
    client: KubeClient
    signed_in: float
    last_used: float
    ends: float
    # What the session was made from, to tell whether a request's credentials are the same:
    # a digest of the token, or the impersonated user and groups.
    credential_digest: str
    # Opened for an Authorization header: found by `credential_digest`, never by a cookie.
    by_header: bool = False
    ended: bool = False
    # The tasks of its open streams, cancelled when it ends.
    streams: set[asyncio.Task[object]] = field(default_factory=set)


def digest(credential: str) -> str:
    return hashlib.sha256(credential.encode()).hexdigest()


class Sessions:
    def __init__(self, *, idle: float, max_age: float, clock: Clock = time.time) -> None:
        self.idle = idle
        self.max_age = max_age
        self._clock = clock
        self._by_id: dict[str, Session] = {}
        self._by_header: dict[str, Session] = {}
        self._closing: set[asyncio.Task[None]] = set()

    def __len__(self) -> int:
        return len(self._by_id)

    def open(
        self,
        identity: Identity,
        client: KubeClient,
        credential_digest: str,
        expires: float | None = None,
        *,
        by_header: bool = False,
    ) -> Session:
        """A new session; it ends at the earlier of `max_age` from now and `expires`."""
        now = self._clock()
        ends = now + self.max_age if expires is None else min(now + self.max_age, expires)
        session = Session(
            secrets.token_urlsafe(32), identity, client, now, now, ends, credential_digest
        )
        session.by_header = by_header
        if by_header:
            # Two requests with one new token at once: the first one's session gives way.
            if earlier := self._by_header.get(credential_digest):
                self.close(earlier.id)
            self._by_header[credential_digest] = session
        self._by_id[session.id] = session
        return session

    def find(self, session_id: str | None) -> Session | None:
        """The live cookie session of `session_id`, marked used; None (and the session ended)
        when it is unknown or over."""
        session = self._by_id.get(session_id or "")
        if session is None or session.by_header:
            return None
        return self._used(session)

    def find_by_header(self, credential_digest: str) -> Session | None:
        """The live session opened for an Authorization header of this digest, marked used."""
        session = self._by_header.get(credential_digest)
        return None if session is None else self._used(session)

    def _used(self, session: Session) -> Session | None:
        now = self._clock()
        if now >= session.ends or now - session.last_used >= self.idle:
            self.close(session.id)
            return None
        session.last_used = now
        return session

    def close(self, session_id: str) -> None:
        """Ends the session: its streams are cancelled (all but the caller's own), its client
        closed."""
        session = self._by_id.pop(session_id, None)
        if session is None:
            return
        session.ended = True
        if self._by_header.get(session.credential_digest) is session:
            del self._by_header[session.credential_digest]
        current = asyncio.current_task()
        for stream in list(session.streams):
            if stream is not current:
                stream.cancel("the session ended")
        task = asyncio.get_running_loop().create_task(session.client.close())
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)

    @contextlib.contextmanager
    def streaming(self, session: Session) -> Iterator[None]:
        """The current task is one of the session's streams until the block ends: it is
        cancelled if the session ends first."""
        task = asyncio.current_task()
        assert task is not None
        if session.ended:
            raise asyncio.CancelledError("the session ended")
        session.streams.add(task)
        try:
            yield
        finally:
            session.streams.discard(task)

    async def check_streaming(self, check: TokenCheck = review) -> int:
        """Asks the apiserver again (`check`, a SelfSubjectReview) for the token of each session
        with an open stream; ends those it refuses, and says how many. Any other failure keeps
        the session: the next request or check tells."""
        streaming = [s for s in self._by_id.values() if s.streams]
        answers = await asyncio.gather(
            *(check(s.client) for s in streaming), return_exceptions=True
        )
        refused = [
            s for s, a in zip(streaming, answers, strict=True) if isinstance(a, Unauthorized)
        ]
        for session in refused:
            log.info("token refused, session ended", user=session.identity.username)
            self.close(session.id)
        return len(refused)

    def sweep(self) -> int:
        """Ends every session that is over; how many."""
        now = self._clock()
        over = [
            s.id for s in self._by_id.values() if now >= s.ends or now - s.last_used >= self.idle
        ]
        for session_id in over:
            self.close(session_id)
        return len(over)

    async def close_all(self) -> None:
        for session_id in list(self._by_id):
            self.close(session_id)
        if self._closing:
            await asyncio.gather(*self._closing, return_exceptions=True)
