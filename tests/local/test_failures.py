"""Failures with real torchrun: a script exiting 1 fails the job with its reason and exit code, a
job past its activeDeadlineSeconds is stopped, and Ctrl-C leaves no process behind."""

from __future__ import annotations

import signal
import time
from pathlib import Path

from support.cli import (
    SCRIPTS,
    TorchjobRun,
    descendants,
    process,
    run_to_end,
    running,
    still_alive,
)
from support.jobs import JobBuilder


def ddp(name: str, *script_args: str, replicas: int = 2) -> JobBuilder:
    """`replicas` workers of torchrun running ddp_loop.py with `script_args`."""
    loop = process([str(SCRIPTS / "ddp_loop.py"), *script_args])
    return (
        JobBuilder(name)
        .replicas("worker", replicas, container=loop, restartPolicy="ExitCode")
        .torchrun()
    )


def test_a_script_exiting_1_fails_the_job(tmp_path: Path) -> None:
    # One replica: with two, the other's torchrun ends on the broken group at the same moment,
    # and which ending is seen first (MasterFailed or ReplicaFailed) is the machine's to choose.
    args = ("--steps", "50", "--fail-at", "2", "--exit-code", "1")
    manifest = ddp("exit-one", *args, replicas=1).build()
    finished = run_to_end(manifest, tmp_path)
    assert finished.returncode == 1
    failed = finished.condition("Failed")
    assert failed["reason"] == "MasterFailed"
    assert failed["message"] == (
        "replica exit-one-worker-0 failed with exit code 1 and is not restarted"
    )
    assert finished.status["backoffCount"] == 0
    assert "torchjob: exit-one-worker-0 exited with exit code 1" in finished.stderr
    assert any("job default/exit-one: Failed (MasterFailed:" in line for line in finished.stderr)


def test_a_job_past_its_deadline_is_stopped(tmp_path: Path) -> None:
    # The deadline may pass before torch has started on a busy machine: the job is stopped
    # all the same, so nothing here waits for training to be under way.
    manifest = (
        ddp("deadline", "--steps", "100000", "--sleep", "0.2")
        .run_policy(activeDeadlineSeconds=20)
        .build()
    )
    with running(manifest, tmp_path) as run:
        started = processes_until_exit(run)
        finished = run.finish(240)
    assert finished.returncode == 1
    assert finished.condition("Failed")["reason"] == "DeadlineExceeded"
    assert "torchjob: stopping deadline-worker-0" in finished.stderr
    assert "torchjob: stopping deadline-worker-1" in finished.stderr
    assert started, "no replica process was ever seen"
    assert not still_alive(started, 60.0)


def test_ctrl_c_leaves_no_process_behind(tmp_path: Path) -> None:
    with running(ddp("ctrl-c", "--steps", "100000").build(), tmp_path) as run:
        run.wait_for(r"^ctrl-c-worker-0 *\| step 2 ", timeout=240)
        assert run.process is not None
        started = descendants(run.process.pid)
        # two torchrun agents and their training processes (each in a session of its own)
        assert len([p for p in started if "ddp_loop" in _command(p)]) >= 4
        run.signal(signal.SIGINT)
        finished = run.finish(240)
    assert finished.returncode == 130
    assert not still_alive(started, 60.0)


def processes_until_exit(run: TorchjobRun, timeout: float = 240.0) -> set[int]:
    """Every process seen below `torchjob run` until it exits (or `timeout` passes)."""
    assert run.process is not None
    seen: set[int] = set()
    until = time.monotonic() + timeout
    while run.process.poll() is None and time.monotonic() < until:
        seen |= descendants(run.process.pid)
        time.sleep(0.1)
    return seen


def _command(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_text().replace("\0", " ")
    except OSError:
        return ""
