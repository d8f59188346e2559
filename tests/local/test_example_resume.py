"""examples/mnist-ddp/train.py resumes every rank from the same checkpoint when only some ranks
have one, as after a lost replica is replaced on a cluster where each pod has its own filesystem:
two plain gloo processes on this machine, each with a log directory of its own, only rank 1's
holding a checkpoint of the job."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import torch
from support.cli import EXAMPLE

TRAIN = EXAMPLE / "train.py"
RUN_ID = "job-uid-1"
TIMEOUT = 300  # a bound on a hang (mismatched collectives), not a verdict


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def train(log_dirs: list[Path], epochs: int, run_id: str = RUN_ID) -> list[str]:
    """train.py in one process per log directory (rank = its index), as the operator starts plain
    replicas: MASTER_ADDR, MASTER_PORT, WORLD_SIZE, RANK. Each process's output."""
    port = free_port()
    processes = []
    for rank, log_dir in enumerate(log_dirs):
        env = {
            **os.environ,
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(port),
            "WORLD_SIZE": str(len(log_dirs)),
            "RANK": str(rank),
            "TORCHELASTIC_RUN_ID": run_id,
        }
        argv = [sys.executable, str(TRAIN), "--epochs", str(epochs), "--log_dir", str(log_dir)]
        processes.append(
            subprocess.Popen(
                argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
            )
        )
    outputs = []
    for rank, started in enumerate(processes):
        output, _ = started.communicate(timeout=TIMEOUT)
        assert started.returncode == 0, f"rank {rank}:\n{output[-3000:]}"
        outputs.append(output)
    return outputs


def checkpoint(log_dir: Path) -> dict[str, object]:
    state: dict[str, object] = torch.load(log_dir / "checkpoint.pt", map_location="cpu")
    return state


def test_ranks_resume_together_from_the_only_checkpoint(tmp_path: Path) -> None:
    fresh, holder = tmp_path / "fresh", tmp_path / "holder"
    # The replica that survived: two epochs of this job checkpointed in its directory.
    train([holder], epochs=2)
    assert checkpoint(holder)["epoch"] == 2

    rank0, _ = train([fresh, holder], epochs=3)

    # Rank 1 holds the latest checkpoint: both ranks load it and train only the third epoch.
    assert "resumed from epoch 2 (checkpoint of rank 1)" in rank0, rank0
    epochs = re.findall(r"^epoch (\d+)/3 ", rank0, re.MULTILINE)
    assert epochs == ["3"], rank0
    first, second = checkpoint(fresh), checkpoint(holder)
    assert first["epoch"] == second["epoch"] == 3
    # The same model on both ranks: they started from the same weights.
    for name, weights in first["model"].items():  # type: ignore[attr-defined]
        assert torch.equal(weights, second["model"][name]), name  # type: ignore[index]


def test_a_checkpoint_of_another_job_is_ignored(tmp_path: Path) -> None:
    fresh, stale = tmp_path / "fresh", tmp_path / "stale"
    train([stale], epochs=1, run_id="an-earlier-job")

    rank0, _ = train([fresh, stale], epochs=1)

    assert "resumed from" not in rank0, rank0
    assert re.findall(r"^epoch (\d+)/1 ", rank0, re.MULTILINE) == ["1"], rank0
    assert checkpoint(stale)["run_id"] == RUN_ID
