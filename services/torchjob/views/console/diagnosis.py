"""What a job's page shows of its diagnosis (lifecycle/diagnosis.py): the latest one the
reconciler recorded, a request it has not taken up yet, and where the stacks are (each replica
pod's restart agent's log). Pure.

The record is read where the job's kind keeps the lifecycle's record
(`views.summary.diagnosis_record`), so a PyTorchJob's is read from its `status.torchjob`. Its
message summarizes what the job's own processes reported: the page shows it as the job's
report, escaped, never as the console's words."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlencode

from torchjob.api import constants, queries
from torchjob.render.in_place import AGENT
from torchjob.views.console.rows import replica_choices
from torchjob.views.summary import diagnosis_record

Object = dict[str, Any]
# Why a diagnosis was made, in words, by its reason.
WHY = {
    constants.DIAGNOSIS_REQUESTED: "asked for",
    constants.REASON_NO_PROGRESS: "the job's progress reports stopped past its deadline",
}


@dataclass(frozen=True)
class Diagnosis:
    number: int
    reason: str  # NoProgress (the job's silence asked for it) or Requested
    asked: str  # RFC 3339
    collected: str  # RFC 3339; '' while it is under way
    pods: int  # how many pods were asked
    message: str  # the job's own report, summarized: untrusted text

    @property
    def why(self) -> str:
        return WHY.get(self.reason, "")


@dataclass(frozen=True)
class DiagnosisShown:
    latest: Diagnosis | None  # None before the first
    requested: str  # the job's request the reconciler has not answered yet ('' none)


def diagnosis_shown(job: Object) -> DiagnosisShown:
    """The job's latest diagnosis and a request of it still to be taken up."""
    record = diagnosis_record(job)
    latest = _diagnosis(record) if record else None
    request = queries.diagnosis_request(job.get("metadata") or {}) or ""
    answered = record.get("request") or ""
    return DiagnosisShown(latest, request if request != answered else "")


def _diagnosis(record: Object) -> Diagnosis:
    number, pods = record.get("number"), record.get("pods")
    return Diagnosis(
        number=number if isinstance(number, int) else 0,
        reason=str(record.get("reason") or ""),
        asked=str(record.get("askedTime") or ""),
        collected=str(record.get("collectedTime") or ""),
        pods=pods if isinstance(pods, int) else 0,
        message=str(record.get("message") or ""),
    )


def agent_logs(namespace: str, pods: list[Object]) -> list[tuple[str, str, str]]:
    """(replica as `type-index`, pod, its restart agent's log page) of each of the job's pods
    with a restart agent, in replica order: where a diagnosis's stacks are."""
    with_agent = [pod for pod in pods if _has_agent(pod)]
    query = urlencode({"container": AGENT})
    return [
        (replica, name, f"/ns/{namespace}/pods/{quote(name, safe='')}/log?{query}")
        for name, replica in replica_choices(with_agent)
    ]


def _has_agent(pod: Object) -> bool:
    spec = pod.get("spec") or {}
    containers = (spec.get("containers") or []) + (spec.get("initContainers") or [])
    return any(isinstance(c, dict) and c.get("name") == AGENT for c in containers)
