"""The pod rewrite: training container, environment (the user's wins), torchrun command,
restartPolicy Never, debug and resume commands; applying it twice changes nothing."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from torchjob.api import constants
from torchjob.api.types import PyTorchTrainingJob
from torchjob.render.pod import PodRewriteError, rewrite_pod


def make_job(containers: list[dict[str, Any]], **spec: Any) -> PyTorchTrainingJob:
    template = {
        "spec": {"containers": containers, "initContainers": [{"name": "init", "image": "b"}]}
    }
    return PyTorchTrainingJob.from_dict(
        {
            "metadata": {"name": "j", "namespace": "ns", "uid": "u1"},
            "spec": {
                "replicaSpecs": [
                    {
                        "type": "worker",
                        "replicas": 2,
                        "restartPolicy": "OnFailure",
                        "template": template,
                    }
                ],
                **spec,
            },
        }
    )


def make_pod(
    job: PyTorchTrainingJob, index: int = 1, annotations: dict[str, str] | None = None
) -> dict[str, Any]:
    assert job.spec and job.spec.replica_specs and job.spec.replica_specs[0].template
    labels = {
        constants.LABEL_JOB_NAME: "j",
        constants.LABEL_REPLICA_TYPE: "worker",
        constants.LABEL_REPLICA_INDEX: str(index),
    }
    return {
        "metadata": {
            "name": f"j-worker-{index}",
            "labels": labels,
            "annotations": annotations or {},
        },
        "spec": copy.deepcopy(job.spec.replica_specs[0].template.spec),
    }


SIDECAR = {"name": "sidecar", "image": "s"}
TRAINER = {"name": "python", "image": "t", "command": ["python"], "args": ["train.py", "--lr=1"]}


def env_names(container: dict[str, Any]) -> list[str]:
    return [e["name"] for e in container.get("env", [])]


def test_plain_python_replica() -> None:
    job = make_job([SIDECAR, TRAINER])
    pod = rewrite_pod(job, make_pod(job)).pod
    sidecar, trainer = pod["spec"]["containers"]
    assert sidecar == SIDECAR, "only the training container is touched"
    assert trainer["command"] == ["python"]
    assert trainer["args"] == ["train.py", "--lr=1"]
    env = {e["name"]: e["value"] for e in trainer["env"]}
    assert env["RANK"] == "1"
    assert env["MASTER_ADDR"] == "j-worker-0.ns.svc"
    assert pod["spec"]["restartPolicy"] == "Never"
    assert {"name": "pytorchjob-port", "containerPort": 23456, "protocol": "TCP"} in trainer[
        "ports"
    ]


def test_first_container_trains_when_none_is_named_python() -> None:
    job = make_job([{"name": "main", "image": "t", "args": ["a.py"]}, SIDECAR])
    pod = rewrite_pod(job, make_pod(job)).pod
    assert "RANK" in env_names(pod["spec"]["containers"][0])
    assert "env" not in pod["spec"]["containers"][1]


def test_torchrun_replaces_the_command_and_keeps_args() -> None:
    job = make_job([TRAINER], torchrunConfig={"enabled": True, "procPerNode": "2"})
    trainer = rewrite_pod(job, make_pod(job)).pod["spec"]["containers"][0]
    assert trainer["command"][0] == "torchrun"
    assert "--nproc-per-node=2" in trainer["command"]
    assert trainer["args"] == ["train.py", "--lr=1"]


def test_user_env_wins() -> None:
    job = make_job([{**TRAINER, "env": [{"name": "MASTER_PORT", "value": "1234"}]}])
    env = rewrite_pod(job, make_pod(job)).pod["spec"]["containers"][0]["env"]
    assert [e for e in env if e["name"] == "MASTER_PORT"] == [
        {"name": "MASTER_PORT", "value": "1234"}
    ]


def test_debug_mode_default_and_custom() -> None:
    job = make_job([TRAINER], runMode={"debug": {"enable": True}})
    pod = rewrite_pod(job, make_pod(job)).pod
    assert pod["spec"]["containers"][0]["command"] == ["sleep", "inf"]
    assert "args" not in pod["spec"]["containers"][0]
    assert pod["spec"]["initContainers"], "init containers stay by default"
    custom = make_job(
        [TRAINER],
        runMode={
            "debug": {
                "enabled": True,
                "replicaSpecs": [
                    {"type": "worker", "skipInitContainer": True, "command": ["/usr/bin/sshd"]}
                ],
            }
        },
    )
    pod = rewrite_pod(custom, make_pod(custom)).pod
    assert pod["spec"]["containers"][0]["command"] == ["/usr/bin/sshd"]
    assert "initContainers" not in pod["spec"]


def test_resume_spec_applies_only_to_resuming_pods() -> None:
    job = make_job(
        [TRAINER],
        runMode={
            "pause": {
                "enabled": False,
                "resumeSpecs": [
                    {
                        "type": "worker",
                        "command": ["python"],
                        "args": ["train.py", "--resume"],
                        "skipInitContainer": True,
                    }
                ],
            }
        },
    )
    fresh = rewrite_pod(job, make_pod(job)).pod
    assert fresh["spec"]["containers"][0]["args"] == ["train.py", "--lr=1"]
    resumed = rewrite_pod(
        job, make_pod(job, annotations={constants.ANNOTATION_RESUMING: "true"})
    ).pod
    assert resumed["spec"]["containers"][0]["args"] == ["train.py", "--resume"]
    assert "initContainers" not in resumed["spec"]


@pytest.mark.parametrize(
    "spec",
    [{}, {"torchrunConfig": {"enabled": True}}, {"runMode": {"debug": {"enabled": True}}}],
    ids=["plain", "torchrun", "debug"],
)
def test_rewrite_is_idempotent_and_its_patch_reproduces_it(spec: dict[str, Any]) -> None:
    job = make_job([SIDECAR, TRAINER], **spec)
    original = make_pod(job)
    as_admitted = copy.deepcopy(original)
    first = rewrite_pod(job, original)
    assert original == as_admitted  # the rewrite shares parts of it, but changes none
    patched = copy.deepcopy(original)
    for op in first.patch:
        key = op["path"].removeprefix("/spec/")
        if op["op"] == "remove":
            del patched["spec"][key]
        else:
            patched["spec"][key] = op["value"]
    assert patched == first.pod
    second = rewrite_pod(job, first.pod)
    assert second.pod == first.pod
    assert second.patch == []


def test_pod_of_an_unknown_replica_is_refused() -> None:
    job = make_job([TRAINER])
    with pytest.raises(PodRewriteError, match="no replica worker/7"):
        rewrite_pod(job, make_pod(job, index=7))
