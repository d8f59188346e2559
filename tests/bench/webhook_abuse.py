"""The webhook under abuse: admission latency, /healthz latency and the webhook's memory, quiet and
while its admission port is abused as in the issue (20 senders of 2 MB reviews back to back and
20 bodies of 2 MB announced and left hanging, from a process of their own), and while 20 senders
post bodies of the largest size it reads that take the most memory once parsed.

The webhook runs as production runs it (`python -m torchjob.webhook`, certificates from files)
against a real control plane. The measuring client posts an ordinary job validation review one at
a time with the apiserver's default webhook timeout (5s here: the chart's timeoutSeconds), and
GETs /healthz every half second with the kubelet's liveness timeout (2s, the chart's). Prints
figures; the exit status says nothing about them.

    .venv/bin/python tests/bench/webhook_abuse.py [--seconds 20] [--source DIR]

`--source DIR` runs the webhook from another tree's `services/` (e.g. one written by
`git archive <commit> services | tar -x -C DIR`), to compare with an earlier version.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime
import os
import platform
import signal
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import orjson

TESTS_DIR = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(TESTS_DIR))

from support import ControlPlane  # noqa: E402
from support.abuse import VALIDATE, Abuse, expensive_review  # noqa: E402
from support.controlplane import free_port  # noqa: E402
from support.jobs import job_manifest  # noqa: E402
from support.processes import ServiceProcess  # noqa: E402
from support.stats import percentile  # noqa: E402

from torchjob.webhook.certificates.pki import new_bundle  # noqa: E402

LOOPBACK = "127.0.0.1"
ADMISSION_TIMEOUT = 5.0  # the chart's webhook timeoutSeconds
LIVENESS_TIMEOUT = 2.0  # the chart's livenessProbe.timeoutSeconds
ABUSE_BODY_BYTES = 2 * 1024 * 1024
LARGEST_BODY_BYTES = 4 * 1024 * 1024  # the webhook's default --max-body-bytes


@dataclass
class Phase:
    name: str
    admissions: list[float] = field(default_factory=list)
    admission_failures: int = 0
    probes: list[float] = field(default_factory=list)
    probe_failures: int = 0
    rss: list[int] = field(default_factory=list)
    abuse: str = ""


def write_tls_files(directory: Path) -> tuple[Path, Path]:
    bundle = new_bundle(["localhost"], [LOOPBACK], datetime.datetime.now(datetime.UTC))
    cert, key = directory / "tls.crt", directory / "tls.key"
    cert.write_bytes(bundle.cert_pem)
    key.touch(mode=0o600)
    key.write_bytes(bundle.key_pem)
    return cert, key


@contextlib.contextmanager
def webhook(
    plane: ControlPlane, cert: Path, key: Path, source: Path | None
) -> Iterator[ServiceProcess]:
    port, probe_port = free_port(), free_port()
    args = [
        *("--host", LOOPBACK, "--port", str(port), "--probe-port", str(probe_port)),
        *("--cert-file", str(cert), "--key-file", str(key), "--kubeconfig", str(plane.kubeconfig)),
    ]
    env = {"PYTHONPATH": str(source / "services")} if source else None
    server = ServiceProcess("torchjob.webhook", args, probe_port, env=env)
    try:
        server.start().wait_ready(60)
        yield server
    finally:
        server.close()


def rss_of(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


async def measure(server: ServiceProcess, phase: Phase, seconds: float) -> None:
    port = int(server.argv[server.argv.index("--port") + 1])
    assert server.process is not None
    pid = server.process.pid
    review = orjson.dumps(
        {
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {
                "uid": "bench",
                "operation": "CREATE",
                "namespace": "default",
                "name": "bench",
                "userInfo": {"username": "alice"},
                "object": job_manifest("torchrun"),
            },
        }
    )
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    deadline = time.monotonic() + seconds

    async def admit() -> None:
        timeout = aiohttp.ClientTimeout(total=ADMISSION_TIMEOUT)
        connector = aiohttp.TCPConnector(ssl=context)
        url = f"https://{LOOPBACK}:{port}{VALIDATE}"
        async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
            while time.monotonic() < deadline:
                started = time.perf_counter()
                try:
                    async with session.post(url, data=review) as response:
                        answer = orjson.loads(await response.read())
                        assert response.status == 200 and answer["response"]["allowed"]
                    phase.admissions.append(time.perf_counter() - started)
                except (aiohttp.ClientError, TimeoutError, AssertionError, orjson.JSONDecodeError):
                    phase.admission_failures += 1
                await asyncio.sleep(0.05)

    async def probe() -> None:
        timeout = aiohttp.ClientTimeout(total=LIVENESS_TIMEOUT)
        url = f"http://{LOOPBACK}:{server.probe_port}/healthz"
        async with aiohttp.ClientSession(timeout=timeout) as session:
            while time.monotonic() < deadline:
                started = time.perf_counter()
                try:
                    async with session.get(url) as response:
                        await response.read()
                        assert response.status == 200
                    phase.probes.append(time.perf_counter() - started)
                except (aiohttp.ClientError, TimeoutError, AssertionError):
                    phase.probe_failures += 1
                await asyncio.sleep(0.5)

    async def memory() -> None:
        while time.monotonic() < deadline:
            phase.rss.append(rss_of(pid))
            await asyncio.sleep(0.2)

    await asyncio.gather(admit(), probe(), memory())


@contextlib.contextmanager
def attacker(port: int, kind: str) -> Iterator[Path]:
    """The abuse, from a process of its own so that it does not slow the measuring client."""
    report = Path(tempfile.mkstemp(prefix="torchjob-abuse-", suffix=".json")[1])
    process = subprocess.Popen(
        [sys.executable, __file__, "--attack", str(port), "--kind", kind, "--report", str(report)],
        start_new_session=True,
    )
    try:
        time.sleep(3)  # under way: connections open, bodies in flight
        yield report
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(30)


def attack(port: int, kind: str, report: Path) -> None:
    """`expensive`: the issue's abuse, 2 MB reviews that cost the most to validate, sent back to
    back by 20 senders, and 20 more left hanging. `largest`: 20 senders of bodies of the largest
    size the webhook reads, all one-letter strings (the most memory once parsed, 18 times their
    size), for the webhook's peak memory."""
    if kind == "expensive":
        body, hanging = expensive_review(ABUSE_BODY_BYTES), 20
    else:
        count = (LARGEST_BODY_BYTES - 64) // 4
        body, hanging = b'{"request":{"uid":"x","object":[' + b'"a",' * count + b'"a"]}}', 0

    async def run() -> dict[str, int]:
        stop = asyncio.Event()
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
        async with Abuse(port, body, hanging=hanging) as abuse:
            await stop.wait()
            return dict(abuse.outcomes)

    report.write_bytes(orjson.dumps(asyncio.run(run())))


