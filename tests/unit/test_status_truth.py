"""The status tells the truth in every phase: it is read from the job's current pods (of the
mode the spec asks for), Running only while they run, with the debug, pause and resume
transitions in conditions and Events of their own, and no stale condition left behind."""

from __future__ import annotations

from typing import Any

from support.planning import conditions, observe, replica_pod, settle, spec

from torchjob.api.objects import PodPhase
from torchjob.api.types import PyTorchTrainingJobSpec
from torchjob.lifecycle.observe import ContainerView, PodView


def pods(
    job: PyTorchTrainingJobSpec, phase: PodPhase = "Running", *, debug: bool = False, gen: str = ""
) -> list[PodView]:
    out = []
    for replica_spec in job.replica_specs or []:
        kind = replica_spec.type or ""
        for index in range(replica_spec.replicas or 1):
            containers = (ContainerView("python", phase.lower()),)
            uid = f"uid-{kind}-{index}{gen}"
            out.append(replica_pod(kind, index, phase, uid=uid, debug=debug, containers=containers))
    return out


def events(plan_status_events: Any) -> list[tuple[str, str]]:
    return [(e.reason, e.message) for e in plan_status_events]


DEBUG: dict[str, Any] = {"runMode": {"debug": {"enabled": True}}}


def test_debug_switched_on_is_a_condition_and_an_event() -> None:
    running = spec()
    status = settle(running, pods(running))
    debug = spec(**DEBUG)
    switching = observe(debug, pods(running), status)
    assert len(switching.delete_pods) == 3
    assert switching.status["phase"] == "Pending"  # the training pods go; debug pods come
    assert conditions(switching.status)["Debug"] == ("True", "DebugEnabled")
    assert conditions(switching.status)["Running"] == ("False", "ReplicasNotRunning")
    assert [e[0] for e in events(switching.status_events)] == ["DebugEnabled", "JobPending"]
    up = observe(debug, pods(debug, debug=True, gen="d"), switching.status)
    assert up.status["phase"] == "Running"
    assert conditions(up.status)["Running"] == ("True", "Debug")
    assert [e[0] for e in events(up.status_events)] == ["JobRunning"]


def test_debug_switched_off_is_not_running_while_the_new_pods_are_pending() -> None:
    debug = spec(**DEBUG)
    status = settle(debug, pods(debug, debug=True))
    assert status["phase"] == "Running"
    off = spec()
    switching = observe(off, pods(off, debug=True), status)
    assert len(switching.delete_pods) == 3
    assert switching.status["phase"] == "Pending"
    assert conditions(switching.status)["Debug"] == ("False", "DebugDisabled")
    assert switching.status["aggregate"]["running"] == 0
    assert events(switching.status_events)[0][0] == "DebugDisabled"
    # The debug pods are gone; the new ones are Pending: the job is not Running.
    pending = observe(off, pods(off, "Pending", gen="n"), switching.status)
    assert pending.status["phase"] == "Pending"
    assert conditions(pending.status)["Running"] == ("False", "ReplicasNotRunning")
    assert conditions(pending.status)["Initialized"] == ("True", "ReplicasCreated")
    assert pending.status["aggregate"]["pending"] == 3
    running = observe(off, pods(off, gen="n"), pending.status)
    assert running.status["phase"] == "Running"
    assert conditions(running.status)["Running"] == ("True", "AllReplicasRunning")
    assert conditions(running.status)["Debug"] == ("False", "DebugDisabled")
    assert [e[0] for e in events(running.status_events)] == ["JobRunning"]


def test_pods_of_the_mode_before_are_not_counted_as_the_jobs_own() -> None:
    off = spec()
    status = settle(spec(**DEBUG), pods(off, debug=True))
    result = observe(off, pods(off, debug=True), status)
    assert result.status["aggregate"]["deleted"] == 3
    assert conditions(result.status)["Initialized"] == ("False", "CreatingReplicas")


def test_a_paused_job_is_not_creating_replicas() -> None:
    running = spec()
    status = settle(running, pods(running))
    paused = spec(runMode={"pause": {"enabled": True}})
    pausing = observe(paused, pods(paused), status)
    assert conditions(pausing.status)["Initialized"] == ("False", "Paused")
    empty = observe(paused, [], pausing.status)
    assert conditions(empty.status)["Initialized"] == ("False", "Paused")
    assert conditions(empty.status)["Paused"] == ("True", "Paused")


def test_resume_ends_in_resumed_not_resuming() -> None:
    running = spec()
    paused = spec(runMode={"pause": {"enabled": True}})
    # The pause deletes the pods it sees: their replicas' recorded uids go with them.
    status = observe(paused, pods(running), settle(running, pods(running))).status
    resumed = spec(runMode={"pause": {"enabled": False}})
    resuming = observe(resumed, [], status)
    assert conditions(resuming.status)["Paused"] == ("False", "Resuming")
    assert resuming.status["phase"] == "Resuming"
    starting = observe(resumed, pods(resumed, "Pending"), resuming.status)
    assert starting.status["phase"] == "Resuming"
    assert conditions(starting.status)["Paused"] == ("False", "Resuming")
    back = observe(resumed, pods(resumed), starting.status)
    assert back.status["phase"] == "Running"
    assert conditions(back.status)["Paused"] == ("False", "Resumed")
    assert [e[0] for e in events(back.status_events)] == ["JobRunning"]
    # Resumed is a final state: it stays, and raises no Event again.
    again = observe(resumed, pods(resumed), back.status)
    assert again.status == back.status
    assert again.status_events == []


def test_a_replica_restarting_within_a_running_job_leaves_it_running() -> None:
    job = spec()
    status = settle(job, pods(job))
    without = [p for p in pods(job) if p.name != "j-worker-1"]
    result = observe(job, without, status)
    assert result.status["phase"] == "Running"


def test_a_new_job_is_pending_until_every_pod_runs() -> None:
    job = spec()
    half = [*pods(job, "Pending")[:2], *pods(job)[2:]]
    assert observe(job, half).status["phase"] == "Pending"
