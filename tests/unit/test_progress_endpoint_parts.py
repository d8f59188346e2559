"""The progress endpoint's parts, each on its own with time that moves only when a test says so:
the per-job rate limit, the writer that coalesces reports, the token's expiry read from a JWT,
and which jobs count as finished."""

from __future__ import annotations

import asyncio
import base64
from typing import Any

import orjson
import pytest
from cachetools import TLRUCache
from support.fake_time import FakeTime, settle

from torchjob.api.job_api import KUBEFLOW_JOB, TRAINING_JOB
from torchjob.api.progress import JobRef
from torchjob.kube.errors import Conflict, KubeError, NotFound
from torchjob.kube.informer import ResourceKind
from torchjob.kube.rest import Resources
from torchjob.webhook import settings
from torchjob.webhook.progress.auth import expiring, expiry_of
from torchjob.webhook.progress.endpoint import JobVersion, finished, job_with_outcome, write_report
from torchjob.webhook.progress.limit import JobRateLimit
from torchjob.webhook.progress.writer import CoalescingWriter


def test_a_job_may_burst_then_report_at_its_rate() -> None:
    time = FakeTime()
    limit = JobRateLimit(rate=1.0, burst=3, clock=time.clock)
    assert [limit.take("a") for _ in range(3)] == [0.0, 0.0, 0.0]
    assert limit.take("a") == pytest.approx(1.0)
    assert limit.take("b") == 0.0, "each job has its own bucket"
    time.now += 0.5
    assert limit.take("a") == pytest.approx(0.5), "a refused request takes nothing"
    time.now += 0.5
    assert limit.take("a") == 0.0
    time.now += 100
    assert [limit.take("a") for _ in range(4)][-1] > 0, "refilled to the burst, no more"


def test_the_rate_limit_keeps_a_bounded_number_of_jobs() -> None:
    limit = JobRateLimit(rate=1.0, burst=1, clock=lambda: 0.0, capacity=2)
    for job in ("a", "b", "c"):
        limit.take(job)
    assert len(limit) == 2


class Recorder:
    def __init__(self) -> None:
        self.written: list[tuple[str, dict[str, Any]]] = []
        self.fail_with: Exception | None = None

    async def write(self, job: str, report: dict[str, Any]) -> None:
        if self.fail_with is not None:
            raise self.fail_with
        self.written.append((job, report))


async def test_reports_between_writes_are_coalesced_and_the_latest_is_written_at_the_slot() -> None:
    time, recorder = FakeTime(), Recorder()
    writer = CoalescingWriter(recorder.write, 10.0, clock=time.clock)
    writer.submit("a", {"p": 1})
    await writer.write_due()
    assert recorder.written == [("a", {"p": 1})], "the first report is written at once"
    for percent in (2, 3, 100):
        writer.submit("a", {"p": percent})
        await writer.write_due()
    assert len(recorder.written) == 1
    assert writer.next_due() == pytest.approx(10.0)
    time.now = 9.9
    await writer.write_due()
    assert len(recorder.written) == 1
    time.now = 10.0
    await writer.write_due()
    assert recorder.written[-1] == ("a", {"p": 100}), "the last report is not lost"
    assert writer.next_due() is None


async def test_a_report_submitted_at_once_does_not_wait_for_the_slot() -> None:
    """A run's last report (100 %) is written when it comes, so that status shows it by the
    time the job ends; the next report waits for a whole interval again."""
    time, recorder = FakeTime(), Recorder()
    writer = CoalescingWriter(recorder.write, 10.0, clock=time.clock)
    writer.submit("a", {"p": 1})
    await writer.write_due()
    writer.submit("a", {"p": 50})
    time.now = 2.0
    writer.submit("a", {"p": 100}, at_once=True)
    assert writer.next_due() == 0.0
    await writer.write_due()
    assert recorder.written == [("a", {"p": 1}), ("a", {"p": 100})]
    writer.submit("a", {"p": 100})
    assert writer.next_due() == pytest.approx(10.0)


