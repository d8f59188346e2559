"""A replica pod as the webhook rewrites it, for the unit tests of what a pod gets."""

from __future__ import annotations

from typing import Any

from support.jobs import JobBuilder
from torchjob.api import constants
from torchjob.api.types import PyTorchTrainingJob
from torchjob.render.pod_rewrite import rewrite_pod


def rendered(policy: str = "OnFailure", **annotations: str) -> dict[str, Any]:
    job = JobBuilder("j").replicas("worker", 2, restartPolicy=policy)
    if annotations:
        job.metadata(annotations=annotations)
    typed = PyTorchTrainingJob.from_dict(job.build())
    pod = {
        "metadata": {
            "labels": {constants.LABEL_REPLICA_TYPE: "worker", constants.LABEL_REPLICA_INDEX: "1"}
        },
        "spec": {"containers": [{"name": "python", "image": "img", "command": ["python", "t.py"]}]},
    }
    spec_: dict[str, Any] = rewrite_pod(typed, pod, in_place=True).pod["spec"]
    return spec_
