"""Our services run as real processes in e2e tests: started with their real command line, waited
for on their readiness probe, stopped with SIGTERM (SIGKILL after a grace period)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from types import TracebackType

READY_TIMEOUT = 60.0
STOP_GRACE = 10.0
# The interpreter a service runs under when this variable names one (a bench's venv with the
# package installed as the image installs it); this process's own otherwise.
SERVICE_PYTHON_VARIABLE = "BENCH_SERVICE_PYTHON"


class ServiceProcess:
    """`python -m <module> <args>` with its output in a log file; ready when /readyz says 200."""

    def __init__(
        self, module: str, args: list[str], probe_port: int, env: dict[str, str] | None = None
    ):
        self.module = module
        python = os.environ.get(SERVICE_PYTHON_VARIABLE, sys.executable)
        self.argv = [python, "-m", module, *args]
        self.probe_port = probe_port
        self.env = {**os.environ, **(env or {})}
        handle, name = tempfile.mkstemp(prefix=f"{module.replace('.', '-')}-", suffix=".log")
        os.close(handle)
        self.log_path = Path(name)
        self.process: subprocess.Popen[bytes] | None = None

    @classmethod
    def program(
        cls, name: str, argv: list[str], probe_port: int, env: dict[str, str] | None = None
    ) -> ServiceProcess:
        """Another project's program (`argv`, a built binary first) with the same lifecycle,
        log file and readiness probe as our services; `name` stands for the module in its log
        file's name and in its errors."""
        process = cls(name, [], probe_port, env)
        process.argv = list(argv)
        return process

    def start(self) -> ServiceProcess:
        log = self.log_path.open("ab")
        self.process = subprocess.Popen(
            self.argv, stdout=log, stderr=subprocess.STDOUT, env=self.env, start_new_session=True
        )
        log.close()
        return self

    def wait_ready(self, timeout: float = READY_TIMEOUT) -> ServiceProcess:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process is None or self.process.poll() is not None:
                raise RuntimeError(f"{self.module} exited early:\n{self.log_tail()}")
            if self.probe("/readyz") == 200:
                return self
            time.sleep(0.1)
        raise RuntimeError(f"{self.module} not ready after {timeout}s:\n{self.log_tail()}")

    def probe(self, path: str) -> int | None:
        try:
            with urllib.request.urlopen(
                f"http://127.0.0.1:{self.probe_port}{path}", timeout=1
            ) as r:
                return int(r.status)
        except urllib.error.HTTPError as error:
            return error.code
        except OSError:
            return None

    def metrics(self) -> str:
        url = f"http://127.0.0.1:{self.probe_port}/metrics"
        with urllib.request.urlopen(url, timeout=5) as response:
            return str(response.read().decode())

    def samples(self, metric: str) -> dict[str, float]:
        """The samples of one metric from /metrics, by their label set as written
        (`{method="GET"}`; "" for none)."""
        pattern = re.compile(rf"^{re.escape(metric)}(\{{.*\}})? (\S+)$")
        found = {}
        for line in self.metrics().splitlines():
            if match := pattern.match(line):
                found[match.group(1) or ""] = float(match.group(2))
        return found

    def kill(self) -> None:
        """SIGKILL, as a crash would."""
        if self.process and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()

    def stop(self) -> None:
        if self.process is None:
            return
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(STOP_GRACE)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
        self.process = None

    def log_tail(self, lines: int = 60) -> str:
        text = self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
        return "\n".join(text.splitlines()[-lines:])

    def close(self) -> None:
        self.stop()
        self.log_path.unlink(missing_ok=True)

    def __enter__(self) -> ServiceProcess:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()
