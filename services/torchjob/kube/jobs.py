"""Writes to PyTorchTrainingJobs that more than one service makes."""

from __future__ import annotations

from typing import Any

from torchjob.api.job_api import TRAINING_JOB, JobApi
from torchjob.kube.resources import job_resource
from torchjob.kube.rest import Resources


async def patch_status(
    resources: Resources,
    meta: dict[str, Any],
    status: dict[str, Any],
    api: JobApi = TRAINING_JOB,
) -> str:
    """A JSON merge patch of the job's status subresource: each key given replaces the stored one
    (a list as a whole), None removes it, and the keys not given are left alone, so the
    reconciler and the housekeeper each write only their own part of the status. Returns the
    job's resourceVersion after the write."""
    return await resources.patch(
        job_resource(api), meta["namespace"], meta["name"], {"status": status}, subresource="status"
    )
