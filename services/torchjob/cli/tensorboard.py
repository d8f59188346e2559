"""`torchjob tensorboard [KIND/]NAME`: forward a local port to the job's TensorBoard Service and
print the local URL, until interrupted (the forwarding: cli/port_forward.py)."""

from __future__ import annotations

import argparse
import sys

from torchjob.cli.commands import EXIT_SUCCEEDED, target_of
from torchjob.cli.connection import CliError, Cluster, connect
from torchjob.cli.port_forward import forward, kubectl_path, port_forward_argv
from torchjob.render.tensorboard import PORT, tensorboard_name
from torchjob.views.cli.job_reference import JobRef
from torchjob.views.cli.tables import training_view


async def tensorboard(args: argparse.Namespace) -> int:
    target = target_of(args)
    async with connect(target) as cluster:
        service, ready = await _board_of(cluster, args.job)
        namespace = cluster.namespace
    argv = port_forward_argv(
        kubectl_path(args.kubectl),
        target,
        namespace=namespace,
        address=args.address,
        service=service,
        local_port=args.port,
        service_port=PORT,
    )
    if not ready:
        sys.stderr.write(f"note: the TensorBoard of {args.job} is not ready yet\n")

    def announce(url: str) -> None:
        sys.stdout.write(f"TensorBoard of {namespace}/{args.job}: {url}\n")

    if await forward(argv, announce):
        sys.stdout.write("Stopped forwarding.\n")
    return EXIT_SUCCEEDED


async def _board_of(cluster: Cluster, ref: JobRef) -> tuple[str, bool]:
    """The job's TensorBoard Service, and whether the board is ready; a CliError saying what to
    do when the job has none (a job of an API without `tensorboardSpec` never has) or its
    Service is not there yet."""
    job = training_view(await cluster.get_job(ref.name, ref.api))
    if not (job.get("spec") or {}).get("tensorboardSpec"):
        raise CliError(
            f"job {ref} has no TensorBoard: submit it with --tensorboard --logdir DIR, "
            "or give it spec.tensorboardSpec"
        )
    service = tensorboard_name(ref.name)
    if await cluster.service(service) is None:
        raise CliError(
            f"the TensorBoard Service {service} does not exist yet: the housekeeper creates "
            "it (is the operator's housekeeper running?); torchjob get shows its state"
        )
    ready = ((job.get("status") or {}).get("tensorboard") or {}).get("ready")
    return service, bool(ready)
