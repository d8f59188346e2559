"""The kinds the controllers list and watch, the index of what a job controls, and a job's
work-queue key."""

from __future__ import annotations

from typing import Any

from torchjob.api import constants, types
from torchjob.kube.informer import ResourceKind, controller_uid
from torchjob.kube.reconcile import JobKey

JOBS = ResourceKind(types.GROUP, types.VERSION, types.PLURAL)
PODS = ResourceKind("", "v1", "pods")
SERVICES = ResourceKind("", "v1", "services")
DEPLOYMENTS = ResourceKind("apps", "v1", "deployments")
# The index (over `informer.controller_uid`) of the objects a job controls, by the job's uid.
OWNER_INDEX = "owner"


def owner_job_key(obj: dict[str, Any]) -> JobKey | None:
    """The key of the job controlling a labelled pod or Service; None for one that no job
    controls (someone else made it: ignored, never adopted)."""
    if not controller_uid(obj):
        return None
    meta = obj.get("metadata") or {}
    labels = meta.get("labels") or {}
    return JobKey(str(meta.get("namespace")), str(labels.get(constants.LABEL_JOB_NAME)))
