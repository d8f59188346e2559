"""Restarts in place: what a pod is given (render/in_place.py), what the reconciler reads of it
(lifecycle/observe.py) and decides (lifecycle/in_place.py): a failure counted once, the gang
asked to restart where it stands, the pods that cannot be asked recreated."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import Any

from support.planning import (
    META,
    NOW,
    REPLICA_SCOPE,
    conditions,
    observe,
    replica_pod,
    settle,
    spec,
)
from support.rewritten import rendered

from torchjob.api import constants
from torchjob.kube.slim import slim_pod
from torchjob.lifecycle.decision import InPlaceRestart
from torchjob.lifecycle.in_place import ask, restart_patch
from torchjob.lifecycle.observe import EndedInPlace, PodView, view_pod
from torchjob.lifecycle.times import format_time
from torchjob.render import in_place

KEYS = (("master", 0), ("worker", 0), ("worker", 1))
# Ended long enough ago that no restart delay is left to wait.
KILLED = EndedInPlace(137, None, None, NOW - timedelta(minutes=10), 30.0)


def pod(kind: str, index: int, **fields: Any) -> PodView:
    """A running pod made to restart in place."""
    return replica_pod(kind, index, in_place=True, **fields)


def gang(**worker_0: Any) -> list[PodView]:
    pods = [pod(k, i) for k, i in KEYS]
    if worker_0:
        pods[1] = pod("worker", 0, **worker_0)
    return pods


# -- what a pod gets ------------------------------------------------------------------------


def test_a_pod_gets_the_agent_its_volumes_and_the_training_containers_rule() -> None:
    spec_ = rendered()
    agent = spec_["initContainers"][-1]
    assert agent["name"] == in_place.AGENT
    assert (agent["image"], agent["command"][0]) == ("img", "python")
    assert agent["restartPolicy"] == "Always", "a native sidecar: it does not hold the pod open"
    assert agent["restartPolicyRules"] == [
        {
            "action": "RestartAllContainers",
            "exitCodes": {"operator": "In", "values": [in_place.AGENT_EXIT_CODE]},
        }
    ]
    assert agent["resources"]["requests"] == agent["resources"]["limits"], "QoS kept"
    [training] = spec_["containers"]
    assert training["restartPolicy"] == "Never"
    assert training["restartPolicyRules"] == [
        {"action": "Restart", "exitCodes": {"operator": "NotIn", "values": [0]}}
    ]
    volumes = {v["name"]: v for v in spec_["volumes"]}
    restarts, diagnoses = volumes[in_place.ASKED_VOLUME]["downwardAPI"]["items"]
    assert constants.ANNOTATION_RESTARTS_ASKED in restarts["fieldRef"]["fieldPath"]
    assert constants.ANNOTATION_DIAGNOSES_ASKED in diagnoses["fieldRef"]["fieldPath"]
    assert volumes[in_place.STARTS_VOLUME]["emptyDir"]["medium"] == "Memory"
    assert in_place.restarts_in_place(spec_)
    assert spec_["restartPolicy"] == "Never", "the pod still never restarts on its own"


def test_the_training_rule_restarts_on_the_codes_the_restart_policy_restarts() -> None:
    [exit_code] = rendered("ExitCode")["containers"]
    codes = exit_code["restartPolicyRules"][0]["exitCodes"]
    assert codes == {"operator": "In", "values": sorted(constants.RETRYABLE_EXIT_CODES)}
    [never] = rendered("Never")["containers"]
    assert "restartPolicyRules" not in never, "a failure ends the pod, as before"
    assert in_place.AGENT in [c["name"] for c in rendered("Never")["initContainers"]]


def test_a_job_may_say_its_pods_are_recreated() -> None:
    spec_ = rendered(**{constants.ANNOTATION_RESTART_IN_PLACE: "false"})
    assert in_place.AGENT not in [c["name"] for c in spec_.get("initContainers") or []]
    assert "restartPolicyRules" not in spec_["containers"][0]


def test_the_agent_is_added_once() -> None:
    spec_ = rendered()
    again = {"initContainers": list(spec_["initContainers"]), "volumes": list(spec_["volumes"])}
    in_place.add_in_place(again, [dict(spec_["containers"][0])], "OnFailure", "python")
    assert again["initContainers"] == spec_["initContainers"]
    assert again["volumes"] == spec_["volumes"]


def test_a_pod_whose_rules_the_apiserver_dropped_is_recreated() -> None:
    spec_ = rendered()
    for container in spec_["initContainers"]:
        container.pop("restartPolicyRules", None)
    assert not in_place.restarts_in_place(spec_)


# -- what is read of a pod ------------------------------------------------------------------


def stored(last_reason: str, asked: str = "1") -> dict[str, Any]:
    spec_ = rendered()
    return {
        "metadata": {
            "name": "j-worker-1",
            "uid": "u",
            "labels": {constants.LABEL_REPLICA_TYPE: "worker", constants.LABEL_REPLICA_INDEX: "1"},
            "annotations": {constants.ANNOTATION_RESTARTS_ASKED: asked},
        },
        "spec": spec_,
        "status": {
            "phase": "Running",
            "initContainerStatuses": [{"name": in_place.AGENT, "restartCount": 1}],
            "containerStatuses": [
                {
                    "name": "python",
                    "restartCount": 2,
                    "state": {"running": {"startedAt": "2026-01-01T12:00:00Z"}},
                    "lastState": {
                        "terminated": {
                            "exitCode": 137,
                            "reason": last_reason,
                            "startedAt": "2026-01-01T11:59:00Z",
                            "finishedAt": "2026-01-01T11:59:59Z",
                        }
                    },
                }
            ],
        },
    }


def test_a_failure_restarted_in_place_is_read_with_its_exit_code() -> None:
    seen = view_pod(stored("OOMKilled"))
    assert seen is not None
    assert (seen.in_place, seen.restarts_asked, seen.agent_restarts) == (True, 1, 1)
    assert seen.training_restarts == 2 and not seen.restart_pending
    assert seen.ended_in_place is not None
    assert (seen.ended_in_place.exit_code, seen.ended_in_place.reason) == (137, "OOMKilled")
    assert seen.ended_in_place.ran_seconds == 59.0


def test_the_reconcilers_slim_cache_keeps_what_is_read() -> None:
    for pod_ in (stored("OOMKilled"), stored(in_place.RESTARTED_ALL_REASON, asked="2")):
        assert view_pod(slim_pod(pod_)) == view_pod(pod_)


def test_a_restart_of_every_container_is_no_failure() -> None:
    seen = view_pod(stored(in_place.RESTARTED_ALL_REASON, asked="2"))
    assert seen is not None and seen.ended_in_place is None
    assert seen.restart_pending, "asked 2, the agent restarted once"


# -- Replica scope: counted once, nothing recreated -------------------------------------------


def test_a_failure_in_place_is_counted_once_and_nothing_is_deleted() -> None:
    job = spec()
    running = settle(job, gang(), meta=REPLICA_SCOPE)
    failed = gang(ended_in_place=KILLED, training_restarts=1)
    first = observe(job, failed, running, meta=REPLICA_SCOPE)
    assert (first.delete_pods, first.create_pods, first.restart_in_place) == ([], [], [])
    assert first.status["backoffCount"] == 1
    [entry] = [r for t in first.status["tasks"] for r in t["replicas"] if r["name"] == "j-worker-0"]
    assert (entry["uid"], entry["restartsInPlace"], entry["consecutiveRestarts"]) == (
        "uid-worker-0",
        1,
        1,
    )
    [event] = first.events
    assert event.reason == constants.REASON_REPLICA_RESTARTING
    assert "exit code 137" in event.message and "restarted in place (restart 1" in event.message
    again = observe(job, failed, first.status, meta=REPLICA_SCOPE)
    assert again.status["backoffCount"] == 1, "the same failure is not counted again"
    assert again.events == []
    second = gang(ended_in_place=KILLED, training_restarts=2)
    later = observe(job, second, again.status, meta=REPLICA_SCOPE)
    assert later.status["backoffCount"] == 2, "a second failure is"
    [entry] = [r for t in later.status["tasks"] for r in t["replicas"] if r["name"] == "j-worker-0"]
    assert entry["consecutiveRestarts"] == 2, "its row carried by the status, not the pod"


def test_a_failure_in_place_past_backoff_limit_fails_the_job() -> None:
    job = spec()
    status = settle(job, gang(), meta=REPLICA_SCOPE) | {"backoffCount": 3}
    failed = gang(ended_in_place=KILLED, training_restarts=4)
    result = observe(job, failed, status, meta=REPLICA_SCOPE)
    # The job says it failed once its pods, stopped now, are gone (lifecycle/finishing.py).
    assert conditions(result.status)["Running"] == (
        "False",
        constants.REASON_BACKOFF_LIMIT_EXCEEDED,
    )
    assert len(result.delete_pods) == 3


# -- Gang scope: every pod asked, charged once ------------------------------------------------


def test_a_gang_restart_asks_every_pod_to_restart_in_place() -> None:
    job = spec()
    running = settle(job, gang())
    result = observe(job, gang(ended_in_place=KILLED, training_restarts=1), running)
    assert result.delete_pods == [] and result.create_pods == []
    asked = sorted((a.name, a.uid, a.gang_restarts, a.asked) for a in result.restart_in_place)
    assert asked == [
        ("j-master-0", "uid-master-0", 1, 1),
        ("j-worker-0", "uid-worker-0", 1, 1),
        ("j-worker-1", "uid-worker-1", 1, 1),
    ]
    status = result.status
    assert (status["backoffCount"], status["gangRestarts"]) == (1, 1)
    assert status["gangRestartTimes"] == [format_time(NOW)]
    recorded = {r["name"]: r for t in status["tasks"] for r in t["replicas"]}
    assert all(r["uid"] for r in recorded.values()), "the pods stay the replicas' pods"
    assert not result.status_can_wait, "the status is written before the pods are asked"
    [event] = result.status_events
    assert event.message.startswith("restarting every replica in place: j-worker-0 failed")


def test_while_the_gang_restarts_in_place_the_others_crashes_are_not_counted() -> None:
    job = spec()
    asked = observe(job, gang(ended_in_place=KILLED, training_restarts=1), settle(job, gang()))
    # The patches landed; the master crashed on the broken group before its agent restarted it.
    pods = [
        pod(
            "master",
            0,
            gang_restarts=1,
            restarts_asked=1,
            ended_in_place=KILLED,
            training_restarts=1,
        ),
        pod("worker", 0, gang_restarts=1, restarts_asked=1, training_restarts=1),
        pod("worker", 1, gang_restarts=1, restarts_asked=1),
    ]
    during = observe(job, pods, asked.status)
    assert during.status["backoffCount"] == 1 and during.restart_in_place == []
    message = conditions_messages(during.status)["ReplicaFailure"]
    assert "waiting for 3 pod(s) to restart" in message
    done = [replace(p, agent_restarts=1, ended_in_place=None) for p in pods]
    after = observe(job, done, during.status)
    assert after.status["backoffCount"] == 1
    assert (
        "ReplicaFailure" not in conditions(after.status)
        or conditions(after.status)["ReplicaFailure"][0] == "False"
    )


def test_an_unpatched_pod_of_the_gang_before_is_asked_again() -> None:
    """A crash between the status write and the patches: the next round asks again."""
    job = spec()
    asked = observe(job, gang(ended_in_place=KILLED, training_restarts=1), settle(job, gang()))
    again = observe(job, gang(ended_in_place=KILLED, training_restarts=1), asked.status)
    assert sorted(a.name for a in again.restart_in_place) == [
        "j-master-0",
        "j-worker-0",
        "j-worker-1",
    ]
    assert again.status["backoffCount"] == 1
    assert again.create_pods == []


def test_a_pod_that_ended_is_recreated_the_others_restart_in_place() -> None:
    job = spec()
    running = settle(job, gang())
    pods = gang()
    pods[2] = replica_pod("worker", 1, "Failed", exit_code=1, in_place=True)
    result = observe(job, pods, running)
    assert result.delete_pods == [("j-worker-1", "uid-worker-1")]
    assert sorted(a.name for a in result.restart_in_place) == ["j-master-0", "j-worker-0"]


def test_a_pod_not_made_for_it_is_recreated() -> None:
    job = spec()
    pods = [replica_pod(k, i) for k, i in KEYS]
    pods[1] = replica_pod("worker", 0, "Failed", exit_code=1)
    result = observe(job, pods, settle(job, [replica_pod(k, i) for k, i in KEYS]))
    assert len(result.delete_pods) == 3 and result.restart_in_place == []


def test_an_ask_already_pending_is_not_raised_again() -> None:
    pending = pod("worker", 0, restarts_asked=3, agent_restarts=2)
    done = pod("worker", 0, restarts_asked=3, agent_restarts=3)
    assert ask(pending, 2).asked == 3
    assert ask(done, 2).asked == 4


def test_the_patch_names_the_pods_uid() -> None:
    patch = restart_patch(InPlaceRestart("j-worker-0", "u", 2, 5))
    assert patch == {
        "metadata": {
            "uid": "u",
            "annotations": {
                constants.ANNOTATION_GANG_RESTARTS: "2",
                constants.ANNOTATION_RESTARTS_ASKED: "5",
            },
        }
    }


def conditions_messages(status: dict[str, Any]) -> dict[str, str]:
    return {c["type"]: c["message"] for c in status["conditions"]}


# -- the agent itself -------------------------------------------------------------------------


def agent(tmp_path: Path) -> tuple[subprocess.Popen[bytes], Path]:
    """The agent as the pod runs it, on this Python, with its paths under `tmp_path`."""
    (tmp_path / "asked").mkdir(exist_ok=True)
    asked = tmp_path / "asked" / in_place.RESTARTS_FILE
    asked.write_text("")  # the annotation not written yet
    command = rendered()["initContainers"][-1]["command"]
    paths = [str(tmp_path / "asked"), str(tmp_path / "starts"), str(tmp_path / "diagnosis")]
    argv = [sys.executable, *command[1:3], *paths, *command[6:]]
    return subprocess.Popen(argv), asked


def test_the_agent_exits_with_its_code_once_a_restart_is_asked(tmp_path: Path) -> None:
    process, asked = agent(tmp_path)
    time.sleep(0.5)
    assert process.poll() is None, "nothing asked yet"
    asked.write_text("1")
    assert process.wait(timeout=10) == in_place.AGENT_EXIT_CODE
    assert (tmp_path / "starts").read_text() == "1"
    again, _ = agent(tmp_path)  # restarted: one start counted, the one ask made
    time.sleep(0.5)
    assert again.poll() is None
    again.terminate()
    again.wait(timeout=10)


def test_the_agent_stops_at_once_when_its_pod_is_deleted(tmp_path: Path) -> None:
    """As PID 1 it would ignore SIGTERM without a handler, and hold the pod its grace period."""
    process, _ = agent(tmp_path)
    time.sleep(0.5)
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=5) == 0


def test_pods_their_rule_restarted_since_the_failure_are_not_restarted_again() -> None:
    """With no restart delay, the worker that failed and the master that crashed on the broken
    group run anew already: only the worker still on its run from before is asked, and the
    master's crash is the gang before's."""
    meta = {**META, "annotations": {constants.ANNOTATION_RESTART_BACKOFF: "0"}}
    job = spec()
    killed = EndedInPlace(137, None, None, NOW - timedelta(seconds=2), 30.0)
    broken = EndedInPlace(1, None, None, NOW - timedelta(seconds=1.5), 30.0)
    anew = NOW - timedelta(seconds=1)
    pods = [
        pod("master", 0, ended_in_place=broken, training_restarts=1, running_since=anew),
        pod("worker", 0, ended_in_place=killed, training_restarts=1, running_since=anew),
        pod("worker", 1, running_since=NOW - timedelta(hours=1)),
    ]
    result = observe(job, pods, settle(job, gang(), meta=meta), meta=meta)
    asked = {a.name: (a.gang_restarts, a.asked) for a in result.restart_in_place}
    assert asked == {"j-master-0": (1, 0), "j-worker-0": (1, 0), "j-worker-1": (1, 1)}
    assert (result.status["backoffCount"], result.status["gangRestarts"]) == (1, 1)
    patched = [replace(p, gang_restarts=1, restarts_asked=asked[p.name][1]) for p in pods]
    after = observe(job, patched, result.status, meta=meta)
    assert after.status["backoffCount"] == 1, "the master's crash is not counted again"
    assert not after.restart_in_place and not after.delete_pods
