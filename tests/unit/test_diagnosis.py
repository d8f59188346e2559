"""Diagnoses (lifecycle/diagnosis.py, lifecycle/hang.py, render/diagnosis.py): the planner asks
before the silence's restart and collects after COLLECT_SECONDS; a request asks once per value;
the pod gets the hook; and the agent and hook themselves, run as the pod runs them, name the
frozen rank and the collective the other waits in."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

from support.planning import META, NOW, observe, replica_pod, settle, spec
from support.rewritten import rendered

from torchjob.api import constants
from torchjob.lifecycle import diagnosis
from torchjob.lifecycle.diagnosis import PodSeen
from torchjob.lifecycle.hang import report_in, summarize
from torchjob.lifecycle.observe import PodView
from torchjob.lifecycle.times import format_time
from torchjob.render import diagnosis as render_diagnosis
from torchjob.render import in_place

KEYS = (("master", 0), ("worker", 0), ("worker", 1))
STARTED = NOW - timedelta(hours=2)


def running(**fields: Any) -> list[PodView]:
    return [
        replica_pod(k, i, running_since=STARTED, diagnosable=True, node="n1", **fields)
        for k, i in KEYS
    ]


def silent(status: dict[str, Any]) -> dict[str, Any]:
    report = {"progressPercentage": 42, "lastUpdatedTime": format_time(NOW - timedelta(hours=1))}
    return {**status, "trainerStatus": report}


# -- the planner -------------------------------------------------------------------------------


def test_a_silent_job_is_diagnosed_before_its_restart_which_names_what_was_found() -> None:
    job = spec()
    status = silent(settle(job, running()))
    asking = observe(job, running(), status)
    assert not asking.delete_pods and not asking.restart_in_place, "the restart waits"
    assert asking.ask_diagnosis is not None
    assert (asking.ask_diagnosis.number, len(asking.ask_diagnosis.pods)) == (1, 3)
    record = asking.status["diagnosis"]
    assert (record["reason"], record["pods"]) == (constants.REASON_NO_PROGRESS, 3)
    assert asking.requeue_after == diagnosis.COLLECT_SECONDS

    later = NOW + timedelta(seconds=4)
    asked = silent(asking.status)  # as read back: the progress endpoint's field with it
    waiting = observe(job, running(diagnoses_asked=1), asked, now=later)
    assert waiting.collect_diagnosis is None and not waiting.delete_pods
    assert waiting.requeue_after == diagnosis.COLLECT_SECONDS - 4

    due = NOW + timedelta(seconds=diagnosis.COLLECT_SECONDS)
    collecting = observe(job, running(diagnoses_asked=1), asked, now=due)
    assert collecting.collect_diagnosis is not None
    assert [p.replica for p in collecting.collect_diagnosis.pods] == [
        "master-0",
        "worker-0",
        "worker-1",
    ]
    assert not collecting.delete_pods, "nor while the reports are read"
    assert collecting.requeue_after == 0, "and the job is looked at again once they are"

    found = diagnosis.collected(record, "rank 2 (worker-1 on n1) did not answer", due)
    restarting = observe(job, running(diagnoses_asked=1), {**asked, "diagnosis": found})
    assert len(restarting.delete_pods) == 3, "then the gang restarts"
    [event] = restarting.status_events
    assert "; where each rank was: diagnosis 1" in event.message
    assert "worker-1" not in event.message, "the summary, the tenant's word, is not in ours"


def test_a_request_asks_once_per_value_and_restarts_nothing() -> None:
    job = spec()
    meta = {**META, "annotations": {constants.ANNOTATION_DIAGNOSE: "2026-12-06T19:00:00Z"}}
    status = settle(job, running())
    asking = observe(job, running(), status, meta=meta)
    assert asking.ask_diagnosis is not None and not asking.delete_pods
    record = asking.status["diagnosis"]
    assert (record["reason"], record["request"]) == ("Requested", "2026-12-06T19:00:00Z")
    answered = {**asking.status, "diagnosis": diagnosis.collected(record, "m", NOW)}
    again = observe(job, running(diagnoses_asked=1), answered, meta=meta)
    assert again.ask_diagnosis is None and again.collect_diagnosis is None


def test_without_an_agent_the_answer_is_at_once_and_the_restart_does_not_wait() -> None:
    job = spec()
    pods = [replica_pod(k, i, running_since=STARTED) for k, i in KEYS]
    result = observe(job, pods, silent(settle(job, pods)))
    assert result.ask_diagnosis is None
    assert "restart agent" in result.status["diagnosis"]["message"]
    assert len(result.delete_pods) == 3


# -- the summary -------------------------------------------------------------------------------

C10D = "/v/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py"


def process(rank: str, **fields: Any) -> dict[str, Any]:
    return {"pid": 7, "rank": rank, "child": False, "answered": True, **fields}


def test_the_summary_puts_the_silent_and_the_elsewhere_first_and_bounds_what_it_quotes() -> None:
    pods = [PodSeen("j-master-0", "master-0", "n1"), PodSeen("j-worker-0", "worker-0", "n2")]
    waits = [[C10D, 3, "all_reduce"], ["/w/train.py", 88, "step"]]
    reports = {
        "j-master-0": {"processes": [process("0", main=waits, backend="gloo")]},
        "j-worker-0": {"processes": [process("1", answered=False), process("1", child=True)]},
    }
    assert summarize(pods, reports) == (
        "rank 1 (worker-0 on n2) did not answer (stopped, or holding Python's lock); "
        "rank 0 (master-0 on n1) waits in all_reduce (gloo) at train.py:88 in step"
    )
    elsewhere = {"j-master-0": {"processes": [process("0", main=[["/w/a.py", 5, "x" * 500]])]}}
    said = summarize(pods, elsewhere)
    assert said.startswith("rank 0 (master-0 on n1) is elsewhere: a.py:5 in xxx")
    assert "j-worker-0 (worker-0 on n2) sent no report" in said
    assert len(said) <= 1024


def test_a_report_is_found_by_its_number_and_a_forged_line_is_only_text() -> None:
    tail = (
        'torchjob-diagnosis {"number":1}\nnoise\ntorchjob-diagnosis {"number":2,"processes":[]}\n'
    )
    assert report_in(tail, 2) == {"number": 2, "processes": []}
    assert report_in(tail, 3) is None
    assert report_in("torchjob-diagnosis {not json\n", 1) is None


# -- what the pod gets -------------------------------------------------------------------------


def test_the_training_container_loads_the_hook_and_keeps_its_own_pythonpath() -> None:
    spec_ = rendered()
    [training] = spec_["containers"]
    assert {"name": "PYTHONPATH", "value": render_diagnosis.HOOK_DIR} in training["env"]
    mounts = {m["name"]: m["mountPath"] for m in training["volumeMounts"]}
    assert mounts[render_diagnosis.VOLUME] == render_diagnosis.PATH
    agent = spec_["initContainers"][-1]
    assert agent["lifecycle"]["postStart"]["exec"]["command"][0] == "python"
    own = {"containers": [{"name": "p", "env": [{"name": "PYTHONPATH", "value": "/a"}]}]}
    render_diagnosis.add_diagnosis(own, own["containers"], dict(agent), "ready")
    assert own["containers"][0]["env"] == [
        {"name": "PYTHONPATH", "value": f"{render_diagnosis.HOOK_DIR}:/a"}
    ]


def test_the_sources_the_pod_carries_hold_nothing_the_kubelet_would_expand() -> None:
    """The kubelet expands `$(NAME)` in a container's command and args."""
    for source in (in_place.AGENT_SOURCE, in_place.HOOK_SOURCE):
        assert "$(" not in source


