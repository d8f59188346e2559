"""The progress endpoint's cost: the webhook's CPU per report, the API writes it adds per job, and
whether a flood of reports slows admission and reconciles.

Against a real control plane: the webhook runs as its Deployment would (`start_webhook`: the
chart's arguments and RBAC, its own certificate), the reconciler makes each job's pod, and every
report carries a token the apiserver minted for that pod with the job's audience (TokenRequest,
as the kubelet's projected volume gets one), sent over TLS verified with the webhook's CA. The
report is what Hugging Face's callback sends: percentage, remaining seconds, four metrics.

1. CPU per report: the webhook's user + system CPU time (/proc/<pid>/stat) while reporters post
   back to back, less what it spends idle over the same time, divided by the reports answered.
   Accepted (200): the webhook restarted with its rate limit out of reach (--progress-rate,
   --progress-burst), one reporter in each of R jobs, on a kept-alive connection and then on a
   new TLS connection per report (as a client that opens one per post). Refused (429): the
   webhook at its default limit, R reporters of one job.
2. API writes at the default throttle (--progress-write-seconds 10): one reporter posting every
   second (Hugging Face's callback posts at most every 5 s) for 40 s; the webhook's status writes
   (torchjob_progress_writes_total) and the job's changes seen by a watch, per minute, and the
   reconciler's API requests meanwhile (a progress write must not make it write).
3. A flood: p50/p95 of job admission (a server-side dry-run create of a PyTorchTrainingJob,
   through the webhook's validation) and of the time from a job's creation until its pod exists
   (the reconciler, and the webhook's pod mutation), quiet and while one job's pod floods the
   endpoint with a valid token from C connections in a process of its own, in alternating
   rounds; and the flood's answers by code.

Prints figures; the exit status says nothing about them.

    .venv/bin/python tests/bench/progress.py [--reporters 8] [--seconds 10] [--connections 8]
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import os
import signal
import ssl
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import orjson
from kubernetes_asyncio import client

from torchjob.api import types
from torchjob.api.job_api import TRAINING_JOB
from torchjob.api.progress import JobRef
from torchjob.kube.client import KubeClient, new_kube_client
from torchjob.kube.informer import KubeObject
from torchjob.kube.resources import JOBS, PODS
from torchjob.runtime import logging as runtime_logging

TESTS_DIR = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(TESTS_DIR))

from support import ControlPlane  # noqa: E402
from support.bench import admin_client, cpu_seconds, print_machine, watch  # noqa: E402
from support.cluster import Job  # noqa: E402
from support.eventually import eventually_sync  # noqa: E402
from support.jobs import JobBuilder, job_manifest  # noqa: E402
from support.operator import (  # noqa: E402
    OPT_IN_LABEL,
    install_crds,
    progress_port,
    reconciler_kubeconfig,
    start_reconciler,
    start_webhook,
    stop_webhook,
    wait_until_admitting,
)
from support.processes import ServiceProcess  # noqa: E402
from support.progress import endpoint_ca, pod_token  # noqa: E402
from support.stats import percentile  # noqa: E402

NAMESPACE = "bench-progress"
UNLIMITED = ("--progress-rate", "1000000", "--progress-burst", "1000000")
WRITE_SECONDS = 10.0  # the webhook's default --progress-write-seconds
WARMUP_REPORTS = 20  # a reporter's first report costs a TokenReview and a read of its pod
IDLE_SECONDS = 3.0
FLOOD_START_SECONDS = 2.0
POD_TIMEOUT = 60.0
ROUNDS = 2
REPORT = orjson.dumps(
    {
        "trainerStatus": {
            "progressPercentage": 42,
            "estimatedRemainingSeconds": 3600,
            "metrics": [
                {"name": "loss", "value": "0.4211"},
                {"name": "learning_rate", "value": "4.9e-05"},
                {"name": "grad_norm", "value": "1.873"},
                {"name": "epoch", "value": "1.25"},
            ],
            "lastUpdatedTime": "2025-01-01T00:00:00Z",
        }
    }
)


def parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--reporters", type=int, default=8, help="concurrent reporters (part 1)")
    p.add_argument("--seconds", type=float, default=10.0, help="measured seconds a case (part 1)")
    p.add_argument("--report-seconds", type=float, default=40.0, help="reporting time (part 2)")
    p.add_argument("--interval", type=float, default=1.0, help="seconds between reports (part 2)")
    p.add_argument("--admissions", type=int, default=300, help="dry-run creates a phase (part 3)")
    p.add_argument("--jobs", type=int, default=20, help="jobs created a phase (part 3)")
    p.add_argument("--connections", type=int, default=8, help="the flood's connections (part 3)")
    p.add_argument("--flood", default=None, help=argparse.SUPPRESS)
    p.add_argument("--token-file", type=Path, default=None, help=argparse.SUPPRESS)
    p.add_argument("--ca-file", type=Path, default=None, help=argparse.SUPPRESS)
    p.add_argument("--report", type=Path, default=None, help=argparse.SUPPRESS)
    return p.parse_args()


# -- the endpoint and its reporters --------------------------------------------------------------


@dataclass(frozen=True)
class Endpoint:
    """The webhook serving progress, where it is, and its CPU time a second when idle."""

    server: ServiceProcess
    base: str
    ca_file: Path
    idle_cpu_rate: float

    def context(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=str(self.ca_file))

    def url(self, job: Job) -> str:
        return self.base + JobRef(TRAINING_JOB, job.namespace, job.name).path

    def writes(self) -> float:
        return self.server.samples("torchjob_progress_writes_total").get("", 0.0)


@contextlib.contextmanager
def endpoint(plane: ControlPlane, directory: Path, *extra_args: str) -> Iterator[Endpoint]:
    server = start_webhook(plane, *extra_args)
    try:
        wait_until_admitting(plane, NAMESPACE)
        ca_file = directory / "ca.crt"
        ca_file.write_bytes(endpoint_ca(plane))
        before = cpu_seconds(server)
        time.sleep(IDLE_SECONDS)
        idle = (cpu_seconds(server) - before) / IDLE_SECONDS
        yield Endpoint(server, f"https://127.0.0.1:{progress_port(server)}", ca_file, idle)
    finally:
        stop_webhook(plane, server)


def prepare_namespace(plane: ControlPlane) -> None:
    """The namespace, through the webhook, with the ServiceAccount its pods' tokens are of."""
    plane.kubectl("create", "namespace", NAMESPACE)
    plane.kubectl("label", "namespace", NAMESPACE, f"{OPT_IN_LABEL}=on")
    eventually_sync(
        lambda: plane.kubectl("get", "sa", "default", "-n", NAMESPACE, check=False).returncode == 0,
        "the namespace's default ServiceAccount",
        timeout=60,
    )


