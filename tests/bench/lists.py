"""Listing 2,000 training jobs: the console's job list and `torchjob list -A`, each beside the
apiserver's own answer for the same jobs.

Everything is real: the control plane (tests/support/controlplane.py), the console as a process
started as the e2e tests start it (token mode), and the CLI as a user runs it (its console
script, a process per call). Both run from a venv with the package installed as the image and
`pip install` install it (tests/support/installed.py), unless `--dev-venv`. No webhook and no
reconciler run: the jobs are created as they are written, in one namespace, and listed as
stored (no status).

Measured, ROUNDS times each, median and max:
- the console's list page (`/ns/<ns>/jobs`, its first page of rows) over one kept-alive
  connection with the session cookie of a tenant bound to `edit` in the namespace: time to the
  first byte and to the end, and its size; a filter that matches none (`?phase=Failed`, which
  reads the list chunk by chunk); beside them the apiserver's list of the same first 50 jobs
  with the tenant's token;
- `torchjob list -A` with the admin's kubeconfig: time from the process's start to the first
  byte of its output and to its exit, and the output's size; beside it `kubectl get
  pytorchtrainingjobs -A` the same way, and the apiserver's whole list (no limit) as one request.

Prints figures; the exit status says nothing about them:

    .venv/bin/python tests/bench/lists.py                # 2,000 jobs
    .venv/bin/python tests/bench/lists.py --jobs 200     # a quick check
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp

from torchjob.kube.client import new_kube_client
from torchjob.kube.resources import JOBS

TESTS_DIR = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(TESTS_DIR))

from support import ControlPlane  # noqa: E402
from support.bench import create_jobs, print_machine, timed_get  # noqa: E402
from support.console import Console, grant_job_roles, start_console, tenant_token  # noqa: E402
from support.installed import install, services_run_by  # noqa: E402
from support.operator import install_crds  # noqa: E402

NAMESPACE = "bench-lists"
ROUNDS = 10
SESSION_COOKIE = "torchjob-console-session"
Timing = tuple[float, float, int]  # seconds to the first byte, seconds to the end, bytes


async def rounds_of_get(session: aiohttp.ClientSession, url: str, **options: Any) -> list[Timing]:
    return [await timed_get(session, url, **options) for _ in range(ROUNDS)]


def timed_command(argv: list[str]) -> Timing:
    """A process's first byte of output and its exit, from its start; its output's size."""
    started = time.perf_counter()
    # Unbuffered: a buffered read(1) would take the first block of output into a buffer that
    # communicate(), reading the pipe itself, never sees, and the size would come out short.
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, bufsize=0)
    assert process.stdout is not None
    first = process.stdout.read(1)
    first_byte = time.perf_counter() - started
    rest, errors = process.communicate()
    elapsed = time.perf_counter() - started
    assert process.returncode == 0, errors.decode(errors="replace")[-500:]
    return first_byte, elapsed, len(first) + len(rest)


def summary(timings: list[Timing]) -> str:
    firsts = [t[0] for t in timings]
    totals = [t[1] for t in timings]
    return (
        f"first byte median {statistics.median(firsts) * 1000:6.0f} ms "
        f"(max {max(firsts) * 1000:.0f}); whole median {statistics.median(totals) * 1000:6.0f} "
        f"ms (max {max(totals) * 1000:.0f}); {timings[-1][2] / 1024:.1f} KiB"
    )


def median_total(timings: list[Timing]) -> float:
    return statistics.median(t[1] for t in timings)


async def sign_in(console: Console, token: str) -> str:
    async with aiohttp.ClientSession() as session:
        signed = await session.post(
            console.url + "/sign-in",
            data={"token": token},
            headers={"Origin": console.url},
            allow_redirects=False,
        )
        return signed.cookies[SESSION_COOKIE].value


async def console_figures(plane: ControlPlane, console: Console, jobs: int) -> None:
    token = tenant_token(plane, NAMESPACE, "edit")
    cookie = await sign_in(console, token)
    page = f"{console.url}/ns/{NAMESPACE}/jobs"
    async with aiohttp.ClientSession(cookies={SESSION_COOKIE: cookie}) as session:
        listed = await rounds_of_get(session, page)
        filtered = await rounds_of_get(session, page + "?phase=Failed")
    tls = ssl.create_default_context(cafile=str(plane.ca_file))
    headers = {"Authorization": f"Bearer {token}", "Accept": "application/json"}
    async with aiohttp.ClientSession(headers=headers) as session:
        url = plane.server + JOBS.path(NAMESPACE) + "?limit=50"
        api = await rounds_of_get(session, url, ssl=tls)
    print(f"\nconsole job list, {jobs} jobs in the namespace, {ROUNDS} rounds each:")
    print(f"  list page:                      {summary(listed)}")
    print(f"  a filter matching none:         {summary(filtered)}")
    print(f"  apiserver list, limit=50:       {summary(api)}")
    print(
        f"  page / apiserver list, whole medians: {median_total(listed) / median_total(api):.2f}x"
    )


async def whole_list(plane: ControlPlane) -> list[Timing]:
    """The apiserver's list of every job in every namespace, as the admin, one request each."""
    async with await new_kube_client(str(plane.kubeconfig)) as admin:
        timings = []
        for _ in range(ROUNDS):
            started = time.perf_counter()
            listed = await admin.request("GET", JOBS.path(None))
            elapsed = time.perf_counter() - started
            timings.append((elapsed, elapsed, len(listed)))
        return timings


