"""Kubeflow's PyTorchJobs (kubeflow.org/v1) on the test control plane: manifests as Kubeflow's
users write them (the seed example of tests/data/kubeflow, or built here) and `KubeflowJob`,
`support.cluster.Job` for a PyTorchJob, read as Kubeflow's users read it: its conditions, its
`replicaStatuses`, its pods and Services by Kubeflow's job-name label."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml
from kubernetes_asyncio import client

from support.cluster import Job
from support.eventually import TIMEOUT
from torchjob.api import kubeflow_types

EXAMPLES = Path(__file__).parents[1] / "data" / "kubeflow"
JOB_NAME_LABEL = "training.kubeflow.org/job-name"
OPERATOR_NAME_LABEL = "training.kubeflow.org/operator-name"
REPLICA_TYPE_LABEL = "training.kubeflow.org/replica-type"
REPLICA_INDEX_LABEL = "training.kubeflow.org/replica-index"
JOB_ROLE_LABEL = "training.kubeflow.org/job-role"
OPERATOR_NAME = "pytorchjob-controller"
IMAGE = "docker.io/kubeflowkatib/pytorch-mnist:v1beta1-45c5727"

Manifest = dict[str, Any]


def example(stem: str = "pytorch-simple", name: str | None = None) -> Manifest:
    """tests/data/kubeflow/<stem>.yaml, renamed to `name` if given."""
    loaded = yaml.safe_load((EXAMPLES / f"{stem}.yaml").read_text())
    assert isinstance(loaded, dict)
    if name is not None:
        loaded["metadata"]["name"] = name
    return loaded


def replica_spec(replicas: int, restart_policy: str = "OnFailure") -> dict[str, Any]:
    return {
        "replicas": replicas,
        "restartPolicy": restart_policy,
        "template": {
            "spec": {
                "containers": [
                    {"name": "pytorch", "image": IMAGE, "command": ["python3", "train.py"]}
                ]
            }
        },
    }


def pytorchjob(
    name: str,
    *,
    masters: int = 1,
    workers: int = 1,
    restart_policy: str = "OnFailure",
    run_policy: dict[str, Any] | None = None,
    **spec: Any,
) -> Manifest:
    """A PyTorchJob of `masters` (0 or 1) Master and `workers` Worker replicas, each of one
    `pytorch` container, with `run_policy` and further `spec` fields."""
    specs: dict[str, Any] = {}
    if masters:
        specs["Master"] = replica_spec(masters, restart_policy)
    if workers:
        specs["Worker"] = replica_spec(workers, restart_policy)
    body: dict[str, Any] = {"pytorchReplicaSpecs": specs, **copy.deepcopy(spec)}
    if run_policy is not None:
        body["runPolicy"] = copy.deepcopy(run_policy)
    return {
        "apiVersion": kubeflow_types.API_VERSION,
        "kind": kubeflow_types.KIND,
        "metadata": {"name": name},
        "spec": body,
    }


def pod_names(job: str, masters: int, workers: int) -> set[str]:
    return {f"{job}-master-{i}" for i in range(masters)} | {
        f"{job}-worker-{i}" for i in range(workers)
    }


def condition_of(status: dict[str, Any], kind: str) -> dict[str, Any] | None:
    """The status's condition of type `kind`, if it has one."""
    return next((c for c in status.get("conditions") or [] if c.get("type") == kind), None)


def env_of(container: Any) -> dict[str, str]:
    """A container's environment variables with plain values, by name."""
    return {e.name: e.value for e in container.env or [] if e.value is not None}


class KubeflowJob(Job):
    """One PyTorchJob under test."""

    group = kubeflow_types.GROUP
    version = kubeflow_types.VERSION
    plural = kubeflow_types.PLURAL
    job_name_label = JOB_NAME_LABEL

    def __init__(self, api: client.ApiClient, namespace: str, manifest: Manifest) -> None:
        super().__init__(api, namespace, manifest)

    async def create(self) -> KubeflowJob:
        await super().create()
        return self

    async def exists(self) -> bool:
        try:
            await self.get()
        except client.ApiException as error:
            if error.status == 404:
                return False
            raise
        return True

    async def wait_condition(
        self, kind: str, status: str = "True", timeout: float = TIMEOUT
    ) -> dict[str, Any]:
        """Until the job's condition `kind` has `status`; the job's status then."""

        async def reached() -> bool:
            found = condition_of(await self.status(), kind)
            return found is not None and found.get("status") == status

        await self.wait(f"condition {kind}={status}", reached, timeout)
        return await self.status()

    async def service_objects(self) -> dict[str, Any]:
        listed = await self.core.list_namespaced_service(
            self.namespace, label_selector=f"{JOB_NAME_LABEL}={self.name}"
        )
        return {s.metadata.name: s for s in listed.items}
