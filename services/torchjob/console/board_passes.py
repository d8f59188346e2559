"""The credentials of the TensorBoards' own origins, kept in the console's memory.

Opening a job's TensorBoard from the console issues a ticket: random, good for TICKET_SECONDS,
for one job, redeemed once, and only on that job's host. Redeeming it gives the browser a pass: a
random id in a cookie of that host alone, good for PASS_SECONDS at most and only while the console
session that asked for the ticket lives (`live` is asked on every use). Neither is the session's
id, so a TensorBoard's page, which the job's owner writes, never holds anything that works on the
console or on another job's TensorBoard.

Each job has a host label of its own, opaque (a keyed digest of its namespace, name and uid), so
two jobs' TensorBoards are two origins, and a name does not say which job a host serves."""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass

TICKET_SECONDS = 60.0
PASS_SECONDS = 3600.0
LABEL_CHARS = 32  # hexadecimal: a DNS label of its own
Clock = Callable[[], float]


@dataclass(frozen=True, slots=True)
class Board:
    """The job whose TensorBoard a ticket or pass opens."""

    namespace: str
    name: str
    uid: str
    route_kind: str = "jobs"


@dataclass(slots=True)
class Grant:
    """What a ticket or a pass stands for: one job's TensorBoard, for one console session."""

    board: Board
    label: str
    session_id: str
    ends: float
    # The TensorBoard pod a pass last reached, and when it was found (the proxy's, to look again).
    address: str = ""
    found_at: float = 0.0


class BoardPasses:
    def __init__(
        self,
        *,
        clock: Clock = time.time,
        ticket_seconds: float = TICKET_SECONDS,
        pass_seconds: float = PASS_SECONDS,
    ) -> None:
        self._clock = clock
        self._ticket_seconds = ticket_seconds
        self._pass_seconds = pass_seconds
        self._key = secrets.token_bytes(32)
        self._tickets: dict[str, Grant] = {}
        self._passes: dict[str, Grant] = {}

    def label(self, board: Board) -> str:
        """The job's host label: the same for the job while the console runs, told apart from
        every other job's."""
        message = f"{board.namespace}/{board.route_kind}/{board.name}/{board.uid}".encode()
        return hmac.new(self._key, message, hashlib.sha256).hexdigest()[:LABEL_CHARS]

    def issue(self, board: Board, session_id: str) -> str:
        """A ticket to `board` for the session `session_id`."""
        self.sweep()
        ticket = secrets.token_urlsafe(32)
        ends = self._clock() + self._ticket_seconds
        self._tickets[ticket] = Grant(board, self.label(board), session_id, ends)
        return ticket

    def redeem(self, ticket: str, label: str) -> tuple[str, Grant] | None:
        """A new pass (its id and grant) for a ticket presented on the host `label`; None when
        the ticket is unknown, used, expired or for another job's host. A ticket is spent by
        its first presentation, on whichever host."""
        grant = self._tickets.pop(ticket, None)
        now = self._clock()
        if grant is None or now >= grant.ends or not hmac.compare_digest(grant.label, label):
            return None
        pass_id = secrets.token_urlsafe(32)
        self._passes[pass_id] = Grant(
            grant.board, label, grant.session_id, now + self._pass_seconds
        )
        return pass_id, grant

    def find(self, pass_id: str | None, label: str, live: Callable[[str], bool]) -> Grant | None:
        """The grant of a pass presented on the host `label`, while it lasts and its console
        session lives; an over pass is forgotten."""
        grant = self._passes.get(pass_id or "")
        if grant is None or not hmac.compare_digest(grant.label, label):
            return None
        if self._clock() >= grant.ends or not live(grant.session_id):
            self._passes.pop(pass_id or "", None)
            return None
        return grant

    def sweep(self) -> int:
        """Forgets every expired ticket and pass; how many."""
        now = self._clock()
        over = [t for t, g in self._tickets.items() if now >= g.ends]
        over_passes = [p for p, g in self._passes.items() if now >= g.ends]
        for ticket in over:
            del self._tickets[ticket]
        for pass_id in over_passes:
            del self._passes[pass_id]
        return len(over) + len(over_passes)
