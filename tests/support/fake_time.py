"""Time that moves only when a test says so: a clock and an asyncio sleep that follows it."""

from __future__ import annotations

import asyncio


async def settle() -> None:
    """Let every task that can run, run."""
    for _ in range(20):
        await asyncio.sleep(0)


class FakeTime:
    """A clock that moves only when the test advances it, and a sleep that follows it."""

    def __init__(self) -> None:
        self.now = 0.0
        self._sleepers: list[tuple[float, asyncio.Future[None]]] = []

    def clock(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        wake_up: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._sleepers.append((self.now + seconds, wake_up))
        await wake_up

    async def advance(self, seconds: float) -> None:
        self.now += seconds
        for due, wake_up in self._sleepers:
            if due <= self.now and not wake_up.done():
                wake_up.set_result(None)
        self._sleepers = [(due, wake_up) for due, wake_up in self._sleepers if not wake_up.done()]
        await settle()
