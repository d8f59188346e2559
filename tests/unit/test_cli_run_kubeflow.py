"""`torchjob run` of a Kubeflow PyTorchJob with small Python replicas (no torch): admitted with
Kubeflow's defaults and validation (errors name the PyTorchJob's fields), its pods rewritten with
Kubeflow's environment (the master's short name mapped to this machine), its status shown and
written as Kubeflow shows it."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import pytest
import yaml
from support.cli import run_to_end
from support.kubeflow import EXAMPLES, condition_of, pytorchjob

from torchjob.cli.cluster import admitted_pod, first_plan
from torchjob.cli.manifest import admit
from torchjob.views.cli.local import canonical_address, local_command

PYTHON = ["python", "-c"]


def with_commands(manifest: dict[str, Any], **commands: str) -> dict[str, Any]:
    """Each replica type's `pytorch` container running a Python script."""
    for kind, text in commands.items():
        container = manifest["spec"]["pytorchReplicaSpecs"][kind]["template"]["spec"]["containers"][
            0
        ]
        container["command"] = [*PYTHON, textwrap.dedent(text)]
    return manifest


MASTER = """
    import os, socket
    server = socket.create_server((os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])))
    connection, _ = server.accept()
    print("received", connection.recv(100).decode(), "rank", os.environ["RANK"])
    """
WORKER = """
    import os, socket, time
    address = (os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]))
    while True:  # until the master listens, however long that takes (the run's own limit holds)
        try:
            socket.create_connection(address).sendall(("hello from " + os.environ["RANK"]).encode())
            break
        except ConnectionRefusedError:
            time.sleep(0.05)
    names = ("MASTER_ADDR", "PET_MASTER_ADDR", "WORLD_SIZE", "PET_NNODES", "PYTHONUNBUFFERED")
    print(" ".join(f"{n}={os.environ[n]}" for n in names))
    """


def test_an_invalid_pytorchjob_exits_2_naming_its_own_fields(tmp_path: Path) -> None:
    manifest = pytorchjob("bad", workers=1)
    manifest["spec"]["pytorchReplicaSpecs"]["Master"]["replicas"] = 2
    worker = manifest["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]
    worker["containers"][0]["name"] = "main"
    for extra in ((), ("--dry-run",)):
        finished = run_to_end(manifest, tmp_path, *extra)
        assert finished.returncode == 2
        assert finished.stdout == []
        errors = "\n".join(finished.stderr)
        assert "error: spec.pytorchReplicaSpecs.Master.replicas: " in errors
        assert "error: spec.pytorchReplicaSpecs.Worker.template.spec.containers: " in errors


def test_a_kubeflow_api_version_with_another_kind_is_refused(tmp_path: Path) -> None:
    manifest = pytorchjob("pj")
    manifest["kind"] = "TFJob"
    finished = run_to_end(manifest, tmp_path)
    assert finished.returncode == 2
    assert "error: kind: must be PyTorchJob, not 'TFJob'" in finished.stderr


def test_dry_run_prints_the_defaulted_pytorchjob_then_kubeflow_pods(tmp_path: Path) -> None:
    manifest = yaml.safe_load((EXAMPLES / "pytorch-simple.yaml").read_text())
    finished = run_to_end(manifest, tmp_path, "--dry-run")
    assert finished.returncode == 0, finished.stderr
    documents = list(yaml.safe_load_all("\n".join(finished.stdout)))
    assert [d["kind"] for d in documents] == ["PyTorchJob"] + ["Pod", "Service"] * 3
    stored = documents[0]
    assert stored["spec"]["runPolicy"] == {"cleanPodPolicy": "None", "suspend": False}
    assert stored["spec"]["nprocPerNode"] == "auto"
    names = [d["metadata"]["name"] for d in documents[1::2]]
    assert names == [
        "pytorch-simple-master-0",
        "pytorch-simple-worker-0",
        "pytorch-simple-worker-1",
    ]
    worker = documents[5]
    assert worker["metadata"]["ownerReferences"][0]["kind"] == "PyTorchJob"
    assert worker["metadata"]["labels"]["training.kubeflow.org/replica-type"] == "worker"
    container = worker["spec"]["containers"][0]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["MASTER_ADDR"] == "pytorch-simple-master-0"
    assert env["RANK"] == "2" and env["WORLD_SIZE"] == "3" and env["PET_NNODES"] == "3"
    assert container["command"] == ["python3", "/opt/pytorch-mnist/mnist.py", "--epochs=1"]


def test_replicas_meet_at_the_masters_short_name_and_kubeflow_status_is_shown(
    tmp_path: Path,
) -> None:
    manifest = with_commands(pytorchjob("kf", workers=1), Master=MASTER, Worker=WORKER)
    finished = run_to_end(manifest, tmp_path)
    assert finished.returncode == 0, finished.stderr
    assert finished.replica_lines("kf-master-0") == ["received hello from 1 rank 0"]
    assert finished.replica_lines("kf-worker-0") == [
        "MASTER_ADDR=127.0.0.1 PET_MASTER_ADDR=127.0.0.1 WORLD_SIZE=2 PET_NNODES=2 "
        "PYTHONUNBUFFERED=0"
    ]
    status = finished.status  # logs/status.yaml: the PyTorchJob's status
    assert status is not None
    assert [(c["type"], c["status"]) for c in status["conditions"]] == [
        ("Created", "True"),
        ("Running", "False"),
        ("Succeeded", "True"),
    ]
    succeeded = condition_of(status, "Succeeded")
    assert succeeded is not None and succeeded["reason"] == "PyTorchJobSucceeded"
    # The master's success ends the job; the worker, if it has not exited by then, is stopped
    # before the job says so (lifecycle/finishing.py), so only the master's count is certain.
    assert set(status["replicaStatuses"]) == {"Master", "Worker"}
    assert status["replicaStatuses"]["Master"].get("succeeded") == 1
    assert status["torchjob"]["phase"] == "Succeeded"  # the lifecycle's record, kept with it
    assert (
        "torchjob: job PyTorchJob:default/kf: Succeeded (PyTorchJobSucceeded: PyTorchJob kf is "
        "successfully completed.)"
    ) in finished.stderr
    assert "torchjob:   replicaStatuses.Master: succeeded 1" in finished.stderr
    assert any(
        line.startswith("torchjob: restarts 0 (no backoffLimit)") for line in finished.stderr
    )


def test_a_failed_worker_fails_the_pytorchjob_as_kubeflow_says(tmp_path: Path) -> None:
    manifest = with_commands(
        pytorchjob("kf", workers=1, restart_policy="Never"),
        Master="import time; time.sleep(30)",
        Worker="import sys; sys.exit(3)",
    )
    finished = run_to_end(manifest, tmp_path, "--grace-period", "1")
    assert finished.returncode == 1
    failed = condition_of(finished.status, "Failed")
    assert failed is not None and failed["reason"] == "PyTorchJobFailed"
    assert finished.status["conditions"][-1]["type"] == "Failed"
    assert finished.status["replicaStatuses"]["Worker"]["failed"] == 1
    assert any(
        line.startswith("torchjob: job PyTorchJob:default/kf: Failed") for line in finished.stderr
    )


# -- the address mapping, pure ---------------------------------------------------------------------

PORTS = {"kf-master-0.ns.svc": 40001, "kf-worker-0.ns.svc": 40002, "kf-worker-1.ns.svc": 40003}


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("kf-master-0", "kf-master-0.ns.svc"),
        ("kf-master-0.ns", "kf-master-0.ns.svc"),
        ("kf-worker-0:23456", "kf-worker-0.ns.svc:23456"),
        ("kf-master-0.ns.svc", "kf-master-0.ns.svc"),
        ("runs/kf-master-0", "runs/kf-master-0"),  # not wholly a name: left alone
        ("kf-master-0:http", "kf-master-0:http"),
        ("kf-master-0.other", "kf-master-0.other"),
        ("kf-master-00", "kf-master-00"),
    ],
)
def test_a_value_that_is_wholly_a_short_name_is_its_service_host(value: str, expected: str) -> None:
    assert canonical_address(value, PORTS) == expected


