"""Kubeflow Trainer's own clients, unmodified, report progress to `torchjob run`: a tiny Hugging
Face Trainer run (examples/mnist-ddp/hf_trainer.py, whose Kubeflow callback registers itself)
and a loop calling the Kubeflow SDK's `update_trainjob_status` (examples/mnist-ddp/sdk_loop.py).
The run prints their reports and keeps the last one in status.yaml."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from support.cli import EXAMPLE, Finished, process, run_to_end
from support.jobs import JobBuilder


def one_replica(name: str, script: str, *args: str) -> dict[str, Any]:
    """A job of one replica running an example script with this environment's python."""
    container = process([str(EXAMPLE / script), *args], ["python"])
    job = JobBuilder(name).replicas("worker", 1, container=container, restartPolicy="Never")
    return job.build()


def reported(finished: Finished) -> dict[str, str]:
    return {m["name"]: m["value"] for m in finished.status["trainerStatus"].get("metrics") or []}


def progress_lines(finished: Finished) -> list[str]:
    return [line for line in finished.stderr if line.startswith("torchjob: progress ")]


def test_a_hugging_face_trainer_reports_its_progress(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Nothing comes from the hub: offline, and with a cache of its own that starts empty.
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    manifest = one_replica("hf", "hf_trainer.py", "--output_dir", str(tmp_path / "out"))
    finished = run_to_end(manifest, tmp_path, timeout=600)
    assert finished.returncode == 0, "\n".join(finished.stdout[-40:] + finished.stderr)
    printed = finished.replica_lines("hf-worker-0")
    assert any(line.startswith("trained 30 steps") for line in printed), printed

    status = finished.status["trainerStatus"]
    assert status["progressPercentage"] == 100
    assert status["estimatedRemainingSeconds"] == 0
    metrics = reported(finished)
    assert float(metrics["train_loss"]) > 0
    assert "loss" in metrics
    lines = progress_lines(finished)
    # The callback's first report (training begins) and its last (training ended).
    assert lines[0].startswith("torchjob: progress 0%"), lines
    assert lines[-1].startswith("torchjob: progress 100% · eta 0s · "), lines


def test_a_loop_calling_the_kubeflow_sdk_reports_its_progress(tmp_path: Path) -> None:
    finished = run_to_end(one_replica("sdk", "sdk_loop.py"), tmp_path)
    assert finished.returncode == 0, "\n".join(finished.stdout[-40:] + finished.stderr)
    steps = finished.replica_lines("sdk-worker-0")
    sent = [line for line in steps if line.endswith("reported True")]
    # The SDK's throttle let some through, the first and the last among them.
    assert len(sent) >= 2 and steps[0] == sent[0] and steps[-1] == sent[-1], steps
    assert steps[-1].startswith("step 10/10 ")

    status = finished.status["trainerStatus"]
    assert status["progressPercentage"] == 100
    assert status["estimatedRemainingSeconds"] == 0
    assert reported(finished) == {"loss": "0.1642", "step": "10"}
    lines = progress_lines(finished)
    assert len(lines) >= 2, lines
    assert lines[0].startswith("torchjob: progress 10% · eta "), lines
    assert lines[-1] == "torchjob: progress 100% · eta 0s · loss=0.1642 · step=10"