@dataclass(frozen=True)
class Reporter:
    url: str
    token: str

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}", "Content-Type": "application/json"}


async def reporter_of(user: client.ApiClient, api: KubeClient, at: Endpoint, name: str) -> Reporter:
    """A new job of one replica, once its pod exists; the reporter in that pod."""
    job = await Job(user, NAMESPACE, JobBuilder(name).replicas("worker", 1).build()).create()
    pod = (await job.wait_pods({f"{name}-worker-0"}, timeout=POD_TIMEOUT))[f"{name}-worker-0"]
    audience = JobRef(TRAINING_JOB, NAMESPACE, name).audience
    return Reporter(at.url(job), await pod_token(api, NAMESPACE, pod, audience))


async def post_until(
    session: aiohttp.ClientSession,
    reporter: Reporter,
    codes: collections.Counter[int],
    *,
    deadline: float | None = None,
    count: int | None = None,
    pause: float = 0.0,
) -> None:
    """Reports from one reporter, one at a time, until `deadline` or `count` of them."""
    sent = 0
    while (deadline is None or time.monotonic() < deadline) and (count is None or sent < count):
        async with session.post(reporter.url, data=REPORT, headers=reporter.headers) as answer:
            await answer.read()
            codes[answer.status] += 1
        sent += 1
        if pause:
            await asyncio.sleep(pause)


# -- 1. CPU per report ---------------------------------------------------------------------------


