"""Self-healing for Kubeflow's PyTorchJob, as for a PyTorchTrainingJob: gang restarts and their
default restart scope, the progress deadline read from the PyTorchJob's own `trainerStatus`, start
failures, the NCCL setting in Kubeflow's environment, and the three annotations' admission. Each
round goes the way the reconciler takes: the stored PyTorchJob, the job `as_run` makes of it, the
plan, the status Kubeflow shows (render/kubeflow.py), merged into what is stored."""

from __future__ import annotations

import copy
from dataclasses import replace
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from support.planning import NOW, gone, replica_pod, services

from torchjob.api import constants
from torchjob.api.job_api import KUBEFLOW_JOB
from torchjob.api.jsoncopy import merge_patched
from torchjob.api.kubeflow import STATUS_RECORD, as_run, as_training_job
from torchjob.api.kubeflow_admission import default_pytorchjob, validate_pytorchjob
from torchjob.api.types import PyTorchTrainingJob, PyTorchTrainingJobSpec
from torchjob.lifecycle.backoff import RestartRules
from torchjob.lifecycle.observe import CannotStart, ContainerView, PodView
from torchjob.lifecycle.plan import Plan, plan
from torchjob.lifecycle.round import Observed
from torchjob.lifecycle.times import format_time
from torchjob.render import environment
from torchjob.render.job_kinds import kind_of
from torchjob.render.kubeflow import kubeflow_env, kubeflow_status
from torchjob.render.pod_rewrite import rewrite_kubeflow_pod
from torchjob.render.topology import Replica

ROOT = Path(__file__).resolve().parents[2]
KEYS = (("master", 0), ("worker", 0), ("worker", 1))
ALL = sorted((f"j-{kind}-{index}", f"uid-{kind}-{index}") for kind, index in KEYS)
STARTED = NOW - timedelta(hours=2)
NCCL = "TORCH_NCCL_ASYNC_ERROR_HANDLING"


def pytorchjob(
    policy: str = "OnFailure", annotations: dict[str, str] | None = None, **spec: Any
) -> dict[str, Any]:
    """A PyTorchJob `j`: a Master and two Workers restarted by `policy`, backoffLimit 3."""
    replica = {
        "restartPolicy": policy,
        "template": {"spec": {"containers": [{"name": "pytorch", "image": "i"}]}},
    }
    meta: dict[str, Any] = {"name": "j", "namespace": "ns", "uid": "job-uid", "generation": 1}
    if annotations:
        meta["annotations"] = annotations
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": meta,
        "spec": {
            "pytorchReplicaSpecs": {
                "Master": {"replicas": 1, **replica},
                "Worker": {"replicas": 2, **replica},
            },
            "runPolicy": {"backoffLimit": 3},
            **spec,
        },
    }


def pod(kind: str, index: int, phase: Any = "Running", **fields: Any) -> PodView:
    started = STARTED if phase == "Running" else None
    return replica_pod(kind, index, phase, **{"containers": (), "running_since": started, **fields})


def gang(**worker0: Any) -> list[PodView]:
    """The job's three pods running; worker-0 with the fields `worker0`."""
    pods = [pod(kind, index) for kind, index in KEYS]
    pods[1] = replace(pods[1], **worker0)
    return pods


FAILED_WORKER = {
    "phase": "Failed",
    "exit_code": 1,
    "containers": (ContainerView("pytorch", "terminated", 1, "Error"),),
    "finished_at": NOW - timedelta(minutes=10),
    "running_since": None,
}


def reconcile(job: dict[str, Any], pods: list[PodView], now: datetime = NOW, **rules: Any) -> Plan:
    """One round of the reconciler on the stored PyTorchJob `job`, whose status it moves on to
    what the round writes."""
    run = as_run(job)
    assert run is not None
    typed = PyTorchTrainingJobSpec.from_dict(run["spec"], "spec")
    observed = Observed.of_json(run["metadata"], typed, run["status"], pods, services(typed), now)
    decision = plan(observed, RestartRules(**rules))
    shown = kind_of(KUBEFLOW_JOB).shown_status(run, decision.status, format_time(now))
    job["status"] = merge_patched(job.get("status") or {}, shown)
    return decision


def kubeflow_conditions(job: dict[str, Any]) -> list[tuple[str, str, str]]:
    return [(c["type"], c["status"], c["reason"]) for c in job["status"]["conditions"]]


def last(job: dict[str, Any]) -> dict[str, Any]:
    """The last Kubeflow condition: the job's state, as `kubectl get` shows it."""
    condition: dict[str, Any] = job["status"]["conditions"][-1]
    return condition


