"""examples/mnist-ddp/job.yaml run by `torchjob run`, with fewer epochs: it trains for real, to
>= 0.95 test accuracy, reports its progress to the run, and survives a replica killed with SIGKILL
mid-training."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
from pathlib import Path
from typing import Any

import torch
import yaml
from support.cli import EXAMPLE, descendants, run_to_end, running
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

MASTER, WORKER = "mnist-ddp-worker-0", "mnist-ddp-worker-1"


def example(tmp: Path, epochs: int) -> dict[str, Any]:
    """The example's manifest as written, with fewer epochs, the script by its absolute path
    (the test runs elsewhere) and the logs under `tmp`."""
    manifest: dict[str, Any] = yaml.safe_load((EXAMPLE / "job.yaml").read_text())
    container = manifest["spec"]["replicaSpecs"][0]["template"]["spec"]["containers"][0]
    args = container["args"]
    assert args[0] == "train.py"
    args[0] = str(EXAMPLE / "train.py")
    args[args.index("--epochs") + 1] = str(epochs)
    args[args.index("--log_dir") + 1] = str(tmp / "runs")
    return manifest


def test_the_example_trains_to_95_percent(tmp_path: Path) -> None:
    finished = run_to_end(example(tmp_path, epochs=6), tmp_path)
    assert finished.returncode == 0, "\n".join(finished.stdout[-40:] + finished.stderr)
    assert finished.condition("Completed")["reason"] == "MasterSucceeded"
    metrics = json.loads((tmp_path / "runs" / "metrics.json").read_text())
    assert metrics["world_size"] == 4  # two replicas of torchrun, two processes each
    assert metrics["test_accuracy"] >= 0.95
    assert f"test accuracy {metrics['test_accuracy']:.4f}" in finished.replica_lines(MASTER)

    events = EventAccumulator(str(tmp_path / "runs"))
    events.Reload()
    assert set(events.Tags()["scalars"]) == {"train/loss", "val/accuracy"}
    losses = [e.value for e in events.Scalars("train/loss")]
    assert len(losses) == 6 and losses[-1] < losses[0]
    model = torch.load(tmp_path / "runs" / "model.pt")
    assert "classify.3.weight" in model

    # Rank 0 reported its progress; the last report, at the end, is in the job's status.
    progress = finished.status["trainerStatus"]
    assert progress["progressPercentage"] == 100
    assert progress["estimatedRemainingSeconds"] == 0
    reported = {m["name"]: m["value"] for m in progress["metrics"]}
    assert reported["test_accuracy"] == f"{metrics['test_accuracy']:.4g}"
    assert reported["epoch"] == "6"
    assert {"loss", "accuracy"} <= set(reported)
    lines = [line for line in finished.stderr if line.startswith("torchjob: progress ")]
    assert lines[-1].startswith("torchjob: progress 100% · eta 0s · loss="), lines


def test_a_replica_killed_mid_training_is_restarted_and_the_job_succeeds(tmp_path: Path) -> None:
    with running(example(tmp_path, epochs=8), tmp_path) as run:
        run.wait_for(r"\| epoch 2/8 ", timeout=180)
        # The whole replica at once, as a container is killed: were torchrun alone killed, its
        # training processes could finish the run with the master before they are cleaned up.
        torchrun = run.pid_of(WORKER)
        for pid in {torchrun} | descendants(torchrun):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        run.pid_of(WORKER, after=1)  # recreated
        finished = run.finish(300)
    assert finished.returncode == 0, "\n".join(finished.stdout[-60:] + finished.stderr)
    assert f"torchjob: {WORKER} exited with exit code 137" in finished.stderr
    assert finished.status["backoffCount"] == 1
    assert finished.status["tasks"][0]["restartCount"] == 1
    assert finished.condition("Completed")["reason"] == "MasterSucceeded"
    master = finished.replica_lines(MASTER)
    # torchrun on the master restarted its workers, which met the new replica and resumed.
    started = [line for line in master if line.startswith("training on 4 process(es)")]
    assert len(started) == 2, master
    assert any(
        re.match(r"resumed from epoch [1-9]\d* \(checkpoint of rank \d+\)$", line)
        for line in master
    ), master
    metrics = json.loads((tmp_path / "runs" / "metrics.json").read_text())
    assert metrics["test_accuracy"] >= 0.95
    assert finished.status["trainerStatus"]["progressPercentage"] == 100
