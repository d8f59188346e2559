"""The `torchjob` cluster commands as users run them: the installed executable (and the kubectl
plugin) in a process of its own, against the real control plane with the webhook and the
reconciler running; the test plays the kubelet. Logs and the TensorBoard port-forward need a real
kubelet: tests/node/test_cli.py."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
from pathlib import Path
from typing import Any

import yaml
from kubernetes_asyncio import client
from support import ControlPlane
from support.cli import BIN, TORCHJOB, stand_in_kubectl, stop_forwarding
from support.cluster import Job
from support.controlplane import free_port
from support.eventually import eventually
from support.processes import ServiceProcess

from torchjob.api.admission import handle, mutate_job

KUBECTL_TORCHJOB = BIN / "kubectl-torchjob"
TIMEOUT = 120.0


def torchjob(
    control_plane: ControlPlane,
    namespace: str,
    *args: str,
    input: str | None = None,
    executable: Path = TORCHJOB,
    kubeconfig: Path | None = None,
    timeout: float = TIMEOUT,
) -> subprocess.CompletedProcess[str]:
    """`torchjob ARGS --kubeconfig ... -n NAMESPACE`, its output captured."""
    cluster: list[str] = []
    if args and args[0] not in ("run", "completion"):
        config = kubeconfig or control_plane.kubeconfig
        cluster = [f"--kubeconfig={config}", f"--namespace={namespace}"]
    command, rest = (args[:2], args[2:]) if args[:1] == ("top",) else (args[:1], args[1:])
    # Everything after `--` is the job's command: the cluster flags go before it.
    if "--" in rest:
        at = rest.index("--")
        rest = (*rest[:at], *cluster, *rest[at:])
    else:
        rest = (*rest, *cluster)
    return subprocess.run(
        [str(executable), *command, *rest],
        input=input,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "KUBECONFIG": ""},
    )


async def run(
    control_plane: ControlPlane, namespace: str, *args: str, **kw: Any
) -> subprocess.CompletedProcess[str]:
    return await asyncio.to_thread(torchjob, control_plane, namespace, *args, **kw)


def ok(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, f"exit {result.returncode}\n{result.stdout}\n{result.stderr}"
    return result.stdout


SUBMIT: tuple[str, ...] = (
    *("submit", "--name", "train", "--image", "img", "--workers", "2", "--cpu", "500m"),
    *("--memory", "1Gi", "--env", "EPOCHS=3", "--restart-policy", "Never"),
    *("--backoff-limit", "1", "--", "python", "train.py", "--epochs", "3"),
)


async def test_submit_dry_run_round_trips_through_run_and_admission(
    control_plane: ControlPlane, admitted_namespace: str, reconciler: ServiceProcess
) -> None:
    """The printed job is what `torchjob run --dry-run` admits, what the webhook stores
    unchanged (its mutation adds nothing), and what `submit` itself creates."""
    printed = ok(
        await run(
            control_plane, admitted_namespace, *SUBMIT[:1], "--dry-run", "-o", "yaml", *SUBMIT[1:]
        )
    )
    job = yaml.safe_load(printed)
    assert job["metadata"] == {"name": "train", "namespace": admitted_namespace}

    dry = ok(await run(control_plane, admitted_namespace, "run", "--dry-run", "-", input=printed))
    assert next(yaml.safe_load_all(dry)) == job

    review = {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {"uid": "u", "operation": "CREATE", "object": json.loads(json.dumps(job))},
    }
    assert "patch" not in handle(review, mutate_job)["response"]

    await asyncio.to_thread(
        control_plane.kubectl, "create", "-n", admitted_namespace, "-f", "-", input=printed
    )
    stored = json.loads(
        control_plane.kubectl("get", "ptj", "train", "-n", admitted_namespace, "-o", "json").stdout
    )
    assert stored["spec"] == job["spec"]

    # The same flags create the same job (under another name).
    created = ok(
        await run(
            control_plane,
            admitted_namespace,
            "submit",
            "-o",
            "json",
            *SUBMIT[1:2],
            "train-2",
            *SUBMIT[3:],
        )
    )
    assert json.loads(created)["spec"] == job["spec"]


async def test_submit_from_a_file_is_admitted_as_kubectl_apply(
    control_plane: ControlPlane, admitted_namespace: str, reconciler: ServiceProcess, tmp_path: Path
) -> None:
    manifest = yaml.safe_load(
        ok(await run(control_plane, admitted_namespace, SUBMIT[0], "--dry-run", *SUBMIT[1:]))
    )
    del manifest["metadata"]["namespace"]
    container = manifest["spec"]["replicaSpecs"][0]["template"]["spec"]["containers"][0]
    container["comand"] = container.pop("command", ["python"])  # a typo admission refuses
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(manifest))
    refused = await run(control_plane, admitted_namespace, "submit", "-f", str(path))
    assert refused.returncode == 2
    assert "spec.replicaSpecs[0].template.spec.containers[0].comand" in refused.stderr
    assert "not created" not in refused.stdout and refused.stdout == ""

    container["command"] = container.pop("comand")
    path.write_text(yaml.safe_dump(manifest))
    out = ok(await run(control_plane, admitted_namespace, "submit", "-f", str(path)))
    assert f"train created in {admitted_namespace}" in out
    again = await run(control_plane, admitted_namespace, "submit", "-f", str(path))
    assert again.returncode == 2 and "already exists" in again.stderr, again.stderr


async def test_list_get_wait_follow_a_job_to_success(
    control_plane: ControlPlane,
    kube_client: client.ApiClient,
    admitted_namespace: str,
    reconciler: ServiceProcess,
) -> None:
    ok(await run(control_plane, admitted_namespace, *SUBMIT))
    job = Job(kube_client, admitted_namespace, {"metadata": {"name": "train"}})
    await job.wait_pods({"train-worker-0", "train-worker-1"})

    listed = ok(await run(control_plane, admitted_namespace, "list"))
    header, row = listed.splitlines()
    assert header.split() == [
        "NAME",
        "PHASE",
        "REPLICAS",
        "RESTARTS",
        "PROGRESS",
        "ETA",
        "GPUS",
        "AGE",
    ]
    assert row.split()[:7] == ["train", "Pending", "0/2", "0", "-", "-", "0"]

    waiting = asyncio.create_task(
        run(control_plane, admitted_namespace, "wait", "train", "--timeout", "5m")
    )
    await job.run_all()
    await job.wait_phase("Running")

    async def two_running() -> bool:
        out = ok(await run(control_plane, admitted_namespace, "list"))
        return out.splitlines()[1].split()[1:3] == ["Running", "2/2"]

    await eventually(two_running, "list showing 2/2 Running", timeout=TIMEOUT)
    wide = ok(await run(control_plane, admitted_namespace, "list", "-o", "wide"))
    assert wide.splitlines()[0].split()[-3:] == ["QUEUE", "NODES", "REASON"]
    as_json = json.loads(ok(await run(control_plane, admitted_namespace, "list", "-o", "json")))
    assert [j["metadata"]["name"] for j in as_json["items"]] == ["train"]
    assert ok(await run(control_plane, admitted_namespace, "list", "-o", "name")) == "train\n"
    everywhere = ok(await run(control_plane, admitted_namespace, "list", "-A"))
    assert everywhere.splitlines()[0].split()[:2] == ["NAMESPACE", "NAME"]
    assert [admitted_namespace, "train", "Running", "2/2"] in [
        line.split()[:4] for line in everywhere.splitlines()
    ]
    stored = yaml.safe_load(
        ok(await run(control_plane, admitted_namespace, "get", "train", "-o", "yaml"))
    )
    assert stored["status"]["phase"] == "Running"

    described = ok(await run(control_plane, admitted_namespace, "get", "train"))
    assert "Phase:       Running" in described
    assert "AllReplicasRunning" in described  # the Running condition's reason
    replicas = described.split("Replicas:")[1].split("Events:")[0]
    assert "worker-0   train-worker-0" in replicas and "worker-1   train-worker-1" in replicas
    assert "Normal" in described.split("Events:")[1]

    await job.kubelet.finish("train-worker-1", 0)
    await job.kubelet.finish("train-worker-0", 0)
    finished = await asyncio.wait_for(waiting, TIMEOUT)
    assert ok(finished).startswith("job train Succeeded (MasterSucceeded")
    described = ok(await run(control_plane, admitted_namespace, "get", "train"))
    assert "Completed (exit code 0)" in described


async def test_submit_wait_exits_1_when_the_job_fails(
    control_plane: ControlPlane,
    kube_client: client.ApiClient,
    admitted_namespace: str,
    reconciler: ServiceProcess,
) -> None:
    submitted = asyncio.create_task(
        run(control_plane, admitted_namespace, *SUBMIT[:-5], "--wait", "--", "python", "t.py")
    )
    job = Job(kube_client, admitted_namespace, {"metadata": {"name": "train"}})
    await job.wait_pods({"train-worker-0", "train-worker-1"})
    await job.kubelet.finish("train-worker-0", 3)
    result = await asyncio.wait_for(submitted, TIMEOUT)
    assert result.returncode == 1, result.stderr
    assert "job train Failed" in result.stdout
    assert "job train: Pending" in result.stderr  # phase changes are followed on stderr

    timed_out = await run(control_plane, admitted_namespace, "wait", "nothing-here")
    assert timed_out.returncode == 2 and 'job "nothing-here" not found' in timed_out.stderr


async def test_wait_times_out_with_124(
    control_plane: ControlPlane, admitted_namespace: str, reconciler: ServiceProcess
) -> None:
    ok(await run(control_plane, admitted_namespace, *SUBMIT))
    result = await run(control_plane, admitted_namespace, "wait", "train", "--timeout", "1s")
    assert result.returncode == 124, result.stderr
    assert "still Pending after 1s" in result.stderr


async def test_pause_resume_and_delete(
    control_plane: ControlPlane,
    kube_client: client.ApiClient,
    admitted_namespace: str,
    reconciler: ServiceProcess,
) -> None:
    ok(await run(control_plane, admitted_namespace, *SUBMIT))
    job = Job(kube_client, admitted_namespace, {"metadata": {"name": "train"}})
    await job.wait_pods({"train-worker-0", "train-worker-1"})
    await job.run_all()
    await job.wait_phase("Running")

    paused = ok(
        await run(control_plane, admitted_namespace, "pause", "train", "--wait", "--timeout", "2m")
    )
    assert "train paused" in paused and "job train: Paused" in paused
    await job.wait_pods(set())
    stored = await job.get()
    assert stored["spec"]["runMode"]["pause"]["enabled"] is True
    managers = {m["manager"] for m in stored["metadata"]["managedFields"]}
    assert "torchjob-cli" in managers
    again = ok(await run(control_plane, admitted_namespace, "pause", "train"))
    assert "already paused" in again
    assert "Paused:      yes" in ok(await run(control_plane, admitted_namespace, "get", "train"))
    no_pod = await run(control_plane, admitted_namespace, "logs", "train")
    assert no_pod.returncode == 2
    assert "replica worker-0 has no pod now (job phase Paused)" in no_pod.stderr

    ok(await run(control_plane, admitted_namespace, "resume", "train"))
    await job.wait_pods({"train-worker-0", "train-worker-1"})
    await job.run_all()
    await job.wait_phase("Running")

    deleted = ok(
        await run(control_plane, admitted_namespace, "delete", "train", "--wait", "--timeout", "2m")
    )
    assert "train deleted" in deleted
    listed = await run(control_plane, admitted_namespace, "list")
    # "No PyTorchTrainingJobs found", or "No PyTorchTrainingJobs or TrainJobs found" where
    # another test has installed an opt-in API's CRD.
    assert listed.stdout == "" and "No PyTorchTrainingJobs" in listed.stderr


async def test_errors_say_what_to_do(
    control_plane: ControlPlane,
    kube_client: client.ApiClient,
    admitted_namespace: str,
    reconciler: ServiceProcess,
    tmp_path: Path,
) -> None:
    ok(await run(control_plane, admitted_namespace, *SUBMIT))
    missing = await run(control_plane, admitted_namespace, "get", "trian")
    assert missing.returncode == 2
    assert 'job "trian" not found' in missing.stderr and "did you mean train?" in missing.stderr
    for command in (
        ("delete", "tran"),
        ("pause", "trains"),
        ("logs", "Train"),
        ("top", "job", "trai"),
    ):
        refused = await run(control_plane, admitted_namespace, *command)
        assert refused.returncode == 2 and "did you mean train?" in refused.stderr, command

    nobody = await asyncio.to_thread(control_plane.issue_kubeconfig, "nobody")
    forbidden = await run(control_plane, admitted_namespace, "list", kubeconfig=nobody)
    assert forbidden.returncode == 2
    assert "the cluster refused" in forbidden.stderr and "edit and view roles" in forbidden.stderr

    unreachable = _elsewhere(control_plane.kubeconfig, tmp_path / "unreachable.kubeconfig")
    down = await run(control_plane, admitted_namespace, "list", kubeconfig=unreachable)
    assert down.returncode == 2 and "cannot reach the cluster at https://127.0.0.1:" in down.stderr

    no_replica = await run(control_plane, admitted_namespace, "logs", "train", "-r", "worker-7")
    assert "has no replica worker-7; its replicas: worker-0, worker-1" in no_replica.stderr

    await Job(kube_client, admitted_namespace, {"metadata": {"name": "train"}}).wait_pods(
        {"train-worker-0", "train-worker-1"}
    )
    unstarted = await run(control_plane, admitted_namespace, "logs", "train")
    assert "replica worker-0 has not started yet (Pending); -f waits for it" in unstarted.stderr

    no_board = await run(control_plane, admitted_namespace, "tensorboard", "train")
    assert no_board.returncode == 2 and "train has no TensorBoard" in no_board.stderr
    # No housekeeper runs here, so the job's TensorBoard Service is never made.
    board = (*SUBMIT[1:2], "board", *SUBMIT[3:-5], "--data", "logs:/logs", "--tensorboard")
    board += ("--tensorboard-image", "tb", "--logdir", "/logs/board", "--", "python", "t.py")
    ok(await run(control_plane, admitted_namespace, "submit", *board))
    waiting = await run(control_plane, admitted_namespace, "tensorboard", "board")
    assert waiting.returncode == 2
    assert "the TensorBoard Service board-tensorboard does not exist yet" in waiting.stderr
    described = ok(await run(control_plane, admitted_namespace, "get", "board"))
    assert f"http://board-tensorboard.{admitted_namespace}.svc:6006/" in described


async def test_top_job_and_node_from_the_api(
    control_plane: ControlPlane,
    kube_client: client.ApiClient,
    admitted_namespace: str,
    reconciler: ServiceProcess,
) -> None:
    """A Node object with GPUs; one replica bound to it (as the scheduler binds), one not."""
    node = f"gpu-{admitted_namespace}"[:63]
    core = client.CoreV1Api(kube_client)
    create_node: Any = core.create_node
    await create_node({"metadata": {"name": node}})
    try:
        capacity = {"cpu": "8", "memory": "32Gi", "nvidia.com/gpu": "4", "pods": "110"}
        await core.patch_node_status(
            node, {"status": {"capacity": capacity, "allocatable": capacity}}
        )
        submit = [a if a != "500m" else "2" for a in SUBMIT]
        ok(
            await run(
                control_plane,
                admitted_namespace,
                *submit[:-5],
                "--gpus",
                "1",
                "--",
                "python",
                "t.py",
            )
        )
        job = Job(kube_client, admitted_namespace, {"metadata": {"name": "train"}})
        await job.wait_pods({"train-worker-0", "train-worker-1"})
        bind: Any = core.create_namespaced_binding  # its answer is a Status, not a Binding
        await bind(
            admitted_namespace,
            {"metadata": {"name": "train-worker-0"}, "target": {"kind": "Node", "name": node}},
            _preload_content=False,
        )

        tops = ok(await run(control_plane, admitted_namespace, "top", "job", "--no-metrics"))
        header, row = tops.splitlines()
        assert header.split() == [
            "NAME",
            "PHASE",
            "GPUS(REQ)",
            "GPUS(ALLOC)",
            "CPU(REQ)",
            "CPU(ALLOC)",
            "MEMORY(REQ)",
            "MEMORY(ALLOC)",
        ]
        assert row.split() == ["train", "Pending", "2", "1", "4000m", "2000m", "2048Mi", "1024Mi"]

        nodes = ok(await run(control_plane, admitted_namespace, "top", "node", "--no-metrics"))
        line = next(x for x in nodes.splitlines() if x.startswith(node))
        assert line.split() == [
            node,
            "4",
            "1",
            "8000m",
            "2000m",
            "(25%)",
            "32Gi",
            "1024Mi",
            "(3%)",
            "1",
        ]
        # metrics-server is not installed here: the usage columns are left out, not made up.
        assert "USED" not in ok(await run(control_plane, admitted_namespace, "top", "node"))
    finally:
        await core.delete_node(node)


async def test_the_kubectl_plugin_is_the_same_command(
    control_plane: ControlPlane, admitted_namespace: str, reconciler: ServiceProcess
) -> None:
    ok(await run(control_plane, admitted_namespace, *SUBMIT, executable=KUBECTL_TORCHJOB))
    path = f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"
    result = await asyncio.to_thread(
        subprocess.run,
        [str(control_plane.binaries.kubectl), "torchjob", "list", "-n", admitted_namespace],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        env={**os.environ, "PATH": path, "KUBECONFIG": str(control_plane.kubeconfig)},
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[1].split()[0] == "train"
    # kubectl completes `kubectl torchjob get tr<TAB>` through kubectl_complete-torchjob.
    completed = await asyncio.to_thread(
        subprocess.run,
        [
            str(control_plane.binaries.kubectl),
            "__complete",
            "torchjob",
            "get",
            "-n",
            admitted_namespace,
            "tr",
        ],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        env={**os.environ, "PATH": path, "KUBECONFIG": str(control_plane.kubeconfig)},
    )
    assert completed.stdout.splitlines() == ["train", ":4"], completed.stderr
    helped = await run(
        control_plane, admitted_namespace, "completion", "bash", executable=KUBECTL_TORCHJOB
    )
    assert "complete -o default" in ok(helped)


def _elsewhere(kubeconfig: Path, path: Path) -> Path:
    """A copy of `kubeconfig` naming a server nobody listens at."""
    config = yaml.safe_load(kubeconfig.read_text())
    config["clusters"][0]["cluster"]["server"] = f"https://127.0.0.1:{free_port()}"
    path.write_text(yaml.safe_dump(config))
    return path


def test_tensorboard_runs_kubectl_port_forward_and_stops_it(
    control_plane: ControlPlane, admitted_namespace: str, reconciler: ServiceProcess, tmp_path: Path
) -> None:
    """The real forwarding needs a kubelet (tests/node/test_cli.py); here a stand-in kubectl
    shows what torchjob asks of it, that the URL it reports is printed, and that SIGTERM stops
    it with torchjob."""
    board = (*SUBMIT[1:2], "board", *SUBMIT[3:-5], "--data", "logs:/logs", "--tensorboard")
    board += ("--tensorboard-image", "tb", "--logdir", "/logs/board", "--", "python", "t.py")
    ok(torchjob(control_plane, admitted_namespace, "submit", *board))
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "board-tensorboard", "namespace": admitted_namespace},
        "spec": {"ports": [{"port": 6006}]},
    }
    control_plane.kubectl("create", "-f", "-", input=json.dumps(service))
    fake = stand_in_kubectl(tmp_path, 6006)
    argv = [str(TORCHJOB), "tensorboard", "board", f"--kubectl={fake}"]
    argv += [f"--kubeconfig={control_plane.kubeconfig}", f"--namespace={admitted_namespace}"]
    forward = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    first = f"TensorBoard of {admitted_namespace}/board: http://127.0.0.1:41234/\n"
    assert stop_forwarding(forward, first, tmp_path, 60) == [
        "port-forward",
        f"--kubeconfig={control_plane.kubeconfig}",
        f"--namespace={admitted_namespace}",
        "--address=127.0.0.1",
        "service/board-tensorboard",
        ":6006",
    ]
