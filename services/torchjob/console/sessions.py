"""Signed-in users, kept in the console's memory: the browser holds only a random session id, in an
HttpOnly, Secure, SameSite=Strict cookie; the token it stands for never goes back to the browser.

A session ends when it has not been used for `idle` seconds, `max_age` seconds after sign-in, when
its token expires, on sign-out, or when the apiserver refuses its token. Sessions live in one
process: a restarted console signs everyone out, and several replicas need sticky sessions."""

from __future__ import annotations

import asyncio
import hashlib
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass

from torchjob.console.identity import Identity
from torchjob.kube.client import KubeClient

COOKIE = "torchjob-console-session"
Clock = Callable[[], float]


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


def digest(credential: str) -> str:
    return hashlib.sha256(credential.encode()).hexdigest()


class Sessions:
    def __init__(self, *, idle: float, max_age: float, clock: Clock = time.time) -> None:
        self.idle = idle
        self.max_age = max_age
        self._clock = clock
        self._by_id: dict[str, Session] = {}
        self._closing: set[asyncio.Task[None]] = set()

    def __len__(self) -> int:
        return len(self._by_id)

    def open(
        self,
        identity: Identity,
        client: KubeClient,
        credential_digest: str,
        expires: float | None = None,
    ) -> Session:
        """A new session; it ends at the earlier of `max_age` from now and `expires`."""
        now = self._clock()
        ends = now + self.max_age if expires is None else min(now + self.max_age, expires)
        session = Session(
            secrets.token_urlsafe(32), identity, client, now, now, ends, credential_digest
        )
        self._by_id[session.id] = session
        return session

    def find(self, session_id: str | None) -> Session | None:
        """The live session of `session_id`, marked used; None (and the session ended) when it
        is unknown or over."""
        session = self._by_id.get(session_id or "")
        if session is None:
            return None
        now = self._clock()
        if now >= session.ends or now - session.last_used >= self.idle:
            self.close(session.id)
            return None
        session.last_used = now
        return session

    def close(self, session_id: str) -> None:
        session = self._by_id.pop(session_id, None)
        if session is not None:
            task = asyncio.get_running_loop().create_task(session.client.close())
            self._closing.add(task)
            task.add_done_callback(self._closing.discard)

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
