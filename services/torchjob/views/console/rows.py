"""What the console's pages show of a job: a slim row of the list, and the details page's summary.
Pure: a job object (as the apiserver returns it) comes in, plain values go out."""

from __future__ import annotations

import datetime
import shlex
from dataclasses import dataclass
from typing import Any

from torchjob.api.constants import FINISHED_JOB_PHASES, LABEL_REPLICA_INDEX, LABEL_REPLICA_TYPE
from torchjob.api.job_api import JobApi, api_named
from torchjob.api.objects import latest_condition
from torchjob.api.queries import training_container_in
from torchjob.lifecycle.conditions import START_FAILURE_REASONS
from torchjob.lifecycle.times import parse_time
from torchjob.render.job_kinds import KINDS, JobKind, kind_of
from torchjob.views import summary
from torchjob.views.quantities import format_gpus, job_gpus
from torchjob.views.replica_command import replica_command

Object = dict[str, Any]
# What the list's phase cell can say of a job of each API: its phase as its kind says it, or
# why its replicas cannot start.
PHASES: dict[JobApi, tuple[str, ...]] = {
    api: (*kind.phases, *sorted(START_FAILURE_REASONS)) for api, kind in KINDS.items()
}
# The phase in which a job's replicas run: pausing it then deletes them, keeping its progress.
RUNNING = "Running"


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
    eta: str  # '' when an estimate would mean nothing (paused, finished, at 100 %)
    created: str
    started: str  # RFC 3339, '' before the job's first replicas were made
    finished_at: str  # RFC 3339, '' until the job finishes
    duration: str  # from start to finish, or to now while it runs; '' before it starts
    paused: bool  # the spec asks for a pause (whether or not the replicas are gone yet)
    pausable: bool  # pausing would stop running replicas

    @property
    def dom_id(self) -> str:
        return f"job-{self.uid}"


def job_kind(job: Object) -> JobKind:
    """The kind of a job as the apiserver returns it (by its `kind`)."""
    return kind_of(api_named(str(job.get("kind") or "")))


def training_view(job: Object) -> Object:
    """The PyTorchTrainingJob the job stands for (its kind's own reading of it): its spec and
    the lifecycle's record, whichever API it is written in."""
    return job_kind(job).training_job(job)


def is_paused(job: Object) -> bool:
    return job_kind(job).paused(job)


def job_row(job: Object, now: datetime.datetime | None = None) -> JobRow:
    """The job's row; `now` (default: the current time) ends the duration of a running job."""
    meta = job.get("metadata") or {}
    status = job.get("status") or {}
    kind = job_kind(job)
    record = kind.training_job(job)
    paused = kind.paused(job)
    job = {**job, "status": {**status, "phase": kind.phase(job)}}  # as its kind shows it
    percentage = summary.reported_progress(job).get("progressPercentage")
    started, finished = _times(record)
    return JobRow(
        name=str(meta.get("name") or ""),
        uid=str(meta.get("uid") or ""),
        phase=summary.phase_cell(job),
        finished=summary.phase(job) in FINISHED_JOB_PHASES,
        running=int((status.get("aggregate") or {}).get("running") or 0),
        replicas=summary.total_replicas(job),
        restarts=int(status.get("backoffCount") or 0),
        gpus=format_gpus(job_gpus(job)),
        progress=summary.progress_text(job),
        progress_value=percentage if isinstance(percentage, int) else None,
        eta=eta_shown(record, paused),
        created=str(meta.get("creationTimestamp") or ""),
        started=started,
        finished_at=finished,
        duration=duration_text(started, finished, now or datetime.datetime.now(datetime.UTC)),
        paused=paused,
        pausable=summary.phase(record) == RUNNING and not paused,
    )


def _times(record: Object) -> tuple[str, str]:
    status = record.get("status") or {}
    return str(status.get("startTime") or ""), str(status.get("completionTime") or "")


def duration_text(started: str, finished: str, now: datetime.datetime) -> str:
    """How long the job has run (`12m`, `1h5m`): to its completion, or to `now` while it runs;
    '' before it starts."""
    start = parse_time(started)
    if start is None:
        return ""
    end = parse_time(finished) or now
    return summary.duration(max(0, int((end - start).total_seconds())))


def eta_shown(record: Object, paused: bool) -> str:
    """The time left as the training process estimated it, only while the job runs and the
    estimate says something: not while it pauses or after it ends, and not once it reports
    100 % or no time left (it is finishing, however long that takes)."""
    report = summary.reported_progress(record)
    done = report.get("progressPercentage") == 100 or report.get("estimatedRemainingSeconds") == 0
    if paused or summary.phase(record) != RUNNING or done:
        return ""
    eta = summary.eta_text(record)
    return "" if eta == summary.NO_VALUE else eta


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


def command_line(job: Object) -> str:
    """The command line the job's first replica runs, as its pod is made and rewritten
    (views/replica_command.py), quoted as a shell would need it; '' when its pods cannot be
    made."""
    kind = job_kind(job)
    return shlex.join(replica_command(job, kind.api))


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
    latest = latest_condition(status)
    if latest and latest.get("message"):
        return f"{latest.get('reason')}: {latest.get('message')}"
    return ""


def kubelet_message(pod: Object) -> str:
    """What the kubelet said of the pod's containers, whole (a failed pull's cause is at its
    end): each container's waiting or termination message, else the pod's own."""
    status = pod.get("status") or {}
    said = []
    for container in (status.get("initContainerStatuses") or []) + (
        status.get("containerStatuses") or []
    ):
        state = container.get("state") or {}
        words = (state.get("waiting") or state.get("terminated") or {}).get("message")
        if words:
            said.append(f"{container.get('name')}: {words}")
    return "\n".join(said) or str(status.get("message") or "")


def kubelet_messages(pods: list[Object]) -> list[tuple[str, str]]:
    """(pod, what the kubelet said) of each pod it said something of, by name."""
    named = [(str((p.get("metadata") or {}).get("name") or ""), kubelet_message(p)) for p in pods]
    return sorted((name, said) for name, said in named if said)


def replica_choices(pods: list[Object]) -> list[tuple[str, str]]:
    """(pod, replica as `type-index`) of each replica pod of a job, in replica order: the
    choices of a log page's rank."""

    def replica_of(pod: Object) -> tuple[str, int, str]:
        name = str((pod.get("metadata") or {}).get("name") or "")
        labels = (pod.get("metadata") or {}).get("labels") or {}
        index = str(labels.get(LABEL_REPLICA_INDEX) or "")
        if labels.get(LABEL_REPLICA_TYPE) and index.isdigit():
            return str(labels[LABEL_REPLICA_TYPE]), int(index), name
        return name, 0, name

    ordered = sorted(replica_of(pod) for pod in pods)
    return [(name, f"{kind}-{index}" if kind != name else name) for kind, index, name in ordered]
