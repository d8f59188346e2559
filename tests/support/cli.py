"""`torchjob run` as a user runs it: the installed console script in a process of its own, its
output collected line by line while it runs, so that a test can act on what it prints."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import yaml

from support.eventually import eventually_sync

BIN = Path(sys.executable).parent
TESTS = Path(__file__).parents[1]
SCRIPTS = TESTS / "local" / "scripts"  # run by torchrun in the real-torch tests
EXAMPLE = TESTS.parent / "examples" / "mnist-ddp"
TORCHJOB = BIN / "torchjob"
STARTED = re.compile(r"^torchjob: started (?P<name>\S+) \(pid (?P<pid>\d+)\)")


def process(args: list[str], command: list[str] | None = None) -> dict[str, Any]:
    """A replica's container as `torchjob run` runs it: a local process (the image unused)."""
    container: dict[str, Any] = {"name": "python", "image": "unused", "args": args}
    if command is not None:
        container["command"] = command
    return container


@dataclass
class Finished:
    returncode: int
    stdout: list[str]
    stderr: list[str]
    status: dict[str, Any]

    def condition(self, kind: str) -> dict[str, Any]:
        return next(c for c in self.status.get("conditions", []) if c["type"] == kind)

    def replica_lines(self, name: str) -> list[str]:
        prefix = re.compile(rf"^{re.escape(name)}\s*\| ")
        return [prefix.sub("", line) for line in self.stdout if prefix.match(line)]


