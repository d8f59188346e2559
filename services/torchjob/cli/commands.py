"""`torchjob submit | list | get | delete | pause | resume | wait`: jobs on the cluster of the
current kubeconfig context, of any API the cluster serves (a job argument is a `JobRef`,
views/cli/job_reference.py), each read and written as its kind says (render/job_kinds.py). Each
command is an async function of its parsed arguments that writes to stdout (results) and stderr
(progress) and returns the exit code."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import yaml

from torchjob.api.constants import FINISHED_JOB_PHASES, LABEL_TENSORBOARD
from torchjob.api.job_api import JobApi, api_of
from torchjob.cli.connection import CliError, Cluster, Target, connect, context_namespace
from torchjob.cli.manifest import InvalidManifest, admit, read_manifest
from torchjob.kube.kueue import pending_workloads
from torchjob.lifecycle.status import TERMINAL_CONDITIONS
from torchjob.render.job_kinds import kind_of
from torchjob.views import queue, summary
from torchjob.views.cli import description, tables
from torchjob.views.cli.job_reference import JobRef
from torchjob.views.cli.submission import Submission, SubmissionError, build_job

EXIT_SUCCEEDED, EXIT_FAILED, EXIT_INVALID, EXIT_TIMEOUT = 0, 1, 2, 124
POLL_SECONDS = 2.0


def target_of(args: argparse.Namespace) -> Target:
    return Target(
        kubeconfig=getattr(args, "kubeconfig", None),
        context=getattr(args, "context", None),
        namespace=getattr(args, "namespace", None),
        all_namespaces=bool(getattr(args, "all_namespaces", False)),
    )


def now() -> datetime:
    return datetime.now(UTC)


def dump(document: Any, output: str) -> str:
    if output == "json":
        return json.dumps(document, indent=2) + "\n"
    return str(yaml.safe_dump(document, sort_keys=False))


# -- submit ------------------------------------------------------------------------------------


def submission_of(args: argparse.Namespace, namespace: str | None) -> Submission:
    command = list(args.job_command or [])
    if command and command[0] == "--":
        command = command[1:]
    return Submission(
        name=args.name,
        image=args.image,
        command=tuple(command),
        namespace=namespace,
        workers=args.workers,
        gpus=args.gpus,
        cpu=args.cpu,
        memory=args.memory,
        cpu_limit=args.cpu_limit,
        memory_limit=args.memory_limit,
        working_dir=args.working_dir,
        env=tuple(args.env),
        data=tuple(args.data),
        image_pull_policy=args.image_pull_policy,
        sync_mode=args.sync_mode,
        sync_source=args.sync_source,
        sync_branch=args.sync_branch,
        sync_image=args.sync_image,
        tensorboard=args.tensorboard,
        tensorboard_image=args.tensorboard_image,
        logdir=args.logdir,
        node_selector=tuple(args.selector),
        tolerations=tuple(args.toleration),
        priority_class=args.priority,
        queue=args.queue,
        queue_priority=args.queue_priority,
        torchrun=args.torchrun,
        nproc_per_node=args.nproc_per_node,
        max_restarts=args.max_restarts,
        elastic_min=args.elastic_min,
        elastic_max=args.elastic_max,
        restart_policy=args.restart_policy,
        backoff_limit=args.backoff_limit,
        deadline=args.deadline,
        cleanup_policy=args.cleanup_policy,
        ttl=args.ttl,
        labels=tuple(args.label),
    )


def job_from_args(args: argparse.Namespace) -> tuple[dict[str, Any], list[str]]:
    """The job to create, defaulted and validated as admission would, and its warnings; from
    `-f FILE` or from the flags. Its namespace is -n, else the manifest's, else the kubeconfig
    context's (read from the file, no cluster asked), else default."""
    namespace = args.namespace
    if args.filename:
        if args.name is not None or args.image is not None or args.job_command:
            raise CliError(
                "give either -f FILE or the job's flags (--name, --image, ...), not both"
            )
        document = read_manifest(args.filename)
    else:
        missing = [
            flag for flag, value in (("--name", args.name), ("--image", args.image)) if not value
        ]
        if missing:
            raise CliError(f"submit needs {' and '.join(missing)} (or -f FILE)")
        try:
            document = build_job(submission_of(args, namespace))
        except SubmissionError as error:
            raise CliError(str(error)) from error
    meta = document.get("metadata")
    written = isinstance(meta, dict) and meta.get("namespace")
    if not namespace and not written:
        namespace = context_namespace(target_of(args))
    job = admit(document, namespace=namespace)
    return job.manifest, job.warnings


