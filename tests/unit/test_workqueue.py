"""The work queue on fake time: each key queued once, held by one worker at a time, delayed adds
in due order, per-key exponential backoff up to its cap, and shutdown."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from support.fake_time import FakeTime, settle

from torchjob.kube.workqueue import LOW, QueueShutDown, WorkQueue


@pytest.fixture
def time() -> FakeTime:
    return FakeTime()


@pytest.fixture
async def queue(time: FakeTime) -> AsyncIterator[WorkQueue[str]]:
    work: WorkQueue[str] = WorkQueue(
        backoff_base=0.005, backoff_cap=0.04, clock=time.clock, sleep=time.sleep
    )
    yield work
    work.shutdown()
    await settle()


def start_get(queue: WorkQueue[str]) -> asyncio.Task[str]:
    return asyncio.create_task(queue.get())


async def test_a_key_added_many_times_is_queued_once(queue: WorkQueue[str]) -> None:
    for key in ("a", "b", "a", "a", "b"):
        queue.add(key)
    assert len(queue) == 2
    assert [await queue.get(), await queue.get()] == ["a", "b"]
    assert len(queue) == 0


async def test_a_key_added_while_held_comes_back_once_after_done(queue: WorkQueue[str]) -> None:
    queue.add("a")
    held = await queue.get()
    queue.add("a")
    queue.add("a")
    second = start_get(queue)
    await settle()
    assert len(queue) == 0
    assert not second.done(), "a second worker got a key that is still being processed"

    queue.done(held)
    await settle()
    assert second.result() == "a"
    queue.done("a")
    assert len(queue) == 0


async def test_a_waiting_get_wakes_on_add(queue: WorkQueue[str]) -> None:
    waiting = start_get(queue)
    await settle()
    assert not waiting.done()
    queue.add("a")
    await settle()
    assert waiting.result() == "a"


async def test_add_after_delivers_in_due_order(queue: WorkQueue[str], time: FakeTime) -> None:
    queue.add_after("late", 3)
    queue.add_after("soon", 1)
    queue.add_after("middle", 2)
    got: list[str] = []
    for _ in range(3):
        waiting = start_get(queue)
        await settle()
        assert not waiting.done()
        await time.advance(1)
        got.append(waiting.result())
    assert got == ["soon", "middle", "late"]


async def test_the_earlier_of_two_delays_wins_and_the_key_comes_once(
    queue: WorkQueue[str], time: FakeTime
) -> None:
    queue.add_after("a", 5)
    queue.add_after("a", 1)
    queue.add_after("a", 3)
    await time.advance(1)
    assert await queue.get() == "a"
    queue.done("a")
    await time.advance(10)
    assert len(queue) == 0


async def test_add_after_zero_is_immediate(queue: WorkQueue[str]) -> None:
    queue.add_after("a", 0)
    assert len(queue) == 1


async def test_rate_limited_delay_doubles_up_to_the_cap(
    queue: WorkQueue[str], time: FakeTime
) -> None:
    expected = [0.005, 0.01, 0.02, 0.04, 0.04]
    assert [queue.backoff(failures) for failures in range(5)] == expected
    for delay in expected:
        queue.add_rate_limited("a")
        waiting = start_get(queue)
        await time.advance(delay * 0.9)
        assert not waiting.done(), f"came back before its {delay}s backoff"
        await time.advance(delay * 0.1 + 1e-9)
        assert waiting.result() == "a"
        queue.done("a")
    assert queue.retries("a") == len(expected)


async def fail(queue: WorkQueue[str], time: FakeTime, key: str, times: int) -> None:
    """Add `key` rate-limited `times` times, taking it back after each backoff."""
    for _ in range(times):
        queue.add_rate_limited(key)
        await time.advance(1)
        assert await queue.get() == key
        queue.done(key)


async def test_forget_resets_the_backoff(queue: WorkQueue[str], time: FakeTime) -> None:
    await fail(queue, time, "a", 3)
    queue.forget("a")
    assert queue.retries("a") == 0
    queue.add_rate_limited("a")
    await time.advance(0.005)
    assert len(queue) == 1, "not back after the base delay"


async def test_backoff_is_per_key(queue: WorkQueue[str], time: FakeTime) -> None:
    await fail(queue, time, "slow", 3)
    queue.add_rate_limited("slow")
    queue.add_rate_limited("fresh")
    await time.advance(0.005)
    assert await queue.get() == "fresh"
    assert len(queue) == 0


async def test_shutdown_ends_waiting_and_later_gets(queue: WorkQueue[str]) -> None:
    waiting = start_get(queue)
    await settle()
    queue.shutdown()
    await settle()
    with pytest.raises(QueueShutDown):
        waiting.result()
    queue.add("a")
    assert len(queue) == 0
    with pytest.raises(QueueShutDown):
        await queue.get()


async def test_shutdown_wakes_a_get_waiting_for_a_timer(
    queue: WorkQueue[str], time: FakeTime
) -> None:
    queue.add_after("a", 10)
    waiting = start_get(queue)
    await settle()
    queue.shutdown()
    await settle()
    with pytest.raises(QueueShutDown):
        waiting.result()


async def test_a_higher_priority_is_served_first_then_in_order_added(
    queue: WorkQueue[str],
) -> None:
    for key in ("new-1", "new-2", "new-3"):
        queue.add(key, LOW)
    queue.add("changed-1")
    queue.add("changed-2")
    assert [await queue.get() for _ in range(5)] == [
        "changed-1",
        "changed-2",
        "new-1",
        "new-2",
        "new-3",
    ]


async def test_a_key_added_again_at_a_higher_priority_moves_up_once(
    queue: WorkQueue[str],
) -> None:
    for key in ("new-1", "new-2", "new-3"):
        queue.add(key, LOW)
    queue.add("new-3")
    queue.add("new-3", LOW)  # a lower priority does not move it down
    assert len(queue) == 3
    assert [await queue.get() for _ in range(3)] == ["new-3", "new-1", "new-2"]


async def test_a_held_key_added_again_comes_back_at_the_highest_priority_given(
    queue: WorkQueue[str],
) -> None:
    queue.add("held", LOW)
    assert await queue.get() == "held"
    queue.add("other", LOW)
    queue.add("held", LOW)
    queue.add("held")
    queue.done("held")
    assert [await queue.get(), await queue.get()] == ["held", "other"]
