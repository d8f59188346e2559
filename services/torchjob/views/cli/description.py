"""`torchjob get [KIND/]NAME`: the description of one job (its phase, the progress its training
process reports, conditions, replicas, TensorBoard and Events), as `kubectl describe` lays one
out. Pure: the objects as the apiserver returns them (plain JSON dicts) and the time come in, text
goes out."""

from __future__ import annotations

import textwrap
from datetime import UTC, datetime
from typing import Any

from torchjob.api.job_api import api_of
from torchjob.lifecycle.progress import seconds_since_report
from torchjob.render.job_kinds import kind_of
from torchjob.render.tensorboard import PORT as TENSORBOARD_PORT
from torchjob.render.tensorboard import tensorboard_name, tensorboard_url
from torchjob.views.cli.tables import NONE, age, listed_name, parse_time, table, training_view
from torchjob.views.quantities import format_cpu, format_gpus, format_memory, job_requests
from torchjob.views.summary import (
    NO_VALUE,
    diagnosis_record,
    duration,
    eta_text,
    pod_phase,
    pod_reason,
    pod_restarts,
    progress_text,
    replica_pods,
    reported_progress,
)

DIAGNOSIS_LABEL = "Diagnosis:   "
DIAGNOSIS_WIDTH = 100  # the message is up to 1 KiB: wrapped, aligned under its start


def describe(
    job: dict[str, Any],
    pods: list[dict[str, Any]],
    events: list[dict[str, Any]],
    now: datetime,
    *,
    tensorboard_pods: list[dict[str, Any]] | None = None,
    event_limit: int = 20,
    queue: str | None = None,
) -> str:
    """`torchjob get [KIND/]NAME`: the job's phase, its place in a Kueue queue it waits in
    (`queue`, views/queue.py), progress, conditions, replicas, TensorBoard and Events. A job of
    any API is read as its kind reads it: its phase and pause as its API shows them, the rest
    from the PyTorchTrainingJob it stands for (its replicas, and the lifecycle's record with its
    conditions)."""
    view = training_view(job)
    lines = _summary(job, view, now)
    if queue is not None:
        lines.append(f"Queue:       {queue}")
    lines += diagnosis_lines(job)
    lines += ["", "Progress:", *_progress(view, now)]
    lines += ["", "Conditions:", *_conditions((view.get("status") or {}), now)]
    lines += ["", "Replicas:", _replicas(view, pods)]
    if (view.get("spec") or {}).get("tensorboardSpec"):
        lines += ["", "TensorBoard:", *_tensorboard(view, tensorboard_pods)]
    lines += ["", "Events:", _events(events, now, event_limit)]
    return "\n".join(lines) + "\n"


def _summary(job: dict[str, Any], view: dict[str, Any], now: datetime) -> list[str]:
    """The job's name, kind (of another API than PyTorchTrainingJob's), phase, age, times,
    restarts, pause and requests; `view` is the job as `training_view` reads it."""
    meta = job.get("metadata") or {}
    status = view.get("status") or {}
    spec = view.get("spec") or {}
    kind = kind_of(api_of(job))
    lines = [f"Name:        {meta.get('name')}", f"Namespace:   {meta.get('namespace')}"]
    if listed_name(job) != meta.get("name"):  # its name alone does not say its kind
        lines.append(f"Kind:        {kind.api.kind} ({kind.api.api_version})")
    lines += [
        f"Phase:       {kind.phase(job)}",
        f"Age:         {age(meta.get('creationTimestamp'), now)}",
    ]
    if status.get("startTime"):
        lines.append(f"Started:     {status['startTime']}")
    if status.get("completionTime"):
        lines.append(f"Completed:   {status['completionTime']}")
    limit = (spec.get("runPolicy") or {}).get("backoffLimit")
    gang = f", {status['gangRestarts']} of every replica" if status.get("gangRestarts") else ""
    lines.append(
        f"Restarts:    {status.get('backoffCount') or 0}"
        + (f" (backoffLimit {limit})" if limit is not None else "")
        + gang
    )
    if status.get("avoidedNodes"):
        avoided = ", ".join(status["avoidedNodes"])
        lines.append(f"Avoiding:    {avoided} (its replicas kept failing there)")
    if kind.paused(job):
        lines.append(f"Paused:      yes (torchjob resume {listed_name(job)} to start it again)")
    requests = job_requests(view)
    lines.append(
        f"Requests:    {format_gpus(requests.gpus)} GPU(s), {format_cpu(requests.cpu)} CPU, "
        f"{format_memory(requests.memory)} memory in all"
    )
    return lines