async def submit(args: argparse.Namespace) -> int:
    try:
        manifest, warnings = job_from_args(args)
    except InvalidManifest as error:
        for line in error.errors:
            sys.stderr.write(f"error: {line}\n")
        return EXIT_INVALID
    for warning in warnings:
        sys.stderr.write(f"Warning: {warning}\n")
    if args.dry_run:
        sys.stdout.write(dump(manifest, args.output or "yaml"))
        return EXIT_SUCCEEDED
    async with connect(target_of(args)) as cluster:
        cluster.namespace = manifest["metadata"]["namespace"]
        created = await cluster.create_job(manifest)
        job = JobRef(api_of(created), created["metadata"]["name"])
        if args.output:
            sys.stdout.write(dump(created, args.output))
        else:
            sys.stdout.write(f"{job.resource} created in {cluster.namespace}\n")
        sys.stdout.flush()
        if not args.wait:
            return EXIT_SUCCEEDED
        return await follow_until_finished(cluster, job, args.timeout)


# -- list, get ---------------------------------------------------------------------------------


async def list_jobs(args: argparse.Namespace) -> int:
    async with connect(target_of(args)) as cluster:
        listing = await cluster.list_every_kind()
        for refusal in listing.refused:
            sys.stderr.write(f"Warning: {refusal}\n")
        jobs = listing.jobs
        if args.output in ("json", "yaml"):
            document = {"apiVersion": "v1", "kind": "List", "items": jobs}
            sys.stdout.write(dump(document, args.output))
            return EXIT_SUCCEEDED
        if args.output == "name":
            sys.stdout.write(
                "".join(f"{tables.listed_name(j)}\n" for j in tables.in_list_order(jobs))
            )
            return EXIT_SUCCEEDED
        if not jobs:
            where = "any namespace" if cluster.target.all_namespaces else cluster.namespace
            sys.stderr.write(f"No {kinds_text(listing.served)} found in {where}.\n")
            return EXIT_SUCCEEDED
        pods = await cluster.job_pods() if args.output == "wide" else None
        sys.stdout.write(
            tables.list_table(
                jobs,
                now(),
                wide=args.output == "wide",
                all_namespaces=cluster.target.all_namespaces,
                pods=pods,
                queues=await queue_places(cluster, jobs, pods) if pods is not None else None,
            )
        )
    return EXIT_SUCCEEDED


def kinds_text(apis: list[JobApi]) -> str:
    """The kinds listed: `PyTorchTrainingJobs`, `PyTorchTrainingJobs or TrainJobs`, ..."""
    plurals = [f"{api.kind}s" for api in apis]
    if len(plurals) < 2:
        return "".join(plurals)
    return f"{', '.join(plurals[:-1])} or {plurals[-1]}"


async def get(args: argparse.Namespace) -> int:
    ref: JobRef = args.job
    async with connect(target_of(args)) as cluster:
        job = await cluster.get_job(ref.name, ref.api)
        if args.output in ("json", "yaml"):
            sys.stdout.write(dump(job, args.output))
            return EXIT_SUCCEEDED
        view = tables.training_view(job)
        pods = await cluster.job_pods(ref.name, ref.api, all_namespaces=False)
        events = await related_events(cluster, view, pods)
        boards = None
        if (view.get("spec") or {}).get("tensorboardSpec"):
            boards = await cluster.pods(f"{LABEL_TENSORBOARD}={ref.name}", all_namespaces=False)
        waiting = await queue_position(cluster, view, pods)
        text = description.describe(
            job, pods, events, now(), tensorboard_pods=boards, queue=waiting
        )
        sys.stdout.write(text)
    return EXIT_SUCCEEDED