def print_phase(phase: Phase) -> None:
    ms = 1000
    print(
        f"{phase.name:8} admission p50 {percentile(phase.admissions, 50) * ms:8.1f} ms"
        f"  p99 {percentile(phase.admissions, 99) * ms:8.1f} ms"
        f"  answered {len(phase.admissions):4}  failed {phase.admission_failures:3}"
        f" | /healthz p50 {percentile(phase.probes, 50) * ms:7.1f} ms"
        f"  p99 {percentile(phase.probes, 99) * ms:7.1f} ms  failed {phase.probe_failures:2}"
        f" | RSS median {statistics.median(phase.rss) / 2**20 if phase.rss else 0:6.1f} MiB"
        f"  max {max(phase.rss, default=0) / 2**20:6.1f} MiB"
    )
    if phase.abuse:
        print(f"{'':8} abuse answered: {phase.abuse}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--source", type=Path, default=None)
    parser.add_argument("--attack", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--report", type=Path, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--kind", default="expensive", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.attack is not None:
        attack(args.attack, args.kind, args.report)
        return
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    print(f"{platform.node()}: {os.cpu_count()} CPUs, Python {platform.python_version()}")
    print(f"webhook from {args.source or 'this tree'}; {args.seconds:g}s per phase")
    with tempfile.TemporaryDirectory(prefix="torchjob-bench-") as directory:
        cert, key = write_tls_files(Path(directory))
        with ControlPlane() as plane, webhook(plane, cert, key, args.source) as server:
            port = int(server.argv[server.argv.index("--port") + 1])
            quiet = Phase("quiet")
            asyncio.run(measure(server, quiet, args.seconds))
            print_phase(quiet)
            for name, kind in (("abused", "expensive"), ("largest", "largest")):
                phase = Phase(name)
                with attacker(port, kind) as report:
                    asyncio.run(measure(server, phase, args.seconds))
                if report.exists() and report.stat().st_size:
                    phase.abuse = report.read_text()
                report.unlink(missing_ok=True)
                print_phase(phase)
            alive = server.process is not None and server.process.poll() is None
            print(f"webhook still running afterwards: {alive}")


if __name__ == "__main__":
    main()