@dataclass(frozen=True)
class CpuRow:
    case: str
    reporters: int
    codes: collections.Counter[int]
    seconds: float
    cpu: float  # the webhook's CPU seconds, its idle share taken out

    @property
    def answered(self) -> int:
        return sum(self.codes.values())

    def print(self) -> None:
        per = self.cpu / self.answered * 1e6 if self.answered else float("nan")
        print(
            f"  {self.case:30} {self.reporters:>4} {self.answered:>8} {self.codes[200]:>7} "
            f"{self.codes[429]:>7} {self.answered / self.seconds:>8.0f} "
            f"{self.cpu / self.seconds * 100:>6.0f}% {per:>9.0f}",
            flush=True,
        )


def print_cpu_header(at: Endpoint) -> None:
    print(
        "\n1. webhook CPU per report (user + system, less what it spends idle: "
        f"{at.idle_cpu_rate * 1000:.1f} ms/s), reporters posting back to back"
    )
    print(
        f"  {'case':30} {'rep.':>4} {'answered':>8} {'200':>7} {'429':>7} {'per s':>8} "
        f"{'busy':>7} {'µs/report':>9}"
    )


async def cpu_case(
    at: Endpoint, reporters: list[Reporter], seconds: float, case: str, *, new_connection: bool
) -> CpuRow:
    codes: collections.Counter[int] = collections.Counter()
    async with contextlib.AsyncExitStack() as stack:
        sessions = []
        for _ in reporters:
            connector = aiohttp.TCPConnector(ssl=at.context(), limit=1, force_close=new_connection)
            sessions.append(
                await stack.enter_async_context(aiohttp.ClientSession(connector=connector))
            )
        warmup: collections.Counter[int] = collections.Counter()
        await asyncio.gather(
            *(
                post_until(s, r, warmup, count=WARMUP_REPORTS)
                for s, r in zip(sessions, reporters, strict=True)
            )
        )
        cpu, started = cpu_seconds(at.server), time.monotonic()
        deadline = started + seconds
        await asyncio.gather(
            *(
                post_until(s, r, codes, deadline=deadline)
                for s, r in zip(sessions, reporters, strict=True)
            )
        )
        elapsed = time.monotonic() - started
        cpu = cpu_seconds(at.server) - cpu - at.idle_cpu_rate * elapsed
    return CpuRow(case, len(reporters), codes, elapsed, cpu)


async def accepted_cpu(plane: ControlPlane, at: Endpoint, args: argparse.Namespace) -> list[CpuRow]:
    async with (
        await admin_client(plane) as user,
        await new_kube_client(str(plane.kubeconfig)) as api,
    ):
        reporters = [await reporter_of(user, api, at, f"cpu-{i}") for i in range(args.reporters)]
        print_cpu_header(at)
        rows = []
        for case, new_connection in (
            ("200, kept-alive connection", False),
            ("200, new TLS connection each", True),
        ):
            rows.append(
                await cpu_case(at, reporters, args.seconds, case, new_connection=new_connection)
            )
            rows[-1].print()
    return rows


async def refused_cpu(
    user: client.ApiClient, api: KubeClient, at: Endpoint, args: argparse.Namespace
) -> CpuRow:
    """R reporters of one job at the default limit: beyond its burst all but one a second 429."""
    reporter = await reporter_of(user, api, at, "refused")
    row = await cpu_case(
        at,
        [reporter] * args.reporters,
        args.seconds,
        "429 (default limit), kept-alive",
        new_connection=False,
    )
    row.print()
    return row


# -- 2. API writes at the default throttle -------------------------------------------------------


class JobChanges:
    """When one job changed (a resourceVersion not seen before), as a watch sees it."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.versions: set[str] = set()
        self.times: list[float] = []  # of each change after the first version seen

    def changed(self, job: KubeObject) -> None:
        version = job["metadata"]["resourceVersion"]
        if job["metadata"]["name"] != self.name or version in self.versions:
            return
        if self.versions:
            self.times.append(time.monotonic())
        self.versions.add(version)

    def per_minute(self) -> float:
        """Changes a minute once under way: from the mean time between them."""
        if len(self.times) < 2:
            return float("nan")
        return (len(self.times) - 1) / (self.times[-1] - self.times[0]) * 60


def reconciler_counts(reconciler: ServiceProcess) -> collections.Counter[str]:
    """The reconciler's API requests by method, and its reconciles."""
    counts: collections.Counter[str] = collections.Counter()
    for labels, value in reconciler.samples("torchjob_kube_client_requests_total").items():
        counts[labels.partition('"')[2].rstrip('"}')] += int(value)
    reconciles = reconciler.samples("torchjob_reconcile_total").values()
    counts["reconciles"] = int(sum(reconciles))
    return counts


