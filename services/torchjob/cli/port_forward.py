"""`kubectl port-forward` to a Service, for `torchjob tensorboard` and `torchjob console`: the
local URL printed once kubectl forwards, its errors relayed, and kubectl stopped with the command.

The forwarding is kubectl's. The other commands ask the apiserver through our REST client
(kube/client.py); a port-forward is a stream protocol of its own, a multiplexed connection per
browser connection over SPDY or WebSocket (portforward.k8s.io, v4.channel.k8s.io), with its
error channel and the apiserver's choice among versions. kubectl's is the client users already
trust and speaks whichever protocol the apiserver offers; a second one of ours would be the
riskiest code of the CLI for no gain. A user of the `kubectl torchjob` plugin has kubectl by
definition; elsewhere `--kubectl PATH` or $KUBECTL names it."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import shutil
import signal
import sys
from collections.abc import Callable

from torchjob.cli.connection import CliError, Target, kubeconfig_path

FORWARDING = re.compile(r"Forwarding from (?P<address>[0-9.]+):(?P<port>\d+) ->")
READY_TIMEOUT = 60.0
_BACKGROUND: set[asyncio.Task[None]] = set()  # referenced until the process ends


def kubectl_path(given: str | None) -> str:
    path = given or os.environ.get("KUBECTL") or shutil.which("kubectl")
    if not path or not (os.path.isfile(path) and os.access(path, os.X_OK)):
        raise CliError(
            "torchjob forwards the port with kubectl, which is not on PATH: "
            "install kubectl, or give --kubectl PATH"
        )
    return path


def port_forward_argv(
    kubectl: str,
    target: Target,
    *,
    namespace: str,
    address: str,
    service: str,
    local_port: int,
    service_port: int,
) -> list[str]:
    """kubectl's command line, with the kubeconfig and context the command was given; local port
    0 lets kubectl choose a free one."""
    argv = [kubectl, "port-forward"]
    kubeconfig = kubeconfig_path(target)
    if kubeconfig:
        argv.append(f"--kubeconfig={kubeconfig}")
    if target.context:
        argv.append(f"--context={target.context}")
    return [
        *argv,
        f"--namespace={namespace}",
        f"--address={address}",
        f"service/{service}",
        f"{local_port or ''}:{service_port}",
    ]


async def forward(argv: list[str], announce: Callable[[str], None]) -> bool:
    """Runs kubectl port-forward until it ends or the user stops it; `announce` gets the local
    URL once kubectl forwards. True when stopped by the user (SIGTERM or Ctrl-C)."""
    process = await asyncio.create_subprocess_exec(
        *argv,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        start_new_session=True,
    )
    return await _forward_until_stopped(process, announce)


async def _forward_until_stopped(
    process: asyncio.subprocess.Process, announce: Callable[[str], None]
) -> bool:
    """Announces the URL once kubectl forwards, relays its errors, and waits until it ends or the
    user stops it. kubectl, in a session of its own, is stopped on the way out rather than left
    running."""
    assert process.stdout is not None and process.stderr is not None
    loop = asyncio.get_running_loop()
    main = asyncio.current_task()
    assert main is not None
    loop.add_signal_handler(signal.SIGTERM, main.cancel)  # SIGTERM stops it as Ctrl-C does
    relay: asyncio.Task[None] | None = None
    try:
        url = await asyncio.wait_for(_forwarding(process.stdout), READY_TIMEOUT)
        if url is None:
            error = (await process.stderr.read()).decode(errors="replace").strip()
            raise CliError(f"kubectl port-forward failed: {error or 'no output'}")
        announce(url)
        sys.stdout.write("Forwarding with kubectl port-forward; Ctrl-C to stop.\n")
        sys.stdout.flush()
        relay = asyncio.create_task(_relay(process.stderr))
        code = await process.wait()
        await relay
        if code != 0:
            raise CliError(f"kubectl port-forward ended with exit code {code}")
    except TimeoutError as error:
        raise CliError(f"kubectl port-forward did not start in {READY_TIMEOUT:g}s") from error
    except asyncio.CancelledError:
        # SIGTERM, or Ctrl-C (asyncio.run cancels the main task on SIGINT)
        if main.cancelling() > 1:
            raise
        return True
    finally:
        loop.remove_signal_handler(signal.SIGTERM)
        if relay is not None:
            relay.cancel()
        await _stop(process)
    return False


async def _stop(process: asyncio.subprocess.Process) -> None:
    if process.returncode is None:
        with contextlib.suppress(ProcessLookupError):
            process.send_signal(signal.SIGTERM)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(process.wait(), 10)
        if process.returncode is None:
            process.kill()
            await process.wait()


async def _forwarding(stdout: asyncio.StreamReader) -> str | None:
    """The local URL, from kubectl's first `Forwarding from` line; None if it exits first."""
    while line := await stdout.readline():
        match = FORWARDING.search(line.decode(errors="replace"))
        if match:
            _BACKGROUND.add(asyncio.get_running_loop().create_task(_drain(stdout)))
            return f"http://{match['address']}:{match['port']}/"
    return None


async def _drain(stream: asyncio.StreamReader) -> None:
    while await stream.readline():
        pass


async def _relay(stream: asyncio.StreamReader) -> None:
    while line := await stream.readline():
        sys.stderr.write(line.decode(errors="replace"))
        sys.stderr.flush()
