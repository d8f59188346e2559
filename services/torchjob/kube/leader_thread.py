"""Leader election on an event loop of its own, in a thread of its own, while the caller leads on
its loop.

A controller's loop is busy exactly when a leader must go on renewing: decoding the watch events
of a thousand pods bound and started at once, planning a round over all of them. A renewal
waiting there for its turn, twice (the Lease's read, then its write), can miss the renew deadline
while the apiserver answers at once, and the leader steps down with nothing wrong. In a thread
the renewals take their turn as Python threads do (every few milliseconds) however long the
controller's loop is held, as client-go's elector runs in a goroutine of its own. The Lease's
client is made and closed on that loop (a client belongs to the loop it was made on)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Awaitable, Callable

from torchjob.kube.client import KubeClient
from torchjob.kube.leader import LeaderElector

Lead = Callable[[], Awaitable[None]]


class ElectionThread:
    """`run(lead)` as LeaderElector's, the candidate campaigning in a thread: `connect` makes the
    Lease's client there, `elector_of` the elector on it."""

    def __init__(
        self,
        connect: Callable[[], Awaitable[KubeClient]],
        elector_of: Callable[[KubeClient], LeaderElector],
        name: str = "leader-election",
    ) -> None:
        self._connect = connect
        self._elector_of = elector_of
        self._name = name
        self._elector: LeaderElector | None = None

    @property
    def is_leader(self) -> bool:
        return self._elector is not None and self._elector.is_leader

    async def run(self, lead: Lead) -> None:
        """Wait for the Lease, then run `lead()` on this loop while the thread holds it; returns
        when leadership is lost (once `lead()` has ended), or when `lead()` returns, and raises
        what it raised. Cancelled, `lead()` is cancelled and the Lease released first."""
        here = asyncio.get_running_loop()
        loop = asyncio.new_event_loop()
        thread = threading.Thread(target=loop.run_forever, name=self._name, daemon=True)
        thread.start()
        try:
            await Remote(loop, lambda: self._campaign(here, lead)).outcome()
        finally:
            loop.call_soon_threadsafe(loop.stop)
            await asyncio.to_thread(thread.join)
            loop.close()

    async def _campaign(self, here: asyncio.AbstractEventLoop, lead: Lead) -> None:
        async with await self._connect() as client:
            self._elector = self._elector_of(client)
            # Stepping down waits for lead() to end on its loop: a leader that says it no longer
            # leads has stopped acting.
            await self._elector.run(lambda: Remote(here, lead).outcome())


class Remote:
    """A coroutine run as a task on another event loop, awaited from this one: its outcome comes
    back once the task has ended, and cancelling the wait cancels the task and waits for its
    end (a future run_coroutine_threadsafe returns says it was cancelled at once)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, make: Callable[[], Awaitable[None]]):
        self._loop = loop
        self._ended: concurrent.futures.Future[None] = concurrent.futures.Future()
        self._task: asyncio.Task[None] | None = None
        loop.call_soon_threadsafe(self._start, make)

    def _start(self, make: Callable[[], Awaitable[None]]) -> None:
        self._task = self._loop.create_task(_awaited(make))
        self._task.add_done_callback(self._report)

    def _report(self, task: asyncio.Task[None]) -> None:
        if task.cancelled():
            self._ended.cancel()
        elif (error := task.exception()) is not None:
            self._ended.set_exception(error)
        else:
            self._ended.set_result(None)

    def _cancel(self) -> None:
        # Called after _start: the loop runs its callbacks in the order they were scheduled.
        if self._task is not None:
            self._task.cancel()

    async def outcome(self) -> None:
        waiting = asyncio.wrap_future(self._ended)
        try:
            await asyncio.shield(waiting)
        except asyncio.CancelledError:
            if not waiting.done():  # this wait was cancelled, not the task
                self._loop.call_soon_threadsafe(self._cancel)
                await asyncio.wait([waiting])
            raise


async def _awaited(make: Callable[[], Awaitable[None]]) -> None:
    await make()