@dataclass(frozen=True)
class Writes:
    steady: float  # a job a minute, once under way
    window: float  # a job a minute over the reporting time, the first write included


async def throttled_writes(
    user: client.ApiClient,
    api: KubeClient,
    at: Endpoint,
    reconciler: ServiceProcess,
    args: argparse.Namespace,
) -> Writes:
    """One reporter posting every `interval` seconds: the writes into its job's status."""
    reporter = await reporter_of(user, api, at, "throttle")
    # Earlier jobs' reports still waiting for their slot are written by then.
    await asyncio.sleep(WRITE_SECONDS + 1)
    seen = JobChanges("throttle")
    codes: collections.Counter[int] = collections.Counter()
    connector = aiohttp.TCPConnector(ssl=at.context(), force_close=True)
    async with (
        watch(user, JOBS, NAMESPACE, seen.changed),
        aiohttp.ClientSession(connector=connector) as session,
    ):
        writes, counts = at.writes(), reconciler_counts(reconciler)
        started = time.monotonic()
        deadline = started + args.report_seconds
        await post_until(session, reporter, codes, deadline=deadline, pause=args.interval)
        elapsed = time.monotonic() - started
        written, changed = at.writes() - writes, len(seen.times)
        await asyncio.sleep(WRITE_SECONDS + 1)
        later, changed_later = at.writes() - writes - written, len(seen.times) - changed
        after = reconciler_counts(reconciler)
    result = Writes(seen.per_minute(), written / elapsed * 60)
    print(
        f"\n2. API writes, one reporter every {args.interval:g} s for {elapsed:.0f} s at the "
        f"default throttle (--progress-write-seconds {WRITE_SECONDS:g})"
    )
    print(f"  {'reports answered':34} {dict(sorted(codes.items()))}")
    print(
        f"  {'webhook status writes':34} {written:.0f} while reporting (the first at once): "
        f"{result.window:.1f} a minute"
    )
    print(
        f"  {'job changes seen by a watch':34} {changed} while reporting; once under way "
        f"{result.steady:.1f} a job a minute"
    )
    print(
        f"  {'after the last report':34} {later:.0f} write(s), {changed_later} change(s) "
        "(a report left waiting is written at its slot)"
    )
    moved = after - counts
    requests = ", ".join(f"{moved[k]} {k}" for k in sorted(moved) if k != "reconciles")
    print(
        f"  {'reconciler meanwhile':34} {moved['reconciles']} reconciles; requests: "
        f"{requests or 'none'} (Lease renewals included)"
    )
    return result


# -- 3. admission and reconciles under a flood ---------------------------------------------------


@dataclass
class Phase:
    """What one condition (quiet, or under the flood) measured over its rounds."""

    prefix: str  # of the jobs it creates
    admissions: list[float] = field(default_factory=list)
    pods: list[float] = field(default_factory=list)
    cpu: float = 0.0  # the webhook's CPU seconds
    seconds: float = 0.0
    flood: collections.Counter[str] = field(default_factory=collections.Counter)


async def admission_latencies(user: client.ApiClient, count: int) -> list[float]:
    """Server-side dry-run creates of the example job, one at a time: the webhook validates it."""
    objects = client.CustomObjectsApi(user)
    manifest = job_manifest("torchrun", "admission-probe")
    latencies = []
    for _ in range(count):
        started = time.perf_counter()
        await objects.create_namespaced_custom_object(
            types.GROUP, types.VERSION, NAMESPACE, types.PLURAL, manifest, dry_run="All"
        )
        latencies.append(time.perf_counter() - started)
    return latencies


