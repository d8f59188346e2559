"""`torchjob convert` of Kubeflow Trainer's TrainJob: to the PyTorchJob of its nodes (the one API
whose environment is a TrainJob's) and to a PyTorchTrainingJob through it, from a PyTorchJob or a
PyTorchTrainingJob to a TrainJob of the torch-distributed runtime; every field of either spec
carried or refused is checked with the others' in test_cli_convert.py."""

from __future__ import annotations

import copy
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from support.cli import TORCHJOB
from support.fields import values_at
from support.kubeflow import pytorchjob
from support.trainer import TORCH_RUNTIME, TRAIN_JOB, with_dataset_initializer

from torchjob.cli.convert import Unconvertible, convert
from torchjob.cli.convert_fields import PYTORCHJOB_TO_TRAINJOB_FIELDS, TRAINJOB_FIELDS
from torchjob.cli.manifest import with_runtime


def trainjob(**spec: Any) -> dict[str, Any]:
    job = copy.deepcopy(TRAIN_JOB)
    job["metadata"] = {"name": "tj", "namespace": "team"}
    job["spec"]["trainer"]["numProcPerNode"] = 2
    job["spec"].update(spec)
    return with_runtime(job, [TORCH_RUNTIME])


def torchrun_pytorchjob(**spec: Any) -> dict[str, Any]:
    job = pytorchjob("pj", workers=2, **spec)
    for replica in job["spec"]["pytorchReplicaSpecs"].values():
        container = replica["template"]["spec"]["containers"][0]
        container["command"] = ["torchrun", "train.py"]
    return job


def test_a_trainjob_becomes_the_pytorchjob_of_its_nodes() -> None:
    out, dropped = convert(trainjob(activeDeadlineSeconds=60, suspend=True), "kubeflow")
    assert dropped == []
    assert out["kind"] == "PyTorchJob" and out["metadata"] == {"name": "tj", "namespace": "team"}
    spec = out["spec"]
    replicas = spec["pytorchReplicaSpecs"]
    assert (replicas["Master"]["replicas"], replicas["Worker"]["replicas"]) == (1, 1)
    [container] = replicas["Worker"]["template"]["spec"]["containers"]
    assert (container["name"], container["image"], container["command"]) == (
        "pytorch",
        "i",
        ["torchrun", "t.py"],
    )
    assert spec["nprocPerNode"] == "2"
    assert spec["runPolicy"]["backoffLimit"] == 6
    assert spec["runPolicy"]["activeDeadlineSeconds"] == 60
    assert spec["runPolicy"]["suspend"] is True


