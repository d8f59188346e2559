"""The torchrun command line and environment that render/ produces, run by the real torchrun for
every kind of torchrunConfig the webhook admits: every process checks RANK, WORLD_SIZE,
LOCAL_RANK and MASTER_ADDR and joins the process group."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from support.cli import SCRIPTS, checks, process, run_to_end
from support.jobs import JobBuilder

CHECK = [str(SCRIPTS / "check_env.py")]


CONFIGS: dict[str, dict[str, Any]] = {
    "c10d": {
        "spec": {"torchrunConfig": {"enabled": True, "rdzvBackend": "c10d"}},
        "replicas": [("worker", 2)],
        "nnodes": "2",
        "nproc": 1,
    },
    "procPerNode-maxRestarts-extraOptions": {
        "spec": {
            "torchrunConfig": {
                "enabled": True,
                "procPerNode": "2",
                "maxRestarts": 2,
                "extraOptions": ["--role", "trainer", "--monitor-interval=1"],
            }
        },
        "replicas": [("master", 1), ("worker", 1)],
        "nnodes": "2",
        "nproc": 2,
        "role": "trainer",
        "max_restarts": "2",
    },
    "elastic-min-max": {
        "spec": {
            "torchrunConfig": {"enabled": True},
            "elastic": {"enabled": True, "minReplicas": 1, "maxReplicas": 2},
        },
        "replicas": [("worker", 2)],
        "nnodes": "1:2",
        "nproc": 1,
    },
    "t9k-older-spelling-minNodes": {
        "spec": {"torchrunConfig": {"enable": True, "minNodes": 1, "procPerNode": "1"}},
        "replicas": [("worker", 2)],
        "nnodes": "1:2",
        "nproc": 1,
    },
}


@pytest.mark.parametrize("config", list(CONFIGS))
def test_torchrun_accepts_the_rendered_command_and_environment(tmp_path: Path, config: str) -> None:
    case = CONFIGS[config]
    builder = JobBuilder(f"tr-{len(config)}")
    for replica_type, count in case["replicas"]:
        builder.replicas(replica_type, count, container=process(CHECK), restartPolicy="ExitCode")
    manifest = builder.spec(**case["spec"]).build()
    finished = run_to_end(manifest, tmp_path)
    assert finished.returncode == 0, "\n".join(finished.stdout[-40:] + finished.stderr)
    assert finished.status["phase"] == "Succeeded"

    started = [line for line in finished.stderr if line.startswith("torchjob: started ")]
    assert len(started) == 2
    for line in started:
        assert f" --nnodes={case['nnodes']} " in line
        assert f" --nproc-per-node={case['nproc']} " in line
    run_id = re.search(r"--rdzv-id=(\S+)", started[0])
    assert run_id is not None

    reports = checks(finished.stdout)
    world = 2 * case["nproc"]
    assert len(reports) == world, finished.stdout
    assert sorted(r["rank"] for r in reports) == list(range(world))
    assert {r["world_size"] for r in reports} == {world}
    assert {r["group_world"] for r in reports} == {world}
    assert {r["group_rank_sum"] for r in reports} == {world * (world - 1) / 2}
    assert {r["master_addr"] for r in reports} == {"127.0.0.1"}
    assert len({r["master_port"] for r in reports}) == 1
    assert {r["run_id"] for r in reports} == {run_id.group(1)}
    by_replica: dict[str, list[dict[str, Any]]] = {}
    for report in reports:
        by_replica.setdefault(report["replica"], []).append(report)
    assert len(by_replica) == 2
    for processes in by_replica.values():
        assert sorted(p["local_rank"] for p in processes) == list(range(case["nproc"]))
        assert {p["local_world_size"] for p in processes} == {case["nproc"]}
        assert len({p["group_rank"] for p in processes}) == 1
    assert sorted(p[0]["group_rank"] for p in by_replica.values()) == [0, 1]
    assert {r["role"] for r in reports} == {case.get("role", "default")}
    assert {r["max_restarts"] for r in reports} == {case.get("max_restarts", "0")}