def cli_figures(plane: ControlPlane, torchjob: Path, jobs: int, cache: Path) -> None:
    kubeconfig = str(plane.kubeconfig)
    ours = [
        timed_command([str(torchjob), "list", "-A", "--kubeconfig", kubeconfig])
        for _ in range(ROUNDS)
    ]
    kubectl_argv = [
        *(str(plane.binaries.kubectl), "--kubeconfig", kubeconfig, "--cache-dir", str(cache)),
        *("get", "pytorchtrainingjobs", "-A"),
    ]
    kubectl = [timed_command(kubectl_argv) for _ in range(ROUNDS)]
    api = asyncio.run(whole_list(plane))
    print(f"\n`torchjob list -A`, {jobs} jobs, {ROUNDS} runs each (process start to exit):")
    print(f"  torchjob list -A:               {summary(ours)}")
    print(f"  kubectl get pytorchtrainingjobs -A: {summary(kubectl)}")
    print(f"  apiserver list, no limit (one request): {summary(api)}")
    print(f"  torchjob / kubectl, whole medians: {median_total(ours) / median_total(kubectl):.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument(
        "--dev-venv", action="store_true", help="run the console and the CLI from the dev .venv"
    )
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    print_machine()
    with ControlPlane() as plane, tempfile.TemporaryDirectory(prefix="torchjob-bench-") as tmp:
        python = None if args.dev_venv else install(Path(tmp))
        torchjob = Path(sys.executable if python is None else python).parent / "torchjob"
        print(f"runs:       {torchjob.parent}")
        install_crds(plane)
        grant_job_roles(plane)
        plane.kubectl("create", "namespace", NAMESPACE)
        with services_run_by(python):
            console = start_console(plane, "--log-level", "WARNING")
        try:
            asyncio.run(create_and_measure(plane, console, args.jobs))
            cli_figures(plane, torchjob, args.jobs, Path(tmp) / "kube-cache")
        finally:
            console.process.close()


async def create_and_measure(plane: ControlPlane, console: Console, jobs: int) -> None:
    async with await new_kube_client(str(plane.kubeconfig)) as admin:
        started = time.perf_counter()
        await create_jobs(admin, NAMESPACE, jobs)
        print(f"{jobs} jobs created in {time.perf_counter() - started:.1f} s")
    await console_figures(plane, console, jobs)


if __name__ == "__main__":
    main()
