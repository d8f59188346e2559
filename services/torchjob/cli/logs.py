"""`torchjob logs [KIND/]NAME`: a replica's log by its replica name (the master by default), or
every replica's with `--all`, each line prefixed; `-f` follows, waiting for containers that have
not started yet. A job of any API is read as its kind reads it: its replicas those of the
PyTorchTrainingJob it stands for (a TrainJob's `node-0`...), its training container its API's."""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import AsyncIterator
from typing import Any

from torchjob.api.job_api import JobApi, api_of
from torchjob.api.types import PyTorchTrainingJob
from torchjob.cli.commands import EXIT_SUCCEEDED, target_of
from torchjob.cli.connection import CliError, Cluster, connect
from torchjob.render.job_kinds import kind_of
from torchjob.render.topology import master_of, replica_name
from torchjob.views import summary
from torchjob.views.cli.job_reference import JobRef
from torchjob.views.cli.tables import training_view
from torchjob.views.replica_command import training_container_named

WAIT_POLL = 1.0
NO_PREVIOUS = (
    "a replica is restarted in a new pod (its pods have restartPolicy Never), so a container "
    "has no previous attempt inside its pod; the ended pod of a restarting replica is kept, and "
    "shown by `torchjob logs` without --previous, only until its restart delay has passed"
)


async def logs(args: argparse.Namespace) -> int:
    ref: JobRef = args.job
    async with connect(target_of(args)) as cluster:
        job = await cluster.get_job(ref.name, ref.api)
        chosen = _chosen_replicas(args, ref, training_view(job))
        prefixed = args.all or len(chosen) > 1
        width = max(len(r) for r in chosen)
        tasks = [
            _replica_log(cluster, args, job, replica, f"{replica:<{width}} | " if prefixed else "")
            for replica in chosen
        ]
        results = await asyncio.gather(*tasks, return_exceptions=True)
        failures = [r for r in results if isinstance(r, BaseException)]
        for failure in failures:
            if not isinstance(failure, CliError):
                raise failure
        if failures and len(failures) == len(results):
            raise failures[0]
        for failure in failures:
            sys.stderr.write(f"error: {failure}\n")
    return EXIT_SUCCEEDED


def _chosen_replicas(args: argparse.Namespace, ref: JobRef, view: dict[str, Any]) -> list[str]:
    """The replicas whose logs are asked for (`type-index`), of the job as `training_view` reads
    it: every one, the one named, or the master."""
    replicas = [name for name, _ in summary.replica_pods(view, [])]
    if args.all:
        return replicas
    if args.replica:
        if args.replica not in replicas:
            raise CliError(
                f"job {ref} has no replica {args.replica}; its replicas: "
                + (", ".join(replicas) or "none yet")
            )
        return [args.replica]
    spec = PyTorchTrainingJob.from_dict(view).spec
    if spec is None or not spec.replica_specs:
        raise CliError(f"job {ref} has no replicas yet (phase {summary.phase(view)})")
    master_type, index = master_of(spec)
    return [f"{master_type}-{index}"]


async def _replica_log(
    cluster: Cluster, args: argparse.Namespace, job: dict[str, Any], replica: str, prefix: str
) -> None:
    replica_type, _, index = replica.rpartition("-")
    pod_name = replica_name(job["metadata"]["name"], replica_type, int(index))
    pod = await cluster.get_pod(pod_name)
    if pod is None:
        phase = kind_of(api_of(job)).phase(job)
        raise CliError(
            f"replica {replica} has no pod now (job phase {phase}); torchjob get shows why"
        )
    container = args.container or _training_container(pod, api_of(job))
    if args.previous:
        await _print(cluster, pod_name, container, prefix, args, previous=True)
        return
    if args.follow:
        await _until_started(cluster, pod_name, container, replica)
    elif not _started(pod, container):
        why = summary.pod_reason(pod) or summary.pod_phase(pod)
        raise CliError(f"replica {replica} has not started yet ({why}); -f waits for it")
    await _print(cluster, pod_name, container, prefix, args, previous=False)


def _started(pod: dict[str, Any], container: str) -> bool:
    """The container runs or has run: the kubelet has a log for it."""
    status_of = pod.get("status") or {}
    statuses = [
        *(status_of.get("initContainerStatuses") or []),
        *(status_of.get("containerStatuses") or []),
    ]
    for status in statuses:
        if status.get("name") == container:
            state = status.get("state") or {}
            return "running" in state or "terminated" in state
    return False


def _training_container(pod: dict[str, Any], api: JobApi) -> str:
    """The pod's training container as the job's API names it (a TrainJob's `node`, a
    PyTorchJob's `pytorch`; torchjob's own `python`, else the first)."""
    pod_spec = pod.get("spec") or {}
    _, container = training_container_named(pod_spec, kind_of(api).training_container)
    return str((container or {}).get("name") or "")


async def _until_started(cluster: Cluster, pod_name: str, container: str, replica: str) -> None:
    """Until the container runs or has run: the kubelet has no log for it before."""
    said = ""
    while True:
        pod = await cluster.get_pod(pod_name)
        if pod is None:
            raise CliError(f"pod {pod_name} of replica {replica} was deleted")
        if _started(pod, container):
            return
        why = summary.pod_reason(pod) or summary.pod_phase(pod)
        if why != said:
            sys.stderr.write(f"waiting for {replica} to start ({why})\n")
            sys.stderr.flush()
            said = why
        await asyncio.sleep(WAIT_POLL)


def log_query(args: argparse.Namespace, container: str, *, previous: bool) -> dict[str, str]:
    """The apiserver's log options for the flags given: the previous container's log is never
    followed."""
    query = {"container": container}
    if previous:
        query["previous"] = "true"
    elif args.follow:
        query["follow"] = "true"
    if args.tail is not None:
        query["tailLines"] = str(args.tail)
    if args.since is not None:
        query["sinceSeconds"] = str(args.since)
    if args.timestamps:
        query["timestamps"] = "true"
    return query


async def _print(
    cluster: Cluster,
    pod_name: str,
    container: str,
    prefix: str,
    args: argparse.Namespace,
    *,
    previous: bool,
) -> None:
    try:
        async with cluster.pod_log(pod_name, log_query(args, container, previous=previous)) as log:
            await _write_lines(log.content.iter_any(), prefix)
    except CliError as error:
        if previous and "previous terminated container" in error.message:
            raise CliError(f"{pod_name}: no previous attempt: {NO_PREVIOUS}") from error
        raise


async def _write_lines(chunks: AsyncIterator[bytes], prefix: str) -> None:
    """Each line of the log as it arrives, `prefix` before it."""
    partial = b""
    async for chunk in chunks:
        partial += chunk
        *lines, partial = partial.split(b"\n")
        if lines:
            sys.stdout.write(
                "".join(f"{prefix}{line.decode(errors='replace')}\n" for line in lines)
            )
            sys.stdout.flush()
    if partial:
        sys.stdout.write(f"{prefix}{partial.decode(errors='replace')}\n")
        sys.stdout.flush()
