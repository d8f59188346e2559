"""What the console's pages show of a job: a slim row of the list, and the details page's summary.
Pure: a job object (as the apiserver returns it) comes in, plain values go out."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from torchjob.api.quantities import format_gpus, job_gpus
from torchjob.api.queries import training_container_in
from torchjob.lifecycle import summary

Object = dict[str, Any]
PHASES = ("Pending", "Running", "Paused", "Resuming", "Succeeded", "Failed")


@dataclass(frozen=True)
class JobRow:
    name: str
    uid: str
    phase: str  # the phase, or why the replicas cannot start
    finished: bool
    running: int
    replicas: int
    restarts: int
    gpus: str
    progress: str
    progress_value: int | None  # 0-100, for the bar
    eta: str
    created: str

    @property
    def dom_id(self) -> str:
        return f"job-{self.uid}"


def kubeflow_phase(job: Object) -> str:
    """A Kubeflow PyTorchJob has no phase: its latest True condition says where it is."""
    latest = summary.latest_condition(job.get("status") or {})
    return str(latest.get("type")) if latest else "Created"


def job_row(job: Object) -> JobRow:
    meta = job.get("metadata") or {}
    status = job.get("status") or {}
    if job.get("kind") == "PyTorchJob":
        phase = kubeflow_phase(job)
        job = {**job, "status": {**status, "phase": phase}}
    percentage = summary.reported_progress(job).get("progressPercentage")
    return JobRow(
        name=str(meta.get("name") or ""),
        uid=str(meta.get("uid") or ""),
        phase=summary.phase_cell(job),
        finished=summary.phase(job) in summary.FINISHED_PHASES,
        running=int((status.get("aggregate") or {}).get("running") or 0),
        replicas=summary.total_replicas(job),
        restarts=int(status.get("backoffCount") or 0),
        gpus=format_gpus(job_gpus(job)),
        progress=summary.progress_text(job),
        progress_value=percentage if isinstance(percentage, int) else None,
        eta=summary.eta_text(job),
        created=str(meta.get("creationTimestamp") or ""),
    )


def matches(row: JobRow, phase: str, text: str) -> bool:
    """Whether a row passes the list's filters: its phase (or start failure) and a part of its
    name."""
    if phase and row.phase != phase:
        return False
    return text.lower() in row.name.lower()


def training_container(job: Object) -> Object:
    """The first replica type's training container, as the pod rewrite chooses it."""
    replicas = (job.get("spec") or {}).get("replicaSpecs") or [{}]
    _, container = training_container_in((replicas[0].get("template") or {}).get("spec") or {})
    return dict(container or {})


def torchrun_line(job: Object) -> str:
    """The torchrun command line the replicas run, as far as the spec says it; '' without
    torchrun."""
    spec = job.get("spec") or {}
    torchrun = spec.get("torchrunConfig") or {}
    if not (torchrun.get("enabled") or torchrun.get("enable")):
        return ""
    container = training_container(job)
    words = ["torchrun", f"--nproc-per-node={torchrun.get('procPerNode', '1')}"]
    words += [str(option) for option in torchrun.get("extraOptions") or []]
    words += [str(arg) for arg in (container.get("command") or [])[1:]]
    words += [str(arg) for arg in container.get("args") or []]
    return " ".join(words)


def pending_reason(job: Object) -> str:
    """Why the job waits, in the words of its conditions (a start failure, an unschedulable or
    queued replica); '' when it does not wait."""
    status = job.get("status") or {}
    if summary.phase(job) not in ("Pending", "Resuming"):
        return ""
    for condition in status.get("conditions") or []:
        failing = condition.get("type") == "StartFailure" and condition.get("status") == "True"
        if failing and condition.get("message"):
            return f"{condition.get('reason')}: {condition.get('message')}"
    latest = summary.latest_condition(status)
    if latest and latest.get("message"):
        return f"{latest.get('reason')}: {latest.get('message')}"
    return ""
