"""`torchjob logs NAME`: a replica's log by its replica name (the master by default), or every
replica's with `--all`, each line prefixed; `-f` follows, waiting for containers that have not
started yet."""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import AsyncIterator
from typing import Any

from torchjob.api.queries import training_container_in
from torchjob.api.types import PyTorchTrainingJob
from torchjob.cli.commands import EXIT_SUCCEEDED, target_of
from torchjob.cli.connection import CliError, Cluster, connect
from torchjob.render.topology import master_of, replica_name
from torchjob.views import summary

WAIT_POLL = 1.0
NO_PREVIOUS = (
    "a replica is restarted in a new pod (its pods have restartPolicy Never), so a container "
    "has no previous attempt inside its pod; the ended pod of a restarting replica is kept, and "
    "shown by `torchjob logs` without --previous, only until its restart delay has passed"
)


async def logs(args: argparse.Namespace) -> int:
    async with connect(target_of(args)) as cluster:
        job = await cluster.get_job(args.job)
        replicas = [name for name, _ in summary.replica_pods(job, [])]
        if args.all:
            chosen = replicas
        elif args.replica:
            if args.replica not in replicas:
                raise CliError(
                    f"job {args.job} has no replica {args.replica}; its replicas: "
                    + ", ".join(replicas)
                )
            chosen = [args.replica]
        else:
            spec = PyTorchTrainingJob.from_dict(job).spec
            assert spec is not None
            master_type, index = master_of(spec)
            chosen = [f"{master_type}-{index}"]
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


async def _replica_log(
    cluster: Cluster, args: argparse.Namespace, job: dict[str, Any], replica: str, prefix: str
) -> None:
    replica_type, _, index = replica.rpartition("-")
    pod_name = replica_name(job["metadata"]["name"], replica_type, int(index))
    pod = await cluster.get_pod(pod_name)
    if pod is None:
        raise CliError(
            f"replica {replica} has no pod now (job phase {summary.phase(job)}); "
            "torchjob get shows why"
        )
    container = args.container or _training_container(pod)
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


def _training_container(pod: dict[str, Any]) -> str:
    _, container = training_container_in(pod.get("spec") or {})
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
