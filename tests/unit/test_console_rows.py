"""What the console's list and job page show of a job."""

from __future__ import annotations

import copy
import datetime
from typing import Any

import pytest
from support.trainer import TRAIN_JOB as TRAIN_JOB_MANIFEST
from support.trainer import started
from support.webhook import KUBEFLOW_JOB as KUBEFLOW_MANIFEST

from torchjob.api.constants import LABEL_REPLICA_INDEX, LABEL_REPLICA_TYPE
from torchjob.api.job_api import KUBEFLOW_JOB, TRAIN_JOB, TRAINING_JOB
from torchjob.api.types import JOB_PHASE_VALUES
from torchjob.views.console.rows import (
    PHASES,
    command_line,
    job_row,
    kubelet_messages,
    matches,
    pending_reason,
    replica_choices,
)


def job(**status: Any) -> dict[str, Any]:
    container = {
        "name": "python",
        "image": "trainer:1",
        "args": ["train.py", "--epochs", "3"],
        "resources": {"limits": {"nvidia.com/gpu": 2}},
    }
    return {
        "metadata": {
            "name": "mnist",
            "namespace": "ns",
            "uid": "u-1",
            "creationTimestamp": "2026-01-01T00:00:00Z",
        },
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


def test_the_command_is_the_one_the_rewritten_pods_run() -> None:
    words = command_line(job()).split()
    assert words[0] == "torchrun" and words[-3:] == ["train.py", "--epochs", "3"]
    assert {"--nnodes=3", "--nproc-per-node=2", "--rdzv-id=u-1"} <= set(words)
    assert any(word.startswith("--rdzv-endpoint=mnist-worker-0") for word in words)
    aliased = job()
    aliased["spec"]["torchrunConfig"] = {"enable": True, "procPerNode": "2"}
    assert command_line(aliased) == command_line(job())  # the alias means what `enabled` does
    plain = job()
    plain["spec"]["torchrunConfig"] = {}
    container = plain["spec"]["replicaSpecs"][0]["template"]["spec"]["containers"][0]
    container["command"] = ["python"]
    assert command_line(plain) == "python train.py --epochs 3"
    container["args"] = ["train.py", "two words"]
    assert command_line(plain) == "python train.py 'two words'"
    assert command_line({"metadata": {"name": "empty"}, "spec": {}}) == ""


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


NOW = datetime.datetime(2026, 1, 1, 1, 0, tzinfo=datetime.UTC)


def test_a_row_says_when_the_job_started_finished_and_how_long_it_ran() -> None:
    running = job_row(job(phase="Running", startTime="2026-01-01T00:10:00Z"), NOW)
    assert (running.started, running.finished_at, running.duration) == (
        "2026-01-01T00:10:00Z",
        "",
        "50m",
    )
    done = job_row(
        job(
            phase="Succeeded",
            startTime="2026-01-01T00:10:00Z",
            completionTime="2026-01-01T00:12:30Z",
        ),
        NOW,
    )
    assert (done.finished_at, done.duration) == ("2026-01-01T00:12:30Z", "2m30s")
    assert job_row(job(phase="Pending"), NOW).duration == ""


@pytest.mark.parametrize(
    ("phase", "paused", "report", "shown"),
    [
        ("Running", False, {"progressPercentage": 40, "estimatedRemainingSeconds": 130}, "2m10s"),
        ("Running", True, {"progressPercentage": 40, "estimatedRemainingSeconds": 130}, ""),
        ("Paused", True, {"progressPercentage": 40, "estimatedRemainingSeconds": 130}, ""),
        ("Resuming", False, {"progressPercentage": 40, "estimatedRemainingSeconds": 130}, ""),
        ("Succeeded", False, {"progressPercentage": 100, "estimatedRemainingSeconds": 0}, ""),
        ("Running", False, {"progressPercentage": 100, "estimatedRemainingSeconds": 0}, ""),
        ("Running", False, {"progressPercentage": 99, "estimatedRemainingSeconds": 0}, ""),
        ("Running", False, {"progressPercentage": 40}, ""),
    ],
)
def test_the_eta_is_shown_only_while_it_means_something(
    phase: str, paused: bool, report: dict[str, Any], shown: str
) -> None:
    subject = job(phase=phase, trainerStatus=report)
    subject["spec"]["runMode"] = {"pause": {"enabled": paused}}
    assert job_row(subject, NOW).eta == shown


def test_pause_is_offered_only_while_replicas_run() -> None:
    assert job_row(job(phase="Running")).pausable
    for phase in ("Pending", "Resuming", "Paused", "Succeeded", "Failed"):
        assert not job_row(job(phase=phase)).pausable, phase
    failing = job(phase="Pending", startTime="2026-01-01T00:10:00Z")
    assert not job_row(failing).pausable  # its pods exist but never ran
    pausing = job(phase="Running")
    pausing["spec"]["runMode"] = {"pause": {"enabled": True}}
    assert job_row(pausing).paused and not job_row(pausing).pausable


def test_a_kubeflow_pytorchjob_pauses_by_its_run_policy_and_is_read_by_its_record() -> None:
    kubeflow = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": "kf", "uid": "u-2"},
        "spec": {"pytorchReplicaSpecs": {}, "runPolicy": {"suspend": True}},
        "status": {"torchjob": {"phase": "Running", "startTime": "2026-01-01T00:00:00Z"}},
    }
    row = job_row(kubeflow, NOW)
    assert row.paused and not row.pausable


