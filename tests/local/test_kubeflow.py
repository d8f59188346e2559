"""A Kubeflow PyTorchJob of one Master and one Worker run by `torchjob run`: the example's training
script (examples/mnist-ddp) with the command its image runs (`python train.py`), which joins the
process group through the environment Kubeflow gives every container (MASTER_ADDR
`<job>-master-0`, mapped to this machine, MASTER_PORT, RANK, WORLD_SIZE). It trains for real to
Succeeded, and the status printed and written is Kubeflow's."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from support.cli import EXAMPLE, run_to_end

JOB = "mnist-kf"


def pytorchjob(tmp: Path, epochs: int) -> dict[str, Any]:
    """1 Master + 1 Worker, each the example's container command with fewer epochs, the script by
    its absolute path (the test runs elsewhere) and the logs under `tmp`."""

    def replica() -> dict[str, Any]:
        container = {
            "name": "pytorch",
            "image": "localhost/torchjob/mnist-ddp:0.1.0",
            # The image's CMD, `python train.py`, with the example's arguments.
            "command": ["python", str(EXAMPLE / "train.py")],
            "args": ["--epochs", str(epochs), "--log_dir", str(tmp / "runs")],
        }
        return {
            "replicas": 1,
            "restartPolicy": "OnFailure",
            "template": {"spec": {"containers": [container]}},
        }

    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": JOB},
        "spec": {"pytorchReplicaSpecs": {"Master": replica(), "Worker": replica()}},
    }


def test_a_pytorchjob_of_a_master_and_a_worker_trains_to_succeeded(tmp_path: Path) -> None:
    finished = run_to_end(pytorchjob(tmp_path, epochs=1), tmp_path, timeout=180)
    assert finished.returncode == 0, "\n".join(finished.stdout[-40:] + finished.stderr)
    master = finished.replica_lines(f"{JOB}-master-0")
    assert any(line.startswith("training on 2 process(es)") for line in master), master
    metrics = json.loads((tmp_path / "runs" / "metrics.json").read_text())
    assert metrics["world_size"] == 2

    status = finished.status  # logs/status.yaml, as Kubeflow shows the PyTorchJob's status
    assert [(c["type"], c["status"], c["reason"]) for c in status["conditions"]] == [
        ("Created", "True", "PyTorchJobCreated"),
        ("Running", "False", "PyTorchJobRunning"),
        ("Succeeded", "True", "PyTorchJobSucceeded"),
    ]
    assert status["replicaStatuses"]["Master"]["succeeded"] == 1
    # The master's success ends the job: a worker that has not exited by then (its processes
    # leave the process group a moment after rank 0's) is stopped before the job says so.
    assert set(status["replicaStatuses"]) == {"Master", "Worker"}
    assert status["replicaStatuses"]["Worker"]["selector"] == (
        f"training.kubeflow.org/job-name={JOB},"
        "training.kubeflow.org/operator-name=pytorchjob-controller,"
        "training.kubeflow.org/replica-type=worker"
    )
    assert "startTime" in status and "completionTime" in status
    assert (
        f"torchjob: job PyTorchJob:default/{JOB}: Succeeded (PyTorchJobSucceeded: PyTorchJob "
        f"{JOB} is successfully completed.)"
    ) in finished.stderr
