"""`torchjob convert`: a Kubeflow PyTorchJob as the PyTorchTrainingJob that runs it and back, the
fields the other API cannot express (refused, naming them, or with --drop-unsupported left out
and listed), every field of either spec carried or refused (cli/convert_fields.py), and the
command itself."""

from __future__ import annotations

import re
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml
from support.cli import TORCHJOB
from support.fields import generated_fields, row_of, values_at
from support.jobs import JobBuilder
from support.kubeflow import EXAMPLES, pytorchjob

from torchjob.api import kubeflow_types, trainer_types, types
from torchjob.api.kubeflow_admission import default_pytorchjob
from torchjob.cli.convert import Unconvertible, convert
from torchjob.cli.convert_fields import (
    PYTORCHJOB_FIELDS,
    PYTORCHJOB_TO_TRAINJOB_FIELDS,
    TRAINING_JOB_FIELDS,
    TRAINJOB_FIELDS,
    Fate,
)
from torchjob.cli.manifest import InvalidManifest

SEEDS = sorted(EXAMPLES.glob("*.yaml"))


def training_job(**spec: Any) -> dict[str, Any]:
    """A master and two workers, each of one `python` container, with further `spec` fields."""
    builder = JobBuilder("tj").replicas("master", 1).replicas("worker", 2)
    return builder.spec(**spec).build() if spec else builder.build()


def containers(job: dict[str, Any], kind: str) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = job["spec"]["pytorchReplicaSpecs"][kind]["template"]["spec"][
        "containers"
    ]
    return found


@pytest.mark.parametrize("seed", SEEDS, ids=[s.stem for s in SEEDS])
def test_a_pytorchjob_converted_and_back_is_the_defaulted_original(seed: Path) -> None:
    original = yaml.safe_load(seed.read_text())
    training, dropped = convert(original)
    assert dropped == []
    assert training["apiVersion"] == "batch.tensorstack.dev/v1beta1"
    assert training["kind"] == "PyTorchTrainingJob"
    assert "status" not in training
    assert not {"kubeflowStatus", "kubeflowSpec"} & set(training)
    back, dropped = convert(training)
    assert dropped == []
    defaulted, _ = default_pytorchjob(original)
    assert back["spec"] == defaulted["spec"]
    kept = ("name", "namespace", "labels", "annotations")
    assert back["metadata"] == {k: v for k, v in original["metadata"].items() if k in kept}
    assert back["apiVersion"] == "kubeflow.org/v1" and back["kind"] == "PyTorchJob"


def test_a_pytorchjob_becomes_the_training_job_that_runs_it() -> None:
    manifest = pytorchjob(
        "pj",
        workers=2,
        run_policy={"cleanPodPolicy": "Running", "backoffLimit": 4, "suspend": True},
    )
    manifest["metadata"].update(
        namespace="team", labels={"a": "b"}, uid="u", resourceVersion="1", generation=3
    )
    manifest["status"] = {"conditions": []}
    training, _ = convert(manifest, "torchjob")
    assert training["metadata"] == {"name": "pj", "namespace": "team", "labels": {"a": "b"}}
    spec = training["spec"]
    assert [(r["type"], r["replicas"]) for r in spec["replicaSpecs"]] == [
        ("master", 1),
        ("worker", 2),
    ]
    assert spec["runPolicy"]["cleanUpPolicy"] == "Unfinished"
    assert spec["runPolicy"]["backoffLimit"] == 4
    assert spec["runMode"]["pause"]["enabled"] is True
    # Kubeflow's `pytorch` container is the PyTorchTrainingJob's training container, `python`.
    names = [c["name"] for r in spec["replicaSpecs"] for c in r["template"]["spec"]["containers"]]
    assert names == ["python", "python"]


def test_a_training_job_becomes_a_pytorchjob() -> None:
    job = training_job(
        runPolicy={"cleanUpPolicy": "Unfinished", "backoffLimit": 5, "activeDeadlineSeconds": 60},
        runMode={"pause": {"enabled": True}},
    )
    job["spec"]["replicaSpecs"][1]["template"]["spec"]["containers"].insert(
        0, {"name": "sidecar", "image": "s"}
    )
    out, dropped = convert(job)
    assert dropped == []
    assert out["apiVersion"] == "kubeflow.org/v1" and out["kind"] == "PyTorchJob"
    spec = out["spec"]
    assert set(spec["pytorchReplicaSpecs"]) == {"Master", "Worker"}
    assert spec["pytorchReplicaSpecs"]["Worker"]["replicas"] == 2
    assert spec["runPolicy"] == {
        "backoffLimit": 5,
        "cleanPodPolicy": "Running",
        "activeDeadlineSeconds": 60,
        "suspend": True,
    }
    assert [c["name"] for c in containers(out, "Worker")] == ["sidecar", "pytorch"]
    assert [c["name"] for c in containers(out, "Master")] == ["pytorch"]


