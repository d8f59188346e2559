"""`torchjob run` with small Python replicas (no torch): admission errors, the dry run, addresses,
restarts, backoffLimit, the deadline, logs and Ctrl-C, through the installed command."""

from __future__ import annotations

import signal
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from support.cli import descendants, process, run_to_end, running, still_alive
from support.jobs import JobBuilder, job_manifest

from torchjob.api.constants import ANNOTATION_SERVICE_SCOPE as SERVICE_SCOPE

PYTHON = ["python", "-c"]


def script(text: str) -> list[str]:
    return [textwrap.dedent(text)]


def test_invalid_manifest_exits_2_naming_every_field(tmp_path: Path) -> None:
    manifest = (
        JobBuilder("bad")
        .replicas("worker", 0, container=process(["pass"], PYTHON), restartPolicy="ExitCode")
        .spec(
            runPolicy={"backoffLimit": -1},
            elastic={"enabled": True, "minReplicas": 3, "maxReplicas": 2},
        )
        .build()
    )
    for extra in ((), ("--dry-run",)):
        finished = run_to_end(manifest, tmp_path, *extra)
        assert finished.returncode == 2
        assert finished.stdout == []
        errors = set(finished.stderr)
        assert "error: spec.replicaSpecs[0].replicas: must be at least 1" in errors
        assert "error: spec.runPolicy.backoffLimit: must not be negative" in errors
        assert "error: spec.elastic.minReplicas: 3 exceeds maxReplicas 2" in errors
        assert any(e.startswith("error: spec.elastic.enabled: ") for e in errors)


def test_not_a_job_exits_2(tmp_path: Path) -> None:
    manifest = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}}
    finished = run_to_end(manifest, tmp_path)
    assert finished.returncode == 2
    assert "error: apiVersion: must be batch.tensorstack.dev/v1beta1, not 'v1'" in finished.stderr
    assert "error: kind: must be PyTorchTrainingJob, not 'Pod'" in finished.stderr


def test_a_container_without_command_cannot_run_here(tmp_path: Path) -> None:
    finished = run_to_end(
        JobBuilder("nocmd")
        .replicas("worker", 1, container=process(["train.py"]), restartPolicy="ExitCode")
        .build(),
        tmp_path,
    )
    assert finished.returncode == 2
    assert any("spec.containers[0].command is empty" in line for line in finished.stderr)


def test_dry_run_prints_the_defaulted_job_then_every_pod_and_service(tmp_path: Path) -> None:
    manifest = job_manifest("torchrun")
    container = manifest["spec"]["replicaSpecs"][0]["template"]["spec"]["containers"][0]
    container["env"] = [{"name": "MASTER_PORT", "value": "1234"}]
    finished = run_to_end(manifest, tmp_path, "--dry-run")
    assert finished.returncode == 0, finished.stderr
    documents = list(yaml.safe_load_all("\n".join(finished.stdout)))
    assert [d["kind"] for d in documents] == ["PyTorchTrainingJob"] + ["Pod", "Service"] * 4
    stored = documents[0]
    assert stored["metadata"] == {"name": "pytorch-torchrun", "namespace": "default"}
    assert stored["spec"]["runPolicy"] == {"backoffLimit": 3, "cleanUpPolicy": "None"}
    names = [d["metadata"]["name"] for d in documents[1:]]
    assert names == [f"pytorch-torchrun-worker-{i}" for i in range(4) for _ in range(2)]
    uids = {d["metadata"]["ownerReferences"][0]["uid"] for d in documents[1:]}
    assert len(uids) == 1
    pod = documents[1]
    assert pod["spec"]["restartPolicy"] == "Never"
    training = pod["spec"]["containers"][0]
    assert training["command"][0] == "torchrun"
    assert f"--rdzv-id={uids.pop()}" in training["command"]
    env = {e["name"]: e["value"] for e in training["env"]}
    assert env["MASTER_PORT"] == "1234"  # the user's value wins
    assert env["PET_RDZV_ENDPOINT"] == "pytorch-torchrun-worker-0.default.svc:23456"
    assert any("MASTER_PORT is set by you" in line for line in finished.stderr)
    again = run_to_end(manifest, tmp_path, "--dry-run", "--namespace", "default")
    assert again.stdout == finished.stdout  # a stable rendering