async def queue_places(
    cluster: Cluster, jobs: list[dict[str, Any]], pods: list[dict[str, Any]]
) -> dict[tuple[str, str], str]:
    """The Kueue queue each waiting job waits in and its place, by namespace and name: one read
    of Kueue's visibility API per queue, as the user."""
    waiting = queue.waiting_jobs([tables.training_view(job) for job in jobs], pods)
    read: dict[tuple[str, str], dict[str, Any] | None] = {}
    for (namespace, _), where in waiting.items():
        if (namespace, where.queue) not in read:
            pending, _ = await pending_workloads(cluster.client, namespace, where.queue)
            read[namespace, where.queue] = pending
    return {
        key: queue.short_text(where, read[key[0], where.queue]) for key, where in waiting.items()
    }


async def queue_position(
    cluster: Cluster, view: dict[str, Any], pods: list[dict[str, Any]]
) -> str | None:
    """Where the job (as `training_view` reads it) waits in its Kueue queue, read from Kueue's
    visibility API as the user; None for a job that waits for no Kueue admission."""
    where = queue.queued(view, pods)
    if where is None:
        return None
    pending, problem = await pending_workloads(cluster.client, cluster.namespace, where.queue)
    return queue.position_text(where, pending, problem)


async def related_events(
    cluster: Cluster, view: dict[str, Any], pods: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """The Events of the job (as `training_view` reads it) and of its replicas' pods, past and
    present (by uid, and by name for the pods of replicas that were replaced since)."""
    uids = {view["metadata"].get("uid")} | {p["metadata"].get("uid") for p in pods}
    # A replica `worker-1` of job `train` has the pod `train-worker-1`.
    names = {
        f"{view['metadata']['name']}-{replica}" for replica, _ in summary.replica_pods(view, [])
    }
    found = []
    for event in await cluster.events():
        involved = event.get("involvedObject") or {}
        if involved.get("uid") in uids or (
            involved.get("kind") == "Pod" and involved.get("name") in names
        ):
            found.append(event)
    return found


# -- delete, pause, resume ---------------------------------------------------------------------


async def delete(args: argparse.Namespace) -> int:
    refs: list[JobRef] = args.jobs
    async with connect(target_of(args)) as cluster:
        for ref in refs:
            await cluster.delete_job(ref.name, ref.api)
            sys.stdout.write(f"{ref.resource} deleted\n")
        if args.wait:
            for ref in refs:
                await _until_gone(cluster, ref, args.timeout)
    return EXIT_SUCCEEDED


async def _until_gone(cluster: Cluster, ref: JobRef, limit: float | None) -> None:
    deadline = None if limit is None else time.monotonic() + limit
    while True:
        jobs = await cluster.list_jobs(ref.api, all_namespaces=False)
        if all(j["metadata"]["name"] != ref.name for j in jobs):
            return
        if deadline is not None and time.monotonic() > deadline:
            raise CliError(f"job {ref} still exists after {limit:g}s", EXIT_TIMEOUT)
        await asyncio.sleep(POLL_SECONDS / 2)


async def pause(args: argparse.Namespace) -> int:
    return await _set_paused(args, True)


async def resume(args: argparse.Namespace) -> int:
    return await _set_paused(args, False)


async def _set_paused(args: argparse.Namespace, paused: bool) -> int:
    """Pause or resume the job with its kind's own patch; `--wait` until the lifecycle has
    paused it (its replicas gone), or runs it again (or it ended meanwhile)."""
    ref: JobRef = args.job
    kind = kind_of(ref.api)
    async with connect(target_of(args)) as cluster:
        job = await cluster.get_job(ref.name, ref.api)
        ended = kind.outcome(job)
        if ended is not None:
            raise CliError(f"job {ref} has ended ({ended}); there is nothing to {args.command}")
        if kind.paused(job) == paused:
            state = "paused" if paused else "not paused"
            sys.stdout.write(f"job {ref} is already {state} (phase {kind.phase(job)})\n")
            return EXIT_SUCCEEDED
        await cluster.patch_job(ref.name, kind.pause_patch(paused), ref.api)
        sys.stdout.write(f"{ref.resource} {'paused' if paused else 'resumed'}\n")
        if not args.wait:
            return EXIT_SUCCEEDED
        wanted = ("Paused",) if paused else ("Running", *FINISHED_JOB_PHASES)
        final = await _until(
            cluster, ref, lambda j: lifecycle_phase(j) in wanted, wanted, args.timeout
        )
        sys.stdout.write(f"job {ref}: {kind.phase(final)}\n")
    return EXIT_SUCCEEDED


def lifecycle_phase(job: dict[str, Any]) -> str:
    """The phase the lifecycle has recorded for a job of any API (PyTorchTrainingJob's words:
    a job is Paused once its replicas are gone)."""
    return summary.phase(tables.training_view(job))


# -- wait --------------------------------------------------------------------------------------


async def wait(args: argparse.Namespace) -> int:
    ref: JobRef = args.job
    async with connect(target_of(args)) as cluster:
        await cluster.get_job(ref.name, ref.api)  # not found: say so at once, with similar names
        return await follow_until_finished(cluster, ref, args.timeout)


async def follow_until_finished(cluster: Cluster, ref: JobRef, limit: float | None) -> int:
    """Report each phase change on stderr until the job ends; exit 0 when it succeeded, 1 when
    it failed, 124 when `limit` seconds passed first."""
    kind = kind_of(ref.api)
    job = await _until(
        cluster, ref, lambda j: kind.outcome(j) is not None, FINISHED_JOB_PHASES, limit
    )
    outcome = kind.outcome(job)
    condition: dict[str, Any] = next(
        (
            c
            for c in (tables.training_view(job).get("status") or {}).get("conditions") or []
            if c.get("type") in TERMINAL_CONDITIONS and c.get("status") == "True"
        ),
        {},
    )
    detail = f" ({condition.get('reason')}: {condition.get('message')})" if condition else ""
    sys.stdout.write(f"job {ref} {outcome}{detail}\n")
    return EXIT_SUCCEEDED if outcome == "Succeeded" else EXIT_FAILED


async def _until(
    cluster: Cluster,
    ref: JobRef,
    reached: Callable[[dict[str, Any]], bool],
    waited_for: tuple[str, ...],
    limit: float | None,
) -> dict[str, Any]:
    """The job once `reached` says so of it, writing each change of its phase (as its API shows
    it) on stderr; CliError (exit 124) naming the phases `waited_for` when `limit` seconds pass
    first."""
    kind = kind_of(ref.api)
    deadline = None if limit is None else time.monotonic() + limit
    last = None
    while True:
        job = await cluster.get_job(ref.name, ref.api)
        phase = kind.phase(job)
        if phase != last:
            sys.stderr.write(f"job {ref}: {phase}\n")
            sys.stderr.flush()
            last = phase
        if reached(job):
            return job
        if deadline is not None and time.monotonic() >= deadline:
            raise CliError(
                f"job {ref} is still {phase} after {limit:g}s "
                f"(waited for {' or '.join(waited_for)})",
                EXIT_TIMEOUT,
            )
        pause = POLL_SECONDS if deadline is None else min(POLL_SECONDS, deadline - time.monotonic())
        await asyncio.sleep(max(pause, 0.05))