def report(job: dict[str, Any], ago: timedelta) -> None:
    """The progress endpoint's write: the report at the top of the PyTorchJob's status."""
    job["status"]["trainerStatus"] = {
        "progressPercentage": 42,
        "metrics": [{"name": "loss", "value": "0.25"}],
        "lastUpdatedTime": format_time(NOW - ago),
    }


def running_job(**kwargs: Any) -> dict[str, Any]:
    job = pytorchjob(**kwargs)
    reconcile(job, gang())
    assert last(job)["type"] == "Running", job["status"]
    return job


# -- the progress deadline -----------------------------------------------------------------------


def test_the_planner_reads_the_pytorchjobs_own_progress_report() -> None:
    job = running_job()
    report(job, timedelta(minutes=1))
    run = as_run(job)
    assert run is not None
    assert run["status"]["trainerStatus"] == job["status"]["trainerStatus"]
    assert STATUS_RECORD not in run["status"]
    # Before the deadline the job is looked at again when it passes.
    assert reconcile(job, gang()).requeue_after == 1740


def test_a_silent_pytorchjob_is_restarted_as_a_gang_with_no_progress() -> None:
    job = running_job()
    report(job, timedelta(minutes=31))
    result = reconcile(job, gang())
    assert sorted(result.delete_pods) == ALL
    [event] = result.status_events
    assert (event.type, event.reason) == ("Warning", constants.REASON_NO_PROGRESS)
    assert "no progress reported for 31m" in event.message
    restarting = last(job)
    assert (restarting["type"], restarting["reason"]) == ("Restarting", "PyTorchJobRestarting")
    assert restarting["message"].startswith(
        "PyTorchJob j is restarting every replica together: no progress reported for 31m"
    )
    record = job["status"][STATUS_RECORD]
    assert (record["backoffCount"], record["gangRestarts"]) == (1, 1)
    assert record["gangRestartTimes"] == [format_time(NOW)]
    # The report stays the progress endpoint's: the reconciler's writes never carry it.
    assert job["status"]["trainerStatus"]["progressPercentage"] == 42
    assert "trainerStatus" not in record


def test_a_silent_pytorchjob_that_may_not_restart_fails_with_no_progress() -> None:
    job = running_job(policy="Never")
    report(job, timedelta(minutes=31))
    stopping = reconcile(job, gang())
    assert sorted(stopping.delete_pods) == ALL
    assert last(job)["type"] == "Running", "it says it failed once its pods have stopped"
    reconcile(job, gone(stopping, gang()))
    failed = last(job)
    assert (failed["type"], failed["status"], failed["reason"]) == (
        "Failed",
        "True",
        "PyTorchJobFailed",
    )
    assert failed["message"].startswith("PyTorchJob j has failed (NoProgress): no progress")
    record_failed = [c for c in job["status"][STATUS_RECORD]["conditions"] if c["type"] == "Failed"]
    assert record_failed[0]["reason"] == constants.REASON_NO_PROGRESS


def test_the_progress_deadline_annotation_of_a_pytorchjob_is_honoured() -> None:
    short = {constants.ANNOTATION_PROGRESS_DEADLINE: "60"}
    job = running_job(annotations=short)
    report(job, timedelta(minutes=2))
    assert sorted(reconcile(job, gang()).delete_pods) == ALL
    off = running_job(annotations={constants.ANNOTATION_PROGRESS_DEADLINE: "0"})
    report(off, timedelta(hours=1))
    assert reconcile(off, gang()).delete_pods == []


# -- gang restarts and the restart scope ---------------------------------------------------------


def test_a_failed_worker_restarts_every_replica_once_and_kubeflow_shows_restarting() -> None:
    job = running_job()
    result = reconcile(job, gang(**FAILED_WORKER))
    assert sorted(result.delete_pods) == ALL
    assert kubeflow_conditions(job)[-1] == ("Restarting", "True", "PyTorchJobRestarting")
    assert last(job)["message"].startswith(
        "PyTorchJob j is restarting every replica together: j-worker-0"
    )
    record = job["status"][STATUS_RECORD]
    assert (record["backoffCount"], record["gangRestarts"]) == (1, 1)
    # The old gang stopping: Restarting holds, and is not counted again.
    stopping = [replace(p, deleting=True) for p in gang(**FAILED_WORKER)]
    reconcile(job, stopping, NOW + timedelta(seconds=5))
    assert kubeflow_conditions(job)[-1] == ("Restarting", "True", "PyTorchJobRestarting")
    assert job["status"][STATUS_RECORD]["backoffCount"] == 1
    # The new gang runs: Running replaces Restarting.
    new_gang = [replace(p, uid=f"new-{p.uid}", gang_restarts=1) for p in gang()]
    reconcile(job, new_gang, NOW + timedelta(seconds=30))
    states = kubeflow_conditions(job)
    assert states[-1] == ("Running", "True", "PyTorchJobRunning")
    assert "Restarting" not in [kind for kind, _, _ in states]
    assert job["status"][STATUS_RECORD]["gangRestarts"] == 1


