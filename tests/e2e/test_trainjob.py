"""Kubeflow Trainer's TrainJob (trainer.kubeflow.org/v1alpha1) on the real control plane, as a data
scientist drives it with the Kubeflow SDK's `TrainerClient`, unmodified: the webhook admits
TrainJobs against their runtime and rewrites their pods, the reconciler runs them with `--trainer`,
the test plays the kubelet (its log endpoint too). Every refusal of the torch subset is made here
as a user makes it, and read back by the field it names."""

from __future__ import annotations

import asyncio
import copy
import json
from collections.abc import Iterator
from typing import Any

import pytest
from kubeflow.trainer import (
    CustomTrainer,
    CustomTrainerContainer,
    KubernetesBackendConfig,
    TrainerClient,
)
from kubeflow.trainer.options import TrainerCommand
from kubernetes_asyncio import client
from support import ControlPlane
from support.eventually import eventually
from support.kubelet import TestKubelet
from support.kubelet_logs import log_kubelet
from support.operator import reconciler_kubeconfig, start_reconciler
from support.processes import ServiceProcess
from support.trainer import TORCH_RUNTIME, TRAIN_JOB

GROUP, VERSION = "trainer.kubeflow.org", "v1alpha1"
TIMEOUT = 90


@pytest.fixture(scope="module")
def trainer_reconciler(
    control_plane: ControlPlane, webhook_server: ServiceProcess
) -> Iterator[ServiceProcess]:
    """The reconciler running TrainJobs too, under a Lease of its own."""
    process = start_reconciler(
        control_plane,
        reconciler_kubeconfig(control_plane),
        "trainer-r1",
        "--trainer",
        "--lease-name",
        "trainer-e2e-reconciler",
    )
    yield process
    process.close()


def train_mnist() -> None:
    """The function a notebook hands the SDK (it runs in the pods, under torchrun)."""
    print("training")


def sdk(control_plane: ControlPlane, namespace: str) -> TrainerClient:
    config = KubernetesBackendConfig(namespace=namespace, config_file=str(control_plane.kubeconfig))
    return TrainerClient(backend_config=config)


def namespaced_runtime(name: str, image: str) -> dict[str, Any]:
    """Trainer's torch-distributed runtime as a team keeps it in its namespace, on `image`."""
    runtime = copy.deepcopy(TORCH_RUNTIME)
    runtime["kind"] = "TrainingRuntime"
    runtime["metadata"] = {"name": name, "labels": runtime["metadata"]["labels"]}
    node = runtime["spec"]["template"]["spec"]["replicatedJobs"][0]
    node["template"]["spec"]["template"]["spec"]["containers"][0]["image"] = image
    return runtime


async def bind(core: client.CoreV1Api, namespace: str, pod: str, node: str) -> None:
    """Place `pod` on `node`, as the scheduler does (this tier runs none for these pods)."""
    body: Any = {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": pod},
        "target": {"apiVersion": "v1", "kind": "Node", "name": node},
    }
    await core.create_namespaced_binding(namespace, body, _preload_content=False)


async def node_pods(
    core: client.CoreV1Api, namespace: str, job: str, count: int, reconciler: ServiceProcess
) -> list[Any]:
    selector = f"jobset.sigs.k8s.io/jobset-name={job},jobset.sigs.k8s.io/replicatedjob-name=node"

    async def listed() -> list[Any]:
        pods = (await core.list_namespaced_pod(namespace, label_selector=selector)).items
        return sorted(pods, key=lambda p: p.metadata.name) if len(pods) == count else []

    found: list[Any] = await eventually(
        listed, f"{count} node pods of {job}", timeout=TIMEOUT, explain=lambda: said(reconciler)
    )
    return found


def said(service: ServiceProcess) -> str:
    """What the service logged above debug level, lately."""
    lines = service.log_tail(5000).splitlines()
    return "\n".join([line for line in lines if '"level":"debug"' not in line][-20:])


def env_of(pod: Any) -> dict[str, str]:
    node = next(c for c in pod.spec.containers if c.name == "node")
    return {e.name: e.value for e in node.env or [] if e.value is not None}