def diagnosis_lines(job: dict[str, Any]) -> list[str]:
    """`Diagnosis:   N (reason, <collectedTime or under way>): <message>`, wrapped at
    DIAGNOSIS_WIDTH under its start; none before the job's first diagnosis."""
    record = diagnosis_record(job)
    if not record:
        return []
    when = record.get("collectedTime") or "under way"
    message = str(record.get("message") or "")
    if not record.get("collectedTime"):
        message = f"{record.get('pods') or 0} pod(s) asked at {record.get('askedTime')}"
    text = f"{record.get('number')} ({record.get('reason')}, {when}): {' '.join(message.split())}"
    return textwrap.wrap(
        text,
        width=DIAGNOSIS_WIDTH,
        initial_indent=DIAGNOSIS_LABEL,
        subsequent_indent=" " * len(DIAGNOSIS_LABEL),
        break_long_words=False,
        break_on_hyphens=False,
    )


def _progress(job: dict[str, Any], now: datetime) -> list[str]:
    """What the training process last reported, and how long ago the endpoint received it."""
    report = reported_progress(job)
    if not report:
        return ["  none reported"]
    metrics = [m for m in report.get("metrics") or [] if isinstance(m, dict)]
    since = seconds_since_report(job.get("status") or {}, now)
    return [
        f"  Done:         {progress_text(job)}",
        f"  ETA:          {eta_text(job)}",
        "  Metrics:      "
        + (", ".join(f"{m.get('name')}={m.get('value')}" for m in metrics) or NO_VALUE),
        f"  Last report:  {NO_VALUE if since is None else duration(int(since)) + ' ago'}",
    ]


def _conditions(status: dict[str, Any], now: datetime) -> list[str]:
    conditions = status.get("conditions") or []
    if not conditions:
        return ["  none yet (the reconciler has not seen the job)"]
    rows = [
        [
            str(c.get("type")),
            str(c.get("status")),
            str(c.get("reason") or ""),
            age(c.get("lastTransitionTime"), now),
            str(c.get("message") or ""),
        ]
        for c in conditions
    ]
    return [_indent(table(["TYPE", "STATUS", "REASON", "AGE", "MESSAGE"], rows))]


def _replicas(job: dict[str, Any], pods: list[dict[str, Any]]) -> str:
    rows = []
    for replica, pod in replica_pods(job, pods):
        if pod is None:
            rows.append([replica, NONE, "", "Absent", "0", ""])
            continue
        rows.append(
            [
                replica,
                str(pod["metadata"]["name"]),
                str((pod.get("spec") or {}).get("nodeName") or ""),
                pod_phase(pod),
                str(pod_restarts(pod)),
                pod_reason(pod),
            ]
        )
    return _indent(table(["REPLICA", "POD", "NODE", "PHASE", "RESTARTS", "REASON"], rows))


def _tensorboard(job: dict[str, Any], tensorboard_pods: list[dict[str, Any]] | None) -> list[str]:
    """Whether the job's TensorBoard is ready, where it is and how to reach it."""
    meta = job.get("metadata") or {}
    name, namespace = str(meta.get("name")), str(meta.get("namespace"))
    board = (job.get("status") or {}).get("tensorboard") or {}
    ready = bool(board.get("ready"))
    running = [p for p in tensorboard_pods or [] if pod_phase(p) == "Running"]
    lines = [
        f"  Ready:     {'yes' if ready else 'no'}" + _board_reason(board),
        f"  In-cluster URL: {board.get('url') or tensorboard_url(meta)}",
        f"  Reach it:  torchjob tensorboard {name} -n {namespace}  (port-forward to "
        f"service/{tensorboard_name(name)}:{TENSORBOARD_PORT})",
    ]
    if tensorboard_pods is not None and not running:
        lines.append("  No TensorBoard pod is running yet.")
    return lines


def _events(events: list[dict[str, Any]], now: datetime, limit: int) -> str:
    """The job's latest `limit` Events, oldest first."""
    shown = sorted(events, key=_event_moment)[-limit:]
    if not shown:
        return "  none"
    rows = [
        [
            age(_event_time(e), now),
            str(e.get("type") or ""),
            str(e.get("reason") or ""),
            _involved(e),
            " ".join(str(e.get("message") or e.get("note") or "").split()),
        ]
        for e in shown
    ]
    return _indent(table(["LAST SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE"], rows))


def _board_reason(board: dict[str, Any]) -> str:
    reason = board.get("reason")
    message = board.get("message")
    if not reason and not message:
        return ""
    return f" ({reason or ''}{': ' if reason and message else ''}{message or ''})"


def _indent(text: str) -> str:
    return "\n".join("  " + line for line in text.rstrip("\n").split("\n"))


def _event_time(event: dict[str, Any]) -> str:
    series = event.get("series") or {}
    return str(
        series.get("lastObservedTime")
        or event.get("lastTimestamp")
        or event.get("eventTime")
        or (event.get("metadata") or {}).get("creationTimestamp")
        or ""
    )


def _event_moment(event: dict[str, Any]) -> datetime:
    """When the event last happened, for ordering (the API writes seconds or microseconds)."""
    return parse_time(_event_time(event)) or datetime.min.replace(tzinfo=UTC)


def _involved(event: dict[str, Any]) -> str:
    involved = event.get("involvedObject") or event.get("regarding") or {}
    return f"{str(involved.get('kind') or '').lower()}/{involved.get('name')}"
