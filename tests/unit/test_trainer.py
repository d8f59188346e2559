"""Kubeflow Trainer's TrainJob as torchjob runs it: made from the runtime copied into its status,
its pods as Trainer's torch plugin and JobSet make them, its status as the Kubeflow SDK reads it."""

from __future__ import annotations

import copy
from typing import Any

from support.trainer import (
    TORCH_IMAGE,
    TORCH_RUNTIME,
    TRAIN_JOB,
    started,
    with_dataset_initializer,
)

from torchjob.api.job_api import TRAIN_JOB as TRAIN_JOB_API
from torchjob.api.trainer import (
    as_training_job,
    copied_runtime,
    runtime_snapshot,
    runtime_to_copy,
    training_spec,
)
from torchjob.api.trainer_admission import default_trainjob
from torchjob.api.types import PyTorchTrainingJob
from torchjob.render.job_kinds import kind_of
from torchjob.render.pod_rewrite import PreparedJob
from torchjob.render.topology import Replica
from torchjob.render.trainer import jobs_status, procs_per_node_of, trainer_status

KIND = kind_of(TRAIN_JOB_API)
NOW = "2026-12-06T00:00:00Z"


def node_pod(job: dict[str, Any], index: int) -> dict[str, Any]:
    """The pod of node `index` as the webhook admits it: labelled by the lifecycle, rewritten."""
    training = KIND.training_job(job)
    template = copy.deepcopy(training["spec"]["replicaSpecs"][0]["template"])
    labels = {
        "batch.tensorstack.dev/replica-type": "node",
        "batch.tensorstack.dev/replica-index": str(index),
    }
    pod = {"metadata": {"name": f"j-node-{index}", "labels": labels}, "spec": template["spec"]}
    prepared = PreparedJob(PyTorchTrainingJob.from_dict(training), TRAIN_JOB_API)
    return KIND.rewrite_pod(prepared, job["spec"], pod).pod


def env_of(container: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container.get("env") or []}


def test_a_job_is_made_from_its_runtime_with_the_trainers_overrides() -> None:
    spec = training_spec(TRAIN_JOB["spec"], TORCH_RUNTIME["spec"])
    [node] = spec["replicaSpecs"]
    assert (node["type"], node["replicas"], node["restartPolicy"]) == ("node", 2, "OnFailure")
    [container] = node["template"]["spec"]["containers"]
    assert container == {
        "name": "node",
        "image": "i",
        "command": ["torchrun", "t.py"],
        "resources": {"requests": {"cpu": "2"}},
    }
    # Kubernetes' Job default, and the pods kept for their logs.
    assert spec["runPolicy"] == {"backoffLimit": 6, "cleanUpPolicy": "None"}


def test_without_overrides_the_runtimes_node_count_and_image_stand() -> None:
    runtime = copy.deepcopy(TORCH_RUNTIME["spec"])
    runtime["mlPolicy"]["numNodes"] = 3
    spec = training_spec({"runtimeRef": {"name": "torch-distributed"}}, runtime)
    [node] = spec["replicaSpecs"]
    assert node["replicas"] == 3
    assert node["template"]["spec"]["containers"][0]["image"] == TORCH_IMAGE


def test_suspend_deadline_and_the_runtimes_ttl_carry_over() -> None:
    runtime = copy.deepcopy(TORCH_RUNTIME["spec"])
    runtime["template"]["spec"]["ttlSecondsAfterFinished"] = 60
    spec = training_spec(
        {**TRAIN_JOB["spec"], "suspend": True, "activeDeadlineSeconds": 9}, runtime
    )
    assert spec["runMode"] == {"pause": {"enabled": True}}
    assert spec["runPolicy"]["activeDeadlineSeconds"] == 9
    assert spec["runPolicy"]["ttlSecondsAfterFinished"] == 60


