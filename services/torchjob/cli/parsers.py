"""The cluster commands' arguments, and running one of them: `submit`, `list`, `get`, `logs`,
`top`, `delete`, `pause`, `resume`, `wait`, `tensorboard`, `console` and `completion`."""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Awaitable, Callable
from typing import Any

from torchjob.api import types
from torchjob.cli import commands
from torchjob.cli.command_parser import CommandParser
from torchjob.cli.completion import completion as completion_command
from torchjob.cli.connection import CliError
from torchjob.cli.logs import logs as logs_command
from torchjob.cli.tensorboard import tensorboard as tensorboard_command
from torchjob.cli.top import top as top_command
from torchjob.cli.web_console import OPERATOR_NAMESPACE
from torchjob.cli.web_console import console as console_command
from torchjob.views.cli.job_reference import JobRef, UnknownJobKind, job_reference
from torchjob.views.cli.submission import DEFAULT_SYNC_IMAGE

Command = Callable[[argparse.Namespace], Awaitable[int]]
EXIT_INTERRUPTED = 130


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError("must be 1 or more")
    return value


def _not_negative(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError("must be 0 or more")
    return value


def job_argument(text: str) -> JobRef:
    """A job argument, `NAME` or `KIND/NAME` (views/cli/job_reference.py); an unknown KIND is a
    usage error (exit 2) naming the kinds known."""
    try:
        return job_reference(text)
    except UnknownJobKind as error:
        raise argparse.ArgumentTypeError(str(error)) from None


# What a job argument is, in every command's help.
JOB_METAVAR = "[KIND/]NAME"
JOB_HELP = "a PyTorchTrainingJob's NAME, or KIND/NAME for another API's job (trainjob/NAME)"


def _seconds(text: str) -> float:
    """A duration: 90, 90s, 5m, 2h."""
    units = {"s": 1, "m": 60, "h": 3600}
    try:
        value = float(text[:-1]) * units[text[-1]] if text[-1:] in units else float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: write a duration like 90s, 5m or 2h") from None
    if value <= 0:
        raise argparse.ArgumentTypeError("must be more than 0")
    return value


# The cluster flags, by their attribute on the parsed arguments, as the user writes them.
CLUSTER_FLAGS: dict[str, str] = {
    "kubeconfig": "--kubeconfig",
    "context": "--context",
    "namespace": "-n/--namespace",
    "all_namespaces": "-A/--all-namespaces",
}


def add_cluster_flags(
    group: Any, *, everywhere: bool, after_verb: bool, namespaced: bool = True
) -> None:
    """--kubeconfig, --context, -n (unless not namespaced) and (everywhere) -A, on the top parser
    (before the verb, as kubectl users type them) or on a verb's. After the verb a flag is set
    only when given, so that it does not overwrite the same flag given before the verb."""
    unset: dict[str, Any] = {"default": argparse.SUPPRESS} if after_verb else {}
    group.add_argument(
        "--kubeconfig",
        metavar="FILE",
        help="kubeconfig file (default: $KUBECONFIG or ~/.kube/config)",
        **unset,
    )
    group.add_argument(
        "--context", help="the kubeconfig context to use (default: its current one)", **unset
    )
    if namespaced:
        group.add_argument(
            "-n",
            "--namespace",
            help="the namespace (default: the context's, else default)",
            **unset,
        )
    if everywhere:
        group.add_argument(
            "-A", "--all-namespaces", action="store_true", help="every namespace", **unset
        )


def misplaced_cluster_flags(args: argparse.Namespace) -> list[str]:
    """The cluster flags given (before the verb) that the chosen verb does not take."""
    accepted = getattr(args, "cluster_flags", ())
    return [
        written
        for name, written in CLUSTER_FLAGS.items()
        if getattr(args, name, None) and name not in accepted
    ]


def _cluster_options(everywhere: bool = False) -> CommandParser:
    options = CommandParser(add_help=False)
    add_cluster_flags(options.option_group("cluster"), everywhere=everywhere, after_verb=True)
    accepted = [name for name in CLUSTER_FLAGS if everywhere or name != "all_namespaces"]
    options.set_defaults(cluster_flags=tuple(accepted))
    return options


def add_cluster_commands(commands_: Any) -> None:
    """Every cluster command, on the subparsers of the `torchjob` parser."""
    cluster = _cluster_options()
    everywhere = _cluster_options(everywhere=True)
    _submit(commands_, cluster)

    listing = commands_.add_parser(
        "list",
        parents=[everywhere],
        help="list jobs: phase, replicas running, restarts, GPUs, age",
        description="List the jobs of every API the cluster serves: PyTorchTrainingJobs, and "
        "Kubeflow's PyTorchJobs and TrainJobs where their CRDs are installed (named kind/NAME). "
        "NAME, PHASE, REPLICAS (running/total), RESTARTS (status.backoffCount), GPUS (requested "
        "by all replicas), AGE.",
    )
    listing.add_argument("-o", "--output", choices=("wide", "json", "yaml", "name"))
    listing.set_defaults(run=commands.list_jobs)

    get = commands_.add_parser(
        "get",
        parents=[cluster],
        help="a job's phase, conditions, replicas, Events and TensorBoard",
        description="Describe one job: its phase and conditions with their reasons, each "
        "replica (pod, node, phase, restarts, exit reason), recent Events, and its TensorBoard "
        "with how to reach it.",
    )
    get.add_argument("job", metavar=JOB_METAVAR, type=job_argument, help=JOB_HELP)
    get.add_argument("-o", "--output", choices=("json", "yaml"), help="the job object itself")
    get.set_defaults(run=commands.get)

    logs = commands_.add_parser(
        "logs",
        parents=[cluster],
        help="a replica's log (the master's by default)",
        description="Print a replica's log: the master's by default, -r worker-1 for another, "
        "--all for every replica (lines prefixed with the replica).",
    )
    logs.add_argument("job", metavar=JOB_METAVAR, type=job_argument, help=JOB_HELP)
    which = logs.exclusive_group()
    which.add_argument("-r", "--replica", metavar="TYPE-INDEX", help="e.g. worker-1")
    which.add_argument("--all", action="store_true", help="every replica, prefixed")
    logs.add_argument("-c", "--container", help="default: the training container")
    logs.add_argument("-f", "--follow", action="store_true", help="stream new lines")
    logs.add_argument("--tail", type=_not_negative, metavar="LINES", help="the last LINES lines")
    logs.add_argument(
        "--since", type=lambda t: int(_seconds(t)), metavar="DURATION", help="e.g. 10m"
    )
    logs.add_argument("--timestamps", action="store_true", help="prefix each line with its time")
    logs.add_argument(
        "-p",
        "--previous",
        action="store_true",
        help="the previous attempt of the container in the same pod, where it still exists",
    )
    logs.set_defaults(run=logs_command)

    top = commands_.add_parser(
        "top",
        help="GPUs, CPU and memory by job or by node",
        description="Resources requested and allocated, from the API alone (and used, when "
        "metrics-server answers).",
    )
    what = top.add_subparsers(dest="what", required=True, metavar="job|node")
    top_job = what.add_parser(
        "job",
        parents=[everywhere],
        help="per job: requested by its spec, allocated to its pods on nodes",
    )
    top_job.add_argument("job", metavar=JOB_METAVAR, nargs="?", type=job_argument, help=JOB_HELP)
    top_node = what.add_parser(
        "node",
        parents=[_cluster_options()],
        help="per node: allocatable and requested GPUs, CPU and memory",
    )
    for sub in (top_job, top_node):
        sub.add_argument(
            "--no-metrics", action="store_true", help="do not ask metrics-server for usage"
        )
        sub.set_defaults(run=top_command)

    delete = commands_.add_parser(
        "delete", parents=[cluster], help="delete jobs (their pods and Services go with them)"
    )
    delete.add_argument("jobs", metavar=JOB_METAVAR, nargs="+", type=job_argument, help=JOB_HELP)
    delete.add_argument("--wait", action="store_true", help="until the jobs are gone")
    delete.add_argument("--timeout", type=_seconds, metavar="DURATION")
    delete.set_defaults(run=commands.delete)

    for name, function, text in (
        ("pause", commands.pause, "stop a job's pods without ending it (runMode.pause)"),
        ("resume", commands.resume, "start a paused job's pods again"),
    ):
        sub = commands_.add_parser(name, parents=[cluster], help=text, description=text)
        sub.add_argument("job", metavar=JOB_METAVAR, type=job_argument, help=JOB_HELP)
        sub.add_argument(
            "--wait",
            action="store_true",
            help="until the job is Paused" if name == "pause" else "until it runs again",
        )
        sub.add_argument("--timeout", type=_seconds, metavar="DURATION")
        sub.set_defaults(run=function)

    wait = commands_.add_parser(
        "wait",
        parents=[cluster],
        help="wait until a job ends: exit 0 Succeeded, 1 Failed, 124 timed out",
    )
    wait.add_argument("job", metavar=JOB_METAVAR, type=job_argument, help=JOB_HELP)
    wait.add_argument("--timeout", type=_seconds, metavar="DURATION", help="e.g. 30m")
    wait.set_defaults(run=commands.wait)

    board = commands_.add_parser(
        "tensorboard",
        parents=[cluster],
        help="forward a local port to a job's TensorBoard and print the URL",
        description="Forward a local port to the job's TensorBoard Service with kubectl "
        "port-forward, print the local URL, and keep forwarding until Ctrl-C.",
    )
    board.add_argument("job", metavar=JOB_METAVAR, type=job_argument, help=JOB_HELP)
    board.add_argument(
        "--port", type=_not_negative, default=0, help="local port (default: any free one)"
    )
    board.add_argument("--address", default="127.0.0.1", help="local address (default: 127.0.0.1)")
    board.add_argument("--kubectl", metavar="PATH", help="kubectl to use (default: $KUBECTL, PATH)")
    board.set_defaults(run=tensorboard_command)
    _console(commands_)

    completion = commands_.add_parser(
        "completion",
        help="print a shell completion script (bash or zsh)",
        description="Print a completion script: `source <(torchjob completion bash)`, or in "
        "zsh `source <(torchjob completion zsh)`.",
    )
    completion.add_argument("shell", choices=("bash", "zsh"))
    completion.set_defaults(run=completion_command)


def _console(commands_: Any) -> None:
    """`torchjob console`: the kubeconfig and context, not -n (the console's namespace is the
    operator's, and it offers every namespace the user may use)."""
    options = CommandParser(add_help=False)
    add_cluster_flags(
        options.option_group("cluster"), everywhere=False, after_verb=True, namespaced=False
    )
    options.set_defaults(cluster_flags=("kubeconfig", "context"))
    console = commands_.add_parser(
        "console",
        parents=[options],
        help="open the console (jobs in the browser) through a local port",
        description="Open the console, the job manager in the browser (the chart's "
        "console.enabled): forward a local port to its Service torchjob-console with kubectl "
        "port-forward, print the local URL and open it in the browser, until Ctrl-C. Run in a "
        "pod of the cluster without a kubeconfig, print its in-cluster URL instead.",
    )
    console.add_argument(
        "--namespace-of-operator",
        metavar="NS",
        default=OPERATOR_NAMESPACE,
        help=f"the namespace torchjob is installed in (default: {OPERATOR_NAMESPACE})",
    )
    console.add_argument(
        "--port", type=_not_negative, default=0, help="local port (default: any free one)"
    )
    console.add_argument(
        "--address", default="127.0.0.1", help="local address (default: 127.0.0.1)"
    )
    console.add_argument("--no-browser", action="store_true", help="only print the URL")
    console.add_argument(
        "--kubectl", metavar="PATH", help="kubectl to use (default: $KUBECTL, PATH)"
    )
    console.set_defaults(run=console_command)


def _submit(commands_: Any, cluster: CommandParser) -> None:
    submit = commands_.add_parser(
        "submit",
        parents=[cluster],
        help="create a job from flags (Arena's submit pytorch) or from a file",
        description="Create a PyTorchTrainingJob from flags, or from -f FILE with the same "
        "admission as kubectl apply. The job has one replica spec, worker, of --workers "
        "replicas; replica 0 is the master. The command follows `--`; with torchrun (--torchrun, "
        "--nproc-per-node, --max-restarts or --elastic-*), it is the script and its arguments "
        "(a leading python is dropped). --dry-run prints the job instead.",
        usage="%(prog)s [options] -- COMMAND [ARG ...]\n       %(prog)s -f FILE [options]",
    )
    submit.add_argument("-f", "--filename", metavar="FILE", help="a job manifest ('-': stdin)")
    submit.add_argument(
        "--dry-run", action="store_true", help="print the defaulted job, create nothing"
    )
    submit.add_argument("-o", "--output", choices=("yaml", "json"), help="print the job so")
    submit.add_argument(
        "--wait",
        action="store_true",
        help="follow the job until it ends; exit 0 Succeeded, 1 Failed",
    )
    submit.add_argument("--timeout", type=_seconds, metavar="DURATION", help="with --wait")

    job = submit.option_group("the job (Arena's flags)")
    job.add_argument("--name", help="the job's name")
    job.add_argument("--image", help="the training image")
    job.add_argument("--workers", type=_positive, default=1, help="replicas (default: 1)")
    job.add_argument("--gpus", type=_not_negative, default=0, help="GPUs per replica")
    job.add_argument("--cpu", help="CPU requested per replica, e.g. 2 or 500m")
    job.add_argument("--memory", help="memory requested per replica, e.g. 4Gi")
    job.add_argument("--cpu-limit", metavar="CPU", help="CPU limit (default: --cpu)")
    job.add_argument("--memory-limit", metavar="MEMORY", help="memory limit (default: --memory)")
    job.add_argument("--working-dir", metavar="DIR", help="the container's working directory")
    job.add_argument("--env", action="append", default=[], metavar="KEY=VALUE")
    job.add_argument(
        "--data",
        action="append",
        default=[],
        metavar="CLAIM:PATH",
        help="mount PersistentVolumeClaim CLAIM at PATH in every replica",
    )
    job.add_argument("--image-pull-policy", choices=("Always", "IfNotPresent", "Never"))
    job.add_argument("--label", action="append", default=[], metavar="KEY=VALUE", help="job label")
    job.add_argument("--sync-mode", choices=("git",), help="fetch the code before training")
    job.add_argument(
        "--sync-source",
        metavar="URL",
        help="the git repository, cloned into the working dir (default /workspace)",
    )
    job.add_argument("--sync-branch", metavar="BRANCH")
    job.add_argument(
        "--sync-image",
        default=DEFAULT_SYNC_IMAGE,
        help=f"the image of the clone's init container (default: {DEFAULT_SYNC_IMAGE})",
    )
    job.add_argument("--tensorboard", action="store_true", help="start a TensorBoard over --logdir")
    job.add_argument("--tensorboard-image", metavar="IMAGE", help="an image with tensorboard")
    job.add_argument(
        "--logdir", metavar="DIR", help="the training logs' directory, on a --data claim"
    )
    job.add_argument(
        "--selector", action="append", default=[], metavar="KEY=VALUE", help="node selector"
    )
    job.add_argument(
        "--toleration",
        action="append",
        default=[],
        metavar="KEY[=VALUE][:EFFECT]",
        help="tolerate a taint ('all': every taint)",
    )
    job.add_argument("--priority", metavar="CLASS", help="the pods' PriorityClass")
    job.add_argument("--queue", help="the T9k scheduler queue (spec.scheduler.t9kScheduler)")
    job.add_argument("--queue-priority", type=int, metavar="0-100", help="priority in the queue")

    ours = submit.option_group("torchrun and the run policy")
    ours.add_argument("--torchrun", action="store_true", help="start the command with torchrun")
    ours.add_argument("--nproc-per-node", metavar="N|gpu", help="torchrun processes per replica")
    ours.add_argument("--max-restarts", type=_not_negative, help="torchrun's worker group restarts")
    ours.add_argument("--elastic-min", type=_positive, metavar="N", help="elastic: fewest replicas")
    ours.add_argument("--elastic-max", type=_positive, metavar="N", help="elastic: most replicas")
    ours.add_argument("--restart-policy", choices=types.RESTART_POLICY_VALUES)
    ours.add_argument("--backoff-limit", type=_not_negative, metavar="N")
    ours.add_argument(
        "--deadline",
        type=lambda t: int(_seconds(t)),
        metavar="DURATION",
        help="activeDeadlineSeconds, e.g. 2h",
    )
    ours.add_argument("--cleanup-policy", choices=types.CLEAN_UP_POLICY_VALUES)
    ours.add_argument(
        "--ttl",
        type=lambda t: int(_seconds(t)),
        metavar="DURATION",
        help="delete the job this long after it ends",
    )
    submit.add_argument("job_command", nargs=argparse.REMAINDER, metavar="-- COMMAND")
    submit.set_defaults(run=commands.submit)


def run_cluster_command(args: argparse.Namespace) -> int:
    try:
        code: int = asyncio.run(args.run(args))
        return code
    except CliError as error:
        sys.stderr.write(f"error: {error.message}\n")
        return error.code
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