class PodsAppearing:
    """When each pod was first seen by the bench's watch."""

    def __init__(self) -> None:
        self.seen: dict[str, asyncio.Event] = collections.defaultdict(asyncio.Event)

    def changed(self, pod: KubeObject) -> None:
        self.seen[pod["metadata"]["name"]].set()

    async def latencies(self, user: client.ApiClient, prefix: str, count: int) -> list[float]:
        """Seconds from a one-replica job's creation until the watch sees its pod."""
        objects = client.CustomObjectsApi(user)
        latencies = []
        for index in range(count):
            name = f"{prefix}-{index}"
            manifest = JobBuilder(name).replicas("worker", 1).build()
            started = time.perf_counter()
            await objects.create_namespaced_custom_object(
                types.GROUP, types.VERSION, NAMESPACE, types.PLURAL, manifest
            )
            await asyncio.wait_for(self.seen[f"{name}-worker-0"].wait(), POD_TIMEOUT)
            latencies.append(time.perf_counter() - started)
        return latencies


@contextlib.asynccontextmanager
async def flooding(
    at: Endpoint, reporter: Reporter, connections: int, directory: Path
) -> AsyncIterator[Path]:
    """The flood, from a process of its own so that it does not slow the measuring client."""
    token_file, report = directory / "flood.token", directory / "flood.json"
    token_file.write_text(reporter.token)
    report.unlink(missing_ok=True)
    argv = [
        *(sys.executable, __file__, "--flood", reporter.url, "--token-file", str(token_file)),
        *("--ca-file", str(at.ca_file), "--connections", str(connections)),
        *("--report", str(report)),
    ]
    process = await asyncio.create_subprocess_exec(*argv, start_new_session=True)
    try:
        await asyncio.sleep(FLOOD_START_SECONDS)  # connections open, the burst spent
        yield report
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        await asyncio.wait_for(process.wait(), 30)


def flood(args: argparse.Namespace) -> None:
    """Post the report to `--flood` from `--connections` connections until SIGTERM; write the
    answers by code to `--report`."""
    token = args.token_file.read_text()
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    codes: collections.Counter[str] = collections.Counter()

    async def send(session: aiohttp.ClientSession) -> None:
        while True:
            try:
                async with session.post(args.flood, data=REPORT, headers=headers) as answer:
                    await answer.read()
                    codes[str(answer.status)] += 1
            except aiohttp.ClientError:
                codes["error"] += 1

    async def run() -> None:
        stop = asyncio.Event()
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
        context = ssl.create_default_context(cafile=str(args.ca_file))
        connector = aiohttp.TCPConnector(ssl=context, limit=args.connections)
        async with aiohttp.ClientSession(connector=connector) as session:
            senders = [asyncio.create_task(send(session)) for _ in range(args.connections)]
            await stop.wait()
            for sender in senders:
                sender.cancel()
            await asyncio.gather(*senders, return_exceptions=True)

    asyncio.run(run())
    args.report.write_bytes(orjson.dumps(codes))