def test_the_runtime_is_copied_once_and_the_job_made_from_the_copy_ever_after() -> None:
    job, _ = default_trainjob(copy.deepcopy(TRAIN_JOB))
    assert runtime_to_copy(job) is not None and KIND.run(job) is None
    ref = runtime_to_copy(job)
    assert ref is not None and (ref.kind, ref.name, ref.namespace, ref.plural) == (
        "ClusterTrainingRuntime",
        "torch-distributed",
        None,
        "clustertrainingruntimes",
    )
    running = started(job)
    assert runtime_to_copy(running) is None and KIND.run(running) is not None
    # A later change to the runtime is not in the copy.
    changed = copy.deepcopy(TORCH_RUNTIME)
    changed["spec"]["mlPolicy"]["numNodes"] = 5
    assert copied_runtime(running) == runtime_snapshot(TORCH_RUNTIME) != runtime_snapshot(changed)
    # The record the lifecycle reads leaves the copy out.
    assert "runtime" not in as_training_job(running)["status"]


def test_a_namespaced_runtime_is_read_in_the_jobs_namespace() -> None:
    job = copy.deepcopy(TRAIN_JOB)
    job["spec"]["runtimeRef"] = {"name": "mine", "kind": "TrainingRuntime"}
    ref = runtime_to_copy(job)
    assert ref is not None and (ref.namespace, ref.plural) == ("ns", "trainingruntimes")


def test_a_job_managed_by_multikueue_is_left_alone() -> None:
    job = started(TRAIN_JOB)
    job["spec"]["managedBy"] = "kueue.x-k8s.io/multikueue"
    assert KIND.run(job) is None and runtime_to_copy(job) is None


def test_each_node_gets_torchruns_environment_as_trainer_sets_it() -> None:
    job = started(TRAIN_JOB)
    pod = node_pod(job, 1)
    node = next(c for c in pod["spec"]["containers"] if c["name"] == "node")
    env = env_of(node)
    assert env["PET_NNODES"] == "2"
    assert env["PET_NODE_RANK"] == "1"
    assert env["PET_NPROC_PER_NODE"] == "2"  # the node's CPUs, with no GPU asked for
    assert env["PET_MASTER_ADDR"] == "j-node-0"
    assert env["PET_MASTER_PORT"] == "29500"
    assert any(p["containerPort"] == 29500 for p in node["ports"])
    assert pod["spec"]["restartPolicy"] == "Never"
    # Each node waits until the first node's name resolves, read from torchrun's variable.
    wait = pod["spec"]["initContainers"][0]
    assert (wait["name"], env_of(wait)) == ("wait-for-master", {"MASTER_ADDR": "j-node-0"})
    assert KIND.own_labels("j", _replica(1)) == {
        "jobset.sigs.k8s.io/jobset-name": "j",
        "jobset.sigs.k8s.io/replicatedjob-name": "node",
        "jobset.sigs.k8s.io/job-index": "0",
        "batch.kubernetes.io/job-completion-index": "1",
        "trainer.kubeflow.org/trainjob-ancestor-step": "trainer",
    }


def _replica(index: int) -> Replica:
    return Replica("node", index, index)


def test_processes_per_node_follow_the_trainer_then_gpus_then_cpus() -> None:
    assert procs_per_node_of(4, {}) == "4"
    assert procs_per_node_of(None, {"resources": {"limits": {"nvidia.com/gpu": 8}}}) == "auto"
    assert procs_per_node_of(None, {"resources": {"requests": {"cpu": "3500m"}}}) == "3"
    assert procs_per_node_of(None, {"resources": {"limits": {"cpu": "500m"}}}) == "1"
    assert procs_per_node_of(None, {}) == "1"


def test_the_users_own_variables_win_and_the_first_node_is_the_master() -> None:
    job = started(TRAIN_JOB)
    job["spec"]["trainer"]["env"] = [{"name": "NCCL_DEBUG", "value": "INFO"}]
    env = env_of(node_pod(job, 0)["spec"]["containers"][0])
    assert env["NCCL_DEBUG"] == "INFO" and env["PET_NODE_RANK"] == "0"