@pytest.mark.parametrize("service_scope", [None, "Job"])
def test_replicas_reach_each_other_on_local_addresses(
    tmp_path: Path, service_scope: str | None
) -> None:
    master = script(
        """
        import os, socket
        server = socket.create_server((os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])))
        connection, _ = server.accept()
        print("received", connection.recv(100).decode(), "rank", os.environ["RANK"])
        """
    )
    worker = script(
        """
        import os, socket, time
        address = (os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]))
        # Said before the greeting: the master's success ends the job and stops this replica,
        # on a busy machine before a line printed after the greeting would be written.
        print("addr", os.environ["MASTER_ADDR"], "world", os.environ["WORLD_SIZE"], flush=True)
        for _ in range(200):
            try:
                greeting = "hello from " + os.environ["RANK"]
                socket.create_connection(address).sendall(greeting.encode())
                break
            except ConnectionRefusedError:
                time.sleep(0.05)
        """
    )
    manifest = (
        JobBuilder("addr")
        .replicas("master", 1, container=process(master, PYTHON), restartPolicy="ExitCode")
        .replicas("worker", 1, container=process(worker, PYTHON), restartPolicy="ExitCode")
        .build()
    )
    if service_scope:
        manifest["metadata"]["annotations"] = {SERVICE_SCOPE: service_scope}
    finished = run_to_end(manifest, tmp_path)
    assert finished.returncode == 0, finished.stderr
    assert finished.replica_lines("addr-master-0") == ["received hello from 1 rank 0"]
    assert finished.replica_lines("addr-worker-0") == ["addr 127.0.0.1 world 2"]
    assert finished.status["phase"] == "Succeeded"
    assert (tmp_path / "logs" / "addr-master-0.log").read_text() == "received hello from 1 rank 0\n"


def test_working_dir_and_env_expansion(tmp_path: Path) -> None:
    (tmp_path / "work").mkdir()
    container = process(["pwd; echo $(GREETING) '$$(RANK)'"], ["sh", "-c"])
    container["workingDir"] = str(tmp_path / "work")
    container["env"] = [
        {"name": "NAME", "value": "world"},
        {"name": "GREETING", "value": "hello-$(NAME)"},
        {"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": "SECRET", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}},
    ]
    manifest = JobBuilder("wd").replicas("worker", 1, container=container, restartPolicy="ExitCode")
    finished = run_to_end(manifest.build(), tmp_path)
    assert finished.returncode == 0, finished.stderr
    assert finished.replica_lines("wd-worker-0") == [str(tmp_path / "work"), "hello-world $(RANK)"]
    assert any("env SECRET is read from secretKeyRef" in line for line in finished.stderr)


def _dies_once(marker: Path, then: str = "print('second life')") -> list[str]:
    return script(
        f"""
        import os, pathlib, signal
        marker = pathlib.Path({str(marker)!r})
        if not marker.exists():
            marker.touch()
            os.kill(os.getpid(), signal.SIGKILL)
        {then}
        """
    )


def test_a_replica_killed_by_sigkill_is_restarted_and_counted(tmp_path: Path) -> None:
    wait_for_worker = script(
        f"""
        import pathlib, time
        while not pathlib.Path({str(tmp_path / "done")!r}).exists():
            time.sleep(0.05)
        print("master done")
        """
    )
    worker = _dies_once(
        tmp_path / "killed",
        then=f"pathlib.Path({str(tmp_path / 'done')!r}).touch()",
    )
    manifest = (
        JobBuilder("kill")
        .replicas("master", 1, container=process(wait_for_worker, PYTHON), restartPolicy="ExitCode")
        .replicas("worker", 1, container=process(worker, PYTHON), restartPolicy="ExitCode")
        .spec(runPolicy={"backoffLimit": 2})
        .build()
    )
    finished = run_to_end(manifest, tmp_path, "--restart-backoff", "0")
    assert finished.returncode == 0, finished.stderr
    assert "torchjob: kill-worker-0 exited with exit code 137" in finished.stderr
    assert finished.status["backoffCount"] == 1
    restarts = {t["type"]: t["restartCount"] for t in finished.status["tasks"]}
    assert restarts == {"master": 0, "worker": 1}
    assert finished.condition("Completed")["reason"] == "MasterSucceeded"
    assert "torchjob: restarts 1 (backoffLimit 2), duration" in " ".join(finished.stderr)


def test_exit_code_1_fails_the_job_without_restart(tmp_path: Path) -> None:
    manifest = (
        JobBuilder("fail")
        .replicas(
            "master",
            1,
            container=process(["import sys; sys.exit(1)"], PYTHON),
            restartPolicy="ExitCode",
        )
        .build()
    )
    finished = run_to_end(manifest, tmp_path)
    assert finished.returncode == 1
    failed = finished.condition("Failed")
    assert failed["reason"] == "MasterFailed"
    assert failed["message"] == "replica fail-master-0 failed with exit code 1 and is not restarted"
    assert finished.status["backoffCount"] == 0
    assert any("job default/fail: Failed (MasterFailed:" in line for line in finished.stderr)


def test_restarts_stop_at_the_backoff_limit(tmp_path: Path) -> None:
    suicide = ["import os, signal; os.kill(os.getpid(), signal.SIGKILL)"]
    manifest = (
        JobBuilder("backoff")
        .replicas("master", 1, container=process(suicide, PYTHON), restartPolicy="ExitCode")
        .spec(runPolicy={"backoffLimit": 2})
        .build()
    )
    began = time.monotonic()
    finished = run_to_end(manifest, tmp_path, "--restart-backoff", "1")
    assert finished.returncode == 1
    assert finished.condition("Failed")["reason"] == "BackoffLimitExceeded"
    assert finished.status["backoffCount"] == 2
    starts = [line for line in finished.stderr if line.startswith("torchjob: started backoff")]
    assert len(starts) == 3
    # The restarts waited 1s, then 2s, after each end; an end time has whole seconds, so each
    # wait may be up to a second shorter.
    waits = [line for line in finished.stderr if "RestartBackoff: restarting backoff-" in line]
    assert len(waits) == 2, finished.stderr
    assert all(line.endswith("after exit code 137 (SIGKILL)") for line in waits)
    assert time.monotonic() - began >= (1 - 1) + (2 - 1)


