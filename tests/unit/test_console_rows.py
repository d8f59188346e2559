"""What the console's list and job page show of a job."""

from __future__ import annotations

from typing import Any

from torchjob.console.rows import job_row, matches, pending_reason, torchrun_line


def job(**status: Any) -> dict[str, Any]:
    container = {
        "name": "python",
        "image": "trainer:1",
        "args": ["train.py", "--epochs", "3"],
        "resources": {"limits": {"nvidia.com/gpu": 2}},
    }
    return {
        "metadata": {"name": "mnist", "uid": "u-1", "creationTimestamp": "2026-01-01T00:00:00Z"},
        "spec": {
            "torchrunConfig": {"enabled": True, "procPerNode": "2"},
            "replicaSpecs": [
                {"type": "worker", "replicas": 3, "template": {"spec": {"containers": [container]}}}
            ],
        },
        "status": status,
    }


def test_a_row_has_the_lists_columns() -> None:
    row = job_row(
        job(
            phase="Running",
            aggregate={"running": 2},
            backoffCount=1,
            trainerStatus={"progressPercentage": 40},
        )
    )
    assert (row.name, row.phase, row.running, row.replicas, row.restarts) == (
        "mnist",
        "Running",
        2,
        3,
        1,
    )
    assert (row.gpus, row.progress, row.progress_value, row.dom_id) == ("6", "40%", 40, "job-u-1")


def test_a_start_failure_shows_in_place_of_the_phase_and_says_why_the_job_waits() -> None:
    failing = job(
        phase="Pending",
        conditions=[
            {
                "type": "StartFailure",
                "status": "True",
                "reason": "ImagePullFailed",
                "message": "worker-0: ErrImagePull",
            }
        ],
    )
    assert job_row(failing).phase == "ImagePullFailed"
    assert pending_reason(failing) == "ImagePullFailed: worker-0: ErrImagePull"
    assert pending_reason(job(phase="Running")) == ""


def test_filters_match_phase_and_part_of_the_name() -> None:
    row = job_row(job(phase="Running"))
    assert matches(row, "", "") and matches(row, "Running", "MNI")
    assert not matches(row, "Failed", "") and not matches(row, "", "cifar")


def test_the_torchrun_line_is_built_from_the_spec() -> None:
    assert torchrun_line(job()) == "torchrun --nproc-per-node=2 train.py --epochs 3"
    plain = job()
    plain["spec"]["torchrunConfig"] = {}
    assert torchrun_line(plain) == ""


def test_a_kubeflow_pytorchjob_shows_its_latest_condition_as_its_phase() -> None:
    kubeflow = {
        "kind": "PyTorchJob",
        "metadata": {"name": "kf", "uid": "u-2"},
        "spec": {"pytorchReplicaSpecs": {}},
        "status": {
            "conditions": [
                {"type": "Created", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"},
                {"type": "Running", "status": "True", "lastTransitionTime": "2026-01-01T00:01:00Z"},
            ]
        },
    }
    assert job_row(kubeflow).phase == "Running"
    kubeflow["status"] = {}
    assert job_row(kubeflow).phase == "Created"