def test_the_phase_filter_offers_every_phase_the_list_can_show() -> None:
    for api, phases in PHASES.items():
        assert "ImagePullFailed" in phases and "Unschedulable" in phases, api
    assert set(JOB_PHASE_VALUES) <= set(PHASES[TRAINING_JOB])
    assert {"Created", "Running", "Suspended", "Succeeded"} <= set(PHASES[KUBEFLOW_JOB])


def test_the_kubelets_messages_are_whole() -> None:
    cause = "rpc error: code = NotFound desc = failed to resolve reference " + "x" * 300
    pod = {
        "metadata": {"name": "j-worker-0"},
        "status": {
            "containerStatuses": [
                {
                    "name": "pytorch",
                    "state": {"waiting": {"reason": "ErrImagePull", "message": cause}},
                }
            ]
        },
    }
    quiet = {"metadata": {"name": "j-worker-1"}, "status": {"containerStatuses": []}}
    assert kubelet_messages([quiet, pod]) == [("j-worker-0", f"pytorch: {cause}")]


def test_a_log_pages_replicas_are_in_rank_order() -> None:
    def pod(name: str, kind: str, index: str) -> dict[str, Any]:
        labels = {LABEL_REPLICA_TYPE: kind, LABEL_REPLICA_INDEX: index}
        return {"metadata": {"name": name, "labels": labels}}

    pods = [pod("j-worker-10", "worker", "10"), pod("j-worker-2", "worker", "2")]
    pods.append(pod("j-master-0", "master", "0"))
    assert replica_choices(pods) == [
        ("j-master-0", "master-0"),
        ("j-worker-2", "worker-2"),
        ("j-worker-10", "worker-10"),
    ]
    assert replica_choices([{"metadata": {"name": "bare"}}]) == [("bare", "bare")]


def test_a_kubeflow_pytorchjob_shows_its_pytorch_containers_command() -> None:
    pytorchjob = copy.deepcopy(KUBEFLOW_MANIFEST)
    master = pytorchjob["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]
    master["containers"].reverse()  # the training container is Kubeflow's `pytorch`, not the first
    master["containers"][1]["args"] = ["--epochs", "3"]
    assert command_line(pytorchjob) == "python3 t.py --epochs 3"


def test_a_trainjob_shows_its_state_pause_and_nodes_command_from_its_runtime() -> None:
    trainjob = started(TRAIN_JOB_MANIFEST)
    assert job_row(trainjob, NOW).phase == "Created"  # no condition yet, as the SDK says
    assert command_line(trainjob) == "torchrun t.py"
    trainjob["spec"]["suspend"] = True
    trainjob["status"]["torchjob"].update(phase="Running", startTime="2026-01-01T00:00:00Z")
    assert job_row(trainjob, NOW).paused
    complete = {"type": "Complete", "status": "True", "reason": "AllJobsCompleted"}
    trainjob["status"]["conditions"] = [{**complete, "lastTransitionTime": "2026-01-01T00:30:00Z"}]
    assert job_row(trainjob, NOW).phase == "Complete"
    assert {"Created", "Suspended", "Complete", "Failed"} <= set(PHASES[TRAIN_JOB])
