"""A replica's processes on this machine, as `torchjob run` starts, watches and stops them.

Every process of a replica carries the pod's uid in its environment (`TORCHJOB_REPLICA_UID`),
which is how its processes are found when they have left the replica's session (torchrun starts
each worker in a session of its own); killing a replica kills its session and whatever carries
its uid, as a container runtime tears down a container whose main process has exited.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shlex
import signal
import socket
import subprocess
from pathlib import Path

REPLICA_MARKER = "TORCHJOB_REPLICA_UID"


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def exited(process: subprocess.Popen[bytes]) -> int:
    """The process's return code once it has exited (a pidfd tells when; else it is polled)."""
    try:
        pidfd = os.pidfd_open(process.pid)
    except OSError:  # an old kernel: nothing tells when the process exits, so ask
        while process.poll() is None:  # noqa: ASYNC110
            await asyncio.sleep(0.1)
        return process.returncode
    loop = asyncio.get_running_loop()
    done = loop.create_future()

    def readable() -> None:
        if not done.done():
            done.set_result(None)

    loop.add_reader(pidfd, readable)
    try:
        await done
    finally:
        loop.remove_reader(pidfd)
        os.close(pidfd)
    return process.wait()


def kill_replica(process: subprocess.Popen[bytes], uid: str) -> None:
    """SIGKILL to every process of the replica: the session `process` leads, and whatever
    carries the replica uid `uid`."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)
    for pid in processes_marked(uid):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)


def processes_marked(uid: str) -> list[int]:
    """The processes whose environment carries the replica uid `uid`."""
    marker = f"{REPLICA_MARKER}={uid}".encode()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            environment = Path(f"/proc/{entry}/environ").read_bytes()
        except OSError:  # gone, or not ours to read
            continue
        if marker in environment.split(b"\0"):
            found.append(int(entry))
    return found


def shown_command(argv: list[str]) -> str:
    """A command line as the run reports it: one line, at most 200 characters."""
    text = shlex.join(argv).replace("\n", "\\n")
    return text if len(text) <= 200 else text[:197] + "..."
