"""Writing reports into jobs' status: at most one write per job per interval, whatever the
reporters send. Reports that arrive between two writes replace one another; the latest waits for
the job's next slot and is always written then, so the last report of a run (100 %) is never lost
to the throttle. On shutdown what is waiting is written at once."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Hashable
from typing import Any, Generic, TypeVar

import structlog
from prometheus_client import Counter

from torchjob.kube.errors import NotFound

log = structlog.get_logger("torchjob.webhook")

WRITES = Counter(
    "torchjob_progress_writes", "Progress reports written into a job's status by this replica"
)

Job = TypeVar("Job", bound=Hashable)
Clock = Callable[[], float]
Sleep = Callable[[float], Awaitable[None]]
# A report into the status of `job`; raises NotFound when the job is gone.
Write = Callable[[Job, dict[str, Any]], Awaitable[None]]

MAX_CONCURRENT_WRITES = 16


class CoalescingWriter(Generic[Job]):
    """Each job's latest report, written at most once per `interval` seconds."""

    def __init__(
        self,
        write: Write[Job],
        interval: float,
        *,
        clock: Clock = time.monotonic,
        sleep: Sleep = asyncio.sleep,
    ) -> None:
        self._write = write
        self.interval = interval
        self._clock = clock
        self._sleep = sleep
        self._pending: dict[Job, dict[str, Any]] = {}
        # When each job written lately may be written again.
        self._next_slot: dict[Job, float] = {}
        self._writing: set[Job] = set()
        self._at_once: set[Job] = set()  # jobs whose waiting report is due now, slot or not
        self._wakeup = asyncio.Event()
        self._writes = asyncio.Semaphore(MAX_CONCURRENT_WRITES)

    def submit(self, job: Job, report: dict[str, Any], *, at_once: bool = False) -> None:
        """The job's latest report, replacing any still waiting; `at_once`: written without
        waiting for the job's slot (a run's last report, which status should show by the time
        the job ends)."""
        newly = job not in self._pending
        self._pending[job] = report
        if at_once:
            self._at_once.add(job)
        if newly or at_once:
            self._wakeup.set()  # the running loop looks again at when the next slot is

    @property
    def waiting(self) -> int:
        return len(self._pending)

    def next_due(self) -> float | None:
        """Seconds until the next report's slot (0 when one is due now); None when none waits."""
        slots = [self._slot(job) for job in self._pending if job not in self._writing]
        return max(0.0, min(slots) - self._clock()) if slots else None

    def _slot(self, job: Job) -> float:
        """When the job's waiting report may be written (0: now)."""
        return 0.0 if job in self._at_once else self._next_slot.get(job, 0.0)

    async def write_due(self) -> None:
        """Write every waiting report whose job's slot has come."""
        now = self._clock()
        for job in [job for job, slot in self._next_slot.items() if slot <= now]:
            if job not in self._pending and job not in self._writing:
                del self._next_slot[job]  # nothing waits: forget the job
        due = [job for job in self._pending if job not in self._writing and self._slot(job) <= now]
        await asyncio.gather(*(self._write_one(job, now) for job in due))

    async def run(self) -> None:
        """Write reports as their slots come, until cancelled."""
        while True:
            self._wakeup.clear()
            delay = self.next_due()
            if delay is None or delay > 0:
                await self._wait(delay)
            await self.write_due()

    async def flush(self) -> None:
        """Write every waiting report now, slots or not (on shutdown)."""
        jobs = [job for job in self._pending if job not in self._writing]
        await asyncio.gather(*(self._write_one(job, self._clock()) for job in jobs))

    async def _write_one(self, job: Job, now: float) -> None:
        report = self._pending.pop(job)
        self._at_once.discard(job)
        self._next_slot[job] = now + self.interval
        self._writing.add(job)
        try:
            async with self._writes:
                await self._write(job, report)
            WRITES.inc()
        except NotFound:
            log.debug("progress not written: the job is gone", job=str(job))
        except asyncio.CancelledError:
            self._pending.setdefault(job, report)  # written by the flush that follows
            raise
        except Exception as error:
            # Kept for the job's next slot, unless a newer report has come meanwhile.
            self._pending.setdefault(job, report)
            log.warning(
                "progress write failed; retried at the next slot", job=str(job), error=str(error)
            )
        finally:
            self._writing.discard(job)
            if job in self._pending:
                self._wakeup.set()

    async def _wait(self, delay: float | None) -> None:
        """Until a report may be due: `delay` seconds (None: forever) or a submit."""
        waits: list[asyncio.Future[Any]] = [asyncio.ensure_future(self._wakeup.wait())]
        if delay is not None:
            waits.append(asyncio.ensure_future(self._sleep(delay)))
        try:
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for wait in waits:
                wait.cancel()
            await asyncio.gather(*waits, return_exceptions=True)
