"""The pod rewrite: training container, environment (the user's wins), torchrun command,
restartPolicy Never, debug and resume commands; applying it twice changes nothing."""

from __future__ import annotations

import copy
import os
import subprocess
import sys
from typing import Any

import pytest
from support.jobs import JobBuilder

from torchjob.api import constants
from torchjob.api.types import PyTorchTrainingJob
from torchjob.render.pod_rewrite import PodRewriteError, PreparedJob, rewrite_pod
from torchjob.render.wait import WAIT_FOR_MASTER, WAIT_SCRIPT

# Two workers; each test gives them its containers (after an init container of the user's).
WORKERS = (
    JobBuilder()
    .metadata(namespace="ns", uid="u1")
    .replicas(
        "worker",
        2,
        restartPolicy="OnFailure",
        template={"spec": {"containers": [], "initContainers": [{"name": "init", "image": "b"}]}},
    )
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


def init_names(pod: dict[str, Any]) -> list[str]:
    return [c["name"] for c in pod["spec"].get("initContainers") or []]


def test_plain_python_replica() -> None:
    job = WORKERS.clone().pod_spec(containers=[SIDECAR, TRAINER]).decoded()
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
    job = (
        WORKERS.clone()
        .pod_spec(containers=[{"name": "main", "image": "t", "args": ["a.py"]}, SIDECAR])
        .decoded()
    )
    pod = rewrite_pod(job, make_pod(job)).pod
    assert "RANK" in env_names(pod["spec"]["containers"][0])
    assert "env" not in pod["spec"]["containers"][1]


def test_torchrun_replaces_the_command_and_keeps_args() -> None:
    job = (
        WORKERS.clone()
        .pod_spec(containers=[TRAINER])
        .spec(torchrunConfig={"enabled": True, "procPerNode": "2"})
        .decoded()
    )
    trainer = rewrite_pod(job, make_pod(job)).pod["spec"]["containers"][0]
    assert trainer["command"][0] == "torchrun"
    assert "--nproc-per-node=2" in trainer["command"]
    assert trainer["args"] == ["train.py", "--lr=1"]


def test_user_env_wins() -> None:
    job = (
        WORKERS.clone()
        .pod_spec(containers=[{**TRAINER, "env": [{"name": "MASTER_PORT", "value": "1234"}]}])
        .decoded()
    )
    env = rewrite_pod(job, make_pod(job)).pod["spec"]["containers"][0]["env"]
    assert [e for e in env if e["name"] == "MASTER_PORT"] == [
        {"name": "MASTER_PORT", "value": "1234"}
    ]


def test_debug_mode_default_and_custom() -> None:
    job = (
        WORKERS.clone()
        .pod_spec(containers=[TRAINER])
        .spec(runMode={"debug": {"enable": True}})
        .decoded()
    )
    pod = rewrite_pod(job, make_pod(job)).pod
    assert pod["spec"]["containers"][0]["command"] == ["sleep", "inf"]
    assert "args" not in pod["spec"]["containers"][0]
    assert init_names(pod) == ["init"], "init containers stay by default; no wait in debug mode"
    custom = (
        WORKERS.clone()
        .pod_spec(containers=[TRAINER])
        .spec(
            runMode={
                "debug": {
                    "enabled": True,
                    "replicaSpecs": [
                        {"type": "worker", "skipInitContainer": True, "command": ["/usr/bin/sshd"]}
                    ],
                }
            }
        )
        .decoded()
    )
    pod = rewrite_pod(custom, make_pod(custom)).pod
    assert pod["spec"]["containers"][0]["command"] == ["/usr/bin/sshd"]
    assert "initContainers" not in pod["spec"], "debug mode waits for nothing"


def test_resume_spec_applies_only_to_resuming_pods() -> None:
    job = (
        WORKERS.clone()
        .pod_spec(containers=[TRAINER])
        .spec(
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
            }
        )
        .decoded()
    )
    fresh = rewrite_pod(job, make_pod(job)).pod
    assert fresh["spec"]["containers"][0]["args"] == ["train.py", "--lr=1"]
    resumed = rewrite_pod(
        job, make_pod(job, annotations={constants.ANNOTATION_RESUMING: "true"})
    ).pod
    assert resumed["spec"]["containers"][0]["args"] == ["train.py", "--resume"]
    assert init_names(resumed) == [WAIT_FOR_MASTER], "the user's are skipped, not the wait"


