"""Gang scheduling on the real control plane: the apiserver flags that serve Kubernetes' own
PodGroups, fake nodes with a fixed number of GPUs for the real kube-scheduler to place pods on,
and scheduling gates the test lifts to choose the order in which pods reach the scheduler."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from kubernetes_asyncio import client

from .controlplane import DEFAULT_CONTROLLERS, ControlPlane
from .operator import install_crds

# Kubernetes 1.37 serves scheduling.k8s.io/v1beta1 (PodGroup, Workload) only with the feature
# gate on and the beta version enabled.
GENERIC_WORKLOAD_GATE = "--feature-gates=GenericWorkload=true"
POD_GROUP_API_ARGS = (GENERIC_WORKLOAD_GATE, "--runtime-config=scheduling.k8s.io/v1beta1=true")
# PodGroups carry a protection finalizer while pods name them; kube-controller-manager's
# controller removes it once none does, so a deleted PodGroup goes.
POD_GROUP_CONTROLLERS = (*DEFAULT_CONTROLLERS, "podgroup-protection-controller")
GPU = "nvidia.com/gpu"
# The gate the test's pods are created with; lifting it hands the pod to the scheduler.
ARRIVAL_GATE = "example.com/arrival"


def add_gpu_nodes(plane: ControlPlane, prefix: str, count: int, gpus: int) -> list[str]:
    """`count` Ready nodes of `gpus` GPUs each, which no kubelet runs (no node lifecycle
    controller runs either, so they stay Ready); pods bound to them stay Pending until the test
    plays their kubelet."""
    names = [f"{prefix}-{n}" for n in range(count)]
    capacity = {"cpu": "64", "memory": "256Gi", "pods": "110", GPU: str(gpus)}
    for name in names:
        node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}}
        plane.kubectl("apply", "-f", "-", input=json.dumps(node))
        status = {
            "status": {
                "capacity": capacity,
                "allocatable": capacity,
                "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}],
            }
        }
        plane.kubectl(
            "patch", "node", name, "--subresource=status", "--type=merge", "-p", json.dumps(status)
        )
        # The apiserver taints every new node not-ready until its kubelet reports; these have
        # none, and no node lifecycle controller runs to lift it.
        plane.kubectl("taint", "nodes", name, "node.kubernetes.io/not-ready:NoSchedule-")
    return names


def gpu_job(
    name: str, replicas: int, scheduler: str, annotations: dict[str, str] | None = None
) -> dict[str, Any]:
    """A torchrun job of `replicas` workers of one GPU each, placed by `scheduler`, whose pods
    wait for ARRIVAL_GATE to be lifted."""
    container = {
        "name": "pytorch",
        "image": "example.invalid/train:1",
        "args": ["train.py"],
        "resources": {"limits": {GPU: "1"}},
    }
    return {
        "apiVersion": "batch.tensorstack.dev/v1beta1",
        "kind": "PyTorchTrainingJob",
        "metadata": {"name": name, "annotations": annotations or {}},
        "spec": {
            "torchrunConfig": {"enable": True, "minNodes": replicas, "procPerNode": "1"},
            "replicaSpecs": [
                {
                    "type": "worker",
                    "replicas": replicas,
                    "restartPolicy": "OnFailure",
                    "template": {
                        "spec": {
                            "schedulerName": scheduler,
                            "schedulingGates": [{"name": ARRIVAL_GATE}],
                            "containers": [container],
                        }
                    },
                }
            ],
        },
    }


async def lift_gate(core: client.CoreV1Api, namespace: str, pod: str) -> None:
    """Lift ARRIVAL_GATE (the only gate), handing the pod to the scheduler."""
    await core.patch_namespaced_pod(
        pod, namespace, [{"op": "remove", "path": "/spec/schedulingGates"}]
    )


@contextlib.contextmanager
def gang_control_plane(scheduler: str, extra_crds: Iterable[Path] = ()) -> Iterator[ControlPlane]:
    """A control plane of its own whose apiserver serves PodGroups, whose controller manager lets
    deleted ones go, with our CRDs (and `extra_crds`) and kube-scheduler placing the pods that
    name `scheduler`."""
    with ControlPlane(
        controllers=POD_GROUP_CONTROLLERS,
        extra_apiserver_args=POD_GROUP_API_ARGS,
        extra_controller_manager_args=(GENERIC_WORKLOAD_GATE,),
    ) as plane:
        install_crds(plane, extra_crds)
        plane.start_scheduler(scheduler, GENERIC_WORKLOAD_GATE)
        yield plane


async def place(core: client.CoreV1Api, namespace: str, pod: str, node: str) -> None:
    """Bind the pod to `node`, as kube-scheduler does."""
    create: Any = core.create_namespaced_binding  # its answer is a Status, not a Binding
    target = {"metadata": {"name": pod}, "target": {"kind": "Node", "name": node}}
    response = await create(namespace, target, _preload_content=False)
    said = await response.text()
    response.release()
    if response.status >= 300:
        raise RuntimeError(f"binding {namespace}/{pod} to {node} refused: {said}")
