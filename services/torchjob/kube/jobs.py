"""Writes to PyTorchTrainingJobs that more than one service makes."""

from __future__ import annotations

from typing import Any

from kubernetes_asyncio import client

from torchjob.api import constants
from torchjob.api.job_api import TRAINING_JOB, JobApi
from torchjob.kube.client import unread
from torchjob.kube.errors import translated


async def patch_status(
    objects: client.CustomObjectsApi,
    meta: dict[str, Any],
    status: dict[str, Any],
    api: JobApi = TRAINING_JOB,
) -> None:
    """A JSON merge patch of the job's status subresource: each key given replaces the stored one
    (a list as a whole), None removes it, and the keys not given are left alone, so the
    reconciler and the housekeeper each write only their own part of the status."""
    # The client's stubs omit _content_type, which the call accepts.
    patch: Any = objects.patch_namespaced_custom_object_status
    async with translated():
        # The reply (the whole job) is read, not decoded: nothing uses it.
        await unread(
            patch(
                api.group,
                api.version,
                meta["namespace"],
                api.plural,
                meta["name"],
                {"status": status},
                field_manager=constants.FIELD_MANAGER,
                _content_type="application/merge-patch+json",
                _preload_content=False,
            )
        )
