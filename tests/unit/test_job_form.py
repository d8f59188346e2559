"""The console's job form as data: a form makes the manifest it shows and comes back from it; a
manifest the form cannot show is said to be so; every field an admission error names for a form's
job is shown beside a field of the form."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from support.forms import FORMS, LINES, WORDS

from torchjob.api.defaults import default_job
from torchjob.api.validation import validate
from torchjob.views.console.command_line import container_command, line_of_container
from torchjob.views.console.job_form import (
    TEXTS,
    JobForm,
    NotShown,
    UnreadableField,
    field_of_path,
    form_from_fields,
    form_of,
    manifest_of,
)


@given(FORMS)
def test_a_form_comes_back_from_its_manifest(form: JobForm) -> None:
    assert form_of(manifest_of(form)) == form


@given(FORMS)
def test_every_error_admission_finds_in_a_forms_job_is_shown_beside_a_field(form: JobForm) -> None:
    job, _ = default_job(manifest_of(form))
    for error in validate(job, schema=True).errors:
        if error.path == "metadata.name" or not error.path.startswith("metadata"):
            assert field_of_path(error.path) is not None, error


def test_the_tutorials_form_makes_the_tutorials_job_and_nothing_more() -> None:
    form = JobForm(
        name="mnist",
        torchrun=True,
        proc_per_node="2",
        max_restarts="3",
        replicas="2",
        image="t9kpublic/pytorch:2.1",
        command_line="python train.py --save_path='model state.pt'",
        working_dir="/t9k/mnt",
        gpus="2",
        pvc_claim="tutorial",
        pvc_mount_path="/t9k/mnt",
    )
    manifest = manifest_of(form)
    assert manifest["metadata"] == {"name": "mnist"}
    spec = manifest["spec"]
    assert spec["torchrunConfig"] == {"enabled": True, "maxRestarts": 3, "procPerNode": "2"}
    assert set(spec) == {"replicaSpecs", "torchrunConfig"}  # defaults are the webhook's
    (replica,) = spec["replicaSpecs"]
    assert replica["type"] == "worker" and replica["replicas"] == 2
    assert "restartPolicy" not in replica
    (container,) = replica["template"]["spec"]["containers"]
    assert container["args"] == ["train.py", "--save_path=model state.pt"]
    assert container["resources"] == {"limits": {"nvidia.com/gpu": "2"}}
    volumes = replica["template"]["spec"]["volumes"]
    assert {"name": "dshm", "emptyDir": {"medium": "Memory"}} in volumes
    assert {"name": "data", "persistentVolumeClaim": {"claimName": "tutorial"}} in volumes
    assert validate(default_job(manifest)[0], schema=True).allowed


def test_a_number_that_is_not_one_is_sent_as_written_for_the_cluster_to_judge() -> None:
    manifest = manifest_of(JobForm(replicas="two", backoff_limit="3"))
    assert manifest["spec"]["replicaSpecs"][0]["replicas"] == "two"
    assert manifest["spec"]["runPolicy"] == {"backoffLimit": 3}


def test_a_line_with_an_unclosed_quote_is_refused_beside_its_field() -> None:
    with pytest.raises(UnreadableField) as refused:
        manifest_of(JobForm(command_line="train.py --name 'unclosed"))
    assert refused.value.field == "command_line"


def test_a_posted_form_reads_checkboxes_by_presence_and_trims_text() -> None:
    form = form_from_fields({"name": " job ", "torchrun": "on"})
    assert form.name == "job" and form.torchrun and not form.shm and not form.tensorboard
    assert set(TEXTS) | {"torchrun", "shm", "tensorboard"} == {
        f.name for f in dataclasses.fields(JobForm)
    }


def two_types() -> dict[str, Any]:
    manifest = manifest_of(JobForm(name="a", image="i"))
    master = {**manifest["spec"]["replicaSpecs"][0], "type": "master"}
    manifest["spec"]["replicaSpecs"].insert(0, master)
    return manifest


def sidecar() -> dict[str, Any]:
    manifest = manifest_of(JobForm(name="a", image="i"))
    pod = manifest["spec"]["replicaSpecs"][0]["template"]["spec"]
    pod["containers"].append({"name": "proxy", "image": "envoy"})
    return manifest


def with_spec(**extra: Any) -> dict[str, Any]:
    manifest = manifest_of(JobForm(name="a", image="i"))
    manifest["spec"].update(extra)
    return manifest


@pytest.mark.parametrize(
    ("manifest", "reason"),
    [
        (two_types(), "one replica type; this job has 2"),
        (sidecar(), "one container; this job has 2"),
        (with_spec(elastic={"enabled": True}), "no input for spec.elastic.enabled"),
        (with_spec(torchrunConfig={"enable": True}), "no input for spec.torchrunConfig.enable"),
        (["a", "list"], "not a mapping"),
        ({"spec": {"replicaSpecs": "worker"}}, "this job has 0"),
    ],
)
def test_a_manifest_the_form_cannot_show_is_said_to_be_so(manifest: Any, reason: str) -> None:
    shown = form_of(manifest)
    assert isinstance(shown, NotShown)
    assert reason in str(shown)


def test_a_quantity_written_as_a_number_is_shown() -> None:
    manifest = manifest_of(JobForm(name="a", cpu_limit="2"))
    container = manifest["spec"]["replicaSpecs"][0]["template"]["spec"]["containers"][0]
    container["resources"]["limits"]["cpu"] = 2
    shown = form_of(manifest)
    assert isinstance(shown, JobForm) and shown.cpu_limit == "2"


@pytest.mark.parametrize(
    ("path", "field"),
    [
        ("metadata.name", "name"),
        ("spec.replicaSpecs[0].template.spec.containers[0].image", "image"),
        ("spec.replicaSpecs[0].template.spec.containers[0].args", "command_line"),
        ("spec.replicaSpecs[0].template.spec.containers[0].command", "command_line"),
        ("spec.replicaSpecs[0].template.spec.containers[0].resources.limits", "gpus"),
        (
            "spec.replicaSpecs[0].template.spec.containers[0].resources.limits.nvidia.com/gpu",
            "gpus",
        ),
        ("spec.replicaSpecs[0].template.spec.containers[0].resources.requests.cpu", "cpu_request"),
        ("spec.replicaSpecs[0].restartPolicy", "restart_policy"),
        ("spec.replicaSpecs[0].replicas", "replicas"),
        ("spec.torchrunConfig.procPerNode", "proc_per_node"),
        ("spec.tensorboardSpec.logDir.pvc[0].subPath[0]", "tensorboard_log_path"),
        ("spec.scheduler.t9kScheduler.priority", "priority"),
        ("spec.elastic.minReplicas", None),
        ("kind", None),
        ("", None),
    ],
)
def test_an_error_is_shown_beside_the_field_its_path_names(path: str, field: str | None) -> None:
    assert field_of_path(path) == field


@pytest.mark.parametrize(
    ("line", "args"),
    [
        ("python train.py --epochs 30", ["train.py", "--epochs", "30"]),
        ("python3 -m pkg.train --epochs 30", ["-m", "pkg.train", "--epochs", "30"]),
        ("train.py --epochs 30", ["train.py", "--epochs", "30"]),
        ("python -u train.py", ["--no-python", "python", "-u", "train.py"]),
        ("bash run.sh 'two words'", ["--no-python", "bash", "run.sh", "two words"]),
        ("", []),
    ],
)
def test_with_torchrun_a_command_line_is_torchruns_arguments(line: str, args: list[str]) -> None:
    manifest = manifest_of(JobForm(torchrun=True, command_line=line))
    container = manifest["spec"]["replicaSpecs"][0]["template"]["spec"]["containers"][0]
    assert "command" not in container  # the webhook writes torchrun's
    assert container.get("args", []) == args


def test_without_torchrun_a_command_line_is_the_command_and_its_args() -> None:
    manifest = manifest_of(JobForm(torchrun=False, command_line="python train.py --epochs 30"))
    container = manifest["spec"]["replicaSpecs"][0]["template"]["spec"]["containers"][0]
    assert (container["command"], container["args"]) == (["python"], ["train.py", "--epochs", "30"])


@given(WORDS | LINES, st.booleans())
def test_the_line_read_back_makes_the_same_command_and_args(
    words: list[str], torchrun: bool
) -> None:
    made = container_command(words, torchrun)
    assert container_command(line_of_container(*made, torchrun), torchrun) == made


def test_a_script_written_as_torchruns_argument_is_shown_as_python_runs_it() -> None:
    manifest = manifest_of(JobForm(torchrun=True, command_line="train.py --epochs 3"))
    shown = form_of(manifest)
    assert isinstance(shown, JobForm) and shown.command_line == "python train.py --epochs 3"


def test_torchrun_options_written_in_args_leave_the_job_to_the_yaml_view() -> None:
    manifest = manifest_of(JobForm(torchrun=True, command_line="python train.py"))
    container = manifest["spec"]["replicaSpecs"][0]["template"]["spec"]["containers"][0]
    container["args"] = ["--standalone", "train.py"]
    shown = form_of(manifest)
    assert isinstance(shown, NotShown) and "containers[0].args" in str(shown)
