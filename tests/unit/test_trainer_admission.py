"""Admission of Kubeflow Trainer's API: a TrainJob judged against the runtime it names, and the
runtimes themselves; what torchjob does not run is refused with the field named."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from support.trainer import TORCH_RUNTIME, TRAIN_JOB, started, with_dataset_initializer

from torchjob.api.admission import Request
from torchjob.api.trainer_admission import (
    default_trainjob,
    runtime_errors,
    validate_trainjob,
    validate_trainjob_request,
)


def defaulted(job: dict[str, Any]) -> dict[str, Any]:
    return default_trainjob(copy.deepcopy(job))[0]


def refused(job: dict[str, Any], runtime: dict[str, Any] | None = TORCH_RUNTIME) -> list[str]:
    return [str(e) for e in validate_trainjob(defaulted(job), None, runtime).errors]


def runtime_with(**changes: Any) -> dict[str, Any]:
    runtime = copy.deepcopy(TORCH_RUNTIME)
    for path, value in changes.items():
        *parents, key = path.split("__")
        target = runtime["spec"]
        for part in parents:
            target = target[int(part)] if part.isdigit() else target[part]
        target[key] = value
    return runtime


def test_the_sdks_job_is_admitted_with_trainers_defaults() -> None:
    job = defaulted(TRAIN_JOB)
    assert job["spec"]["runtimeRef"] == {
        "name": "torch-distributed",
        "apiGroup": "trainer.kubeflow.org",
        "kind": "ClusterTrainingRuntime",
    }
    assert job["spec"]["suspend"] is False
    assert validate_trainjob(job, None, TORCH_RUNTIME).allowed
    _, patch = default_trainjob(job)
    assert patch == []


def test_an_unknown_runtime_is_refused_by_its_name() -> None:
    assert refused(TRAIN_JOB, None) == [
        "spec.runtimeRef.name: ClusterTrainingRuntime 'torch-distributed' not found"
    ]
    namespaced = copy.deepcopy(TRAIN_JOB)
    namespaced["spec"]["runtimeRef"]["kind"] = "TrainingRuntime"
    assert refused(namespaced, None) == [
        "spec.runtimeRef.name: TrainingRuntime 'torch-distributed' not found in namespace ns"
    ]


def test_an_mpi_runtime_is_refused_by_its_policy() -> None:
    mpi = runtime_with(mlPolicy={"numNodes": 1, "mpi": {"numProcPerNode": 1}})
    assert refused(TRAIN_JOB, mpi) == [
        "spec.runtimeRef.name: ClusterTrainingRuntime 'torch-distributed': spec.mlPolicy.mpi: "
        "torchjob runs PyTorch's runtimes (spec.mlPolicy.torch) only"
    ]
    assert [e.path for e in runtime_errors(mpi["spec"])] == ["spec.mlPolicy.mpi"]


@pytest.mark.parametrize(
    ("changes", "path"),
    [
        ({"mlPolicy": {"jax": {}}}, "spec.mlPolicy.jax"),
        ({"mlPolicy": {"numNodes": 1}}, "spec.mlPolicy.torch"),
        ({"mlPolicy": {"torch": {"envInjection": {}}}}, "spec.mlPolicy.torch.envInjection"),
        ({"podGroupPolicy": {"coscheduling": {}}}, "spec.podGroupPolicy"),
        ({"template__spec__network": {}}, "spec.template.spec.network"),
        (
            {"template__spec__replicatedJobs__0__name": "launcher"},
            "spec.template.spec.replicatedJobs[0].name",
        ),
        (
            {"template__spec__replicatedJobs__0__replicas": 2},
            "spec.template.spec.replicatedJobs[0].replicas",
        ),
        (
            {"template__spec__replicatedJobs__0__template__spec__completionMode": "Indexed"},
            "spec.template.spec.replicatedJobs[0].template.spec.completionMode",
        ),
        (
            {
                "template__spec__replicatedJobs__0__template__spec__template": {
                    "spec": {"containers": [{"name": "x"}]}
                }
            },
            "spec.template.spec.replicatedJobs[0].template.spec.template.spec.containers",
        ),
    ],
)
def test_what_torchjob_does_not_run_in_a_runtime_is_refused_by_field(
    changes: dict[str, Any], path: str
) -> None:
    assert path in [e.path for e in runtime_errors(runtime_with(**changes)["spec"])]


def test_a_runtime_with_initializers_is_admitted() -> None:
    assert runtime_errors(with_dataset_initializer(TORCH_RUNTIME)["spec"]) == []


@pytest.mark.parametrize(
    ("change", "path"),
    [
        ({"runtimeRef": {"name": "torch-distributed", "kind": "Runtime"}}, "spec.runtimeRef.kind"),
        (
            {"runtimeRef": {"name": "torch-distributed", "apiGroup": "x.io"}},
            "spec.runtimeRef.apiGroup",
        ),
        ({"managedBy": "someone.else/controller"}, "spec.managedBy"),
        ({"trainer": {"env": [{"name": "PET_NNODES", "value": "9"}]}}, "spec.trainer.env[0].name"),
        (
            {"initializer": {"dataset": {"storageUri": "not a uri"}}},
            "spec.initializer.dataset.storageUri",
        ),
        ({"initializer": {"model": {"storageUri": "hf://m"}}}, "spec.initializer.model"),
        (
            {
                "runtimePatches": [
                    {
                        "manager": "m",
                        "trainingRuntimeSpec": {
                            "template": {
                                "spec": {
                                    "replicatedJobs": [
                                        {
                                            "name": "node",
                                            "template": {
                                                "spec": {"template": {"spec": {"nodeSelector": {}}}}
                                            },
                                        }
                                    ]
                                }
                            }
                        },
                    }
                ]
            },
            "spec.runtimePatches[0].trainingRuntimeSpec.template.spec.replicatedJobs[0].template.spec.template.spec",
        ),
    ],
)
def test_a_trainjob_is_refused_by_the_field_that_is_not_run(
    change: dict[str, Any], path: str
) -> None:
    job = copy.deepcopy(TRAIN_JOB)
    job["spec"].update(change)
    assert path in [s.split(": ")[0] for s in refused(job)]


def test_torchjobs_own_rules_on_the_job_made_name_the_trainjobs_field() -> None:
    job = copy.deepcopy(TRAIN_JOB)
    job["metadata"]["name"] = "x" * 60  # its pods' names grow past a label's 63 characters
    paths = {s.split(": ")[0] for s in refused(job)}
    assert paths and all(not p.startswith("spec.replicaSpecs") for p in paths)


def test_an_update_keeps_the_trainer_and_changes_patches_only_while_suspended() -> None:
    old = defaulted(TRAIN_JOB)
    new = copy.deepcopy(old)
    new["spec"]["trainer"]["image"] = "j"
    new["spec"]["runtimePatches"] = [{"manager": "m", "trainingRuntimeSpec": {}}]
    errors = [str(e) for e in validate_trainjob(new, old, TORCH_RUNTIME).errors]
    assert errors == [
        "spec.trainer: is immutable",
        "spec.runtimePatches: may change only while the job is suspended",
    ]
    old["spec"]["suspend"] = new["spec"]["suspend"] = True
    new["spec"]["trainer"] = old["spec"]["trainer"]
    assert validate_trainjob(new, old, TORCH_RUNTIME).allowed


def test_a_started_job_is_judged_by_the_runtime_it_was_made_from() -> None:
    old = defaulted(started(TRAIN_JOB))
    new = copy.deepcopy(old)
    new["metadata"]["labels"] = {"a": "b"}
    request = Request("u", "UPDATE", "ns", "j", "alice", new, old)
    assert validate_trainjob_request(request, None).allowed  # the runtime is gone since


def test_a_job_another_controller_manages_is_not_judged_by_a_runtime() -> None:
    job = copy.deepcopy(TRAIN_JOB)
    job["spec"]["managedBy"] = "kueue.x-k8s.io/multikueue"
    assert refused(job, None) == []