async def test_each_job_has_its_own_slot() -> None:
    time, recorder = FakeTime(), Recorder()
    writer = CoalescingWriter(recorder.write, 10.0, clock=time.clock)
    writer.submit("a", {"p": 1})
    await writer.write_due()
    writer.submit("b", {"p": 2})
    await writer.write_due()
    assert recorder.written == [("a", {"p": 1}), ("b", {"p": 2})]


async def test_a_gone_job_is_dropped_and_another_failure_retried_at_the_next_slot() -> None:
    time, recorder = FakeTime(), Recorder()
    writer = CoalescingWriter(recorder.write, 10.0, clock=time.clock)
    recorder.fail_with = NotFound(404, "NotFound", "gone")
    writer.submit("gone", {"p": 1})
    await writer.write_due()
    assert writer.waiting == 0
    recorder.fail_with = KubeError(500, "InternalError", "etcd")
    writer.submit("a", {"p": 1})
    await writer.write_due()
    assert writer.waiting == 1 and writer.next_due() == pytest.approx(10.0)
    recorder.fail_with = None
    time.now = 10.0
    await writer.write_due()
    assert recorder.written == [("a", {"p": 1})]


async def test_the_running_writer_writes_at_each_slot_and_flushes_on_shutdown() -> None:
    time, recorder = FakeTime(), Recorder()
    writer = CoalescingWriter(recorder.write, 10.0, clock=time.clock, sleep=time.sleep)
    running = asyncio.create_task(writer.run())
    writer.submit("a", {"p": 1})
    await settle()
    assert recorder.written == [("a", {"p": 1})]
    writer.submit("a", {"p": 2})
    await time.advance(5)
    assert len(recorder.written) == 1
    await time.advance(5)
    assert recorder.written[-1] == ("a", {"p": 2})
    writer.submit("a", {"p": 3})
    running.cancel()
    await asyncio.gather(running, return_exceptions=True)
    await writer.flush()
    assert recorder.written[-1] == ("a", {"p": 3}), "what waits is written at shutdown"


def _jwt(claims: dict[str, Any]) -> str:
    payload = base64.urlsafe_b64encode(orjson.dumps(claims)).rstrip(b"=").decode()
    return f"e30.{payload}.sig"


def test_a_tokens_expiry_is_its_exp_claim() -> None:
    assert expiry_of(_jwt({"exp": 1234})) == 1234.0
    assert expiry_of(_jwt({"sub": "x"})) is None
    assert expiry_of(_jwt({"exp": True})) is None
    assert expiry_of("not a jwt") is None
    assert expiry_of("a.!!!.c") is None


def test_remembered_verdicts_expire_and_are_bounded() -> None:
    now = [9.0]
    kept: TLRUCache[str, tuple[float, int]] = expiring(2, lambda: now[0])
    kept["a"] = (10.0, 1)
    assert kept.get("a") == (10.0, 1)
    now[0] = 10.0
    assert kept.get("a") is None
    for key in ("a", "b", "c"):
        kept[key] = (100.0, 1)
    assert len(kept) == 2 and kept.get("a") is None


def test_a_cached_job_has_finished_by_the_phase_its_cache_keeps() -> None:
    assert finished({"status": {"phase": "Succeeded"}})
    assert finished({"status": {"phase": "Failed"}})
    assert not finished({"status": {"phase": "Running"}})
    assert not finished({})


def test_the_job_cache_keeps_only_whether_a_job_finished() -> None:
    job = {
        "metadata": {"name": "j", "managedFields": [{}]},
        "spec": {"x": 1},
        "status": {"phase": "Running", "conditions": [{"type": "Running", "status": "True"}]},
    }
    assert job_with_outcome(job) == {"metadata": {"name": "j"}, "spec": {"x": 1}}
    assert job_with_outcome({**job, "status": {"phase": "Failed"}})["status"] == {"phase": "Failed"}
    kubeflow = {**job, "apiVersion": KUBEFLOW_JOB.api_version}
    held = {"type": "Failed", "status": "True"}
    assert "status" not in job_with_outcome(kubeflow)
    kubeflow_failed = {**kubeflow, "status": {"conditions": [held]}}
    assert job_with_outcome(kubeflow_failed)["status"] == {"phase": "Failed"}
    not_held = {**kubeflow, "status": {"conditions": [{**held, "status": "False"}]}}
    assert "status" not in job_with_outcome(not_held)
    assert finished(job_with_outcome(kubeflow_failed))


