"""Checks for every test: asyncio tasks and child processes must not outlive the test that
started them, or they fail (or slow down) whichever test happens to run next."""

from __future__ import annotations

import asyncio
import contextlib
import glob
import os
import signal
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from support import control_plane_pids

# Long enough for a cancelled task or a terminated child to finish its clean-up.
LEFTOVER_GRACE = 1.0


@pytest.fixture(autouse=True)
async def no_leftover_asyncio_tasks() -> AsyncIterator[None]:
    before = asyncio.all_tasks()
    yield
    leftover = await _tasks_still_pending(before)
    if leftover:
        # Cancelled here so that the next test starts clean and only this one fails.
        for task in leftover:
            task.cancel()
        await asyncio.wait(leftover, timeout=LEFTOVER_GRACE)
        pytest.fail(f"test left {len(leftover)} asyncio task(s) running: {_describe(leftover)}")


async def _tasks_still_pending(before: set[asyncio.Task[object]]) -> set[asyncio.Task[object]]:
    """New tasks still pending after a few event-loop iterations and up to LEFTOVER_GRACE."""
    deadline = time.monotonic() + LEFTOVER_GRACE
    this_fixture = asyncio.current_task()
    iterations = 0
    while True:
        new_tasks = asyncio.all_tasks() - before
        pending = {task for task in new_tasks if task is not this_fixture and not task.done()}
        if not pending or time.monotonic() > deadline:
            return pending
        # A few bare iterations first: most stragglers are one callback away from finishing.
        await asyncio.sleep(0 if iterations < 5 else 0.02)
        iterations += 1


def _describe(tasks: set[asyncio.Task[object]]) -> str:
    return ", ".join(f"{task.get_name()} ({task.get_coro()!r})" for task in tasks)


@pytest.fixture(autouse=True)
def no_leftover_child_processes() -> Iterator[None]:
    before = _running_children()
    yield
    leftover = _wait_for_children_to_exit(before)
    if leftover:
        commands = {pid: _command_line(pid) for pid in leftover}
        for pid in leftover:
            _kill(pid)
        pytest.fail(f"test left child process(es) running: {commands}")


def _wait_for_children_to_exit(before: set[int]) -> set[int]:
    deadline = time.monotonic() + LEFTOVER_GRACE
    while (leftover := _running_children() - before) and time.monotonic() < deadline:
        time.sleep(0.02)
    return leftover


def _running_children() -> set[int]:
    """Live (non-zombie) children of this process, except the test control plane's."""
    children = {pid for pid in _child_pids() if _state(pid) not in (None, "Z")}
    return children - control_plane_pids()


def _child_pids() -> set[int]:
    me = os.getpid()
    # /proc/<pid>/task/<tid>/children (CONFIG_PROC_CHILDREN) is one read per thread;
    # without it, every process's parent has to be looked up.
    per_thread = glob.glob(f"/proc/{me}/task/*/children")
    if per_thread:
        return {int(pid) for path in per_thread for pid in _read(path).split()}
    return {pid for pid in _all_pids() if _parent_pid(pid) == me}


def _all_pids() -> list[int]:
    return [int(entry) for entry in os.listdir("/proc") if entry.isdigit()]


def _stat_fields(pid: int) -> list[str]:
    # The command name in parentheses may itself contain spaces and parentheses.
    return _read(f"/proc/{pid}/stat").rpartition(")")[2].split()


def _state(pid: int) -> str | None:
    fields = _stat_fields(pid)
    return fields[0] if fields else None


def _parent_pid(pid: int) -> int | None:
    fields = _stat_fields(pid)
    return int(fields[1]) if len(fields) > 1 else None


def _command_line(pid: int) -> str:
    return _read(f"/proc/{pid}/cmdline").replace("\0", " ").strip()


def _read(path: str) -> str:
    try:
        return Path(path).read_text()
    except OSError:  # the process is already gone
        return ""


def _kill(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
