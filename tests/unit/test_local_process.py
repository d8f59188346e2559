"""A replica's pod as a local process (views/cli/local.py) and the pod status a local process stands
for (lifecycle/local.py)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from support.jobs import JobBuilder

from torchjob.api.types import PyTorchTrainingJob, PyTorchTrainingJobSpec
from torchjob.lifecycle.local import exit_code_of, local_pod_status
from torchjob.lifecycle.observe import view_pod
from torchjob.render.pod_rewrite import rewrite_pod
from torchjob.render.replica_objects import render_pod
from torchjob.render.topology import replicas_of
from torchjob.views.cli.local import LocalRenderError, expand, gpu_shares, local_command, localize

META = {"name": "j", "namespace": "ns", "uid": "uid-1", "generation": 1}
PORTS = {"j-master-0.ns.svc": 40001, "j-worker-0.ns.svc": 40002}


# A master and a worker of CONTAINER (`python t.py`).
MASTER_AND_WORKER = JobBuilder().metadata(**META).replicas("master", 1).replicas("worker", 1)


def pod_of(typed: PyTorchTrainingJob, rank: int) -> dict[str, Any]:
    spec = typed.spec or PyTorchTrainingJobSpec()
    replica = replicas_of(spec)[rank]
    return rewrite_pod(typed, render_pod(META, spec, replica, {})).pod


def command_of(typed: PyTorchTrainingJob, rank: int, gpus: list[str] | None = None) -> Any:
    spec = typed.spec or PyTorchTrainingJobSpec()
    return local_command(spec, pod_of(typed, rank), PORTS, is_master=rank == 0, gpus=gpus)


def test_plain_replica_addresses_become_local() -> None:
    command = command_of(MASTER_AND_WORKER.decoded(), 1)
    assert command.argv == ["python", "t.py"]
    assert command.env["MASTER_ADDR"] == "127.0.0.1"
    assert command.env["MASTER_PORT"] == "40001"  # the master's own port
    assert command.env["RANK"] == "1"
    assert "PET_RDZV_CONF" not in command.env


def test_torchrun_replicas_rendezvous_at_the_masters_port() -> None:
    typed = MASTER_AND_WORKER.clone().torchrun(rdzvBackend="c10d").decoded()
    master, worker = command_of(typed, 0), command_of(typed, 1)
    for command in (master, worker):
        assert command.argv[0] == "torchrun"
        assert "--rdzv-endpoint=127.0.0.1:40001" in command.argv
        assert command.env["PET_RDZV_ENDPOINT"] == "127.0.0.1:40001"
        assert command.env["PET_MASTER_PORT"] == "40001"
        assert command.env["PET_LOCAL_ADDR"] == "127.0.0.1"
    assert "PET_RDZV_CONF" not in master.env  # the master hosts the store, as on a cluster
    assert worker.env["PET_RDZV_CONF"] == "is_host=false"


def test_a_users_rdzv_conf_is_left_alone() -> None:
    command = command_of(
        MASTER_AND_WORKER.clone()
        .torchrun(rdzvBackend="c10d", extraOptions=["--rdzv-conf=timeout=900"])
        .decoded(),
        1,
    )
    assert "PET_RDZV_CONF" not in command.env


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("j-master-0.ns.svc", "127.0.0.1"),
        ("j-master-0.ns.svc:23456", "127.0.0.1:40001"),
        ("tcp://j-worker-0.ns.svc.cluster.local:23456/x", "tcp://127.0.0.1:40002/x"),
        ("j-master-0.ns.svc:29500", "127.0.0.1:29500"),  # not the Service's port: kept
        ("xj-master-0.ns.svc", "xj-master-0.ns.svc"),
        ("j-master-0.ns.svcx", "j-master-0.ns.svcx"),
        ("j-master-0.ns.svc.other", "j-master-0.ns.svc.other"),
        ("j-master-0", "j-master-0"),
    ],
)
def test_localize(text: str, expected: str) -> None:
    assert localize(text, PORTS) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("$(A)-$(B)", "1-$(B)"),
        ("$$(A)", "$(A)"),
        ("$$", "$"),
        ("$(A", "$(A"),
        ("a$b", "a$b"),
        ("$", "$"),
    ],
)
def test_expand_like_the_kubelet(text: str, expected: str) -> None:
    assert expand(text, {"A": "1"}) == expected


@given(st.text())
def test_expand_without_references_changes_nothing(text: str) -> None:
    plain = text.replace("$", "")
    assert expand(plain, {"A": "1"}) == plain


def test_env_values_fields_and_what_cannot_be_read() -> None:
    env = [
        {"name": "A", "value": "x"},
        {"name": "B", "value": "$(A)-$(RANK)"},
        {"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": "IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
        {"name": "ROLE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.labels['x']"}}},
        {"name": "S", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}},
    ]
    command = command_of(
        MASTER_AND_WORKER.clone().container(env=env, args=["$(B)", "$(POD)"]).decoded(), 0
    )
    assert command.env["B"] == "x-$(RANK)"  # RANK comes later in the list
    assert command.env["POD"] == "j-master-0"
    assert command.env["IP"] == "127.0.0.1"
    assert command.env["ROLE"] == ""
    assert "S" not in command.env
    assert command.argv == ["python", "x-$(RANK)", "j-master-0"]
    assert command.notes == ["env S is read from secretKeyRef, which is not available here"]


def test_a_container_without_command_cannot_run_locally() -> None:
    typed = MASTER_AND_WORKER.clone().container(command=None).decoded()
    with pytest.raises(LocalRenderError, match=r"spec.containers\[0\].command is empty"):
        command_of(typed, 0)


def test_gpu_shares() -> None:
    gpus = ["0", "1", "2", "3"]
    assert gpu_shares([2, 2], gpus) == [["0", "1"], ["2", "3"]]
    assert gpu_shares([4, 4], gpus) == [["0", "1"], ["2", "3"]]  # an equal share of what there is
    assert gpu_shares([1, 0, 1], gpus) == [["0"], [], ["1"]]
    assert gpu_shares([0, 0], []) == [[], []]
    with pytest.raises(LocalRenderError, match="each needs at least one"):
        gpu_shares([1, 1, 1], ["0", "1"])


def test_proc_per_node_gpu_counts_the_replicas_share() -> None:
    typed = (
        MASTER_AND_WORKER.clone()
        .torchrun(rdzvBackend="c10d", procPerNode="gpu")
        .container(resources={"limits": {"nvidia.com/gpu": 4}})
        .decoded()
    )
    command = command_of(typed, 1, gpus=["2", "3"])
    assert command.env["CUDA_VISIBLE_DEVICES"] == "2,3"
    assert command.env["PET_NPROC_PER_NODE"] == "2"
    assert "--nproc-per-node=2" in command.argv


def test_a_replica_without_gpus_sees_none_where_there_are_some() -> None:
    assert command_of(MASTER_AND_WORKER.decoded(), 0, gpus=[]).env["CUDA_VISIBLE_DEVICES"] == ""
    assert "CUDA_VISIBLE_DEVICES" not in command_of(MASTER_AND_WORKER.decoded(), 0).env


@pytest.mark.parametrize(("returncode", "code"), [(0, 0), (1, 1), (-9, 137), (-15, 143), (-2, 130)])
def test_exit_codes_as_a_container_runtime_reports_them(returncode: int, code: int) -> None:
    assert exit_code_of(returncode) == code


@pytest.mark.parametrize(
    ("exit_code", "phase"), [(None, "Running"), (0, "Succeeded"), (137, "Failed")]
)
def test_the_lifecycle_reads_a_local_pod_as_a_kubelet_reported_one(
    exit_code: int | None, phase: str
) -> None:
    pod = pod_of(MASTER_AND_WORKER.decoded(), 0)
    pod["metadata"]["uid"] = "pod-uid"
    now = datetime(2026, 1, 1, tzinfo=UTC)
    pod["status"] = local_pod_status(pod, now, exit_code, now if exit_code is not None else None)
    view = view_pod(pod)
    assert view is not None
    assert (view.phase, view.exit_code, view.uid) == (phase, exit_code, "pod-uid")
    assert (view.replica_type, view.index) == ("master", 0)