def admitted_pods(manifest: dict[str, Any]) -> dict[str, tuple[dict[str, Any], bool]]:
    job = admit(manifest)
    return {
        str(pod["metadata"]["name"]): (pod, item.replica.is_master)
        for item in first_plan(job).create_pods
        if (pod := admitted_pod(job, item.replica, item.annotations))
    }


def test_a_kubeflow_pod_runs_its_pytorch_container_on_local_addresses() -> None:
    manifest = pytorchjob("kf", workers=2)
    manifest["metadata"]["namespace"] = "ns"
    for kind in ("Master", "Worker"):
        pod_spec = manifest["spec"]["pytorchReplicaSpecs"][kind]["template"]["spec"]
        pod_spec["containers"].insert(0, {"name": "sidecar", "image": "s", "command": ["sleep"]})
        pod_spec["containers"][1]["env"] = [
            {"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}
        ]
        pod_spec["containers"][1]["args"] = ["--master", "$(MASTER_ADDR):$(MASTER_PORT)"]
    pods = admitted_pods(manifest)
    pod, is_master = pods["kf-worker-1"]
    command = local_command(
        admit(manifest).spec, pod, PORTS, is_master=is_master, container_name="pytorch"
    )
    assert command.argv == ["python3", "train.py", "--master", "127.0.0.1:40001"]
    assert command.env["MASTER_ADDR"] == command.env["PET_MASTER_ADDR"] == "127.0.0.1"
    assert command.env["MASTER_PORT"] == command.env["PET_MASTER_PORT"] == "40001"
    assert command.env["RANK"] == "2" and command.env["WORLD_SIZE"] == "3"
    assert command.env["POD"] == "kf-worker-1"  # the pod's own name is not an address
    assert command.notes == ["only the training container runs here; not run: sidecar"]


def test_an_elastic_kubeflow_job_rendezvous_at_worker_0() -> None:
    manifest = pytorchjob("kf", masters=0, workers=2, elasticPolicy={"maxReplicas": 2})
    manifest["metadata"]["namespace"] = "ns"
    ports = {k: v for k, v in PORTS.items() if "worker" in k}
    spec = admit(manifest).spec
    envs = {
        name: local_command(spec, pod, ports, is_master=master, container_name="pytorch").env
        for name, (pod, master) in admitted_pods(manifest).items()
    }
    assert {e["PET_RDZV_ENDPOINT"] for e in envs.values()} == {"127.0.0.1:40002"}
    assert envs["kf-worker-0"]["PET_LOCAL_ADDR"] == "127.0.0.1"
    assert "PET_RDZV_CONF" not in envs["kf-worker-0"]  # the endpoint's replica hosts the store
    assert envs["kf-worker-1"]["PET_RDZV_CONF"] == "is_host=false"