def test_an_elastic_pytorchjob_restarts_the_failed_worker_alone() -> None:
    """Its c10d rendezvous lets a restarted Worker rejoin: Replica scope by default."""
    elastic = {"minReplicas": 1, "maxReplicas": 2}
    job = running_job(elasticPolicy=elastic)
    result = reconcile(job, gang(**FAILED_WORKER))
    assert result.delete_pods == [("j-worker-0", "uid-worker-0")]
    assert "gangRestarts" not in job["status"][STATUS_RECORD]
    assert last(job)["message"] == "PyTorchJob j is restarting because 1 Worker replica(s) failed."
    # The PyTorchJob as stored is not changed.
    assert "annotations" not in job["metadata"]


@pytest.mark.parametrize(
    ("elastic", "scope", "deleted"),
    [
        (False, constants.RESTART_SCOPE_REPLICA, [("j-worker-0", "uid-worker-0")]),
        (True, constants.RESTART_SCOPE_GANG, ALL),
    ],
)
def test_the_restart_scope_annotation_wins(
    elastic: bool, scope: str, deleted: list[tuple[str, str]]
) -> None:
    spec = {"elasticPolicy": {"minReplicas": 1, "maxReplicas": 2}} if elastic else {}
    job = running_job(annotations={constants.ANNOTATION_RESTART_SCOPE: scope}, **spec)
    assert sorted(reconcile(job, gang(**FAILED_WORKER)).delete_pods) == deleted


def test_the_gang_restart_fields_are_in_the_pytorchjobs_schema() -> None:
    crd = yaml.safe_load((ROOT / "crds" / "kubeflow.org_pytorchjobs.yaml").read_text())
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    record = schema["properties"]["status"]["properties"][STATUS_RECORD]
    assert record["properties"]["gangRestarts"]["type"] == "integer"
    assert record["properties"]["gangRestartTimes"]["items"]["format"] == "date-time"


# -- start failures ------------------------------------------------------------------------------

PULL = CannotStart(
    "pytorch", constants.REASON_IMAGE_PULL_FAILED, "ImagePullBackOff", 'Back-off pulling "nope"'
)


def test_a_start_failure_has_no_kubeflow_condition_and_fails_the_job_at_its_deadline() -> None:
    job = pytorchjob()
    pending = [pod(kind, index, "Pending", bound=True) for kind, index in KEYS]
    pending[2] = replace(pending[2], cannot_start=PULL)
    result = reconcile(job, pending, NOW - timedelta(seconds=700))
    [event] = [e for e in result.status_events if e.reason == constants.REASON_IMAGE_PULL_FAILED]
    assert event.type == "Warning" and "j-worker-1" in event.message
    # The record shows it; Kubeflow's conditions stay Kubeflow's (the last is the job's state).
    record = {c["type"]: c for c in job["status"][STATUS_RECORD]["conditions"]}
    assert record["StartFailure"]["reason"] == constants.REASON_IMAGE_PULL_FAILED
    assert kubeflow_conditions(job) == [("Created", "True", "PyTorchJobCreated")]
    # Past the start deadline (600s) the job fails: Kubeflow's Failed, naming our reason, once
    # its pods are gone.
    stopping = reconcile(job, pending, NOW)
    assert sorted(stopping.delete_pods) == ALL
    reconcile(job, gone(stopping, pending), NOW)
    failed = last(job)
    assert (failed["type"], failed["reason"]) == ("Failed", "PyTorchJobFailed")
    assert failed["message"].startswith("PyTorchJob j has failed (ImagePullFailed): ")
    assert job["status"]["completionTime"] == format_time(NOW)


@pytest.mark.parametrize(
    "reason",
    [
        constants.REASON_IMAGE_PULL_FAILED,
        constants.REASON_CONTAINER_CONFIG_INVALID,
        constants.REASON_UNSCHEDULABLE,
        constants.REASON_GANG_RESTART_LIMIT_EXCEEDED,
        constants.REASON_NO_PROGRESS,
    ],
)
def test_our_failures_are_kubeflows_failed_naming_our_reason(reason: str) -> None:
    failed = {"type": "Failed", "status": "True", "reason": reason, "message": "why"}
    record = {"phase": "Failed", "tasks": [], "conditions": [failed]}
    status = kubeflow_status("j", {}, record, format_time(NOW), pytorchjob()["spec"])
    assert (status["conditions"][-1]["type"], status["conditions"][-1]["reason"]) == (
        "Failed",
        "PyTorchJobFailed",
    )
    assert status["conditions"][-1]["message"] == f"PyTorchJob j has failed ({reason}): why"