async def test_the_sdk_trains_a_function_lists_follows_and_deletes_its_job(
    control_plane: ControlPlane,
    admitted_namespace: str,
    kube_client: client.ApiClient,
    trainer_reconciler: ServiceProcess,
) -> None:
    namespace, node = admitted_namespace, f"trainjob-{admitted_namespace[-6:]}"
    core = client.CoreV1Api(kube_client)
    control_plane.kubectl(
        "apply",
        "-n",
        namespace,
        "-f",
        "-",
        input=json.dumps(namespaced_runtime("torch-distributed", "trainer:1")),
    )
    trainer = sdk(control_plane, namespace)
    name = await asyncio.to_thread(
        trainer.train, trainer=CustomTrainer(func=train_mnist, num_nodes=2)
    )
    pods = await node_pods(core, namespace, name, 2, trainer_reconciler)
    first = env_of(pods[0])
    assert (first["PET_NNODES"], first["PET_NODE_RANK"], first["PET_MASTER_PORT"]) == (
        "2",
        "0",
        "29500",
    )
    assert first["PET_MASTER_ADDR"] == f"{name}-node-0"
    assert env_of(pods[1])["PET_NODE_RANK"] == "1"
    command = next(c for c in pods[0].spec.containers if c.name == "node").command
    assert (
        command[:2] == ["bash", "-c"] and "torchrun" in command[2] and "train_mnist()" in command[2]
    )
    assert pods[0].spec.containers[0].image == "trainer:1"

    kubelet = TestKubelet(kube_client, namespace)
    async with log_kubelet(control_plane, node) as logs:
        for pod in pods:
            await bind(core, namespace, pod.metadata.name, node)
            await kubelet.run(pod.metadata.name)
        await logs.log(namespace, pods[0].metadata.name, "node").write("training")

        async def running() -> bool:
            job = await asyncio.to_thread(trainer.get_job, name)
            return job.status == "Running" and [s.name for s in job.steps] == ["node-0", "node-1"]

        await eventually(running, "the SDK to read the job as Running", timeout=TIMEOUT)
        assert list(await asyncio.to_thread(lambda: list(trainer.get_job_logs(name)))) == [
            "training"
        ]
        assert name in [j.name for j in await asyncio.to_thread(trainer.list_jobs)]
        for pod in pods:
            await kubelet.finish(pod.metadata.name, 0)
        done = await asyncio.to_thread(trainer.wait_for_job_status, name, {"Complete"}, TIMEOUT, 1)
        assert done.status == "Complete"
    shown = json.loads(
        control_plane.kubectl("get", "trainjob", name, "-n", namespace, "-o", "json").stdout
    )
    assert [(c["type"], c["reason"]) for c in shown["status"]["conditions"]] == [
        ("Complete", "AllJobsCompleted")
    ]
    # The first node's success ends the job, as a master's does (the others had their grace).
    [nodes] = shown["status"]["jobsStatus"]
    assert nodes["name"] == "node" and nodes["succeeded"] >= 1
    await asyncio.to_thread(trainer.delete_job, name)

    async def gone() -> bool:
        listed = await asyncio.to_thread(trainer.list_jobs)
        return name not in [j.name for j in listed]

    await eventually(gone, "the job deleted", timeout=TIMEOUT)