def test_a_trainjobs_initializers_come_along_in_the_pod() -> None:
    job = with_runtime(
        {**trainjob(), "status": {}}
        | {"spec": {**TRAIN_JOB["spec"], "runtimeRef": {"name": "torch-with-data"}}},
        [with_dataset_initializer(TORCH_RUNTIME)],
    )
    out, _ = convert(job, "kubeflow")
    pod = out["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]
    assert [c["name"] for c in pod["initContainers"]] == ["dataset-initializer"]


def test_a_trainjob_without_its_runtime_in_the_file_is_refused() -> None:
    with pytest.raises(Unconvertible, match="the training runtime the TrainJob is made from"):
        convert({**copy.deepcopy(TRAIN_JOB), "metadata": {"name": "tj"}}, "kubeflow")


def test_a_trainjob_becomes_a_training_job_through_a_pytorchjob() -> None:
    job = trainjob(trainer={**TRAIN_JOB["spec"]["trainer"]})
    # A PyTorchTrainingJob sets processes per node only with its own torchrun, which replaces the
    # command: the TrainJob's two (its node's CPUs) are refused, or dropped.
    with pytest.raises(Unconvertible, match=r"spec\.nprocPerNode: '2'"):
        convert(job, "torchjob")
    out, dropped = convert(job, "torchjob", drop_unsupported=True)
    assert [line.split(":")[0] for line in dropped] == ["spec.nprocPerNode"]
    assert out["kind"] == "PyTorchTrainingJob"
    assert [(r["type"], r["replicas"]) for r in out["spec"]["replicaSpecs"]] == [
        ("master", 1),
        ("worker", 1),
    ]


def test_a_pytorchjob_becomes_a_trainjob_of_torch_distributed() -> None:
    source = torchrun_pytorchjob(run_policy={"activeDeadlineSeconds": 30}, nprocPerNode="4")
    out, dropped = convert(source, "trainer")
    assert dropped == []
    assert out["kind"] == "TrainJob" and out["metadata"]["name"] == "pj"
    assert out["spec"]["runtimeRef"]["name"] == "torch-distributed"
    trainer = out["spec"]["trainer"]
    assert (trainer["numNodes"], trainer["numProcPerNode"]) == (3, 4)
    assert trainer["command"] == ["torchrun", "train.py"]
    assert out["spec"]["activeDeadlineSeconds"] == 30


def test_a_plain_python_command_is_refused_for_a_trainjob() -> None:
    with pytest.raises(Unconvertible, match="start the command with torchrun"):
        convert(pytorchjob("pj", workers=1), "trainer")


def test_what_a_trainjob_keeps_in_its_runtime_is_refused_by_path() -> None:
    source = torchrun_pytorchjob()
    for replica in source["spec"]["pytorchReplicaSpecs"].values():
        replica["template"]["spec"]["volumes"] = [{"name": "data", "emptyDir": {}}]
    with pytest.raises(Unconvertible) as refused:
        convert(source, "trainer")
    assert refused.value.errors[0].startswith(
        "spec.pytorchReplicaSpecs.Master.template.spec.volumes: a TrainJob takes this from its "
        "training runtime"
    )


def every_pytorchjob_field() -> dict[str, Any]:
    return torchrun_pytorchjob(
        run_policy={
            "cleanPodPolicy": "Running",
            "ttlSecondsAfterFinished": 30,
            "activeDeadlineSeconds": 60,
            "backoffLimit": 4,
            "schedulingPolicy": {"minAvailable": 2},
            "suspend": True,
            "managedBy": "kueue.x-k8s.io/multikueue",
        },
        elasticPolicy={"minReplicas": 1, "maxReplicas": 3},
        nprocPerNode="gpu",
    )


def test_each_pytorchjob_field_goes_where_its_row_says() -> None:
    job = every_pytorchjob_field()
    job["spec"]["pytorchReplicaSpecs"]["Worker"]["restartPolicy"] = "Never"
    job["spec"]["pytorchReplicaSpecs"]["Master"]["restartPolicy"] = "Never"
    out, dropped = convert(job, "trainer", drop_unsupported=True)
    rows = [re.sub(r"\.(Master|Worker)\.", ".*.", line.split(":")[0]) for line in dropped]
    fates = PYTORCHJOB_TO_TRAINJOB_FIELDS
    assert [row for row in rows if row not in fates or not fates[row].refused] == []
    for row, fate in fates.items():
        if not values_at(job, row):
            continue
        if not fate.to:
            assert row in rows, f"{row} was set, and neither refused nor carried"
        elif not fate.refused:
            assert values_at(out, fate.to), f"{row} was set, and {fate.to} is not"


def test_each_trainjob_field_goes_where_its_row_says() -> None:
    job = trainjob(activeDeadlineSeconds=60, suspend=True)
    out, dropped = convert(job, "kubeflow")
    assert dropped == []
    for row, fate in TRAINJOB_FIELDS.items():
        if values_at(job, row):
            assert values_at(out, fate.to), f"{row} was set, and {fate.to} is not"


def test_the_command_converts_a_file_holding_the_job_and_its_runtime(tmp_path: Path) -> None:
    source = tmp_path / "trainjob.yaml"
    job = copy.deepcopy(TRAIN_JOB)
    job["metadata"] = {"name": "tj"}
    source.write_text(yaml.safe_dump_all([TORCH_RUNTIME, job]))
    done = subprocess.run(
        [str(TORCHJOB), "convert", str(source), "--to", "kubeflow"],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": str(Path(sys.executable).parent)},
    )
    assert done.returncode == 0, done.stderr
    assert yaml.safe_load(done.stdout)["kind"] == "PyTorchJob"
