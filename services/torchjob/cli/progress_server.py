"""`torchjob run`'s progress endpoint: Kubeflow Trainer's status endpoint, served on loopback.

The replicas of a local run report their progress as they would on a cluster (api/progress.py):
every replica's process gets `KUBEFLOW_TRAINER_SERVER_URL` (`http://127.0.0.1:<port><job path>`)
and `KUBEFLOW_TRAINER_SERVER_TOKEN` (a file holding a random secret, readable by this user only),
and POSTs `{"trainerStatus": {...}}` there with the secret as its bearer token. Plain HTTP on
loopback needs no CA, so the CA variable is not set. Each accepted report replaces the last one
(lifecycle/progress.py), is shown as a line of the run's output (at most one every few seconds,
and always the last) and ends up in the run's `status.yaml` as `status.trainerStatus`.

Answers are Kubeflow's server's: 200 with the written `trainerStatus`, else a `metav1.Status`
naming the reason, so Kubeflow's clients (Hugging Face's Trainer, the Kubeflow SDK) work
unchanged.
"""

from __future__ import annotations

import contextlib
import hmac
import math
import os
import secrets
import shutil
import socket
import tempfile
import time
from collections.abc import Awaitable, Callable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final, TypeVar

import orjson
from aiohttp import web

from torchjob.api.progress import (
    ENV_NAMES,
    ENV_TOKEN,
    ENV_URL,
    MAX_BODY_BYTES,
    JobRef,
    job_of_path,
    reporting_enabled,
)
from torchjob.cli.manifest import AdmittedJob
from torchjob.cli.terminal import Console
from torchjob.lifecycle.progress import FIELD, ReportError, failure_status, read_report

LOOPBACK: Final = "127.0.0.1"
TOKEN_FILE: Final = "progress-token"
# Seconds between two progress lines in the run's output: a little under the 5 s that Kubeflow's
# clients wait between two reports, so that each of theirs is shown, and a flood is not.
PRINT_INTERVAL: Final = 4.0
SHOWN_METRICS: Final = 6  # metrics on a progress line; status.yaml holds them all
READ_CHUNK: Final = 16 * 1024
PROXY_VARIABLES: Final = ("http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY")

T = TypeVar("T")


