"""`torchjob diagnose NAME`: ask for a diagnosis of where the job's training processes are, as
the user, and print what the reconciler found, then the stacks behind it.

Asking is what the console's Diagnose button does: the job's ANNOTATION_DIAGNOSE set to the time
now (a merge patch by our field manager; each new value asks one, lifecycle/diagnosis.py). The
reconciler answers in the job's status.diagnosis (read where the job's kind keeps the lifecycle's
record, views/cli/description.py): its `request` is the value answered, and `collectedTime`
comes once each running pod's restart agent has printed its stacks, about COLLECT_SECONDS later.
The stacks stay in each replica pod's `restart-agent` log (render/agent/restart_agent.py): for
diagnosis N, blocks headed `=== torchjob diagnosis N: pid P rank R (argv) ===`, ended by the
report line the reconciler reads, which is left out here."""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from typing import Any, Final

from torchjob.api.constants import ANNOTATION_DIAGNOSE
from torchjob.api.job_api import api_of
from torchjob.cli.command_parser import CommandParser
from torchjob.cli.commands import EXIT_SUCCEEDED, EXIT_TIMEOUT, now, target_of
from torchjob.cli.connection import CliError, Cluster, connect
from torchjob.cli.parsers import (
    CLUSTER_FLAGS,
    JOB_HELP,
    JOB_METAVAR,
    add_cluster_flags,
    job_argument,
)
from torchjob.lifecycle.diagnosis import COLLECT_SECONDS
from torchjob.lifecycle.times import format_micro_time
from torchjob.render.agent.restart_agent import REPORT_PREFIX
from torchjob.render.in_place import AGENT
from torchjob.render.job_kinds import kind_of
from torchjob.views.cli.job_reference import JobRef
from torchjob.views.summary import diagnosis_record, replica_pods

DEFAULT_TIMEOUT: Final = 60.0
POLL_SECONDS: Final = 1.0
HEADING: Final = "=== torchjob diagnosis "


def add_diagnose_command(commands_: Any) -> None:
    """`torchjob diagnose NAME`, with the cluster flags of a one-namespace command."""
    cluster = CommandParser(add_help=False)
    add_cluster_flags(cluster.option_group("cluster"), everywhere=False, after_verb=True)
    cluster.set_defaults(cluster_flags=tuple(n for n in CLUSTER_FLAGS if n != "all_namespaces"))
    diagnose = commands_.add_parser(
        "diagnose",
        parents=[cluster],
        help="where a job's training processes are: every rank's Python stacks",
        description="Ask for a diagnosis of the job (its batch.tensorstack.dev/diagnose "
        "annotation set to the time now), wait for the reconciler's answer in "
        "status.diagnosis and print its summary (which ranks wait in which collective, which "
        "are elsewhere, which did not answer), then each replica pod's stacks from its "
        "restart-agent log. Exit 124 when no answer comes within --timeout.",
    )
    diagnose.add_argument("job", metavar=JOB_METAVAR, type=job_argument, help=JOB_HELP)
    diagnose.add_argument(
        "--timeout",
        type=_seconds,
        default=DEFAULT_TIMEOUT,
        metavar="SECONDS",
        help=f"how long to wait for the answer (default: {DEFAULT_TIMEOUT:g}; or 90s, 2m)",
    )
    diagnose.add_argument(
        "--summary", action="store_true", help="print the summary only, not the pods' stacks"
    )
    diagnose.set_defaults(run=diagnose_job)


def _seconds(text: str) -> float:
    units = {"s": 1, "m": 60}
    try:
        value = float(text[:-1]) * units[text[-1]] if text[-1:] in units else float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: write seconds, or 90s, 2m") from None
    if value <= 0:
        raise argparse.ArgumentTypeError("must be more than 0")
    return value


async def diagnose_job(args: argparse.Namespace) -> int:
    ref: JobRef = args.job
    async with connect(target_of(args)) as cluster:
        job = await cluster.get_job(ref.name, ref.api)
        ended = kind_of(ref.api).outcome(job)
        if ended is not None:
            raise CliError(f"job {ref} has ended ({ended}): no training process to diagnose")
        request = format_micro_time(now())
        patch = {"metadata": {"annotations": {ANNOTATION_DIAGNOSE: request}}}
        await cluster.patch_job(ref.name, patch, ref.api)
        sys.stderr.write(f"asked for a diagnosis of job {ref} ({request})\n")
        sys.stderr.flush()
        job, record = await _until_answered(cluster, ref, request, args.timeout)
        sys.stdout.write(summary_line(record) + "\n")
        sys.stdout.flush()
        if not args.summary:
            pods = await cluster.job_pods(ref.name, ref.api, all_namespaces=False)
            number = int(record.get("number") or 0)
            for pod in pods_in_order(job, pods):
                await _print_stacks(cluster, pod, number)
    return EXIT_SUCCEEDED


