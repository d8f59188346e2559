"""The `torchjob` command (also the kubectl plugin `kubectl torchjob`).

`torchjob run JOB.yaml` runs a PyTorchTrainingJob, or a Kubeflow PyTorchJob, on this machine,
each replica's training container as a local process, with the defaulting, validation, pod
rendering and restart decisions of the cluster; `torchjob run --dry-run JOB.yaml` prints what a
cluster would create. `torchjob convert JOB.yaml` turns a manifest of one API into the other's
(cli/convert.py).
`submit`, `list`, `get`, `logs`, `top`, `delete`, `pause`, `resume`, `wait`, `tensorboard` and
`console` work on the cluster of the current kubeconfig context (cli/parsers.py), and so does
`diagnose` (cli/diagnose.py).

Exit codes: 0 the job succeeded (or the dry run rendered it), 1 the job failed, 2 the manifest was
refused or cannot run here (or a cluster command failed), 124 a wait timed out, 130 interrupted.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import yaml

from torchjob.api import queries
from torchjob.api.kubeflow import UNLIMITED_BACKOFF
from torchjob.cli.cluster import admitted_pod, dry_run_documents, first_plan
from torchjob.cli.command_parser import CommandParser
from torchjob.cli.completion import candidates, job_names
from torchjob.cli.convert import add_convert_command, run_convert
from torchjob.cli.diagnose import add_diagnose_command
from torchjob.cli.manifest import AdmittedJob, InvalidManifest, admit, read_manifest
from torchjob.cli.parsers import (
    add_cluster_commands,
    add_cluster_flags,
    misplaced_cluster_flags,
    run_cluster_command,
)
from torchjob.cli.progress_server import local_progress
from torchjob.cli.runner import LocalRunner, RunResult, training_container_name
from torchjob.cli.terminal import Console
from torchjob.lifecycle.backoff import BASE_DELAY, MAX_DELAY, RestartBackoff
from torchjob.lifecycle.status import TERMINAL_CONDITIONS
from torchjob.render.job_kinds import kind_of
from torchjob.render.topology import replicas_of, service_host, world_size
from torchjob.views.cli.local import (
    LocalRenderError,
    gpu_shares,
    local_command,
)
from torchjob.views.replica_command import training_container_named

EXIT_SUCCEEDED, EXIT_FAILED, EXIT_INVALID, EXIT_INTERRUPTED = 0, 1, 2, 130


def parser(prog: str = "torchjob") -> CommandParser:
    top = CommandParser(prog=prog, description="PyTorchTrainingJob (and Kubeflow PyTorchJob) tools")
    add_cluster_flags(
        top.option_group("cluster (before or after the command, as kubectl takes them)"),
        everywhere=True,
        after_verb=False,
    )
    commands = top.add_subparsers(dest="command", required=True, metavar="COMMAND")
    run = commands.add_parser(
        "run",
        help="run a job locally, each replica as a process",
        description="Run a PyTorchTrainingJob, or a Kubeflow PyTorchJob (kubeflow.org/v1), on "
        "this machine: every replica's training container becomes a local process, with the "
        "cluster's defaulting, validation, pod rendering, restarts, backoffLimit and "
        "activeDeadlineSeconds. A PyTorchJob is admitted with Kubeflow's defaults and "
        "validation, its pods get Kubeflow's environment, and its status is shown as "
        "Kubeflow shows it.",
    )
    run.add_argument("manifest", metavar="JOB.yaml", help="the job's manifest ('-' for stdin)")
    run.add_argument(
        "--dry-run",
        action="store_true",
        help="run nothing: print the defaulted job, then every Pod and Service a cluster would "
        "create (multi-document YAML); admission warnings go to stderr",
    )
    run.add_argument(
        "-n",
        "--namespace",
        default=argparse.SUPPRESS,  # set before the verb, or here
        help="the namespace when the manifest names none (default: default)",
    )
    run.set_defaults(cluster_flags=("namespace",))
    run.add_argument("--logs", metavar="DIR", type=Path, help="also write each replica's log here")
    run.add_argument(
        "--grace-period",
        type=float,
        default=10.0,
        metavar="SECONDS",
        help="time between SIGTERM and SIGKILL when a replica is stopped (default: 10)",
    )
    run.add_argument(
        "--restart-backoff",
        type=_restart_delay,
        default=BASE_DELAY,
        metavar="SECONDS",
        help="delay before a replica's first restart in a row, doubling with each further one "
        f"up to {MAX_DELAY:.0f}s, as the reconciler's (default: {BASE_DELAY:.0f}; 0: at once)",
    )
    add_convert_command(commands)
    add_cluster_commands(commands)
    add_diagnose_command(commands)
    return top


def _restart_delay(text: str) -> float:
    seconds = float(text)
    if not 0 <= seconds <= MAX_DELAY:
        raise argparse.ArgumentTypeError(f"must lie between 0 and {MAX_DELAY:.0f}")
    return seconds


def runnable(path: str, namespace: str | None, uid: str | None) -> AdmittedJob:
    """The job of the file at `path`, admitted, with everything it is made from: a TrainJob's
    training runtime must be in the same file (`torchjob run` reads no cluster)."""
    job = admit(read_manifest(path), namespace=namespace, uid=uid)
    if (runtime := kind_of(job.api).runtime_to_copy(job.manifest)) is not None:
        raise InvalidManifest(
            [
                f"spec.runtimeRef: {runtime} is not in {path}: a {job.api.kind} is made from its "
                "training runtime; add the runtime as another document of the file"
            ]
        )
    return job


def main(argv: list[str] | None = None) -> int:
    prog = "kubectl torchjob" if Path(sys.argv[0]).name.startswith("kubectl-") else "torchjob"
    top = parser(prog)
    args = top.parse_args(argv)
    misplaced = misplaced_cluster_flags(args)
    if misplaced:
        top.error(f"{', '.join(misplaced)}: `{args.command}` does not take it")
    if args.command == "convert":
        return run_convert(args)
    if args.command != "run":
        args.parser = top
        return run_cluster_command(args)
    console = Console(sys.stdout, sys.stderr)
    # A dry run shows a stable stand-in for the uid; a run is a new job with a uid of its own.
    uid = None if args.dry_run else str(uuid.uuid4())
    try:
        job = runnable(args.manifest, args.namespace, uid)
    except InvalidManifest as error:
        for line in error.errors:
            sys.stderr.write(f"error: {line}\n")
        return EXIT_INVALID
    for warning in job.warnings:
        sys.stderr.write(f"Warning: {warning}\n")
    try:
        if args.dry_run:
            sys.stdout.write(yaml.safe_dump_all(dry_run_documents(job), sort_keys=False))
            return EXIT_SUCCEEDED
        shares = _gpu_shares(job, console)
        _preflight(job, shares)
    except LocalRenderError as error:
        sys.stderr.write(f"error: {error}\n")
        return EXIT_INVALID
    except ValueError as error:
        # A value the CRD's schema refuses on a cluster (a procPerNode that is not a number
        # or "gpu", say) but that validation does not check itself.
        sys.stderr.write(f"error: the job cannot be rendered: {error}\n")
        return EXIT_INVALID
    # Replicas report their progress to the run, as they would to the cluster's endpoint.
    progress = local_progress(job, console, args.logs)
    runner = LocalRunner(
        job,
        console,
        gpu_shares=shares,
        logs_dir=args.logs,
        grace_period=args.grace_period,
        backoff=RestartBackoff(base=args.restart_backoff),
        environment=None if progress is None else progress.environment(os.environ),
    )
    _announce(job, console)
    result = asyncio.run(runner.run() if progress is None else progress.serve(runner.run()))
    if args.logs is not None:
        shown = result.shown or result.status
        write_status(
            args.logs / "status.yaml", shown if progress is None else progress.with_report(shown)
        )
    _summary(job, result, console)
    if result.interrupted:
        return EXIT_INTERRUPTED
    return EXIT_SUCCEEDED if result.succeeded else EXIT_FAILED


def _announce(job: AdmittedJob, console: Console) -> None:
    count = world_size(job.spec)
    console.say(
        f"running {job.api.kind} {job.meta['namespace']}/{job.meta['name']} here: {count} "
        "replica(s) as local processes; "
        "container images and resource requests/limits are not used"
    )


def _preflight(job: AdmittedJob, shares: dict[int, list[str]] | None) -> None:
    """Every replica can be turned into a process (it has a command to run, for one)."""
    meta, scope = job.meta, queries.service_scope(job.meta)
    ports = {
        service_host(meta["name"], meta["namespace"], r.type, r.index, scope): 1
        for r in replicas_of(job.spec)
    }
    for item in first_plan(job).create_pods:
        pod = admitted_pod(job, item.replica, item.annotations)
        gpus = None if shares is None else shares.get(item.replica.rank, [])
        local_command(
            job.spec,
            pod,
            ports,
            is_master=item.replica.is_master,
            gpus=gpus,
            container_name=training_container_name(job),
        )


def _gpu_shares(job: AdmittedJob, console: Console) -> dict[int, list[str]] | None:
    """Each replica's GPUs by rank; None when this machine has none (CUDA is left alone)."""
    available = local_gpus()
    config = job.spec.torchrun_config
    by_gpu = queries.torchrun_enabled(job.spec) and bool(config and config.proc_per_node == "gpu")
    if available is None:
        if by_gpu:
            raise LocalRenderError(
                'spec.torchrunConfig.procPerNode is "gpu" and this machine has no GPU '
                "(CUDA_VISIBLE_DEVICES, nvidia-smi)"
            )
        return None
    limits = []
    for replica in replicas_of(job.spec):
        template = queries.replica_spec(job.spec, replica.type).template
        pod_spec = (template.spec if template else None) or {}
        _, container = training_container_named(pod_spec, training_container_name(job))
        limits.append(queries.gpu_limit(container or {}))
    shares = gpu_shares(limits, available)
    console.say(
        f"{len(available)} GPU(s) here; CUDA_VISIBLE_DEVICES by replica: "
        + ", ".join(f"rank {rank}: {','.join(s) or 'none'}" for rank, s in enumerate(shares))
    )
    return dict(enumerate(shares))