async def test_a_runtime_and_a_command_and_a_runtime_changed_while_it_runs(
    control_plane: ControlPlane,
    admitted_namespace: str,
    kube_client: client.ApiClient,
    trainer_reconciler: ServiceProcess,
) -> None:
    namespace = admitted_namespace
    core = client.CoreV1Api(kube_client)
    runtime = namespaced_runtime("team-torch", "team:1")
    control_plane.kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(runtime))
    trainer = sdk(control_plane, namespace)
    name = await asyncio.to_thread(
        trainer.train,
        runtime="team-torch",
        trainer=CustomTrainerContainer(image="team:2", num_nodes=1),
        options=[TrainerCommand(command=["torchrun", "/workspace/train.py"])],
    )
    [pod] = await node_pods(core, namespace, name, 1, trainer_reconciler)
    node = next(c for c in pod.spec.containers if c.name == "node")
    assert (node.image, node.command) == ("team:2", ["torchrun", "/workspace/train.py"])
    # The team changes its runtime: the running job keeps what it was made from.
    changed = copy.deepcopy(runtime)
    changed["spec"]["mlPolicy"]["numNodes"] = 4
    control_plane.kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(changed))
    kubelet = TestKubelet(kube_client, namespace)
    await kubelet.finish(pod.metadata.name, 1)  # restarted: its new pod is made from the copy

    async def recreated() -> list[Any]:
        pods = (await core.list_namespaced_pod(namespace)).items
        return [
            p
            for p in pods
            if p.metadata.uid != pod.metadata.uid and p.metadata.name == pod.metadata.name
        ]

    [again] = await eventually(recreated, "the node's pod created again", timeout=TIMEOUT)
    assert next(c for c in again.spec.containers if c.name == "node").image == "team:2"
    shown = json.loads(
        control_plane.kubectl("get", "trainjob", name, "-n", namespace, "-o", "json").stdout
    )
    assert shown["status"]["torchjob"]["runtime"]["spec"]["mlPolicy"]["numNodes"] == 1
    events = control_plane.kubectl("get", "events", "-n", namespace, "-o", "json").stdout
    assert "TrainingRuntimeCopied" in events


def refusal(control_plane: ControlPlane, namespace: str, obj: dict[str, Any]) -> str:
    """The apiserver's answer to creating `obj` (a server-side dry run: nothing is stored)."""
    done = control_plane.kubectl(
        "create", "--dry-run=server", "-n", namespace, "-f", "-", input=json.dumps(obj), check=False
    )
    assert done.returncode != 0, f"admitted: {json.dumps(obj)[:300]}"
    return done.stderr


def runtime_changed(path: str, value: Any) -> dict[str, Any]:
    runtime = namespaced_runtime("refused", "i")
    *parents, key = path.split(".")
    target: Any = runtime["spec"]
    for part in parents:
        target = target[int(part)] if part.isdigit() else target[part]
    target[key] = value
    return runtime


NODE_SPEC = "template.spec.replicatedJobs.0.template.spec"
RUNTIME_REFUSALS = [
    ("mlPolicy", {"numNodes": 1, "mpi": {"numProcPerNode": 1}}, "spec.mlPolicy.mpi"),
    ("mlPolicy", {"numNodes": 1, "jax": {}}, "spec.mlPolicy.jax"),
    ("mlPolicy", {"numNodes": 1, "xgboost": {}}, "spec.mlPolicy.xgboost"),
    ("mlPolicy", {"numNodes": 1, "flux": {"numProcPerNode": 1}}, "spec.mlPolicy.flux"),
    ("mlPolicy", {"numNodes": 1}, "spec.mlPolicy.torch"),
    ("mlPolicy", {"torch": {"envInjection": {"targets": []}}}, "spec.mlPolicy.torch.envInjection"),
    ("podGroupPolicy", {"coscheduling": {}}, "spec.podGroupPolicy"),
    ("template.spec.network", {"enableDNSHostnames": True}, "spec.template.spec.network"),
    ("template", {"metadata": {"labels": {"a": "b"}}}, "spec.template.spec: is required"),
    ("template.spec.replicatedJobs", [], "spec.template.spec.replicatedJobs: needs the `node`"),
    (
        "template.spec.replicatedJobs.0.name",
        "launcher",
        "spec.template.spec.replicatedJobs[0].name",
    ),
    ("template.spec.replicatedJobs.0.replicas", 2, "spec.template.spec.replicatedJobs[0].replicas"),
    (
        f"{NODE_SPEC}.completionMode",
        "Indexed",
        "spec.template.spec.replicatedJobs[0].template.spec.completionMode",
    ),
    (
        f"{NODE_SPEC}.template",
        {"spec": {"containers": [{"name": "trainer", "image": "i"}]}},
        "spec.template.spec.replicatedJobs[0].template.spec.template.spec.containers",
    ),
]