def test_elastic_bounds_count_workers_only_in_kubeflow() -> None:
    job = training_job(
        torchrunConfig={"enabled": True, "procPerNode": "2", "maxRestarts": 3},
        elastic={"enabled": True, "minReplicas": 2, "maxReplicas": 4},
    )
    out, dropped = convert(job, "kubeflow", drop_unsupported=True)
    assert out["spec"]["elasticPolicy"] == {"minReplicas": 1, "maxReplicas": 3, "maxRestarts": 3}
    assert out["spec"]["nprocPerNode"] == "2"
    assert [d.split(":")[0] for d in dropped] == ["spec.torchrunConfig.enabled"]


def test_what_kubeflow_cannot_express_is_refused_naming_each_field() -> None:
    job = training_job(
        torchrunConfig={"enabled": True},
        tensorboardSpec={
            "image": "tb",
            "logDir": {"pvc": [{"name": "c", "subPath": ["runs"]}]},
        },
        scheduler={"t9kScheduler": {"queue": "q"}},
    )
    with pytest.raises(Unconvertible) as refused:
        convert(job)
    fields = [e.split(":")[0] for e in refused.value.errors]
    assert fields[:3] == [
        "spec.torchrunConfig.enabled",
        "spec.tensorboardSpec",
        "spec.scheduler.t9kScheduler",
    ]
    assert "--drop-unsupported" in refused.value.errors[-1]
    out, dropped = convert(job, drop_unsupported=True)
    assert [d.split(":")[0] for d in dropped] == fields[:3]
    assert not {"tensorboardSpec", "scheduler", "torchrunConfig"} & set(out["spec"])


@pytest.mark.parametrize(
    ("builder", "field"),
    [
        (JobBuilder("x").replicas("master", 2), "spec.replicaSpecs[0].replicas"),
        (JobBuilder("x").replicas("worker", 1).replicas("ps", 1), "spec.replicaSpecs[1].type"),
    ],
)
def test_replicas_kubeflow_has_no_place_for_are_refused_even_when_dropping(
    builder: JobBuilder, field: str
) -> None:
    with pytest.raises(Unconvertible) as refused:
        convert(builder.build(), drop_unsupported=True)
    assert any(e.startswith(f"{field}: ") for e in refused.value.errors), refused.value.errors


def test_a_pytorch_container_beside_the_training_one_is_refused() -> None:
    job = training_job()
    job["spec"]["replicaSpecs"][0]["template"]["spec"]["containers"].append(
        {"name": "pytorch", "image": "other"}
    )
    with pytest.raises(Unconvertible) as refused:
        convert(job)
    assert refused.value.errors[0].startswith(
        "spec.replicaSpecs[0].template.spec.containers[1].name: 'pytorch' names another"
    )


def test_an_invalid_input_is_refused_by_its_own_api() -> None:
    bad = pytorchjob("pj", workers=1)
    bad["spec"]["pytorchReplicaSpecs"]["Master"]["replicas"] = 2
    with pytest.raises(InvalidManifest) as refused:
        convert(bad)
    assert any(
        e.startswith("spec.pytorchReplicaSpecs.Master.replicas") for e in refused.value.errors
    )
    with pytest.raises(Unconvertible, match="already"):
        convert(pytorchjob("pj"), "kubeflow")


def test_an_elastic_pytorchjob_needs_dropping_its_policy() -> None:
    manifest = pytorchjob("pj", workers=2, elasticPolicy={"minReplicas": 1, "maxReplicas": 3})
    with pytest.raises(Unconvertible) as refused:
        convert(manifest)
    assert refused.value.errors[0].startswith("spec.elasticPolicy: ")
    training, dropped = convert(manifest, drop_unsupported=True)
    assert "elastic" not in training["spec"]
    assert [d.split(":")[0] for d in dropped] == ["spec.elasticPolicy"]


def test_the_command_prints_yaml_writes_a_file_and_reports_on_stderr(tmp_path: Path) -> None:
    source = tmp_path / "job.yaml"
    source.write_text(yaml.safe_dump(training_job(tensorboardSpec={"image": "tb"})))

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(TORCHJOB), "convert", *args], capture_output=True, text=True, timeout=60
        )

    refused = run(str(source))
    assert refused.returncode == 2 and refused.stdout == ""
    assert refused.stderr.startswith("error: spec.tensorboardSpec: ")
    dropped = run(
        str(source), "--to", "kubeflow", "--drop-unsupported", "-o", str(tmp_path / "out.yaml")
    )
    assert dropped.returncode == 0, dropped.stderr
    assert dropped.stderr.startswith("dropped: spec.tensorboardSpec: ")
    printed = run(str(source), "--drop-unsupported")
    assert yaml.safe_load(printed.stdout)["kind"] == "PyTorchJob"
    written = run(str(source), "--drop-unsupported", "-o", str(tmp_path / "pj.yaml"))
    assert written.stdout == ""
    assert yaml.safe_load((tmp_path / "pj.yaml").read_text()) == yaml.safe_load(printed.stdout)
    back = run(str(tmp_path / "pj.yaml"))
    assert back.returncode == 0, back.stderr
    assert yaml.safe_load(back.stdout)["kind"] == "PyTorchTrainingJob"


