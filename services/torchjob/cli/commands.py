"""`torchjob submit | list | get | delete | pause | resume | wait`: jobs on the cluster of the
current kubeconfig context. Each command is an async function of its parsed arguments that
writes to stdout (results) and stderr (progress) and returns the exit code."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from datetime import UTC, datetime
from typing import Any

import yaml

from torchjob.api import types
from torchjob.api.constants import FINISHED_JOB_PHASES, LABEL_TENSORBOARD
from torchjob.cli.connection import CliError, Cluster, Target, connect, context_namespace
from torchjob.cli.manifest import InvalidManifest, admit, read_manifest
from torchjob.kube.kueue import pending_workloads
from torchjob.lifecycle.status import TERMINAL_CONDITIONS
from torchjob.views import queue, summary
from torchjob.views.cli import description, tables
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
        name = created["metadata"]["name"]
        if args.output:
            sys.stdout.write(dump(created, args.output))
        else:
            sys.stdout.write(
                f"pytorchtrainingjob.{types.GROUP}/{name} created in {cluster.namespace}\n"
            )
        sys.stdout.flush()
        if not args.wait:
            return EXIT_SUCCEEDED
        return await follow_until_finished(cluster, name, args.timeout)


# -- list, get ---------------------------------------------------------------------------------


async def list_jobs(args: argparse.Namespace) -> int:
    async with connect(target_of(args)) as cluster:
        jobs = await cluster.list_jobs()
        if args.output in ("json", "yaml"):
            document = {"apiVersion": "v1", "kind": "List", "items": jobs}
            sys.stdout.write(dump(document, args.output))
            return EXIT_SUCCEEDED
        if args.output == "name":
            for job in sorted(jobs, key=lambda j: str(j["metadata"]["name"])):
                sys.stdout.write(f"{job['metadata']['name']}\n")
            return EXIT_SUCCEEDED
        if not jobs:
            where = "any namespace" if cluster.target.all_namespaces else cluster.namespace
            sys.stderr.write(f"No PyTorchTrainingJobs found in {where}.\n")
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


async def get(args: argparse.Namespace) -> int:
    async with connect(target_of(args)) as cluster:
        job = await cluster.get_job(args.job)
        if args.output in ("json", "yaml"):
            sys.stdout.write(dump(job, args.output))
            return EXIT_SUCCEEDED
        pods = await cluster.job_pods(args.job, all_namespaces=False)
        events = await related_events(cluster, job, pods)
        boards = None
        if (job.get("spec") or {}).get("tensorboardSpec"):
            boards = await cluster.pods(f"{LABEL_TENSORBOARD}={args.job}", all_namespaces=False)
        waiting = await queue_position(cluster, job, pods)
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
    waiting = queue.waiting_jobs(jobs, pods)
    read: dict[tuple[str, str], dict[str, Any] | None] = {}
    for (namespace, _), where in waiting.items():
        if (namespace, where.queue) not in read:
            pending, _ = await pending_workloads(cluster.client, namespace, where.queue)
            read[namespace, where.queue] = pending
    return {
        key: queue.short_text(where, read[key[0], where.queue]) for key, where in waiting.items()
    }


async def queue_position(
    cluster: Cluster, job: dict[str, Any], pods: list[dict[str, Any]]
) -> str | None:
    """Where the job waits in its Kueue queue, read from Kueue's visibility API as the user;
    None for a job that waits for no Kueue admission."""
    where = queue.queued(job, pods)
    if where is None:
        return None
    pending, problem = await pending_workloads(cluster.client, cluster.namespace, where.queue)
    return queue.position_text(where, pending, problem)


async def related_events(
    cluster: Cluster, job: dict[str, Any], pods: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """The Events of the job and of its replicas' pods, past and present (by uid, and by name
    for the pods of replicas that were replaced since)."""
    uids = {job["metadata"].get("uid")} | {p["metadata"].get("uid") for p in pods}
    # A replica `worker-1` of job `train` has the pod `train-worker-1`.
    names = {f"{job['metadata']['name']}-{replica}" for replica, _ in summary.replica_pods(job, [])}
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
    async with connect(target_of(args)) as cluster:
        for name in args.jobs:
            await cluster.delete_job(name)
            sys.stdout.write(f"pytorchtrainingjob.{types.GROUP}/{name} deleted\n")
        if args.wait:
            for name in args.jobs:
                await _until_gone(cluster, name, args.timeout)
    return EXIT_SUCCEEDED


async def _until_gone(cluster: Cluster, name: str, limit: float | None) -> None:
    deadline = None if limit is None else time.monotonic() + limit
    while True:
        jobs = await cluster.list_jobs(all_namespaces=False)
        if all(j["metadata"]["name"] != name for j in jobs):
            return
        if deadline is not None and time.monotonic() > deadline:
            raise CliError(f"job {name} still exists after {limit:g}s", EXIT_TIMEOUT)
        await asyncio.sleep(POLL_SECONDS / 2)


async def pause(args: argparse.Namespace) -> int:
    return await _set_paused(args, True)


async def resume(args: argparse.Namespace) -> int:
    return await _set_paused(args, False)


async def _set_paused(args: argparse.Namespace, paused: bool) -> int:
    async with connect(target_of(args)) as cluster:
        job = await cluster.get_job(args.job)
        phase = summary.phase(job)
        if phase in FINISHED_JOB_PHASES:
            raise CliError(
                f"job {args.job} has ended ({phase}); there is nothing to {args.command}"
            )
        written = (((job.get("spec") or {}).get("runMode") or {}).get("pause") or {}).get("enabled")
        if bool(written) == paused:
            state = "paused" if paused else "not paused"
            sys.stdout.write(f"job {args.job} is already {state} (phase {phase})\n")
            return EXIT_SUCCEEDED
        await cluster.patch_job(args.job, {"spec": {"runMode": {"pause": {"enabled": paused}}}})
        verb = "paused" if paused else "resumed"
        sys.stdout.write(f"pytorchtrainingjob.{types.GROUP}/{args.job} {verb}\n")
        if not args.wait:
            return EXIT_SUCCEEDED
        wanted = ("Paused",) if paused else ("Running", *FINISHED_JOB_PHASES)
        final = await _until_phase(cluster, args.job, wanted, args.timeout)
        sys.stdout.write(f"job {args.job}: {final}\n")
    return EXIT_SUCCEEDED


# -- wait --------------------------------------------------------------------------------------


async def wait(args: argparse.Namespace) -> int:
    async with connect(target_of(args)) as cluster:
        await cluster.get_job(args.job)  # not found: say so at once, with similar names
        return await follow_until_finished(cluster, args.job, args.timeout)


async def follow_until_finished(cluster: Cluster, name: str, limit: float | None) -> int:
    """Report each phase change on stderr until the job ends; exit 0 when it succeeded, 1 when
    it failed, 124 when `limit` seconds passed first."""
    phase = await _until_phase(cluster, name, FINISHED_JOB_PHASES, limit)
    job = await cluster.get_job(name)
    condition: dict[str, Any] = next(
        (
            c
            for c in (job.get("status") or {}).get("conditions") or []
            if c.get("type") in TERMINAL_CONDITIONS and c.get("status") == "True"
        ),
        {},
    )
    detail = f" ({condition.get('reason')}: {condition.get('message')})" if condition else ""
    sys.stdout.write(f"job {name} {phase}{detail}\n")
    return EXIT_SUCCEEDED if phase == "Succeeded" else EXIT_FAILED


async def _until_phase(
    cluster: Cluster, name: str, wanted: tuple[str, ...], limit: float | None
) -> str:
    deadline = None if limit is None else time.monotonic() + limit
    last = None
    while True:
        job = await cluster.get_job(name)
        phase = summary.phase(job)
        if phase != last:
            sys.stderr.write(f"job {name}: {phase}\n")
            sys.stderr.flush()
            last = phase
        if phase in wanted:
            return phase
        if deadline is not None and time.monotonic() >= deadline:
            raise CliError(
                f"job {name} is still {phase} after {limit:g}s (waited for {' or '.join(wanted)})",
                EXIT_TIMEOUT,
            )
        pause = POLL_SECONDS if deadline is None else min(POLL_SECONDS, deadline - time.monotonic())
        await asyncio.sleep(max(pause, 0.05))