async def measure_phase(
    user: client.ApiClient,
    at: Endpoint,
    phase: Phase,
    appearing: PodsAppearing,
    args: argparse.Namespace,
    round_number: int,
) -> None:
    cpu, started = cpu_seconds(at.server), time.monotonic()
    phase.admissions += await admission_latencies(user, args.admissions // ROUNDS)
    prefix = f"{phase.prefix}-{round_number}"
    phase.pods += await appearing.latencies(user, prefix, args.jobs // ROUNDS)
    phase.seconds += time.monotonic() - started
    phase.cpu += cpu_seconds(at.server) - cpu


async def under_flood(
    user: client.ApiClient,
    api: KubeClient,
    at: Endpoint,
    args: argparse.Namespace,
    directory: Path,
) -> tuple[Phase, Phase]:
    """The quiet and the flooded phase, in alternating rounds."""
    flooder = await reporter_of(user, api, at, "flood")
    appearing = PodsAppearing()
    quiet, flooded = Phase("quiet"), Phase("flooded")
    async with watch(user, PODS, NAMESPACE, appearing.changed):
        await admission_latencies(user, WARMUP_REPORTS)
        for round_number in range(ROUNDS):
            await measure_phase(user, at, quiet, appearing, args, round_number)
            async with flooding(at, flooder, args.connections, directory) as report:
                await measure_phase(user, at, flooded, appearing, args, round_number)
            if report.exists():
                flooded.flood.update(orjson.loads(report.read_bytes()))
            else:
                flooded.flood["no report"] += 1
    print_flood(quiet, flooded, args.connections)
    return quiet, flooded


def print_flood(quiet: Phase, flooded: Phase, connections: int) -> None:
    print(
        f"\n3. latency quiet and while one job's pod floods the endpoint ({connections} "
        f"connections, a valid token), {ROUNDS} alternating rounds"
    )
    print(f"  {'':34} {'quiet':>9} {'flood':>9} {'ratio':>7}")
    ms = 1000.0
    for what, values in (
        ("admission (dry-run create)", "admissions"),
        ("job created -> pod", "pods"),
    ):
        for percent in (50, 95):
            low = percentile(getattr(quiet, values), percent) * ms
            high = percentile(getattr(flooded, values), percent) * ms
            label = f"{what} p{percent} ms"
            print(f"  {label:34} {low:>9.1f} {high:>9.1f} {high / low:>6.2f}x")
    busy = [phase.cpu / phase.seconds * 100 for phase in (quiet, flooded)]
    print(f"  {'webhook CPU, % of a core':34} {busy[0]:>9.0f} {busy[1]:>9.0f}")
    counts = dict(sorted(flooded.flood.items()))
    flood_seconds = flooded.seconds + ROUNDS * FLOOD_START_SECONDS
    rate = sum(v for k, v in counts.items() if k.isdigit()) / flood_seconds
    print(f"  the flood's answers: {counts}, {rate:.0f} a second over {flood_seconds:.0f} s")


# -- main ----------------------------------------------------------------------------------------


def print_summary(cpu: list[CpuRow], writes: Writes, quiet: Phase, flooded: Phase) -> None:
    def per_report(row: CpuRow) -> str:
        return f"{row.cpu / row.answered * 1e6:.0f} µs" if row.answered else "n/a"

    kept, fresh, refused = cpu
    print("\nsummary")
    print(
        f"  endpoint CPU per accepted report    {per_report(kept)} on a kept-alive connection, "
        f"{per_report(fresh)} with a new TLS connection each"
    )
    print(f"  endpoint CPU per refused (429)      {per_report(refused)}")
    print(
        f"  status writes a job a minute        {writes.steady:.1f} at the default throttle once "
        f"under way ({writes.window:.1f} over the reporting time, the first write at once)"
    )
    for percent in (50, 95):
        low, high = percentile(quiet.admissions, percent), percentile(flooded.admissions, percent)
        print(
            f"  admission p{percent} quiet / flood         {low * 1000:.1f} / {high * 1000:.1f} ms "
            f"({high / low:.2f}x)"
        )
    print(f"  429s the flood got                  {flooded.flood.get('429', 0)}")


async def measure_default(
    plane: ControlPlane,
    at: Endpoint,
    reconciler: ServiceProcess,
    args: argparse.Namespace,
    directory: Path,
) -> tuple[CpuRow, Writes, Phase, Phase]:
    """What the webhook at its default limit and throttle is measured for."""
    async with (
        await admin_client(plane) as user,
        await new_kube_client(str(plane.kubeconfig)) as api,
    ):
        refused = await refused_cpu(user, api, at, args)
        writes = await throttled_writes(user, api, at, reconciler, args)
        quiet, flooded = await under_flood(user, api, at, args, directory)
    return refused, writes, quiet, flooded


def main() -> None:
    args = parse()
    if args.flood is not None:
        flood(args)
        return
    runtime_logging.configure("bench", "WARNING")  # the bench's own watches: problems only
    # SIGTERM unwinds like Ctrl-C, through the clean-up of every process and directory.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    print_machine()
    started = time.monotonic()
    with (
        ControlPlane() as plane,
        tempfile.TemporaryDirectory(prefix="torchjob-bench-") as temporary,
        contextlib.ExitStack() as services,
    ):
        directory = Path(temporary)
        install_crds(plane)
        prepare_namespace(plane)
        with endpoint(plane, directory, *UNLIMITED) as unlimited:
            kubeconfig = reconciler_kubeconfig(plane)
            reconciler = start_reconciler(plane, kubeconfig, "bench", "--log-level", "INFO")
            services.callback(reconciler.close)
            cpu = asyncio.run(accepted_cpu(plane, unlimited, args))
        with endpoint(plane, directory) as limited:
            refused, writes, quiet, flooded = asyncio.run(
                measure_default(plane, limited, reconciler, args, directory)
            )
        print_summary([*cpu, refused], writes, quiet, flooded)
    print(f"\nthe bench took {time.monotonic() - started:.0f} s")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