@pytest.mark.parametrize(
    "spec",
    [
        {},
        {"torchrunConfig": {"enabled": True}},
        {"runMode": {"debug": {"enabled": True}}},
        {
            "runMode": {
                "debug": {
                    "enabled": True,
                    "replicaSpecs": [{"type": "worker", "skipInitContainer": True}],
                }
            }
        },
    ],
    ids=["plain", "torchrun", "debug", "debug-without-init-containers"],
)
def test_rewrite_is_idempotent_and_its_patch_reproduces_it(spec: dict[str, Any]) -> None:
    job = WORKERS.clone().pod_spec(containers=[SIDECAR, TRAINER]).spec(**spec).decoded()
    original = make_pod(job)
    as_admitted = copy.deepcopy(original)
    first = rewrite_pod(job, original)
    assert original == as_admitted  # the rewrite shares parts of it, but changes none
    assert patched(original, first.patch) == first.pod
    second = rewrite_pod(job, first.pod)
    assert second.pod == first.pod
    assert second.patch == []
    assert init_names(second.pod).count(WAIT_FOR_MASTER) == (0 if "runMode" in spec else 1)


def test_pod_of_an_unknown_replica_is_refused() -> None:
    job = WORKERS.clone().pod_spec(containers=[TRAINER]).decoded()
    with pytest.raises(PodRewriteError, match="no replica worker/7"):
        rewrite_pod(job, make_pod(job, index=7))


# --- waiting for the master's name -------------------------------------------------------------


def test_the_first_init_container_waits_for_the_master_with_the_trainers_image_and_limits() -> None:
    trainer = {
        **TRAINER,
        "imagePullPolicy": "IfNotPresent",
        "securityContext": {"runAsNonRoot": True, "allowPrivilegeEscalation": False},
        "resources": {
            "requests": {"cpu": "2", "memory": "4Gi", "nvidia.com/gpu": "1"},
            "limits": {"cpu": "4", "memory": "8Gi", "nvidia.com/gpu": "1"},
        },
    }
    job = WORKERS.clone().pod_spec(containers=[SIDECAR, trainer]).decoded()
    pod = rewrite_pod(job, make_pod(job)).pod
    assert init_names(pod) == [WAIT_FOR_MASTER, "init"]
    wait = pod["spec"]["initContainers"][0]
    assert wait == {
        "name": WAIT_FOR_MASTER,
        "image": "t",
        "imagePullPolicy": "IfNotPresent",
        "command": ["python", "-c", WAIT_SCRIPT],
        "env": [{"name": "MASTER_ADDR", "value": "j-worker-0.ns.svc"}],
        "resources": {
            "requests": {"cpu": "2", "memory": "4Gi"},
            "limits": {"cpu": "4", "memory": "8Gi"},
        },
        "securityContext": {"runAsNonRoot": True, "allowPrivilegeEscalation": False},
    }
    assert wait["securityContext"] is not pod["spec"]["containers"][1]["securityContext"]


@pytest.mark.parametrize(
    ("command", "python"),
    [
        (None, "python3"),
        (["python"], "python"),
        (["/opt/conda/bin/python3.10", "-u"], "/opt/conda/bin/python3.10"),
        (["bash", "-c", "python train.py"], "python3"),
    ],
)
def test_the_wait_runs_the_python_the_trainer_names(command: list[str] | None, python: str) -> None:
    trainer = {"name": "python", "image": "t", "args": ["train.py"]}
    if command:
        trainer["command"] = command
    job = (
        WORKERS.clone()
        .pod_spec(containers=[trainer])
        .spec(torchrunConfig={"enabled": True})
        .decoded()
    )
    pod = rewrite_pod(job, make_pod(job)).pod
    assert pod["spec"]["initContainers"][0]["command"][0] == python
    assert pod["spec"]["initContainers"][0]["resources"] == {}


def test_the_wait_resolves_the_master_address_the_user_set() -> None:
    job = (
        WORKERS.clone()
        .pod_spec(containers=[{**TRAINER, "env": [{"name": "MASTER_ADDR", "value": "10.0.0.7"}]}])
        .decoded()
    )
    wait = rewrite_pod(job, make_pod(job)).pod["spec"]["initContainers"][0]
    assert wait["env"] == [{"name": "MASTER_ADDR", "value": "10.0.0.7"}]


def test_a_job_of_one_replica_waits_for_its_own_name() -> None:
    job = WORKERS.clone().pod_spec(containers=[TRAINER]).decoded()
    assert job.spec and job.spec.replica_specs
    job.spec.replica_specs[0].replicas = 1
    pod = rewrite_pod(job, make_pod(job, index=0)).pod
    assert pod["spec"]["initContainers"][0]["env"][0]["value"] == "j-worker-0.ns.svc"