class TorchjobRun:
    """`torchjob run --logs <dir> <manifest>`, started in `cwd`; the venv's bin comes first on
    PATH so that `python` and `torchrun` in a manifest are this environment's."""

    def __init__(self, manifest: dict[str, Any], tmp: Path, *extra: str) -> None:
        self.tmp = tmp
        self.manifest_path = tmp / "job.yaml"
        self.manifest_path.write_text(yaml.safe_dump(manifest))
        self.logs = tmp / "logs"
        self.argv = [str(TORCHJOB), "run", "--logs", str(self.logs), *extra, "job.yaml"]
        self.stdout: list[str] = []
        self.stderr: list[str] = []
        self._changed = threading.Condition()
        self.process: subprocess.Popen[str] | None = None
        self._readers: list[threading.Thread] = []

    def start(self) -> TorchjobRun:
        env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
        self.process = subprocess.Popen(
            self.argv,
            cwd=self.tmp,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert self.process.stdout is not None and self.process.stderr is not None
        for stream, lines in (
            (self.process.stdout, self.stdout),
            (self.process.stderr, self.stderr),
        ):
            reader = threading.Thread(target=self._read, args=(stream, lines), daemon=True)
            reader.start()
            self._readers.append(reader)
        return self

    def _read(self, stream: IO[str], lines: list[str]) -> None:
        for line in stream:
            with self._changed:
                lines.append(line.rstrip("\n"))
                self._changed.notify_all()

    def wait_for(
        self, pattern: str, stream: str = "stdout", timeout: float = 120.0
    ) -> re.Match[str]:
        """The first line of `stream` matching `pattern`, waiting for it."""
        regex = re.compile(pattern)
        lines = self.stdout if stream == "stdout" else self.stderr
        deadline = time.monotonic() + timeout
        with self._changed:
            while True:
                for line in lines:
                    if match := regex.search(line):
                        return match
                if (
                    self.process is not None
                    and self.process.poll() is not None
                    and all(not r.is_alive() for r in self._readers)
                ):
                    raise AssertionError(
                        f"torchjob exited before printing {pattern!r}\n{self.output()}"
                    )
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise AssertionError(
                        f"no line matching {pattern!r} in {timeout}s\n{self.output()}"
                    )
                self._changed.wait(min(remaining, 0.5))

    def pid_of(self, replica: str, after: int = 0) -> int:
        """The pid of the `after`+1-th start of `replica`, as torchjob reports it."""
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            with self._changed:
                pids = [
                    int(m["pid"])
                    for line in self.stderr
                    if (m := STARTED.match(line)) and m["name"] == replica
                ]
                if len(pids) > after:
                    return pids[after]
                self._changed.wait(0.5)
        raise AssertionError(f"{replica} was not started {after + 1} time(s)\n{self.output()}")

    def signal(self, signum: int) -> None:
        assert self.process is not None
        self.process.send_signal(signum)

    def finish(self, timeout: float = 240.0) -> Finished:
        assert self.process is not None
        try:
            returncode = self.process.wait(timeout)
        except subprocess.TimeoutExpired as error:
            self.close()
            raise AssertionError(
                f"torchjob did not finish in {timeout}s\n{self.output()}"
            ) from error
        for reader in self._readers:
            reader.join(10)
        status_file = self.logs / "status.yaml"
        status = yaml.safe_load(status_file.read_text())["status"] if status_file.exists() else {}
        return Finished(returncode, list(self.stdout), list(self.stderr), status)

    def output(self) -> str:
        return "\n".join(["--- stdout", *self.stdout[-80:], "--- stderr", *self.stderr[-80:]])

    def close(self) -> None:
        """Whatever happened, nothing is left running: torchjob gets Ctrl-C, then SIGKILL."""
        if self.process is None or self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGINT)
        try:
            self.process.wait(30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def checks(lines: list[str]) -> list[dict[str, Any]]:
    """The `CHECK {json}` reports of every process (scripts/check_env.py), each with the replica
    that printed it."""
    found = []
    for line in lines:
        name, _, text = line.partition(" | ")
        if text.startswith("CHECK "):
            found.append({"replica": name.strip(), **json.loads(text.removeprefix("CHECK "))})
    return found


@contextlib.contextmanager
def running(manifest: dict[str, Any], tmp: Path, *extra: str) -> Iterator[TorchjobRun]:
    """`torchjob run` started, and whatever happens, not left running."""
    run = TorchjobRun(manifest, tmp, *extra).start()
    try:
        yield run
    finally:
        run.close()


def run_to_end(
    manifest: dict[str, Any], tmp: Path, *extra: str, timeout: float = 240.0
) -> Finished:
    with running(manifest, tmp, *extra) as run:
        return run.finish(timeout)


def descendants(pid: int) -> set[int]:
    """Every live process below `pid`."""
    children: dict[int, set[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = stat.rpartition(")")[2].split()
        children.setdefault(int(fields[1]), set()).add(int(entry))
    found: set[int] = set()
    todo = [pid]
    while todo:
        for child in children.get(todo.pop(), set()):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def alive(pid: int) -> bool:
    """Running, not a zombie waiting to be reaped."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[0] != "Z"


def still_alive(pids: set[int], timeout: float) -> set[int]:
    """The processes of `pids` still running once they all ended or `timeout` passed."""
    deadline = time.monotonic() + timeout
    while (left := {p for p in pids if alive(p)}) and time.monotonic() < deadline:
        time.sleep(0.05)
    return left


def stand_in_kubectl(directory: Path, target_port: int) -> Path:
    """A kubectl that records its arguments and pid in `directory`, reports a forwarded port (to
    `target_port`) as kubectl port-forward does, and waits: the real forwarding needs a kubelet."""
    fake = directory / "kubectl"
    fake.write_text(
        "#!/bin/sh\n"
        f'echo "$@" > {directory}/argv\n'
        f"echo $$ > {directory}/pid\n"
        f'echo "Forwarding from 127.0.0.1:41234 -> {target_port}"\n'
        "exec sleep 600\n"
    )
    fake.chmod(0o755)
    return fake


def stop_forwarding(
    forward: subprocess.Popen[str], first_line: str, directory: Path, timeout: float
) -> list[str]:
    """Reads a forwarding torchjob command's first line (`first_line` expected), stops it with
    SIGTERM, and checks that it exited 0 saying so and took the stand-in kubectl with it; the
    arguments the stand-in kubectl was given."""
    try:
        assert forward.stdout is not None
        assert forward.stdout.readline() == first_line
        forward.terminate()
        out, err = forward.communicate(timeout=timeout)
    finally:
        if forward.poll() is None:
            forward.kill()
            forward.wait()
    assert forward.returncode == 0, err
    assert "Stopped forwarding." in out
    argv = (directory / "argv").read_text().split()
    pid = int((directory / "pid").read_text())
    eventually_sync(lambda: not Path(f"/proc/{pid}").exists(), "the stand-in kubectl stopped")
    return argv