def test_admission_refuses_every_runtime_torchjob_does_not_run_by_field(
    control_plane: ControlPlane, admitted_namespace: str
) -> None:
    for path, value, field in RUNTIME_REFUSALS:
        said = refusal(control_plane, admitted_namespace, runtime_changed(path, value))
        assert field in said, (field, said)
    # A cluster-wide MPI runtime too (Trainer's deepspeed-distributed, as its manifests write it).
    mpi = runtime_changed("mlPolicy", {"numNodes": 1, "mpi": {"numProcPerNode": 1}})
    mpi["kind"], mpi["metadata"]["name"] = "ClusterTrainingRuntime", "deepspeed-distributed"
    assert "spec.mlPolicy.mpi" in refusal(control_plane, admitted_namespace, mpi)


def job_with(**spec: Any) -> dict[str, Any]:
    job = copy.deepcopy(TRAIN_JOB)
    job["metadata"] = {"name": "refused"}
    job["spec"]["runtimeRef"] = {"name": "torch-distributed", "kind": "TrainingRuntime"}
    job["spec"].update(spec)
    return job


PATCH_ON_POD_SPEC = {
    "manager": "m",
    "trainingRuntimeSpec": {
        "template": {
            "spec": {
                "replicatedJobs": [
                    {
                        "name": "node",
                        "template": {"spec": {"template": {"spec": {"nodeSelector": {"a": "b"}}}}},
                    }
                ]
            }
        }
    },
}
TRAINJOB_REFUSALS: list[tuple[dict[str, Any], str]] = [
    (
        {"runtimeRef": {"name": "deepspeed-distributed"}},
        "spec.runtimeRef.name: ClusterTrainingRuntime 'deepspeed-distributed' not found",
    ),
    (
        {"runtimeRef": {"name": "nowhere", "kind": "TrainingRuntime"}},
        "spec.runtimeRef.name: TrainingRuntime 'nowhere' not found",
    ),
    ({"runtimeRef": {"name": "torch-distributed", "kind": "MPIRuntime"}}, "spec.runtimeRef.kind"),
    (
        {"runtimeRef": {"name": "torch-distributed", "apiGroup": "example.dev"}},
        "spec.runtimeRef.apiGroup",
    ),
    ({"managedBy": "example.dev/controller"}, "spec.managedBy"),
    ({"trainer": {"env": [{"name": "PET_NNODES", "value": "8"}]}}, "spec.trainer.env[0].name"),
    (
        {"initializer": {"dataset": {"storageUri": "no-scheme"}}},
        "spec.initializer.dataset.storageUri",
    ),
    ({"initializer": {"model": {"storageUri": "hf://org/model"}}}, "spec.initializer.model"),
    ({"runtimePatches": [PATCH_ON_POD_SPEC]}, "spec.runtimePatches[0].trainingRuntimeSpec"),
    ({"trainer": {"numNodes": 0}}, "spec.trainer.numNodes"),
]


def test_admission_refuses_every_trainjob_torchjob_does_not_run_by_field(
    control_plane: ControlPlane, admitted_namespace: str
) -> None:
    namespace = admitted_namespace
    runtime = namespaced_runtime("torch-distributed", "i")
    control_plane.kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(runtime))
    for spec, said in TRAINJOB_REFUSALS:
        answer = refusal(control_plane, namespace, job_with(**spec))
        assert said in answer, (said, answer)
    # Updates: the trainer is immutable; runtime patches change only while suspended.
    control_plane.kubectl(
        "create", "-n", namespace, "-f", "-", input=json.dumps(job_with(suspend=True))
    )
    image = {"spec": {"trainer": {"image": "other"}}}
    done = control_plane.kubectl(
        "patch",
        "trainjob",
        "refused",
        "-n",
        namespace,
        "--type=merge",
        "-p",
        json.dumps(image),
        check=False,
    )
    assert done.returncode != 0 and "spec.trainer: is immutable" in done.stderr
    patches = [{"manager": "team.example/tool", "trainingRuntimeSpec": {}}]
    resumed = {"spec": {"suspend": False, "runtimePatches": patches}}
    done = control_plane.kubectl(
        "patch", "trainjob", "refused", "-n", namespace, "--type=merge", "-p", json.dumps(resumed),
        check=False,
    )  # fmt: skip
    said = "spec.runtimePatches: may change only while the job is suspended"
    assert done.returncode != 0 and said in done.stderr, done.stderr