def test_no_wait_when_torchrun_rendezvouses_through_etcd() -> None:
    job = (
        WORKERS.clone()
        .pod_spec(containers=[TRAINER])
        .spec(torchrunConfig={"enabled": True, "rdzvBackend": "etcd-v2", "extraOptions": ["--x"]})
        .decoded()
    )
    assert init_names(rewrite_pod(job, make_pod(job)).pod) == ["init"]


def test_a_container_already_named_wait_for_master_is_left_alone() -> None:
    job = WORKERS.clone().pod_spec(containers=[TRAINER]).decoded()
    pod = make_pod(job)
    own = {"name": WAIT_FOR_MASTER, "image": "mine"}
    pod["spec"]["initContainers"] = [own]
    assert rewrite_pod(job, pod).pod["spec"]["initContainers"] == [own]


def test_the_wait_script_ends_once_the_name_resolves_and_says_it_waits_until_then() -> None:
    resolved = subprocess.run(
        [sys.executable, "-c", WAIT_SCRIPT],
        env={**os.environ, "MASTER_ADDR": "localhost"},
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    assert resolved.stdout == "localhost resolves\n"
    with pytest.raises(subprocess.TimeoutExpired) as waiting:
        subprocess.run(
            [sys.executable, "-c", WAIT_SCRIPT],
            env={**os.environ, "MASTER_ADDR": "no-such-replica.invalid"},
            capture_output=True,
            text=True,
            timeout=3,
        )
    output = waiting.value.stdout
    lines = (output.decode() if isinstance(output, bytes) else output or "").splitlines()
    # One line at the first failed attempt (unless this machine's resolver takes seconds to
    # fail), then one every 10 seconds, not one per attempt.
    assert len(lines) <= 1, lines
    assert all(
        line.startswith("waiting for no-such-replica.invalid to resolve (") for line in lines
    )


def test_replicas_rewritten_from_one_prepared_job_are_rewritten_as_each_alone() -> None:
    """The webhook prepares a job once and rewrites every replica pod from it: each pod comes
    out as it would from the job alone, ranks and GPU counts of its own included."""
    builder = (
        JobBuilder()
        .metadata(namespace="ns", uid="u1")
        .replicas("master", 1, template={"spec": {"containers": [dict(TRAINER)]}})
        .replicas("worker", 3, template={"spec": {"containers": [dict(TRAINER)]}})
        .torchrun(enabled=True, procPerNode="gpu")
        .elastic(enabled=True, minReplicas=2, maxReplicas=6)
    )
    job = builder.decoded()
    shared = PreparedJob(job)
    ranks = []
    for kind, index, gpus in (("worker", 2, 4), ("master", 0, 8), ("worker", 0, 1)):
        pod = make_typed_pod(job, kind, index)
        pod["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": gpus}}
        alone = rewrite_pod(job, copy.deepcopy(pod))
        together = rewrite_pod(shared, copy.deepcopy(pod))
        assert together.pod == alone.pod
        assert together.patch == alone.patch
        assert patched(pod, together.patch) == together.pod
        env = {e["name"]: e["value"] for e in together.pod["spec"]["containers"][0]["env"]}
        assert env["PET_NPROC_PER_NODE"] == str(gpus)
        ranks.append(env["RANK"])
    assert ranks == ["3", "0", "1"]
    # The variables every replica's list shares are the prepared job's own: no rewrite changed them.
    assert shared.environment == PreparedJob(job).environment


def make_typed_pod(job: PyTorchTrainingJob, kind: str, index: int) -> dict[str, Any]:
    assert job.spec and job.spec.replica_specs
    replica = next(r for r in job.spec.replica_specs if r.type == kind)
    assert replica.template
    labels = {
        constants.LABEL_JOB_NAME: "j",
        constants.LABEL_REPLICA_TYPE: kind,
        constants.LABEL_REPLICA_INDEX: str(index),
    }
    return {
        "metadata": {"name": f"j-{kind}-{index}", "labels": labels},
        "spec": copy.deepcopy(replica.template.spec),
    }


def patched(pod: dict[str, Any], patch: list[dict[str, Any]]) -> dict[str, Any]:
    """`pod` with the rewrite's JSONPatch applied: operations on fields of /spec."""
    spec = copy.deepcopy(pod["spec"])
    for op in patch:
        key = op["path"].removeprefix("/spec/")
        assert "/" not in key, op
        if op["op"] == "remove":
            del spec[key]
        else:
            assert (op["op"] == "replace") == (key in spec), op
            spec[key] = op["value"]
    return {**pod, "spec": spec}
