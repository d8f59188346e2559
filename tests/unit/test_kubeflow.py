"""Kubeflow's PyTorchJob run as a PyTorchTrainingJob: the translation of its spec, and what its
users see as Kubeflow shows it: labels, the environment of every container and the status."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from torchjob.api import constants
from torchjob.api.job_api import KUBEFLOW_JOB, TRAINING_JOB, api_of
from torchjob.api.jsoncopy import merge_patched
from torchjob.api.kubeflow import (
    KUBEFLOW_SPEC,
    KUBEFLOW_STATUS,
    UNLIMITED_BACKOFF,
    as_training_job,
    kubeflow_path,
    managed_elsewhere,
    scheduling_policy,
    training_spec,
)
from torchjob.api.types import PyTorchTrainingJobSpec
from torchjob.kube.reconcile import JobKey
from torchjob.kube.resources import owner_job_key
from torchjob.render.kubeflow import (
    autoscaler_differs,
    kubeflow_env,
    kubeflow_status,
    render_autoscaler,
    replica_statuses,
    set_condition,
)
from torchjob.render.replica_objects import render_pod, render_service
from torchjob.render.scheduling import Gang, render_pod_group, with_scheduling_policy
from torchjob.render.topology import Replica, replicas_of

NOW = "2026-01-01T00:00:00Z"
LATER = "2026-01-01T00:01:00Z"


def container(name: str = "pytorch", **fields: Any) -> dict[str, Any]:
    return {"name": name, "image": "example", **fields}


def replica(count: int = 1, policy: str = "OnFailure", **pod: Any) -> dict[str, Any]:
    return {
        "replicas": count,
        "restartPolicy": policy,
        "template": {"spec": {"containers": [container()], **pod}},
    }


def pytorchjob(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": "simple", "namespace": "ns", "uid": "u1"},
        "spec": {"pytorchReplicaSpecs": {"Master": replica(), "Worker": replica(2)}, **spec},
    }


# The spec of the job whose status the status tests render: a Master, two Workers, OnFailure.
SPEC = pytorchjob()["spec"]


# -- the spec ------------------------------------------------------------------------------------


def test_replica_specs_become_master_and_worker_in_rank_order() -> None:
    spec = training_spec(
        {"pytorchReplicaSpecs": {"Worker": replica(2, "ExitCode"), "Master": replica()}}
    )
    kinds = [(r["type"], r["replicas"], r["restartPolicy"]) for r in spec["replicaSpecs"]]
    assert kinds == [("master", 1, "OnFailure"), ("worker", 2, "ExitCode")]
    typed = PyTorchTrainingJobSpec.from_dict(spec, "spec")
    names = [(r.type, r.index, r.rank) for r in replicas_of(typed)]
    assert names == [("master", 0, 0), ("worker", 0, 1), ("worker", 1, 2)]


def test_run_policy_fields_map_to_ours() -> None:
    spec = training_spec(
        {
            "pytorchReplicaSpecs": {"Worker": replica()},
            "runPolicy": {
                "cleanPodPolicy": "Running",
                "backoffLimit": 2,
                "activeDeadlineSeconds": 60,
                "ttlSecondsAfterFinished": 30,
                "suspend": True,
            },
        }
    )
    assert spec["runPolicy"] == {
        "cleanUpPolicy": "Unfinished",
        "backoffLimit": 2,
        "activeDeadlineSeconds": 60,
        "ttlSecondsAfterFinished": 30,
    }
    assert spec["runMode"] == {"pause": {"enabled": True}}


@pytest.mark.parametrize(("kubeflow", "ours"), [("All", "All"), ("None", "None")])
def test_clean_pod_policies(kubeflow: str, ours: str) -> None:
    spec = training_spec({"pytorchReplicaSpecs": {}, "runPolicy": {"cleanPodPolicy": kubeflow}})
    assert spec["runPolicy"]["cleanUpPolicy"] == ours


def test_no_backoff_limit_means_no_limit_as_in_kubeflow() -> None:
    spec = training_spec({"pytorchReplicaSpecs": {"Worker": replica()}})
    assert spec["runPolicy"]["backoffLimit"] == UNLIMITED_BACKOFF
    assert "runMode" not in spec


def test_elastic_bounds_count_the_master_too() -> None:
    spec = training_spec(
        {
            "pytorchReplicaSpecs": {"Master": replica(), "Worker": replica(2)},
            "elasticPolicy": {"minReplicas": 1, "maxReplicas": 3},
        }
    )
    assert spec["elastic"] == {"enabled": True, "minReplicas": 2, "maxReplicas": 4}
    worker_only = training_spec(
        {"pytorchReplicaSpecs": {"Worker": replica(2)}, "elasticPolicy": {"maxReplicas": 3}}
    )
    assert worker_only["elastic"] == {"enabled": True, "maxReplicas": 3}


def test_the_job_keeps_its_identity_status_and_spec() -> None:
    job = pytorchjob()
    job["status"] = {"conditions": [{"type": "Created"}], "torchjob": {"backoffCount": 2}}
    run = as_training_job(job)
    assert api_of(run) is KUBEFLOW_JOB
    assert run["metadata"] is job["metadata"]
    assert run["status"] == {"backoffCount": 2}
    assert run[KUBEFLOW_STATUS] is job["status"]
    assert run[KUBEFLOW_SPEC] is job["spec"]


def test_paths_are_named_as_the_pytorchjob_writes_them() -> None:
    spec = {"pytorchReplicaSpecs": {"Worker": replica(), "Master": replica()}}
    assert (
        kubeflow_path("spec.replicaSpecs[0].template.spec", spec)
        == "spec.pytorchReplicaSpecs.Master.template.spec"
    )
    assert kubeflow_path("spec.replicaSpecs[1].replicas", spec) == (
        "spec.pytorchReplicaSpecs.Worker.replicas"
    )
    assert kubeflow_path("spec.runPolicy.cleanUpPolicy", spec) == "spec.runPolicy.cleanPodPolicy"
    assert kubeflow_path("spec.elastic.maxReplicas", spec) == "spec.elasticPolicy.maxReplicas"


def test_managed_by_another_controller() -> None:
    assert not managed_elsewhere(pytorchjob())
    assert not managed_elsewhere(
        pytorchjob(runPolicy={"managedBy": "kubeflow.org/training-operator"})
    )
    assert managed_elsewhere(pytorchjob(runPolicy={"managedBy": "kueue.x-k8s.io/multikueue"}))


# -- keys, labels, owners ------------------------------------------------------------------------


def test_keys_carry_the_kind() -> None:
    key = JobKey.of(pytorchjob())
    assert key == JobKey("ns", "simple", "PyTorchJob")
    assert key != JobKey("ns", "simple")
    assert str(key) == "PyTorchJob:ns/simple" and JobKey.parse(str(key)) == key
    assert str(JobKey("ns", "j")) == "ns/j" and JobKey.parse("ns/j") == JobKey("ns", "j")


def test_pods_carry_kubeflow_labels_and_owner() -> None:
    job = as_training_job(pytorchjob())
    spec = PyTorchTrainingJobSpec.from_dict(job["spec"], "spec")
    master, worker = Replica("master", 0, 0), Replica("worker", 1, 2)
    pod = render_pod(job["metadata"], spec, master, {}, None, KUBEFLOW_JOB)
    labels = pod["metadata"]["labels"]
    assert labels["training.kubeflow.org/job-name"] == "simple"
    assert labels["training.kubeflow.org/operator-name"] == "pytorchjob-controller"
    assert labels["training.kubeflow.org/replica-type"] == "master"
    assert labels["training.kubeflow.org/replica-index"] == "0"
    assert labels["training.kubeflow.org/job-role"] == "master"
    assert labels[constants.LABEL_JOB_NAME] == "simple"  # what the caches select on
    assert constants.LABEL_T9K_OWNER not in labels
    owner = pod["metadata"]["ownerReferences"][0]
    assert (owner["apiVersion"], owner["kind"]) == ("kubeflow.org/v1", "PyTorchJob")
    assert owner_job_key(pod) == JobKey("ns", "simple", "PyTorchJob")
    service = render_service(job["metadata"], worker, KUBEFLOW_JOB)
    assert service["metadata"]["name"] == "simple-worker-1"
    assert "training.kubeflow.org/job-role" not in service["metadata"]["labels"]
    assert service["spec"]["clusterIP"] == "None"
    ours = render_pod(job["metadata"], spec, master, {}, None, TRAINING_JOB)
    assert "training.kubeflow.org/job-name" not in ours["metadata"]["labels"]


# -- the environment -----------------------------------------------------------------------------


def env_of(
    spec: dict[str, Any],
    replica: Replica,
    name: str = "simple",
    scope: str = constants.SERVICE_SCOPE_REPLICA,
) -> dict[str, str]:
    pairs = [(e["name"], e["value"]) for e in kubeflow_env(spec, name, replica, scope)]
    assert len(pairs) == len(dict(pairs)) or spec.get("elasticPolicy"), pairs
    return dict(pairs)


def test_the_environment_with_a_master_in_kubeflows_order() -> None:
    spec = pytorchjob(nprocPerNode="2")["spec"]
    names = [
        e["name"]
        for e in kubeflow_env(
            spec, "simple", Replica("worker", 1, 2), constants.SERVICE_SCOPE_REPLICA
        )
    ]
    assert names == [
        "PYTHONUNBUFFERED",
        "MASTER_PORT",
        "PET_MASTER_PORT",
        "MASTER_ADDR",
        "PET_MASTER_ADDR",
        "WORLD_SIZE",
        "RANK",
        "PET_NPROC_PER_NODE",
        "PET_NODE_RANK",
        "PET_NNODES",
        "TORCH_NCCL_ASYNC_ERROR_HANDLING",
    ]
    env = env_of(spec, Replica("worker", 1, 2))
    assert env["MASTER_ADDR"] == env["PET_MASTER_ADDR"] == "simple-master-0"
    assert env["MASTER_PORT"] == "23456"
    assert env["WORLD_SIZE"] == "6"  # 3 replicas x nprocPerNode 2
    assert env["RANK"] == env["PET_NODE_RANK"] == "2"  # worker 1 after the master
    assert env["PET_NNODES"] == "3"
    assert env["PYTHONUNBUFFERED"] == "0"


def test_with_the_jobs_service_addresses_are_hostnames_under_it() -> None:
    job_scope = constants.SERVICE_SCOPE_JOB
    env = env_of(pytorchjob()["spec"], Replica("worker", 1, 2), scope=job_scope)
    assert env["MASTER_ADDR"] == env["PET_MASTER_ADDR"] == "simple-master-0.simple"
    elastic = {"pytorchReplicaSpecs": {"Worker": replica(2)}, "elasticPolicy": {"maxReplicas": 2}}
    env = env_of(elastic, Replica("worker", 1, 1), scope=job_scope)
    assert env["PET_RDZV_ENDPOINT"] == "simple-worker-0.simple:23456"


def test_a_named_master_port_is_the_master_port() -> None:
    spec = pytorchjob()["spec"]
    port = {"name": "pytorchjob-port", "containerPort": 29500}
    spec["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"] = [
        container(ports=[port])
    ]
    env = env_of(spec, Replica("master", 0, 0))
    assert env["MASTER_PORT"] == "29500" and env["RANK"] == "0"
    assert (
        env_of(pytorchjob(nprocPerNode="auto")["spec"], Replica("master", 0, 0))["WORLD_SIZE"]
        == "3"
    )


def test_worker_only_jobs_get_what_kubeflow_gives_them() -> None:
    spec = {"pytorchReplicaSpecs": {"Worker": replica(2)}}
    assert env_of(spec, Replica("worker", 1, 1)) == {
        "PYTHONUNBUFFERED": "0",
        "PET_NNODES": "2",
        "TORCH_NCCL_ASYNC_ERROR_HANDLING": "3",
    }


def test_elastic_rendezvous() -> None:
    spec: dict[str, Any] = {
        "pytorchReplicaSpecs": {"Worker": replica(2)},
        "elasticPolicy": {
            "minReplicas": 1,
            "maxReplicas": 4,
            "maxRestarts": 3,
            "rdzvId": "run-1",
            "rdzvConf": [{"key": "timeout", "value": "900"}, {"key": "a", "value": "b"}],
            "standalone": True,
        },
    }
    env = env_of(spec, Replica("worker", 0, 0))
    assert env["PET_RDZV_ENDPOINT"] == "simple-worker-0:23456"
    assert env["PET_RDZV_BACKEND"] == "c10d"
    assert env["PET_NNODES"] == "1:4"
    assert env["PET_MAX_RESTARTS"] == "3"
    assert env["PET_RDZV_ID"] == "run-1"
    assert env["PET_RDZV_CONF"] == "timeout=900,a=b"
    assert env["PET_STANDALONE"] == ""
    spec["elasticPolicy"] = {"rdzvHost": "etcd", "rdzvPort": 2379, "rdzvBackend": "etcd-v2"}
    env = env_of(spec, Replica("worker", 0, 0))
    assert env["PET_RDZV_ENDPOINT"] == "etcd:2379"
    assert env["PET_RDZV_BACKEND"] == "etcd-v2"
    assert env["PET_NNODES"] == "2"


# -- the status ----------------------------------------------------------------------------------


def record(phase: str, **fields: Any) -> dict[str, Any]:
    tasks = fields.pop("tasks", None) or [
        {"type": "master", "replicas": [{"name": "simple-master-0", "phase": "Running"}]},
        {
            "type": "worker",
            "replicas": [
                {"name": "simple-worker-0", "phase": "Running"},
                {"name": "simple-worker-1", "phase": "Running"},
            ],
        },
    ]
    return {"phase": phase, "tasks": tasks, "startTime": NOW, **fields}


def condition(
    kind: str, status: str = "True", reason: str = "", message: str = ""
) -> dict[str, Any]:
    return {"type": kind, "status": status, "reason": reason, "message": message}


def states(status: dict[str, Any]) -> list[tuple[str, str, str]]:
    return [(c["type"], c["status"], c["reason"]) for c in status["conditions"]]


def test_a_job_that_runs_and_succeeds() -> None:
    created = kubeflow_status("simple", {}, record("Pending"), NOW, SPEC)
    assert states(created) == [("Created", "True", "PyTorchJobCreated")]
    assert created["conditions"][0]["message"] == "PyTorchJob simple is created."
    assert created["startTime"] == NOW and created["torchjob"]["phase"] == "Pending"
    running = kubeflow_status("simple", created, record("Running"), LATER, SPEC)
    assert states(running)[-1] == ("Running", "True", "PyTorchJobRunning")
    assert running["conditions"][0]["lastTransitionTime"] == NOW  # Created is untouched
    done = record("Succeeded", completionTime=LATER)
    done["tasks"][0]["replicas"][0]["phase"] = "Succeeded"
    succeeded = kubeflow_status("simple", running, done, LATER, SPEC)
    assert states(succeeded) == [
        ("Created", "True", "PyTorchJobCreated"),
        ("Running", "False", "PyTorchJobRunning"),
        ("Succeeded", "True", "PyTorchJobSucceeded"),
    ]
    assert succeeded["conditions"][-1]["message"] == "PyTorchJob simple is successfully completed."
    assert succeeded["completionTime"] == LATER
    # Running workers of a finished job count as succeeded, as Kubeflow counts them.
    assert succeeded["replicaStatuses"]["Master"]["succeeded"] == 1
    assert succeeded["replicaStatuses"]["Worker"] == {
        "active": None,
        "succeeded": 2,
        "failed": None,
        "selector": "training.kubeflow.org/job-name=simple,"
        "training.kubeflow.org/operator-name=pytorchjob-controller,"
        "training.kubeflow.org/replica-type=worker",
    }


def test_restarting_replaces_running_and_back() -> None:
    running = kubeflow_status("simple", {}, record("Running"), NOW, SPEC)
    failing = record(
        "Running", conditions=[condition("ReplicaFailure", reason=constants.REASON_RESTART_BACKOFF)]
    )
    failing["tasks"][1]["replicas"][0]["phase"] = "Failed"
    restarting = kubeflow_status("simple", running, failing, LATER, SPEC)
    assert [c["type"] for c in restarting["conditions"]] == ["Created", "Restarting"]
    assert restarting["conditions"][-1]["message"] == (
        "PyTorchJob simple is restarting because 1 Worker replica(s) failed."
    )
    assert restarting["replicaStatuses"]["Worker"]["failed"] == 1
    again = kubeflow_status("simple", restarting, record("Running"), LATER, SPEC)
    assert [c["type"] for c in again["conditions"]] == ["Created", "Running"]


@pytest.mark.parametrize(
    ("reason", "message"),
    [
        (
            constants.REASON_BACKOFF_LIMIT_EXCEEDED,
            "Job simple has failed because it has reached the specified backoff limit",
        ),
        (
            constants.REASON_DEADLINE_EXCEEDED,
            "Job simple has failed because it was active longer than specified deadline",
        ),
        (
            constants.REASON_REPLICA_FAILED,
            "PyTorchJob simple is failed because 1 Worker replica(s) failed.",
        ),
    ],
)
def test_failures_say_what_kubeflow_says(reason: str, message: str) -> None:
    failed = record("Failed", conditions=[condition("Failed", reason=reason)])
    failed["tasks"][1]["replicas"][1]["phase"] = "Failed"
    running = kubeflow_status("simple", {}, record("Running"), NOW, SPEC)
    status = kubeflow_status("simple", running, failed, LATER, SPEC)
    assert states(status)[-1] == ("Failed", "True", "PyTorchJobFailed")
    assert status["conditions"][-1]["message"] == message
    assert ("Running", "False", "PyTorchJobRunning") in states(status)
    # Nothing moves a failed job's conditions again.
    assert (
        kubeflow_status("simple", status, record("Running"), LATER, SPEC)["conditions"]
        == (status["conditions"])
    )


def test_our_own_failures_keep_our_message() -> None:
    failed = record(
        "Failed",
        conditions=[
            condition("Failed", reason=constants.REASON_GANG_UNAVAILABLE, message="no API")
        ],
    )
    status = kubeflow_status("simple", {}, failed, NOW, SPEC)
    assert status["conditions"][-1]["message"] == (
        "PyTorchJob simple has failed (GangSchedulingUnavailable): no API"
    )


def test_suspend_and_resume() -> None:
    running = kubeflow_status("simple", {}, record("Running"), NOW, SPEC)
    paused = record("Paused", tasks=[{"type": "master", "replicas": [{"name": "simple-master-0"}]}])
    suspended = kubeflow_status("simple", running, paused, LATER, SPEC)
    assert states(suspended) == [
        ("Created", "True", "PyTorchJobCreated"),
        ("Running", "False", "PyTorchJobSuspended"),
        ("Suspended", "True", "PyTorchJobSuspended"),
    ]
    assert suspended["conditions"][-1]["message"] == "PyTorchJob simple is suspended."
    # None: the merge patch removes the stored count (a 0 is absent, as Kubeflow writes it).
    assert suspended["replicaStatuses"]["Master"]["active"] is None
    resumed = kubeflow_status("simple", suspended, record("Running"), LATER, SPEC)
    assert ("Suspended", "False", "PyTorchJobResumed") in states(resumed)
    assert states(resumed)[-1] == ("Running", "True", "PyTorchJobRunning")


def test_a_condition_set_again_keeps_its_times_and_place() -> None:
    conditions = set_condition([], condition("Created", reason="PyTorchJobCreated"), NOW)
    conditions = set_condition(conditions, condition("Running", reason="PyTorchJobRunning"), NOW)
    same = set_condition(conditions, condition("Created", reason="PyTorchJobCreated"), LATER)
    assert same == conditions
    flipped = set_condition(conditions, condition("Running", "False", "Other"), LATER)
    assert flipped[-1]["lastTransitionTime"] == LATER


def test_waiting_for_a_group_shows_the_reconcile_time() -> None:
    waiting = record("Pending", conditions=[condition("Scheduled", "False", "Scheduling")])
    assert kubeflow_status("simple", {}, waiting, NOW, SPEC)["lastReconcileTime"] == NOW
    assert "lastReconcileTime" not in kubeflow_status("simple", {}, record("Running"), NOW, SPEC)


def test_replica_statuses_count_phases() -> None:
    statuses = replica_statuses("simple", record("Running"))
    assert statuses["Master"]["active"] == 1 and statuses["Worker"]["active"] == 2


# -- scheduling ----------------------------------------------------------------------------------


def test_scheduling_policy_shapes_the_group() -> None:
    policy = {
        "minAvailable": 2,
        "queue": "research",
        "priorityClass": "high",
        "minResources": {"cpu": "4"},
        "scheduleTimeoutSeconds": 60,
    }
    owner = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "name": "simple", "uid": "u1"}
    meta = {"name": "simple", "namespace": "ns"}
    volcano = with_scheduling_policy(Gang("volcano", "simple", 3, 3), policy)
    group = render_pod_group(meta, volcano, owner)
    assert group is not None
    assert group["spec"] == {
        "minMember": 2,
        "queue": "research",
        "priorityClassName": "high",
        "minResources": {"cpu": "4"},
    }
    cosched = render_pod_group(
        meta, with_scheduling_policy(Gang("coscheduling", "simple", 3, 3), policy), owner
    )
    assert cosched is not None
    assert cosched["spec"] == {
        "minMember": 2,
        "priorityClassName": "high",
        "minResources": {"cpu": "4"},
        "scheduleTimeoutSeconds": 60,
    }
    native = render_pod_group(
        meta, with_scheduling_policy(Gang("native", "simple", 3, 3), policy), owner
    )
    assert native is not None
    assert native["spec"]["schedulingPolicy"] == {"gang": {"minCount": 2}}
    kueue = with_scheduling_policy(Gang("kueue", "simple", 3, 3, queue="q"), policy)
    assert (kueue.min_count, kueue.queue) == (3, "q")  # Kueue admits a group only whole


def test_the_scheduling_policy_is_read_from_the_job() -> None:
    job = as_training_job(pytorchjob(runPolicy={"schedulingPolicy": {"minAvailable": 1}}))
    assert scheduling_policy(job) == {"minAvailable": 1}
    assert scheduling_policy(as_training_job(pytorchjob())) is None
    assert scheduling_policy(copy.deepcopy(job)) == {"minAvailable": 1}


# -- autoscaling ---------------------------------------------------------------------------------


def test_metrics_make_an_autoscaler_of_the_workers() -> None:
    metric = {
        "type": "Resource",
        "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 80}},
    }
    spec: dict[str, Any] = {
        "pytorchReplicaSpecs": {"Worker": replica(1)},
        "elasticPolicy": {"minReplicas": 1, "maxReplicas": 3, "metrics": [metric]},
    }
    owner = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "name": "simple", "uid": "u1"}
    hpa = render_autoscaler({"name": "simple", "namespace": "ns"}, spec, owner)
    assert hpa is not None
    assert hpa["apiVersion"] == "autoscaling/v2"
    assert hpa["metadata"]["ownerReferences"] == [owner]
    assert hpa["spec"] == {
        "scaleTargetRef": {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "name": "simple"},
        "minReplicas": 1,
        "maxReplicas": 3,
        "metrics": [metric],
    }
    # The apiserver adds defaults and rewrites quantities: the stored object is compared by the
    # hash of what was rendered, not field by field.
    stored = copy.deepcopy(hpa)
    stored["spec"]["behavior"] = {"scaleUp": {}}
    assert not autoscaler_differs(hpa, stored)
    spec["elasticPolicy"]["maxReplicas"] = 5
    changed = render_autoscaler({"name": "simple", "namespace": "ns"}, spec, owner)
    assert changed is not None and autoscaler_differs(changed, stored)
    spec["elasticPolicy"] = {"minReplicas": 1, "maxReplicas": 3}
    assert render_autoscaler({"name": "simple", "namespace": "ns"}, spec, owner) is None


def test_a_refused_creation_is_no_restart() -> None:
    running = kubeflow_status("simple", {}, record("Running"), NOW, SPEC)
    refused = record(
        "Running",
        conditions=[condition("ReplicaFailure", reason=constants.REASON_POD_CREATION_FAILED)],
    )
    status = kubeflow_status("simple", running, refused, LATER, SPEC)
    assert status["conditions"] == running["conditions"]
    assert status["torchjob"]["conditions"][0]["reason"] == constants.REASON_POD_CREATION_FAILED


def test_a_count_that_falls_to_zero_leaves_the_stored_status() -> None:
    running = kubeflow_status("simple", {}, record("Running"), NOW, SPEC)
    stored = merge_patched({}, running)
    assert stored["replicaStatuses"]["Worker"]["active"] == 2
    paused = record("Paused", tasks=[{"type": "worker", "replicas": [{"name": "simple-worker-0"}]}])
    after = merge_patched(stored, kubeflow_status("simple", stored, paused, LATER, SPEC))
    assert "active" not in after["replicaStatuses"]["Worker"]
    assert merge_patched({"a": {"b": 1, "c": 2}}, {"a": {"b": None}, "d": [1]}) == {
        "a": {"c": 2},
        "d": [1],
    }


def test_a_failure_not_restarted_is_no_restarting() -> None:
    """An elastic job goes on without a replica that failed for good (restartPolicy Never, or a
    code ExitCode does not retry): nothing restarts it."""
    failed = record(
        "Running", conditions=[condition("ReplicaFailure", reason=constants.REASON_REPLICA_FAILED)]
    )
    failed["tasks"][1]["replicas"][0] = {
        "name": "simple-worker-0",
        "phase": "Failed",
        "containers": [{"name": "pytorch", "state": "terminated", "exitCode": 1}],
    }
    for policy, restarted in (("Never", False), ("ExitCode", False), ("OnFailure", True)):
        spec = copy.deepcopy(SPEC)
        spec["pytorchReplicaSpecs"]["Worker"]["restartPolicy"] = policy
        running = kubeflow_status("simple", {}, record("Running"), NOW, spec)
        status = kubeflow_status("simple", running, failed, LATER, spec)
        kinds = [c["type"] for c in status["conditions"]]
        assert kinds == (["Created", "Restarting"] if restarted else ["Created", "Running"]), policy
    # A retryable exit code restarts an ExitCode replica.
    failed["tasks"][1]["replicas"][0]["containers"][0]["exitCode"] = 137
    spec = copy.deepcopy(SPEC)
    spec["pytorchReplicaSpecs"]["Worker"]["restartPolicy"] = "ExitCode"
    status = kubeflow_status("simple", {}, failed, LATER, spec)
    assert status["conditions"][-1]["message"] == (
        "PyTorchJob simple is restarting because 1 Worker replica(s) failed."
    )
