"""`torchjob run` of a Kubeflow Trainer TrainJob with its training runtime in the same file: its
nodes run here as processes, with torchrun's environment as Trainer sets it, and its status shows
Trainer's conditions. Without the runtime it is refused, saying what to add."""

from __future__ import annotations

import copy
import subprocess
from pathlib import Path

import yaml
from support.cli import TORCHJOB
from support.trainer import TORCH_RUNTIME, TRAIN_JOB

# Each node says who it is; the first (whose success ends the job, as a master's does) waits
# until the second has said so, through the file system the local processes share.
SAYS = """
import os, pathlib, sys, time
rank, done = os.environ["PET_NODE_RANK"], pathlib.Path(sys.argv[1])
print("node", rank, "of", os.environ["PET_NNODES"], flush=True)
if rank == "1":
    done.touch()
while not done.exists():
    time.sleep(0.05)
"""


def run(
    tmp_path: Path, *documents: dict[str, object], dry_run: bool = False
) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump_all(documents))
    flags = ["--dry-run"] if dry_run else ["--logs", str(tmp_path / "logs")]
    return subprocess.run(
        [str(TORCHJOB), "run", *flags, str(path)], capture_output=True, text=True, timeout=120
    )


def trainjob(done: Path = Path("/nonexistent")) -> dict[str, object]:
    job = copy.deepcopy(TRAIN_JOB)
    job["metadata"] = {"name": "local"}
    command = ["python", "-c", SAYS, str(done)]
    job["spec"]["trainer"] = {"image": "i", "command": command, "numNodes": 2}
    return job


def test_a_trainjob_runs_its_nodes_here_from_the_runtime_in_its_file(tmp_path: Path) -> None:
    done = run(tmp_path, TORCH_RUNTIME, trainjob(tmp_path / "node-1-said"))
    assert done.returncode == 0, done.stderr
    printed = done.stdout + done.stderr
    assert "node 0 of 2" in printed and "node 1 of 2" in printed, printed


def test_the_dry_run_shows_each_nodes_pod_with_torchruns_environment(tmp_path: Path) -> None:
    done = run(tmp_path, trainjob(), TORCH_RUNTIME, dry_run=True)
    assert done.returncode == 0, done.stderr
    documents = list(yaml.safe_load_all(done.stdout))
    pods = [d for d in documents if d["kind"] == "Pod"]
    assert [p["metadata"]["name"] for p in pods] == ["local-node-0", "local-node-1"]
    env = {e["name"]: e.get("value") for e in pods[1]["spec"]["containers"][0]["env"]}
    assert (env["PET_NNODES"], env["PET_NODE_RANK"]) == ("2", "1")


def test_a_trainjob_without_its_runtime_is_refused_saying_what_to_add(tmp_path: Path) -> None:
    done = run(tmp_path, trainjob())
    assert done.returncode == 2
    assert "spec.runtimeRef: ClusterTrainingRuntime torch-distributed is not in" in done.stderr
    assert "add the runtime as another document of the file" in done.stderr