@pytest.mark.parametrize(
    ("reason", "message", "shown"),
    [
        (
            constants.REASON_GANG_RESTARTING,
            "restarting every replica together: j-worker-0 failed",
            "PyTorchJob j is restarting every replica together: j-worker-0 failed",
        ),
        (
            constants.REASON_NO_PROGRESS,
            "no progress reported for 31m",
            "PyTorchJob j is restarting every replica together: no progress reported for 31m",
        ),
        (constants.REASON_POD_CREATION_FAILED, "refused", ""),
    ],
)
def test_the_restarting_condition_of_a_gang_restart(reason: str, message: str, shown: str) -> None:
    """A gang restart is Kubeflow's Restarting whatever the replicas' phases say while the gang
    stops; a refused creation is no restart."""
    failure = {"type": "ReplicaFailure", "status": "True", "reason": reason, "message": message}
    record = {"phase": "Running", "tasks": [], "conditions": [failure]}
    status = kubeflow_status("j", {}, record, format_time(NOW), pytorchjob()["spec"])
    restarting = [c for c in status["conditions"] if c["type"] == "Restarting"]
    assert [c["message"] for c in restarting] == ([shown] if shown else [])


# -- the NCCL setting ----------------------------------------------------------------------------


def test_every_pytorchjob_container_gets_torchjobs_nccl_setting_from_its_one_home() -> None:
    for spec in (pytorchjob()["spec"], pytorchjob(elasticPolicy={"maxReplicas": 2})["spec"]):
        env = kubeflow_env(spec, "j", Replica("worker", 0, 1), constants.SERVICE_SCOPE_REPLICA)
        hang = [e for e in env if e["name"] == NCCL]
        assert hang == list(environment.HANG_EXITS)
        assert hang[0]["value"] == "3"


def test_the_users_own_nccl_setting_wins() -> None:
    job = pytorchjob()
    own = {"name": NCCL, "value": "1"}
    containers = job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"]
    containers[0]["env"] = [own]
    containers.append({"name": "sidecar", "image": "s"})
    run = as_training_job(job)
    typed = PyTorchTrainingJob.from_dict(
        {k: run[k] for k in ("apiVersion", "kind", "metadata", "spec")}
    )
    labels = {constants.LABEL_REPLICA_TYPE: "worker", constants.LABEL_REPLICA_INDEX: "0"}
    raw = {
        "metadata": {"name": "j-worker-0", "labels": labels},
        "spec": copy.deepcopy(job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]),
    }
    rewritten = rewrite_kubeflow_pod(typed, job["spec"], raw).pod
    pytorch, sidecar = rewritten["spec"]["containers"]
    assert [e["value"] for e in pytorch["env"] if e["name"] == NCCL] == ["1"]
    assert [e["value"] for e in sidecar["env"] if e["name"] == NCCL] == ["3"]


# -- admission of the annotations ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("annotation", "value"),
    [
        (constants.ANNOTATION_RESTART_SCOPE, "gang"),
        (constants.ANNOTATION_PROGRESS_DEADLINE, "30m"),
        (constants.ANNOTATION_PROGRESS_DEADLINE, "-1"),
        (constants.ANNOTATION_START_DEADLINE, "ten"),
    ],
)
def test_a_pytorchjob_with_a_bad_annotation_is_refused_naming_it(
    annotation: str, value: str
) -> None:
    job, _ = default_pytorchjob(pytorchjob(annotations={annotation: value}))
    errors = validate_pytorchjob(job).errors
    assert [e.path for e in errors] == [f"metadata.annotations[{annotation}]"]
    assert repr(value) in errors[0].message


def test_a_pytorchjob_with_good_annotations_is_admitted() -> None:
    annotations = {
        constants.ANNOTATION_RESTART_SCOPE: constants.RESTART_SCOPE_GANG,
        constants.ANNOTATION_PROGRESS_DEADLINE: "0",
        constants.ANNOTATION_START_DEADLINE: "900",
    }
    elastic: dict[str, Any] = {"elasticPolicy": {"minReplicas": 1, "maxReplicas": 2}}
    for spec in ({}, elastic):
        job, _ = default_pytorchjob(pytorchjob(annotations=annotations, **spec))
        assert validate_pytorchjob(job).errors == []