# -- every field of either spec -------------------------------------------------------------------


SPECS = [
    (types.PyTorchTrainingJobSpec, TRAINING_JOB_FIELDS, kubeflow_types.PyTorchJobSpec),
    (kubeflow_types.PyTorchJobSpec, PYTORCHJOB_FIELDS, types.PyTorchTrainingJobSpec),
    (trainer_types.TrainJobSpec, TRAINJOB_FIELDS, kubeflow_types.PyTorchJobSpec),
    (kubeflow_types.PyTorchJobSpec, PYTORCHJOB_TO_TRAINJOB_FIELDS, trainer_types.TrainJobSpec),
]


@pytest.mark.parametrize(
    ("spec", "fates", "other"), SPECS, ids=["torchjob", "kubeflow", "trainjob", "to-trainjob"]
)
def test_every_field_of_either_spec_is_carried_or_refused(
    spec: Any, fates: Mapping[str, Fate], other: Any
) -> None:
    fields = dict(generated_fields(spec))
    unsaid = [path for path, message in fields.items() if not message and not row_of(path, fates)]
    assert unsaid == [], "add a row for each to cli/convert_fields.py: carried where, or why not"
    assert [row for row in fates if row not in fields] == [], "a row of no field"
    assert [row for row, fate in fates.items() if not (fate.to or fate.refused)] == []
    targets = dict(generated_fields(other))
    assert [fate.to for fate in fates.values() if fate.to and fate.to not in targets] == []


def every_training_field() -> dict[str, Any]:
    """A PyTorchTrainingJob that sets a field of every row (but the old spelling `enable`)."""
    job = training_job(
        torchrunConfig={
            "enabled": True,
            "minNodes": 2,
            "maxRestarts": 2,
            "procPerNode": "2",
            "extraOptions": ["--log-dir=/tmp"],
        },
        elastic={"enabled": True, "minReplicas": 2, "maxReplicas": 4, "expectedReplicas": 3},
        runPolicy={
            "backoffLimit": 5,
            "activeDeadlineSeconds": 60,
            "cleanUpPolicy": "All",
            "ttlSecondsAfterFinished": 30,
        },
        scheduler={"t9kScheduler": {"queue": "q", "priority": 1}},
        tensorboardSpec={"image": "tb", "trainingLogFilesets": ["t9k://pvc/c/runs"]},
        runMode={
            "debug": {"enabled": True, "replicaSpecs": [{"type": "worker"}]},
            "pause": {"enabled": True, "resumeSpecs": [{"type": "worker", "args": ["x"]}]},
        },
    )
    job["spec"]["replicaSpecs"][1]["scalingWeight"] = 1
    return job


def every_pytorchjob_field() -> dict[str, Any]:
    """A PyTorchJob that sets a field of every row."""
    return pytorchjob(
        "pj",
        workers=2,
        run_policy={
            "cleanPodPolicy": "Running",
            "ttlSecondsAfterFinished": 30,
            "activeDeadlineSeconds": 60,
            "backoffLimit": 4,
            "schedulingPolicy": {"minAvailable": 2, "queue": "q"},
            "suspend": True,
            "managedBy": "kueue.x-k8s.io/multikueue",
        },
        elasticPolicy={"minReplicas": 1, "maxReplicas": 3},
        nprocPerNode="4",
    )


@pytest.mark.parametrize(
    ("job", "fates"),
    [(every_training_field(), TRAINING_JOB_FIELDS), (every_pytorchjob_field(), PYTORCHJOB_FIELDS)],
    ids=["torchjob", "kubeflow"],
)
def test_each_field_goes_where_its_row_says(job: dict[str, Any], fates: Mapping[str, Fate]) -> None:
    out, dropped = convert(job, drop_unsupported=True)
    dropped_rows = [re.sub(r"\[\d+\]", "[]", line.split(":")[0]) for line in dropped]
    assert [row for row in dropped_rows if not fates[row].refused] == []
    for row, fate in fates.items():
        if not values_at(job, row):
            continue
        if not fate.to:
            assert row in dropped_rows, f"{row} was set, and neither refused nor carried"
        elif not fate.refused:
            assert values_at(out, fate.to), f"{row} was set, and {fate.to} is not"
            assert row not in dropped_rows


def test_a_rendezvous_backend_without_an_elastic_policy_is_refused() -> None:
    job = training_job(torchrunConfig={"enabled": True, "rdzvBackend": "etcd-v2"})
    out, dropped = convert(job, drop_unsupported=True)
    assert [d.split(":")[0] for d in dropped] == [
        "spec.torchrunConfig.enabled",
        "spec.torchrunConfig.rdzvBackend",
    ]
    assert "elasticPolicy" not in out["spec"]
