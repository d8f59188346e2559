"""A job's creations go several at a time (as many as the reconciler has workers): every
Service before any pod, each object expected until the informer reports it, one SuccessfulCreate
Event each; a refusal in the middle ends the sending, is returned once those in flight are
answered, and leaves nothing expected that will never be reported; a lost connection is raised.
Events go in the background: unanswered, they hold back neither creations nor a status write."""

from __future__ import annotations

import asyncio
from typing import Any, cast

import pytest
from support.planning import META, observe, replica_pod, spec

from torchjob.api.types import PyTorchTrainingJobSpec
from torchjob.kube.client import KubeClient
from torchjob.kube.errors import Forbidden
from torchjob.kube.events import EventRecorder
from torchjob.kube.expectations import Expectations, ObjectRef
from torchjob.kube.reconcile import JobKey
from torchjob.lifecycle.plan import Plan
from torchjob.reconciler.executor import ReconcilerExecutor
from torchjob.render.scheduling import SchedulingSettings

IN_FLIGHT = 4
WORKERS = 12
KEY = JobKey("ns", "j")
JOB: dict[str, Any] = {
    "apiVersion": "batch.tensorstack.dev/v1beta1",
    "kind": "PyTorchTrainingJob",
    "metadata": dict(META),
}


class SlowApiserver:
    """Answers each creation after a few turns of the event loop, keeping what was created, in
    which order, and how many creations were in flight at most; `refuse` names an object whose
    creation is refused (403), `drop` one whose connection is lost."""

    def __init__(self, refuse: str = "", drop: str = "") -> None:
        self.refuse = refuse
        self.drop = drop
        self.events_answered = asyncio.Event()  # until set, no Event is answered
        self.events_answered.set()
        self.status_writes = 0
        self.sent: list[str] = []
        self.created: list[str] = []
        self.events: list[str] = []
        self.in_flight = 0
        self.most_in_flight = 0

    async def request(self, method: str, path: str, *, body: Any = None, **_: Any) -> bytes:
        if "/events" in path:
            await self.events_answered.wait()
            self.events.append(body["note"])
            return b"{}"
        if method != "POST":
            self.status_writes += path.endswith("/status")
            return b"{}"
        name = f"{path.rsplit('/', 1)[-1].removesuffix('s')}/{body['metadata']['name']}"
        self.sent.append(name)
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            for _turn in range(3):
                await asyncio.sleep(0)
        finally:
            self.in_flight -= 1
        if name == self.refuse:
            raise Forbidden(403, "Forbidden", "exceeded quota")
        if name == self.drop:
            raise ConnectionResetError("the apiserver went away")
        self.created.append(name)
        return b"{}"


def new_job() -> tuple[PyTorchTrainingJobSpec, Plan]:
    job = spec(workers=WORKERS, master=False)
    return job, observe(job, [], svcs=frozenset())


def executor(api: SlowApiserver, expectations: Expectations) -> ReconcilerExecutor:
    client = cast(KubeClient, api)
    return ReconcilerExecutor(
        client,
        EventRecorder(client, "torchjob-reconciler", "test"),
        expectations,
        SchedulingSettings(gang="none"),
        in_flight=IN_FLIGHT,
    )


def report(expectations: Expectations, created: list[str]) -> None:
    """The informer reports every object created."""
    for name in created:
        kind, _, obj = name.partition("/")
        expectations.observed_creation(KEY, ObjectRef(kind, obj))


async def test_creations_go_several_at_a_time_services_first_one_event_each() -> None:
    api, expectations = SlowApiserver(), Expectations()
    job, plan = new_job()
    acting = executor(api, expectations)
    assert await acting.execute(KEY, JOB, job, plan) is None
    await acting.events.flush()
    kinds = [name.partition("/")[0] for name in api.created]
    assert kinds == ["service"] * WORKERS + ["pod"] * WORKERS
    assert sorted(api.created) == sorted(
        f"{kind}/j-worker-{i}" for kind in ("service", "pod") for i in range(WORKERS)
    )
    assert api.most_in_flight == IN_FLIGHT
    assert sorted(api.events) == sorted(f"Created {name.replace('/', ': ')}" for name in api.sent)
    assert not expectations.satisfied(KEY)
    report(expectations, api.created)
    assert expectations.satisfied(KEY)


async def test_a_refusal_in_the_middle_ends_the_sending_and_is_returned() -> None:
    refused = "pod/j-worker-5"
    api, expectations = SlowApiserver(refuse=refused), Expectations()
    job, plan = new_job()
    acting = executor(api, expectations)
    refusal = await acting.execute(KEY, JOB, job, plan)
    await acting.events.flush()
    assert refusal is not None
    assert (refusal.kind, refusal.name, refusal.status) == ("pod", "j-worker-5", 403)
    pods_sent = [name for name in api.sent if name.startswith("pod/")]
    # Those in flight when the refusal came are answered; nothing is sent after it.
    assert refused in pods_sent
    assert len(pods_sent) < WORKERS
    assert len(pods_sent) <= pods_sent.index(refused) + IN_FLIGHT
    assert api.in_flight == 0
    created_events = [note for note in api.events if note.startswith("Created")]
    assert sorted(created_events) == sorted(
        f"Created {name.replace('/', ': ')}" for name in api.created
    )
    # What was created stays expected until reported; the refused and unsent never will be.
    assert not expectations.satisfied(KEY)
    report(expectations, api.created)
    assert expectations.satisfied(KEY)


async def test_a_lost_connection_is_raised_once_those_in_flight_are_answered() -> None:
    api, expectations = SlowApiserver(drop="service/j-worker-2"), Expectations()
    job, plan = new_job()
    with pytest.raises(ConnectionResetError):
        await executor(api, expectations).execute(KEY, JOB, job, plan)
    assert not [name for name in api.sent if name.startswith("pod/")]
    assert api.in_flight == 0
    report(expectations, api.created)
    assert expectations.satisfied(KEY)


async def test_unanswered_events_hold_back_neither_the_status_nor_the_creations() -> None:
    api, expectations = SlowApiserver(), Expectations()
    api.events_answered.clear()
    job, created = new_job()
    acting = executor(api, expectations)
    await acting.execute(KEY, JOB, job, created)
    assert len(api.created) == 2 * WORKERS
    report(expectations, api.created)
    assert expectations.satisfied(KEY)
    # The next round, which sees every pod created, writes the status with Events unanswered.
    assert await acting.execute(KEY, JOB, job, plan_after_creations(job)) is None
    assert api.status_writes == 1
    assert not api.events
    api.events_answered.set()
    await acting.events.flush()
    assert len([note for note in api.events if note.startswith("Created")]) == 2 * WORKERS


def plan_after_creations(job: PyTorchTrainingJobSpec) -> Plan:
    pods = [replica_pod("worker", index, phase="Pending") for index in range(WORKERS)]
    return observe(job, pods)
