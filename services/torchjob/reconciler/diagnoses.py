"""Carries out a plan's diagnosis (lifecycle/diagnosis.py): asks the pods, then reads each pod's
summary from the tail of its restart agent's log and writes what they say.

Asking is a merge patch of one annotation on each pod, with its uid as a precondition; a pod
gone or replaced since is skipped (its report will be missing, and the summary says so).
Collecting reads a bounded tail of each agent's log, a few pods at a time; a log that cannot be
read counts as a missing report."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any, Final

import structlog

from torchjob.api import constants
from torchjob.kube.errors import Conflict, KubeError, NotFound
from torchjob.kube.events import EventRecorder
from torchjob.kube.reconcile import JobKey
from torchjob.kube.resources import PODS
from torchjob.kube.rest import Resources
from torchjob.lifecycle import diagnosis
from torchjob.lifecycle.hang import report_in, summarize
from torchjob.render.in_place import AGENT

log = structlog.get_logger("torchjob.reconciler")

TAIL_LINES: Final = 4
TAIL_BYTES: Final = 256 * 1024
AT_ONCE: Final = 8


class Diagnoses:
    def __init__(self, resources: Resources, events: EventRecorder) -> None:
        self.resources = resources
        self.events = events

    async def ask(self, key: JobKey, job: dict[str, Any], ask: diagnosis.Ask) -> None:
        namespace = job["metadata"]["namespace"]
        annotations = {constants.ANNOTATION_DIAGNOSES_ASKED: str(ask.number)}
        for name, uid in ask.pods:
            patch = {"metadata": {"uid": uid, "annotations": annotations}}
            try:
                await self.resources.patch(PODS, namespace, name, patch)
            except (NotFound, Conflict):
                continue
        log.info("diagnosis asked", job=str(key), number=ask.number, pods=len(ask.pods))

    async def collect(
        self, key: JobKey, job: dict[str, Any], collect: diagnosis.Collect, status: dict[str, Any]
    ) -> dict[str, Any]:
        """The reports, summarized into `status`'s diagnosis (returned), and its Event."""
        namespace = job["metadata"]["namespace"]
        gate = asyncio.Semaphore(AT_ONCE)

        async def report_of(name: str) -> dict[str, Any] | None:
            async with gate:
                try:
                    tail = await self.resources.log_tail(
                        namespace, name, AGENT, TAIL_LINES, TAIL_BYTES
                    )
                except KubeError as error:
                    log.info("diagnosis report unread", job=str(key), pod=name, error=str(error))
                    return None
            return report_in(tail, collect.number)

        names = [pod.name for pod in collect.pods]
        reports = dict(zip(names, await asyncio.gather(*map(report_of, names)), strict=True))
        message = summarize(collect.pods, reports)
        record = diagnosis.collected(diagnosis.recorded(status), message, datetime.now(UTC))
        stalled = record.get("reason") == constants.REASON_NO_PROGRESS
        said = f"diagnosis {collect.number} ({record.get('reason')}): {message}"
        log.info("diagnosis collected", job=str(key), number=collect.number, summary=message)
        self.events.emit(job, "Warning" if stalled else "Normal", constants.REASON_DIAGNOSED, said)
        return record