def local_gpus() -> list[str] | None:
    """This machine's GPU ids: CUDA_VISIBLE_DEVICES when set, else what nvidia-smi lists."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        ids = [v.strip() for v in visible.split(",") if v.strip() and v.strip() != "-1"]
        return ids or None
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None
    try:
        listed = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    count = sum(1 for line in listed.stdout.splitlines() if line.startswith("GPU "))
    return [str(i) for i in range(count)] or None


def _summary(job: AdmittedJob, result: RunResult, console: Console) -> None:
    """How the job ended, as its API shows it (its state, and each replica type's counts where
    its status has them), then the lifecycle's record of its restarts and replicas."""
    status, shown = result.status, result.shown
    reason, message = _ending(job, result)
    console.say(f"job {job.key}: {kind_of(job.api).phase({'status': shown})} ({reason}: {message})")
    for replica_type, counts in (shown.get("replicaStatuses") or {}).items():
        numbers = ", ".join(
            f"{key} {counts[key]}" for key in ("active", "succeeded", "failed") if key in counts
        )
        console.say(f"  replicaStatuses.{replica_type}: {numbers or 'none'}")
    limit = queries.backoff_limit(job.spec)
    console.say(
        f"restarts {status.get('backoffCount', 0)} ({backoff_limit_text(limit)}), "
        f"duration {result.duration:.1f}s"
    )
    for task in status.get("tasks") or []:
        for replica in task.get("replicas") or []:
            console.say(f"  {replica.get('name')}: {_replica_outcome(replica)}")


