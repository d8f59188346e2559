"""The console's job form as Kubeflow's PyTorchJob: a form makes a Master and Workers of one pod
and comes back from it; what a PyTorchJob has no place for is refused beside its field; every
field Kubeflow's admission names for a form's job is shown beside a field of the form."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from support.forms import FORMS

from torchjob.api.kubeflow_admission import default_pytorchjob, validate_pytorchjob
from torchjob.views.console.job_form import JobForm, NotShown
from torchjob.views.console.kubeflow_form import (
    NoKubeflowPlace,
    kubeflow_field_of_path,
    kubeflow_form_of,
    kubeflow_manifest_of,
)

# The forms a PyTorchJob holds: none of the fields it has no place for filled.
KUBEFLOW_FORMS = FORMS.map(
    lambda form: dataclasses.replace(
        form,
        tensorboard=False,
        tensorboard_image="",
        tensorboard_log_path="",
        queue="",
        priority="",
        max_restarts="",
    )
)
IMAGE = "pytorch/pytorch:2.3.1-cuda12.1-cudnn8-runtime"
POD = {"name": "pytorch", "image": IMAGE}


@given(KUBEFLOW_FORMS)
def test_a_form_comes_back_from_its_pytorchjob(form: JobForm) -> None:
    assert kubeflow_form_of(kubeflow_manifest_of(form)) == form


@given(KUBEFLOW_FORMS)
def test_every_error_kubeflow_admission_finds_is_shown_beside_a_field(form: JobForm) -> None:
    job, _ = default_pytorchjob(kubeflow_manifest_of(form))
    for error in validate_pytorchjob(job).errors:
        if error.path == "metadata.name" or not error.path.startswith("metadata"):
            assert kubeflow_field_of_path(error.path) is not None, error


@given(KUBEFLOW_FORMS, st.integers(2, 64))
def test_replicas_are_one_master_and_the_rest_workers(form: JobForm, replicas: int) -> None:
    specs = kubeflow_manifest_of(dataclasses.replace(form, replicas=str(replicas)))["spec"][
        "pytorchReplicaSpecs"
    ]
    assert (specs["Master"]["replicas"], specs["Worker"]["replicas"]) == (1, replicas - 1)
    assert specs["Master"]["template"] == specs["Worker"]["template"]
    assert specs["Master"].get("restartPolicy") == specs["Worker"].get("restartPolicy")


def test_the_tutorials_form_makes_a_pytorchjob_kubeflow_admission_accepts() -> None:
    form = JobForm(
        name="mnist",
        proc_per_node="2",
        replicas="2",
        image=IMAGE,
        command_line="python train.py --epochs 3",
        restart_policy="ExitCode",
        backoff_limit="3",
        active_deadline_seconds="600",
        clean_up_policy="Unfinished",
        pvc_claim="tutorial",
        pvc_mount_path="/t9k/mnt",
    )
    manifest = kubeflow_manifest_of(form)
    assert (manifest["apiVersion"], manifest["kind"]) == ("kubeflow.org/v1", "PyTorchJob")
    spec = manifest["spec"]
    assert spec["nprocPerNode"] == "2"
    assert spec["runPolicy"] == {
        "backoffLimit": 3,
        "activeDeadlineSeconds": 600,
        "cleanPodPolicy": "Running",
    }
    master, worker = spec["pytorchReplicaSpecs"]["Master"], spec["pytorchReplicaSpecs"]["Worker"]
    assert (master["replicas"], worker["replicas"]) == (1, 1)
    assert master["restartPolicy"] == worker["restartPolicy"] == "ExitCode"
    (container,) = master["template"]["spec"]["containers"]
    assert container["name"] == "pytorch"
    assert container["command"] == ["torchrun"]
    assert container["args"] == ["train.py", "--epochs", "3"]
    volumes = master["template"]["spec"]["volumes"]
    assert {"name": "dshm", "emptyDir": {"medium": "Memory"}} in volumes
    assert {"name": "data", "persistentVolumeClaim": {"claimName": "tutorial"}} in volumes
    assert validate_pytorchjob(default_pytorchjob(manifest)[0]).allowed


@pytest.mark.parametrize(
    ("ours", "kubeflows"), [("All", "All"), ("Unfinished", "Running"), ("None", "None")]
)
def test_the_clean_up_policy_is_kubeflows_clean_pod_policy(ours: str, kubeflows: str) -> None:
    manifest = kubeflow_manifest_of(JobForm(clean_up_policy=ours))
    assert manifest["spec"]["runPolicy"] == {"cleanPodPolicy": kubeflows}


def test_one_replica_is_a_master_alone_and_torchrun_off_runs_the_command() -> None:
    form = JobForm(replicas="1", torchrun=False, command_line="python train.py")
    specs = kubeflow_manifest_of(form)["spec"]["pytorchReplicaSpecs"]
    assert set(specs) == {"Master"}
    container = specs["Master"]["template"]["spec"]["containers"][0]
    assert (container["command"], container["args"]) == (["python"], ["train.py"])


def test_a_count_that_is_no_number_is_sent_as_written_for_the_cluster_to_judge() -> None:
    specs = kubeflow_manifest_of(JobForm(replicas="two"))["spec"]["pytorchReplicaSpecs"]
    assert (specs["Master"]["replicas"], specs["Worker"]["replicas"]) == (1, "two")
    assert kubeflow_manifest_of(JobForm(replicas="0"))["spec"]["pytorchReplicaSpecs"] == {
        "Master": {"replicas": 0, "template": specs["Master"]["template"]}
    }


def test_what_a_pytorchjob_has_no_place_for_is_refused_beside_each_field() -> None:
    form = JobForm(tensorboard=True, queue="q", priority="5", max_restarts="3")
    with pytest.raises(NoKubeflowPlace) as refused:
        kubeflow_manifest_of(form)
    assert set(refused.value.fields) == {"tensorboard", "queue", "priority", "max_restarts"}
    assert "no TensorBoard" in refused.value.fields["tensorboard"]


@pytest.mark.parametrize(
    ("manifest", "reason"),
    [
        ({"spec": {}}, "cannot show this PyTorchJob"),
        (
            {"spec": {"pytorchReplicaSpecs": {"Master": {"template": {}}, "Chief": {}}}},
            "a Master and Workers",
        ),
        (
            {
                "spec": {
                    "pytorchReplicaSpecs": {
                        "Master": {"template": {"spec": {"containers": [POD, POD]}}}
                    }
                }
            },
            "one container",
        ),
        (
            {
                "spec": {
                    "pytorchReplicaSpecs": {
                        "Master": {"template": {"spec": {"containers": [POD], "hostIPC": True}}}
                    }
                }
            },
            "no input for spec.pytorchReplicaSpecs.Master.template.spec.hostIPC",
        ),
        (
            {
                "apiVersion": "kubeflow.org/v1",
                "kind": "PyTorchJob",
                "metadata": {},
                "spec": {
                    "pytorchReplicaSpecs": {
                        "Master": {"replicas": 1, "template": {"spec": {"containers": [POD]}}},
                        "Worker": {"replicas": 1, "template": {"spec": {"containers": []}}},
                    }
                },
            },
            "Master and Workers alike",
        ),
    ],
)
def test_a_pytorchjob_the_form_cannot_show_is_said_to_be_so(manifest: Any, reason: str) -> None:
    shown = kubeflow_form_of(manifest)
    assert isinstance(shown, NotShown) and reason in str(shown), shown


@pytest.mark.parametrize(
    ("path", "field"),
    [
        ("spec.pytorchReplicaSpecs.Master.template.spec.containers[0].image", "image"),
        ("spec.pytorchReplicaSpecs[Worker].replicas", "replicas"),
        ("spec.pytorchReplicaSpecs.Master.replicas", "replicas"),
        ("spec.pytorchReplicaSpecs.Worker.restartPolicy", "restart_policy"),
        (
            "spec.pytorchReplicaSpecs.Master.template.spec.containers[0].resources.limits"
            ".nvidia.com/gpu",
            "gpus",
        ),
        ("spec.pytorchReplicaSpecs.Master.template.spec.volumes[0]", "pvc_claim"),
        ("spec.nprocPerNode", "proc_per_node"),
        ("spec.runPolicy.cleanPodPolicy", "clean_up_policy"),
        ("spec.runPolicy.backoffLimit", "backoff_limit"),
        ("metadata.name", "name"),
        ("spec.elasticPolicy.minReplicas", None),
        ("spec.replicaSpecs[0].replicas", None),
    ],
)
def test_an_error_is_shown_beside_the_field_its_path_names(path: str, field: str | None) -> None:
    assert kubeflow_field_of_path(path) == field
