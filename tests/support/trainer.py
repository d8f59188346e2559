"""Kubeflow Trainer objects the tests share: the chart's `torch-distributed` runtime as Trainer
ships it, one with a dataset initializer, and a TrainJob of each, as the Kubeflow SDK writes it."""

from __future__ import annotations

import copy
from typing import Any

from torchjob.api.kubeflow import STATUS_RECORD
from torchjob.api.trainer import RUNTIME_RECORD, runtime_snapshot

# Trainer v2.3.0's own image of torch-distributed, which the chart ships too.
TORCH_IMAGE = "pytorch/pytorch:2.13.0-cuda13.0-cudnn9-runtime"
TORCH_RUNTIME: dict[str, Any] = {
    "apiVersion": "trainer.kubeflow.org/v1alpha1",
    "kind": "ClusterTrainingRuntime",
    "metadata": {
        "name": "torch-distributed",
        "generation": 1,
        "labels": {"trainer.kubeflow.org/framework": "torch"},
    },
    "spec": {
        "mlPolicy": {"numNodes": 1, "torch": {}},
        "template": {
            "spec": {
                "replicatedJobs": [
                    {
                        "name": "node",
                        "template": {
                            "metadata": {
                                "labels": {"trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}
                            },
                            "spec": {
                                "template": {
                                    "spec": {"containers": [{"name": "node", "image": TORCH_IMAGE}]}
                                }
                            },
                        },
                    }
                ]
            }
        },
    },
}


def with_dataset_initializer(runtime: dict[str, Any]) -> dict[str, Any]:
    """`runtime` with a dataset initializer writing into the `initializer` volume, which the
    node mounts at /workspace too."""
    out = copy.deepcopy(runtime)
    out["metadata"]["name"] = "torch-with-data"
    volume = {"name": "initializer", "emptyDir": {}}
    mount = {"name": "initializer", "mountPath": "/workspace"}
    initializer = {
        "name": "dataset-initializer",
        "template": {
            "spec": {
                "template": {
                    "spec": {
                        "containers": [
                            {
                                "name": "dataset-initializer",
                                "image": "busybox",
                                "command": ["sh", "-c", "echo data > /workspace/dataset/x"],
                                "volumeMounts": [mount],
                            }
                        ],
                        "volumes": [volume],
                    }
                }
            }
        },
    }
    jobs = out["spec"]["template"]["spec"]["replicatedJobs"]
    node = jobs[0]["template"]["spec"]["template"]["spec"]
    node["containers"][0]["volumeMounts"] = [mount]
    node["volumes"] = [volume]
    jobs.insert(0, initializer)
    return out


TRAIN_JOB: dict[str, Any] = {
    "apiVersion": "trainer.kubeflow.org/v1alpha1",
    "kind": "TrainJob",
    "metadata": {"name": "j", "namespace": "ns", "uid": "trainjob-uid"},
    "spec": {
        "runtimeRef": {"name": "torch-distributed"},
        "trainer": {
            "image": "i",
            "command": ["torchrun", "t.py"],
            "numNodes": 2,
            "resourcesPerNode": {"requests": {"cpu": "2"}},
        },
    },
}


def started(job: dict[str, Any], runtime: dict[str, Any] = TORCH_RUNTIME) -> dict[str, Any]:
    """`job` once the reconciler has copied its runtime into its status."""
    out = copy.deepcopy(job)
    record = out.setdefault("status", {}).setdefault(STATUS_RECORD, {})
    record[RUNTIME_RECORD] = runtime_snapshot(runtime)
    return out
