"""examples/mnist-ddp/job.yaml as the real node's tests run it, and what its logs say."""

from __future__ import annotations

import re
from typing import Any

import yaml

from .controlplane import REPO_ROOT

EXAMPLE_JOB = REPO_ROOT / "examples" / "mnist-ddp" / "job.yaml"
Manifest = dict[str, Any]


def example_job(epochs: int) -> Manifest:
    """examples/mnist-ddp/job.yaml as written, with `epochs` epochs."""
    job: Manifest = yaml.safe_load(EXAMPLE_JOB.read_text())
    args = example_container(job)["args"]
    args[args.index("--epochs") + 1] = str(epochs)
    return job


def example_container(job: Manifest) -> Manifest:
    """The training container of the example's only replica spec."""
    container: Manifest = job["spec"]["replicaSpecs"][0]["template"]["spec"]["containers"][0]
    return container


def epochs_logged(logs: str) -> list[int]:
    return [int(epoch) for epoch in re.findall(r"^epoch (\d+)/\d+ ", logs, re.MULTILINE)]


def epochs_resumed_from(logs: str) -> list[int]:
    """The epoch of the checkpoint each rank resumed from, as train.py logs it."""
    return [int(n) for n in re.findall(r"resumed from epoch (\d+) \(checkpoint of rank", logs)]


def accuracy_logged(logs: str) -> float:
    """The last test accuracy train.py logged."""
    return float(re.findall(r"test accuracy ([0-9.]+)", logs)[-1])