def _ending(job: AdmittedJob, result: RunResult) -> tuple[str, str]:
    """The reason and message of the condition that ended the job, as its API shows it."""
    if result.interrupted:
        return "Interrupted", "stopped by a signal before the job finished"
    ended = kind_of(job.api).outcome({"status": result.shown})
    final = next(
        (
            c
            for c in reversed(result.shown.get("conditions") or [])
            if c.get("type") in (*TERMINAL_CONDITIONS, ended) and c.get("status") == "True"
        ),
        None,
    )
    if ended is None or final is None:
        return "NotFinished", "nothing could make progress here"
    return str(final.get("reason")), str(final.get("message"))


def backoff_limit_text(limit: int) -> str:
    """`backoffLimit 3`, or that there is none (a PyTorchJob without one)."""
    return "no backoffLimit" if limit == UNLIMITED_BACKOFF else f"backoffLimit {limit}"


def _replica_outcome(replica: dict[str, Any]) -> str:
    phase = replica.get("phase") or "not running"
    codes = [c.get("exitCode") for c in replica.get("containers") or [] if "exitCode" in c]
    return phase + (f", exit code {codes[0]}" if codes else "")


def write_status(path: Path, status: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump({"status": status}, sort_keys=False))


def kubectl_complete(argv: list[str] | None = None) -> int:
    """`kubectl_complete-torchjob WORDS...`: kubectl (1.26 and later) runs it to complete
    `kubectl torchjob WORDS`; it answers as cobra's `__complete` does, one candidate a line,
    then `:4` (no file names)."""
    words = list(sys.argv[1:] if argv is None else argv)
    for candidate in candidates(parser("kubectl torchjob"), words, job_names):
        sys.stdout.write(candidate + "\n")
    sys.stdout.write(":4\n")
    return EXIT_SUCCEEDED


if __name__ == "__main__":
    sys.exit(main())