def test_the_dataset_initializer_runs_first_in_every_node_sharing_its_volume() -> None:
    runtime = with_dataset_initializer(TORCH_RUNTIME)
    job = copy.deepcopy(TRAIN_JOB)
    job["spec"]["initializer"] = {
        "dataset": {"storageUri": "hf://tatsu-lab/alpaca", "secretRef": {"name": "hf-token"}}
    }
    spec = training_spec(job["spec"], runtime["spec"])
    pod = spec["replicaSpecs"][0]["template"]["spec"]
    [init] = pod["initContainers"]
    assert init["name"] == "dataset-initializer"
    assert {"name": "STORAGE_URI", "value": "hf://tatsu-lab/alpaca"} in init["env"]
    assert init["envFrom"] == [{"secretRef": {"name": "hf-token"}}]
    assert [v["name"] for v in pod["volumes"]] == ["initializer"]
    assert pod["containers"][0]["volumeMounts"] == init["volumeMounts"]


def test_runtime_patches_add_labels_and_annotations_to_the_nodes() -> None:
    job = copy.deepcopy(TRAIN_JOB)
    job["spec"]["runtimePatches"] = [
        {
            "manager": "trainer.kubeflow.org/kubeflow-sdk",
            "trainingRuntimeSpec": {
                "template": {
                    "metadata": {"labels": {"team": "a"}},
                    "spec": {
                        "replicatedJobs": [
                            {
                                "name": "node",
                                "template": {
                                    "spec": {"template": {"metadata": {"annotations": {"x": "y"}}}}
                                },
                            }
                        ]
                    },
                }
            },
        }
    ]
    meta = training_spec(job["spec"], TORCH_RUNTIME["spec"])["replicaSpecs"][0]["template"]
    assert meta["metadata"] == {"labels": {"team": "a"}, "annotations": {"x": "y"}}


def test_status_shows_trainers_conditions_only_and_keeps_the_record() -> None:
    record = {
        "phase": "Running",
        "tasks": [{"type": "node", "replicas": [{"phase": "Running"}, {"phase": "Pending"}]}],
    }
    shown = trainer_status({}, record, NOW, 1)
    # No condition while it runs: the Kubeflow SDK reads a job as Running only so.
    assert shown["conditions"] == []
    assert shown["jobsStatus"] == [
        {"name": "node", "ready": 1, "succeeded": 0, "failed": 0, "active": 2, "suspended": 0}
    ]
    assert shown["torchjob"] == record


def test_a_failure_names_our_reason_in_trainers_condition() -> None:
    record: dict[str, Any] = {
        "phase": "Failed",
        "conditions": [
            {"type": "Failed", "status": "True", "reason": "NoProgress", "message": "silent"}
        ],
    }
    [failed] = trainer_status({}, record, NOW, 2)["conditions"]
    assert failed == {
        "type": "Failed",
        "status": "True",
        "reason": "FailedJobs",
        "message": "NoProgress: silent",
        "lastTransitionTime": NOW,
        "observedGeneration": 2,
    }
    record["conditions"][0]["reason"] = "DeadlineExceeded"
    [deadline] = trainer_status({}, record, NOW, 2)["conditions"]
    assert deadline["reason"] == "DeadlineExceeded"


def test_suspended_then_resumed_as_trainer_says_it() -> None:
    paused = trainer_status({}, {"phase": "Paused"}, NOW, 1)
    assert [(c["type"], c["status"], c["reason"]) for c in paused["conditions"]] == [
        ("Suspended", "True", "Suspended")
    ]
    resumed = trainer_status(paused, {"phase": "Running"}, "2026-12-06T00:01:00Z", 2)
    [condition] = resumed["conditions"]
    assert (condition["status"], condition["reason"]) == ("False", "Resumed")
    assert condition["lastTransitionTime"] == "2026-12-06T00:01:00Z"
    done = trainer_status(resumed, {"phase": "Succeeded"}, NOW, 2)
    assert KIND.outcome({"status": done}) == "Succeeded"
    assert KIND.phase({"status": done}) == "Complete"
    assert KIND.phase({}) == "Created"


def test_jobs_status_counts_a_suspended_jobs_nodes_as_suspended() -> None:
    record = {"phase": "Paused", "tasks": [{"type": "node", "replicas": [{}, {}]}]}
    assert jobs_status(record)["suspended"] == 2 and jobs_status(record)["active"] == 0