def trainjob_shown(control_plane: ControlPlane, namespace: str, name: str) -> dict[str, Any]:
    done = control_plane.kubectl("get", "trainjob", name, "-n", namespace, "-o", "json")
    shown: dict[str, Any] = json.loads(done.stdout)
    return shown


async def test_a_runtime_gone_or_not_run_fails_the_job_saying_why(
    control_plane: ControlPlane, namespace: str, trainer_reconciler: ServiceProcess
) -> None:
    """Past admission (this namespace is not the webhook's), a TrainJob whose runtime is gone, or
    one torchjob does not run, fails at once with Trainer's condition and a Warning Event:
    nothing waits for a runtime that is not coming."""
    mpi = runtime_changed("mlPolicy", {"numNodes": 1, "mpi": {"numProcPerNode": 1}})
    control_plane.kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(mpi))
    for name, runtime in (("gone", "nowhere"), ("mpi", "refused")):
        job = job_with(runtimeRef={"name": runtime, "kind": "TrainingRuntime"})
        job["metadata"]["name"] = name
        control_plane.kubectl("create", "-n", namespace, "-f", "-", input=json.dumps(job))
    expected = {
        "gone": ("TrainingRuntimeNotFound", f"TrainingRuntime {namespace}/nowhere was not found"),
        "mpi": ("TrainingRuntimeNotSupported", "spec.mlPolicy.mpi: torchjob runs PyTorch's"),
    }
    for name, (reason, said) in expected.items():

        def failed(name: str = name) -> dict[str, Any]:
            status = trainjob_shown(control_plane, namespace, name).get("status") or {}
            conditions = status.get("conditions") or []
            return next((c for c in conditions if c["type"] == "Failed"), {})

        condition = await eventually(failed, f"{name} failed", timeout=TIMEOUT)
        assert condition["reason"] == reason and said in condition["message"], condition
    events = json.loads(
        control_plane.kubectl("get", "events", "-n", namespace, "-o", "json").stdout
    )
    warned = {
        (e["involvedObject"]["name"], e["reason"])
        for e in events["items"]
        if e["type"] == "Warning"
    }
    assert {("gone", "TrainingRuntimeNotFound"), ("mpi", "TrainingRuntimeNotSupported")} <= warned
    pods = control_plane.kubectl("get", "pods", "-n", namespace, "-o", "name").stdout
    assert pods == "", "a job that cannot run has no pods"


async def test_a_node_that_cannot_pull_its_image_shows_in_the_start_column(
    control_plane: ControlPlane,
    admitted_namespace: str,
    kube_client: client.ApiClient,
    trainer_reconciler: ServiceProcess,
) -> None:
    namespace = admitted_namespace
    core = client.CoreV1Api(kube_client)
    runtime = namespaced_runtime("torch-distributed", "missing:1")
    control_plane.kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(runtime))
    job = job_with()
    job["metadata"]["name"] = "pull"
    job["spec"]["trainer"]["numNodes"] = 1
    control_plane.kubectl("create", "-n", namespace, "-f", "-", input=json.dumps(job))
    [pod] = await node_pods(core, namespace, "pull", 1, trainer_reconciler)
    kubelet = TestKubelet(kube_client, namespace)
    await kubelet.cannot_start(
        pod.metadata.name, "ImagePullBackOff", 'Back-off pulling image "missing:1"'
    )

    def start_column() -> str:
        table = control_plane.kubectl("get", "trainjob", "pull", "-n", namespace).stdout
        header, row = table.splitlines()
        start = header.index("START")
        return row[start : header.index("PROGRESS")].strip()

    assert await eventually(start_column, "START to say why", timeout=TIMEOUT) == "ImagePullFailed"
    shown = trainjob_shown(control_plane, namespace, "pull")
    assert shown["status"]["conditions"] == []  # the SDK still reads it as waiting to run
    events = control_plane.kubectl("get", "events", "-n", namespace, "-o", "json").stdout
    assert "ImagePullFailed" in events
