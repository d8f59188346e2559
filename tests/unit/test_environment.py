"""Replica topology, injected environment and torchrun argv, against exact expected values."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from support.jobs import JobBuilder

from torchjob.api.types import PyTorchTrainingJobSpec
from torchjob.render.environment import replica_env, torchrun_argv
from torchjob.render.topology import Replica, master_of, replica_at, replicas_of, world_size

HOST = "j-master-0.ns.svc"


TRAINER = {
    "name": "python",
    "image": "i",
    "args": ["t.py"],
    "resources": {"limits": {"nvidia.com/gpu": 4}},
}


def env_of(job: PyTorchTrainingJobSpec, replica: Replica) -> dict[str, str]:
    container = {"resources": {"limits": {"nvidia.com/gpu": 4}}}
    env = replica_env(
        job, replica, job_name="j", namespace="ns", job_uid="uid-1", container=container
    )
    return {e["name"]: e["value"] for e in env}


def test_master_is_the_master_type_even_when_listed_last() -> None:
    job = (
        JobBuilder()
        .replicas("worker", 2, container=TRAINER)
        .replicas("master", 1, container=TRAINER)
        .decoded_spec()
    )
    assert master_of(job) == ("master", 0)
    assert replicas_of(job) == [
        Replica("master", 0, 0),
        Replica("worker", 0, 1),
        Replica("worker", 1, 2),
    ]


def test_without_a_master_type_the_first_replica_is_master() -> None:
    job = (
        JobBuilder()
        .replicas("worker", 3, container=TRAINER)
        .replicas("evaluator", 1, container=TRAINER)
        .decoded_spec()
    )
    assert [(r.type, r.index, r.rank) for r in replicas_of(job)] == [
        ("worker", 0, 0),
        ("worker", 1, 1),
        ("worker", 2, 2),
        ("evaluator", 0, 3),
    ]


REPLICA_TYPES = st.lists(
    st.tuples(st.sampled_from(["master", "worker", "evaluator", "ps", "chief"]), st.integers(1, 6)),
    min_size=1,
    max_size=4,
    unique_by=lambda pair: pair[0],
)


@given(REPLICA_TYPES)
def test_a_replica_looked_up_alone_has_the_rank_the_full_list_gives_it(
    replicas: list[tuple[str, int]],
) -> None:
    builder = JobBuilder()
    for replica_type, count in replicas:
        builder.replicas(replica_type, count, container=TRAINER)
    job = builder.decoded_spec()
    everyone = replicas_of(job)
    assert world_size(job) == len(everyone)
    for replica in everyone:
        assert replica_at(job, replica.type, replica.index) == replica
    for kind, count in replicas:
        assert replica_at(job, kind, count) is None
        assert replica_at(job, kind, -1) is None
    assert replica_at(job, "absent", 0) is None


def test_plain_python_environment() -> None:
    job = JobBuilder().replicas("worker", 4, container=TRAINER).decoded_spec()
    assert env_of(job, Replica("worker", 2, 2)) == {
        "MASTER_ADDR": "j-worker-0.ns.svc",
        "MASTER_PORT": "23456",
        "WORLD_SIZE": "4",
        "RANK": "2",
        "PYTHONUNBUFFERED": "1",
    }


TORCHRUN_CASES = [
    # (torchrunConfig, elastic, expected nnodes, expected nproc, expected extra flags)
    ({"enabled": True}, None, "3", "1", []),
    ({"enable": True, "procPerNode": "2"}, None, "3", "2", []),
    ({"enabled": True, "procPerNode": "gpu"}, None, "3", "4", []),
    ({"enabled": True, "minNodes": 2}, None, "2:3", "1", []),
    ({"enabled": True}, {"enabled": True, "minReplicas": 2, "maxReplicas": 5}, "2:5", "1", []),
    (
        {"enabled": True, "maxRestarts": 3, "extraOptions": ["--monitor-interval=5"]},
        None,
        "3",
        "1",
        ["--monitor-interval=5"],
    ),
    (
        {"enabled": True, "rdzvBackend": "etcd", "extraOptions": ["--rdzv-endpoint=etcd:2379"]},
        None,
        "3",
        "1",
        ["--rdzv-endpoint=etcd:2379"],
    ),
]


@pytest.mark.parametrize(("torchrun", "elastic", "nnodes", "nproc", "extra"), TORCHRUN_CASES)
def test_torchrun_environment_and_argv(
    torchrun: dict[str, Any],
    elastic: dict[str, Any] | None,
    nnodes: str,
    nproc: str,
    extra: list[str],
) -> None:
    job = (
        JobBuilder()
        .replicas("master", 1, container=TRAINER)
        .replicas("worker", 2, container=TRAINER)
        .spec(torchrunConfig=torchrun, **({"elastic": elastic} if elastic else {}))
        .decoded_spec()
    )
    replica = Replica("worker", 1, 2)
    env = env_of(job, replica)
    backend = torchrun.get("rdzvBackend", "c10d")
    restarts = str(torchrun.get("maxRestarts", 0))
    assert env == {
        "MASTER_ADDR": HOST,
        "MASTER_PORT": "23456",
        "WORLD_SIZE": "3",
        "RANK": "2",
        "PYTHONUNBUFFERED": "1",
        "PET_NNODES": nnodes,
        "PET_NPROC_PER_NODE": nproc,
        "PET_NODE_RANK": "2",
        "PET_MASTER_ADDR": HOST,
        "PET_MASTER_PORT": "23456",
        "PET_RDZV_BACKEND": backend,
        "PET_RDZV_ENDPOINT": f"{HOST}:23456",
        "PET_RDZV_ID": "uid-1",
        "PET_MAX_RESTARTS": restarts,
        # torch's own default, which torchrun's agent would replace with 1 (TearDown).
        "TORCH_NCCL_ASYNC_ERROR_HANDLING": "3",
    }
    argv = torchrun_argv(
        job, [{"name": k, "value": v} for k, v in env.items()], ["-m", "train", "--lr=0.1"]
    )
    assert argv == [
        "torchrun",
        f"--nnodes={nnodes}",
        f"--nproc-per-node={nproc}",
        f"--max-restarts={restarts}",
        f"--rdzv-backend={backend}",
        f"--rdzv-endpoint={HOST}:23456",
        "--rdzv-id=uid-1",
        *extra,
        "-m",
        "train",
        "--lr=0.1",
    ]