class LocalProgress:
    """The endpoint of one local run: its secret, its socket, and the last report it accepted."""

    def __init__(
        self,
        job: JobRef,
        console: Console,
        run_dir: Path | None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.job = job
        self.console = console
        self.clock = clock
        # Without a run directory (no --logs) the secret goes to a private one of its own.
        directory = run_dir if run_dir is not None else Path(tempfile.mkdtemp(prefix="torchjob-"))
        self._own_dir = None if run_dir is not None else directory
        self._token = secrets.token_urlsafe(32)
        self.token_file = _write_secret(directory / TOKEN_FILE, self._token)
        # Bound now, so that the URL is known before the loop that serves it runs.
        self._socket = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._socket.bind((LOOPBACK, 0))
        self.port: int = self._socket.getsockname()[1]
        self._socket.listen()  # a replica's report waits to be accepted, never refused
        self._runner: web.AppRunner | None = None
        self.latest: dict[str, Any] | None = None  # status.trainerStatus, as last reported
        self._printed_at: float | None = None
        self._unprinted: dict[str, Any] | None = None

    @property
    def url(self) -> str:
        return f"http://{LOOPBACK}:{self.port}{self.job.path}"

    def environment(self, inherited: Mapping[str, str]) -> dict[str, str]:
        """What every replica's process inherits: this machine's environment, less any reporting
        variables it carries from elsewhere (another endpoint's CA or token), plus this run's
        endpoint. A container's own variables of the same names are set over these, as they
        win on a cluster."""
        env = {key: value for key, value in inherited.items() if key not in ENV_NAMES}
        env[ENV_URL] = self.url
        env[ENV_TOKEN] = str(self.token_file)
        if any(env.get(name) for name in PROXY_VARIABLES):
            # The reporters' HTTP clients would send a loopback report to the proxy.
            for name in ("no_proxy", "NO_PROXY"):
                env[name] = ",".join(filter(None, (env.get(name), LOOPBACK)))
        return env

    async def serve(self, work: Awaitable[T]) -> T:
        """Serve reports while `work` runs, then stop."""
        await self.start()
        try:
            return await work
        finally:
            await self.stop()

    async def start(self) -> None:
        app = web.Application()
        app.router.add_route("*", "/{path:.*}", self.handle)
        self._runner = web.AppRunner(app, handle_signals=False, access_log=None)
        await self._runner.setup()
        await web.SockSite(self._runner, self._socket).start()

    async def stop(self) -> None:
        """No more reports: show the last one if it was not, and remove the secret."""
        if self._runner is not None:
            await self._runner.cleanup()
        self._socket.close()
        if self._unprinted is not None:
            self._say(self._unprinted)
        with contextlib.suppress(OSError):
            self.token_file.unlink()
        if self._own_dir is not None:
            shutil.rmtree(self._own_dir, ignore_errors=True)

    def with_report(self, status: dict[str, Any]) -> dict[str, Any]:
        """The job's status with its last report, as the endpoint writes it on a cluster."""
        return status if self.latest is None else {**status, FIELD: self.latest}

    # -- a report --------------------------------------------------------------------------------

    async def handle(self, request: web.Request) -> web.Response:
        if request.method != "POST":
            return failure(405, "MethodNotAllowed", f"{request.method} is not served; POST")
        if not self._authorized(request.headers.get("Authorization", "")):
            return failure(401, "Unauthorized", "a bearer token from this run's token file")
        if job_of_path(request.path) != self.job:
            return failure(
                404, "NotFound", f"{request.path} names no job of this run; {self.job.path}"
            )
        raw = await _bounded_body(request)
        if raw is None:
            return failure(413, "RequestEntityTooLarge", f"the body exceeds {MAX_BODY_BYTES} bytes")
        try:
            body = orjson.loads(raw)
        except orjson.JSONDecodeError as error:
            return failure(400, "BadRequest", f"the body is not JSON: {error}"[:200])
        try:
            report = read_report(body)
        except ReportError as error:
            return failure(422, "Invalid", str(error))
        written = {k: v for k, v in report.status(datetime.now(UTC)).items() if v is not None}
        self.latest = written
        self._show(written)
        return _json(200, {FIELD: written})

    def _authorized(self, header: str) -> bool:
        scheme, _, token = header.partition(" ")
        token = token.strip()
        # A header's bytes that are not ASCII arrive as lone surrogates, which cannot be encoded.
        return (
            scheme.lower() == "bearer"
            and token.isascii()
            and hmac.compare_digest(token.encode(), self._token.encode())
        )

    def _show(self, report: dict[str, Any]) -> None:
        """A line for the report, unless one was shown moments ago (then it waits for the next
        line's turn, or the end); the one that says 100 % is always shown."""
        now = self.clock()
        due = self._printed_at is None or now - self._printed_at >= PRINT_INTERVAL
        if due or report.get("progressPercentage") == 100:
            self._printed_at = now
            self._say(report)
        else:
            self._unprinted = report

    def _say(self, report: dict[str, Any]) -> None:
        self._unprinted = None
        self.console.say(progress_line(report))


def local_progress(
    job: AdmittedJob, console: Console, run_dir: Path | None
) -> LocalProgress | None:
    """The run's endpoint, or None when the job turns reporting off."""
    if not reporting_enabled(job.meta.get("annotations")):
        return None
    return LocalProgress(JobRef(job.api, job.meta["namespace"], job.meta["name"]), console, run_dir)


def progress_line(report: dict[str, Any]) -> str:
    """`progress 45% · eta 2m10s · loss=0.25 · accuracy=0.9`."""
    percentage = report.get("progressPercentage")
    parts = ["progress" if percentage is None else f"progress {percentage}%"]
    eta = report.get("estimatedRemainingSeconds")
    if eta is not None:
        parts.append(f"eta {duration(int(eta))}")
    metrics = report.get("metrics") or []
    parts += [f"{m['name']}={short(m['value'])}" for m in metrics[:SHOWN_METRICS]]
    if len(metrics) > SHOWN_METRICS:
        parts.append(f"+{len(metrics) - SHOWN_METRICS} more")
    return " · ".join(parts)


def short(value: str) -> str:
    """A metric's value as a line shows it: a fraction to 4 significant digits (0.6910826683 is
    0.6911), anything else as it is."""
    try:
        number = float(value)
    except ValueError:
        return value
    return f"{number:.4g}" if any(c in value for c in ".eE") and math.isfinite(number) else value


def duration(seconds: int) -> str:
    """45s, 2m10s, 3h05m."""
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m"
    return f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"


def failure(code: int, reason: str, message: str) -> web.Response:
    return _json(code, failure_status(code, reason, message))


def _json(code: int, body: dict[str, Any]) -> web.Response:
    return web.Response(status=code, body=orjson.dumps(body), content_type="application/json")


async def _bounded_body(request: web.Request) -> bytes | None:
    """The request's body, or None when it is longer than a report may be (read no further)."""
    if request.content_length is not None and request.content_length > MAX_BODY_BYTES:
        return None
    chunks: list[bytes] = []
    size = 0
    while chunk := await request.content.read(READ_CHUNK):
        size += len(chunk)
        if size > MAX_BODY_BYTES:
            return None
        chunks.append(chunk)
    return b"".join(chunks)


def _write_secret(path: Path, secret: str) -> Path:
    """`secret` in a new file at `path` that only this user can read."""
    path = path.absolute()
    path.parent.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(FileNotFoundError):
        path.unlink()  # a previous run's: a file opened anew gets the mode below
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "w") as handle:
        handle.write(secret)
    return path