def test_the_deadline_stops_the_job(tmp_path: Path) -> None:
    manifest = (
        JobBuilder("late")
        .replicas(
            "master",
            1,
            container=process(["import time; time.sleep(600)"], PYTHON),
            restartPolicy="ExitCode",
        )
        .spec(runPolicy={"activeDeadlineSeconds": 2})
        .build()
    )
    finished = run_to_end(manifest, tmp_path, timeout=60)
    assert finished.returncode == 1
    failed = finished.condition("Failed")
    assert failed["reason"] == "DeadlineExceeded"
    assert "torchjob: stopping late-master-0" in finished.stderr


def test_ctrl_c_stops_every_replica_and_what_they_started(tmp_path: Path) -> None:
    stubborn = script(
        """
        import signal, subprocess, time
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # only SIGKILL ends this one
        subprocess.Popen(["sleep", "600"])
        print("ready", flush=True)
        time.sleep(600)
        """
    )
    manifest = (
        JobBuilder("ctrlc")
        .replicas("master", 1, container=process(stubborn, PYTHON), restartPolicy="ExitCode")
        .replicas("worker", 2, container=process(stubborn, PYTHON), restartPolicy="ExitCode")
        .build()
    )
    with running(manifest, tmp_path, "--grace-period", "1") as run:
        for name in ("ctrlc-master-0", "ctrlc-worker-0", "ctrlc-worker-1"):
            run.wait_for(rf"^{name} *\| ready")
        assert run.process is not None
        started = descendants(run.process.pid)
        assert len(started) >= 6  # three replicas, each with its sleep
        run.signal(signal.SIGINT)
        finished = run.finish(60)
    assert finished.returncode == 130
    assert (
        "torchjob: interrupted: stopping every replica (Ctrl-C again to kill them)"
        in finished.stderr
    )
    assert any("Interrupted" in line for line in finished.stderr)
    assert not still_alive(started, 5.0)


def test_a_paused_job_ends_as_nothing_can_resume_it_here(tmp_path: Path) -> None:
    manifest: dict[str, Any] = (
        JobBuilder("paused")
        .replicas("master", 1, container=process(["pass"], PYTHON), restartPolicy="ExitCode")
        .spec(runMode={"pause": {"enabled": True}})
        .build()
    )
    finished = run_to_end(manifest, tmp_path, timeout=60)
    assert finished.returncode == 1
    assert finished.status["phase"] == "Paused"
    assert "torchjob: the job is Paused and nothing can change it here" in finished.stderr


def test_a_command_that_cannot_start_fails_like_a_container_start_error(tmp_path: Path) -> None:
    manifest = (
        JobBuilder("nostart")
        .replicas(
            "master", 1, container=process([], ["no-such-program-here"]), restartPolicy="Never"
        )
        .build()
    )
    finished = run_to_end(manifest, tmp_path)
    assert finished.returncode == 1
    assert any(
        "nostart-master-0 could not start: no-such-program-here" in x for x in finished.stderr
    )
    assert finished.condition("Failed")["message"] == (
        "replica nostart-master-0 failed with exit code 128 and is not restarted"
    )


def test_the_master_finishing_first_leaves_workers_a_moment_then_stops_them(
    tmp_path: Path,
) -> None:
    manifest = (
        JobBuilder("settle")
        .replicas("master", 1, container=process(["pass"], PYTHON), restartPolicy="ExitCode")
        .replicas(
            "worker",
            1,
            container=process(["import time; time.sleep(600)"], PYTHON),
            restartPolicy="ExitCode",
        )
        .build()
    )
    finished = run_to_end(manifest, tmp_path, "--grace-period", "2", timeout=60)
    assert finished.returncode == 0
    assert "torchjob: stopping settle-worker-0" in finished.stderr
    assert "torchjob: settle-worker-0 was stopped with exit code 143" in finished.stderr


def test_a_value_only_the_crd_schema_refuses_exits_2_naming_the_field(tmp_path: Path) -> None:
    manifest = job_manifest("torchrun")
    manifest["spec"]["torchrunConfig"]["procPerNode"] = "many"  # the CRD's pattern refuses it
    manifest["spec"]["torchrunConfig"]["maxRestarts"] = -1  # and its minimum this
    for extra in ((), ("--dry-run",)):
        finished = run_to_end(manifest, tmp_path, *extra)
        assert finished.returncode == 2
        assert finished.stdout == []
        assert set(finished.stderr) >= {
            "error: spec.torchrunConfig.procPerNode: 'many' does not match ^([1-9][0-9]{0,3}|gpu)$",
            "error: spec.torchrunConfig.maxRestarts: -1 is less than the minimum 0",
        }
