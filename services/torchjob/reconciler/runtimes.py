"""A TrainJob's training runtime, copied into the job's status before it starts
(`JobKind.runtime_to_copy`): the runtime is read as the reconciler, checked by the rules of the
torch subset, and written to `status.torchjob.runtime`, so that the job is made from that copy ever
after (api/trainer.py). A runtime deleted, or changed into one torchjob does not run, since the
job was admitted fails the job with Trainer's condition and a Warning Event: nothing waits on a
runtime that will not come."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import structlog

from torchjob.api import constants
from torchjob.api.field_errors import FieldError
from torchjob.api.job_api import api_of
from torchjob.api.kubeflow import STATUS_RECORD
from torchjob.api.trainer import RUNTIME_RECORD, RuntimeRef, runtime_snapshot
from torchjob.api.trainer_admission import runtime_errors
from torchjob.api.trainer_types import GROUP, VERSION
from torchjob.kube.errors import NotFound
from torchjob.kube.events import EventRecorder
from torchjob.kube.expectations import Expectations
from torchjob.kube.informer import ResourceKind
from torchjob.kube.jobs import patch_status
from torchjob.kube.reconcile import JobKey
from torchjob.kube.rest import Resources
from torchjob.lifecycle.times import format_time
from torchjob.render.trainer import runtime_failed_status

log = structlog.get_logger("torchjob.reconciler")


async def copy_runtime(
    resources: Resources,
    events: EventRecorder,
    expectations: Expectations,
    key: JobKey,
    job: dict[str, Any],
    ref: RuntimeRef,
) -> None:
    """Copy the runtime `ref` into the status of `job`, or fail the job where it cannot run."""
    kind = ResourceKind(GROUP, VERSION, ref.plural)
    try:
        runtime = await resources.get(kind, ref.namespace or "", ref.name)
    except NotFound:
        runtime = None
    if runtime is None:
        reason, message = constants.REASON_RUNTIME_NOT_FOUND, f"{ref} was not found"
    elif errors := runtime_errors(runtime.get("spec")):
        reason = constants.REASON_RUNTIME_NOT_SUPPORTED
        message = f"{ref} is not one torchjob runs: {_listed(errors)}"
    else:
        status = {STATUS_RECORD: {RUNTIME_RECORD: runtime_snapshot(runtime)}}
        await _write(resources, expectations, key, job, status)
        log.info("copied the training runtime", job=str(key), runtime=str(ref))
        events.emit(job, "Normal", constants.REASON_RUNTIME_COPIED, f"made from {ref}")
        return
    meta = job["metadata"]
    generation = meta.get("generation") if isinstance(meta.get("generation"), int) else None
    now = format_time(datetime.now(UTC))
    status = runtime_failed_status(job.get("status") or {}, reason, message, now, generation)
    await _write(resources, expectations, key, job, status)
    log.info("the training runtime cannot run", job=str(key), reason=reason)
    events.emit(job, "Warning", reason, message)


async def _write(
    resources: Resources,
    expectations: Expectations,
    key: JobKey,
    job: dict[str, Any],
    status: dict[str, Any],
) -> None:
    version = await patch_status(resources, job["metadata"], status, api_of(job))
    # The next round must see this write, not the job before it.
    expectations.expect_status(key, version)


def _listed(errors: list[FieldError]) -> str:
    return "; ".join(str(error) for error in errors)
