"""Kubeflow Trainer's TrainJob on the real node, driven by the Kubeflow SDK's `TrainerClient` as a
data scientist's notebook drives it, unmodified: a Python function (`CustomTrainer`) that trains
the example's model on two nodes under torchrun, its progress shown by `kubectl get`, its logs,
its status awaited, the job listed and deleted; then a job whose runtime's dataset initializer
writes the data into the volume it shares with the trainer, which reads it. The runtimes are the
team's own (TrainingRuntimes in the namespace, which the SDK looks up first): the image the chart's
torch-distributed names cannot be pulled here."""

from __future__ import annotations

import copy
from typing import Any

from kubeflow.trainer import (
    CustomTrainer,
    CustomTrainerContainer,
    Initializer,
    KubernetesBackendConfig,
    S3DatasetInitializer,
    TrainerClient,
)
from kubeflow.trainer.options import TrainerCommand
from support.node import Node, wait_until
from support.trainer import TORCH_RUNTIME, with_dataset_initializer

TIMEOUT = 600


def train_mnist() -> None:
    """The example's training, one epoch, run by torchrun on each node (the SDK inlines this
    function's source into the pods' command)."""
    import runpy
    import sys

    sys.argv = ["train.py", "--epochs", "1"]
    runpy.run_path("/workspace/train.py", run_name="__main__")


def team_runtime(image: str, runtime: dict[str, Any] = TORCH_RUNTIME) -> dict[str, Any]:
    out = copy.deepcopy(runtime)
    out["kind"] = "TrainingRuntime"
    out["metadata"] = {"name": out["metadata"]["name"], "labels": out["metadata"]["labels"]}
    for job in out["spec"]["template"]["spec"]["replicatedJobs"]:
        pod = job["template"]["spec"]["template"]["spec"]
        for container in pod["containers"]:
            container["image"] = image
            container["imagePullPolicy"] = "IfNotPresent"
            container["resources"] = {"requests": {"cpu": "200m", "memory": "512Mi"}}
    return out


def progress_shown(node: Node, namespace: str, name: str) -> str:
    """The PROGRESS column `kubectl get trainjob` prints, once it shows a number."""
    table = node.kubectl("get", "trainjob", name, "-n", namespace, check=False).stdout
    header, *rows = table.splitlines() or [""]
    if "PROGRESS" not in header or not rows:
        return ""
    # Columns are aligned; an empty one (START, before any start failure) leaves a gap.
    start = header.index("PROGRESS")
    end = header.index("ETA") if "ETA" in header else len(header)
    value = rows[0][start:end].strip()
    return value if value.isdigit() else ""


def test_the_sdk_trains_the_example_on_two_nodes(node: Node, node_namespace: str) -> None:
    node.apply(node_namespace, team_runtime(node.example_image))
    config = KubernetesBackendConfig(namespace=node_namespace, config_file=str(node.kubeconfig))
    trainer = TrainerClient(backend_config=config)
    name = trainer.train(trainer=CustomTrainer(func=train_mnist, num_nodes=2))
    assert name in [job.name for job in trainer.list_jobs()]
    shown = wait_until(
        "progress in kubectl get", lambda: progress_shown(node, node_namespace, name), TIMEOUT
    )
    assert 0 <= int(shown) <= 100
    job = trainer.wait_for_job_status(name, {"Complete"}, timeout=TIMEOUT, polling_interval=2)
    assert job.status == "Complete" and [s.name for s in job.steps] == ["node-0", "node-1"]
    logs = "\n".join(trainer.get_job_logs(name))
    assert "accuracy" in logs.lower(), logs[-2000:]
    stored = node.get("trainjob", name, node_namespace)
    assert stored is not None
    assert stored["status"]["trainerStatus"]["progressPercentage"] == 100
    trainer.delete_job(name)
    wait_until("the job deleted", lambda: name not in [j.name for j in trainer.list_jobs()], 120)


def test_the_trainer_reads_what_the_dataset_initializer_wrote(
    node: Node, node_namespace: str
) -> None:
    runtime = team_runtime(node.example_image, with_dataset_initializer(TORCH_RUNTIME))
    initializer = runtime["spec"]["template"]["spec"]["replicatedJobs"][0]
    container = initializer["template"]["spec"]["template"]["spec"]["containers"][0]
    written = "/workspace/dataset/data.txt"
    script = f'mkdir -p /workspace/dataset && echo "rows from $STORAGE_URI" > {written}'
    container["command"] = ["sh", "-c", script]
    node.apply(node_namespace, runtime)
    config = KubernetesBackendConfig(namespace=node_namespace, config_file=str(node.kubeconfig))
    trainer = TrainerClient(backend_config=config)
    name = trainer.train(
        runtime="torch-with-data",
        initializer=Initializer(dataset=S3DatasetInitializer(storage_uri="s3://team/rows")),
        trainer=CustomTrainerContainer(image=node.example_image, num_nodes=1),
        options=[TrainerCommand(command=["cat", "/workspace/dataset/data.txt"])],
    )
    trainer.wait_for_job_status(name, {"Complete"}, timeout=TIMEOUT, polling_interval=2)
    assert list(trainer.get_job_logs(name)) == ["rows from s3://team/rows"]