# -- the agent and the hook, as the pod runs them ----------------------------------------------

TRAIN = """\
import torch.distributed.distributed_c10d as c10d
def step():
    c10d.all_reduce()
step()
"""
FAKE_C10D = "import time\ndef all_reduce():\n    time.sleep(60)\n"


def test_the_agent_names_the_frozen_rank_and_the_collective_the_other_waits_in(
    tmp_path: Path,
) -> None:
    asked, diagnosis_dir = tmp_path / "asked", tmp_path / "diagnosis"
    asked.mkdir()
    command = rendered()["initContainers"][-1]["command"]
    paths = [str(asked), str(tmp_path / "starts"), str(diagnosis_dir)]
    image_path = tmp_path / "image" / "site-packages"  # a library, as torch is installed
    (image_path / "torch" / "distributed").mkdir(parents=True)
    (image_path / "torch" / "distributed" / "distributed_c10d.py").write_text(FAKE_C10D)
    for package in ("torch", "torch/distributed"):
        (image_path / package / "__init__.py").write_text("")
    train = tmp_path / "image" / "train.py"
    train.write_text(TRAIN)
    env = {**os.environ, "PYTHONPATH": str(image_path)}  # the image's own PYTHONPATH
    agent = subprocess.Popen(
        [sys.executable, *command[1:3], *paths, *command[6:]], env=env, stdout=subprocess.PIPE
    )
    hook_dir = str(diagnosis_dir / "python")
    ranks: list[subprocess.Popen[bytes]] = []
    try:
        for _ in range(100):
            if (diagnosis_dir / "ready").exists():
                break
            time.sleep(0.05)
        for rank in ("0", "1"):
            ranks.append(
                subprocess.Popen(
                    [sys.executable, str(train)],
                    env={**os.environ, "PYTHONPATH": hook_dir, "RANK": rank},
                )
            )
        for _ in range(100):
            if len(list((diagnosis_dir / "processes").glob("*.json"))) == 2:
                break
            time.sleep(0.05)
        time.sleep(0.5)  # rank 0 reaches its all_reduce
        ranks[1].send_signal(signal.SIGSTOP)
        (asked / render_diagnosis.DIAGNOSES_FILE).write_text("1")
        assert agent.stdout is not None
        log = b""
        deadline = time.monotonic() + 20
        while b"torchjob-diagnosis {" not in log and time.monotonic() < deadline:
            log += agent.stdout.readline()
    finally:
        for process in [*ranks, agent]:
            process.kill()
            process.wait()
    report = report_in(log.decode(), 1)
    assert report is not None, log
    pods = [PodSeen("j-worker-0", "worker-0", "n1")]
    said = summarize(pods, {"j-worker-0": report})
    assert said.startswith("rank 1 (worker-0 on n1) did not answer"), said
    assert "rank 0 (worker-0 on n1) waits in all_reduce at train.py:3 in step" in said
    assert b"=== torchjob diagnosis 1: pid" in log and b"[MainThread]" in log

    # Restarted in place, the agent prints its latest diagnosis again: the current log has it.
    again = subprocess.Popen(
        [sys.executable, *command[1:3], *paths, *command[6:]], env=env, stdout=subprocess.PIPE
    )
    try:
        assert again.stdout is not None
        first = again.stdout.readline()
    finally:
        again.kill()
        again.wait()
    assert first.startswith(b"=== torchjob diagnosis 1: pid"), first


def test_a_diagnosis_a_user_asked_during_the_silence_does_not_stand_for_the_silences() -> None:
    job = spec()
    status = silent(settle(job, running()))
    requested = {
        "number": 1,
        "reason": "Requested",
        "request": "r",
        "askedTime": format_time(NOW - timedelta(minutes=1)),
        "collectedTime": format_time(NOW - timedelta(seconds=50)),
        "message": "m",
    }
    result = observe(job, running(), {**status, "diagnosis": requested})
    assert result.ask_diagnosis is not None and not result.delete_pods
    assert result.status["diagnosis"]["reason"] == constants.REASON_NO_PROGRESS
    assert result.status["diagnosis"]["request"] == "r", "the request answered stays answered"
    written = result.status["diagnosis"]
    assert (written["collectedTime"], written["message"]) == (None, None), "removed: a merge patch"