def pods_in_order(job: dict[str, Any], pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The job's replica pods in the order of its replicas (as its kind reads its spec), then
    any other of its pods by name."""
    view = kind_of(api_of(job)).training_job(job)
    ordered = [pod for _, pod in replica_pods(view, pods) if pod is not None]
    named = {id(pod) for pod in ordered}
    rest = [pod for pod in pods if id(pod) not in named]
    return ordered + sorted(rest, key=lambda pod: str(pod["metadata"]["name"]))


async def _until_answered(
    cluster: Cluster, ref: JobRef, request: str, limit: float
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The job and its status.diagnosis once it answers `request` collected; CliError (exit
    124) naming what is missing when `limit` seconds pass first."""
    deadline = time.monotonic() + limit
    while True:
        job = await cluster.get_job(ref.name, ref.api)
        record = diagnosis_record(job)
        if record.get("request") == request and record.get("collectedTime"):
            return job, record
        if time.monotonic() >= deadline:
            raise CliError(missing_answer(str(ref), request, record, limit), EXIT_TIMEOUT)
        await asyncio.sleep(max(min(POLL_SECONDS, deadline - time.monotonic()), 0.05))


def missing_answer(name: str, request: str, record: dict[str, Any], limit: float) -> str:
    """What did not come within `limit` seconds, and what to check."""
    if record.get("request") != request:
        answered = record.get("request")
        latest = f"its latest diagnosis answers {answered}" if answered else "it has answered none"
        return (
            f"no diagnosis of job {name} within {limit:g}s: the reconciler did not take up the "
            f"request {request} ({latest}). Is the job running, and the operator's reconciler "
            f"up? torchjob get {name} shows the job"
        )
    return (
        f"diagnosis {record.get('number')} of job {name}, asked at {record.get('askedTime')}, "
        f"was not collected within {limit:g}s (the reconciler reads the pods' restart agents "
        f"about {COLLECT_SECONDS:g}s after asking): give a longer --timeout, or see it later "
        f"in torchjob get {name}"
    )


def summary_line(record: dict[str, Any]) -> str:
    """`Diagnosis N (reason) at <collectedTime>: <message>`."""
    number, reason, at = record.get("number"), record.get("reason"), record.get("collectedTime")
    head = f"Diagnosis {number} ({reason}) at {at}"
    message = record.get("message")
    return f"{head}: {message}" if message else head


async def _print_stacks(cluster: Cluster, pod: dict[str, Any], number: int) -> None:
    """The pod's heading and its lines of diagnosis `number`; one line when its log cannot be
    read or holds none (looked for in the agent's previous log too, where it was restarted in
    place since)."""
    name = str(pod["metadata"]["name"])
    node = str((pod.get("spec") or {}).get("nodeName") or "no node")
    sys.stdout.write(f"\n--- pod {name} on {node} ---\n")
    if not _has_agent(pod):
        sys.stdout.write(f"cannot read its stacks: it has no {AGENT} container\n")
        return
    try:
        lines = diagnosis_lines(await _agent_log(cluster, name, previous=False), number)
        if not lines:
            lines = diagnosis_lines(await _agent_log(cluster, name, previous=True), number)
    except CliError as error:
        said = " ".join(error.message.split())
        sys.stdout.write(f"cannot read its {AGENT} log: {said}\n")
        return
    if not lines:
        lines = [
            f"no stacks of diagnosis {number} in its {AGENT} log (the pod was not asked: "
            "not running then; or the log has rotated since)"
        ]
    sys.stdout.write("".join(f"{line}\n" for line in lines))
    sys.stdout.flush()


async def _agent_log(cluster: Cluster, pod: str, *, previous: bool) -> str:
    query = {"container": AGENT, **({"previous": "true"} if previous else {})}
    try:
        async with cluster.pod_log(pod, query) as response:
            return (await response.read()).decode(errors="replace")
    except CliError:
        if previous:
            return ""  # no previous container: the current one's answer stands
        raise


def _has_agent(pod: dict[str, Any]) -> bool:
    spec = pod.get("spec") or {}
    containers = [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]
    return any(isinstance(c, dict) and c.get("name") == AGENT for c in containers)


def diagnosis_lines(log: str, number: int) -> list[str]:
    """The lines of an agent's log that belong to diagnosis `number`: from its first
    `=== torchjob diagnosis N:` heading up to, not including, the report line that ends it (the
    latest such run where the log has more than one)."""
    start = f"{HEADING}{number}: "
    found: list[str] = []
    current: list[str] | None = None
    for line in log.splitlines():
        if current is None:
            if line.startswith(start):
                current = [line]
        elif line.startswith(REPORT_PREFIX):
            found, current = current, None
        elif line.startswith(HEADING) and not line.startswith(start):
            found, current = current, None  # another diagnosis's, without an end of its own
        else:
            current.append(line)
    return current if current else found