def test_the_progress_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("TORCHJOB_PROGRESS", "TORCHJOB_PROGRESS_PORT", "TORCHJOB_PROGRESS_URL"):
        monkeypatch.delenv(name, raising=False)
    defaults = settings.parse([])
    assert (defaults.progress, defaults.progress_port) == (True, 9444)
    assert defaults.progress_base_url == "https://torchjob-webhook.torchjob-system.svc:9444"
    assert (defaults.progress_write_seconds, defaults.progress_rate, defaults.progress_burst) == (
        10.0,
        1.0,
        10,
    )
    given = settings.parse(["--no-progress", "--progress-url", "https://x:1", "--ca-file", "c"])
    assert (given.progress, given.progress_base_url, given.ca_file) == (False, "https://x:1", "c")
    for wrong in (["--progress-rate", "0"], ["--progress-burst", "0"], ["--progress-port", "0"]):
        with pytest.raises(SystemExit):
            settings.parse(wrong)


class StoredJob(Resources):
    """One job's object as the apiserver keeps it: reads, and status patches that fail with a
    conflict `conflicts` times (another writer got there first) before they apply."""

    def __init__(self, uid: str, shown: dict[str, Any] | None, conflicts: int = 0) -> None:
        self.job: dict[str, Any] = {"metadata": {"uid": uid, "resourceVersion": "1"}, "status": {}}
        if shown is not None:
            self.job["status"]["trainerStatus"] = shown
        self.conflicts = conflicts
        self.patches: list[dict[str, Any]] = []

    async def get(self, kind: ResourceKind, namespace: str, name: str) -> dict[str, Any]:
        return self.job

    async def patch(
        self, kind: ResourceKind, namespace: str, name: str, body: Any, **_: Any
    ) -> str:
        self.patches.append(body)
        if self.conflicts:
            self.conflicts -= 1
            raise Conflict(409, "Conflict", "the object has been modified")
        self.job["status"].update(body["status"])
        return str(self.job["metadata"]["resourceVersion"])


REF = JobRef(TRAINING_JOB, "ns", "j")
EARLIER = {"progressPercentage": 20, "lastUpdatedTime": "2026-11-28T10:00:00.000001Z"}
LATER = {"progressPercentage": 100, "lastUpdatedTime": "2026-11-28T10:00:00.000002Z"}


async def test_a_report_is_written_on_the_version_it_was_read_with() -> None:
    stored = StoredJob("uid-1", EARLIER)
    await write_report(stored, JobVersion(REF, "uid-1"), LATER)
    assert stored.patches == [
        {"metadata": {"resourceVersion": "1"}, "status": {"trainerStatus": LATER}}
    ]


async def test_an_earlier_report_is_not_written_over_a_later_one() -> None:
    """Another webhook replica wrote a report it received later."""
    stored = StoredJob("uid-1", LATER)
    await write_report(stored, JobVersion(REF, "uid-1"), EARLIER)
    assert stored.patches == []


async def test_a_report_does_not_reach_a_job_made_again_under_its_name() -> None:
    stored = StoredJob("uid-2", None)
    await write_report(stored, JobVersion(REF, "uid-1"), LATER)
    assert stored.patches == []


async def test_a_report_that_keeps_meeting_conflicts_waits_for_its_next_slot() -> None:
    """Raising keeps it in the writer, which tries again at the job's next slot."""
    stored = StoredJob("uid-1", None, conflicts=2)
    await write_report(stored, JobVersion(REF, "uid-1"), LATER)
    assert len(stored.patches) == 3
    assert stored.job["status"]["trainerStatus"] == LATER
    stored.conflicts = 3
    with pytest.raises(Conflict):
        await write_report(
            stored, JobVersion(REF, "uid-1"), {**LATER, "lastUpdatedTime": "2026-11-28T10:00:01Z"}
        )
