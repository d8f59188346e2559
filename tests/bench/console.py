"""The console under a namespace of 1,000 training jobs: how soon the job list's first byte comes
and how much the page weighs, against the apiserver's own answer to the same page of jobs for the
same user; and how soon a status write shows in an open browser page, without a reload.

Everything is real: the control plane (tests/support/controlplane.py), the console as a process
started as the e2e tests start it (token mode), Debian's Chromium driven by Playwright, and a
tenant signed in with a token of a ServiceAccount bound to `edit` in the namespace. No webhook
and no reconciler run: the jobs are created as they are written (the list reads them as stored),
and the bench writes their status itself.

Measured:
- the list page (`/ns/<ns>/jobs`, 50 rows) fetched ROUNDS times over one kept-alive connection
  with the session cookie: time to the first byte of the answer and to its end, and its size;
  beside it the apiserver's own list of the same 50 jobs (`limit=50`) with the tenant's token,
  which the console's page needs at least once; the ratio of the medians;
- a filtered page that matches nothing (`?phase=Failed`), which reads the list chunk by chunk up
  to its limit;
- the time from a status write (a merge patch of the job's `status.phase`, through the status
  subresource) to the row showing the new phase in the open page, timed in the page on the
  browser's animation frames (`requestAnimationFrame` polling), UPDATES times a second apart (the
  page's rows are sent at most twice a second, console/jobs.py), median and max.

Prints figures; the exit status says nothing about them:

    .venv/bin/python tests/bench/console.py               # 1,000 jobs
    .venv/bin/python tests/bench/console.py --jobs 200    # a quick check
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import statistics
import sys
import time
from pathlib import Path

import aiohttp

from torchjob.kube.client import KubeClient, new_kube_client
from torchjob.kube.resources import JOBS

TESTS_DIR = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(TESTS_DIR))

from support import ControlPlane  # noqa: E402
from support.bench import create_jobs, timed_get  # noqa: E402
from support.console import (  # noqa: E402
    Console,
    chromium,
    grant_job_roles,
    signed_in,
    start_console,
    tenant_token,
)
from support.operator import install_crds  # noqa: E402

NAMESPACE = "bench-console"
ROUNDS = 30
UPDATES = 10


async def page_figures(
    console: Console, cookie: str, path: str
) -> tuple[list[float], list[float], int]:
    firsts, totals, size = [], [], 0
    async with aiohttp.ClientSession(cookies={"torchjob-console-session": cookie}) as session:
        for _ in range(ROUNDS):
            first, total, size = await timed_get(session, console.url + path)
            firsts.append(first)
            totals.append(total)
    return firsts, totals, size


async def apiserver_figures(plane: ControlPlane, token: str) -> tuple[list[float], int]:
    import ssl

    tls = ssl.create_default_context(cafile=str(plane.ca_file))
    totals, size = [], 0
    headers = {"Authorization": f"Bearer {token}", "Accept": "application/json"}
    async with aiohttp.ClientSession(headers=headers) as session:
        for _ in range(ROUNDS):
            _, total, size = await timed_get(
                session, plane.server + JOBS.path(NAMESPACE) + "?limit=50", ssl=tls
            )
            totals.append(total)
    return totals, size


async def update_latencies(console: Console, token: str, admin: KubeClient) -> list[float]:
    async with chromium() as browser:
        context, page = await signed_in(browser, console, token)
        await page.goto(f"/ns/{NAMESPACE}/jobs")
        row = page.locator("tbody tr").first
        await row.wait_for()
        uid = (await row.get_attribute("id") or "").removeprefix("job-")
        name = await row.locator("th a").inner_text()
        await asyncio.sleep(1)  # the page's event stream is open
        latencies = []
        for round_ in range(UPDATES):
            phase = "Running" if round_ % 2 == 0 else "Pending"
            waiting = page.wait_for_function(
                "([id, phase]) => document.querySelector(`#${id} .phase`).textContent === phase",
                arg=[f"job-{uid}", phase],
                polling="raf",
                timeout=30_000,
            )
            started = time.perf_counter()
            await admin.request(
                "PATCH",
                f"{JOBS.path(NAMESPACE)}/{name}/status",
                body={"status": {"phase": phase}},
                content_type="application/merge-patch+json",
            )
            await waiting
            latencies.append(time.perf_counter() - started)
            await asyncio.sleep(1)  # past the list's coalescing beat: each write is seen alone
        await context.close()
    return latencies


def ms(values: list[float]) -> str:
    return f"median {statistics.median(values) * 1000:.1f} ms, max {max(values) * 1000:.1f} ms"


async def measure(plane: ControlPlane, console: Console, jobs: int) -> None:
    token = tenant_token(plane, NAMESPACE, "edit")
    async with await new_kube_client(str(plane.kubeconfig)) as admin:
        started = time.perf_counter()
        await create_jobs(admin, NAMESPACE, jobs)
        print(f"{jobs} jobs created in {time.perf_counter() - started:.1f} s")
        async with aiohttp.ClientSession() as session:
            signed = await session.post(
                console.url + "/sign-in",
                data={"token": token},
                headers={"Origin": console.url},
                allow_redirects=False,
            )
            cookie = signed.cookies["torchjob-console-session"].value
        firsts, totals, size = await page_figures(console, cookie, f"/ns/{NAMESPACE}/jobs")
        api_totals, api_size = await apiserver_figures(plane, token)
        print(f"\njob list, first page of 50 of {jobs} jobs, {ROUNDS} rounds:")
        print(
            f"  console page:  first byte {ms(firsts)}; whole {ms(totals)}; {size / 1024:.1f} KiB"
        )
        print(
            f"  apiserver list (limit=50, same user): {ms(api_totals)}; {api_size / 1024:.1f} KiB"
        )
        ratio = statistics.median(totals) / statistics.median(api_totals)
        print(f"  page / apiserver list, medians: {ratio:.2f}x; page weight {size / api_size:.2f}x")
        firsts, totals, size = await page_figures(
            console, cookie, f"/ns/{NAMESPACE}/jobs?phase=Failed"
        )
        print(f"  a filter matching none (every chunk read): {ms(totals)}; {size / 1024:.1f} KiB")
        latencies = await update_latencies(console, token, admin)
        print(f"\nstatus write -> row updated in the open page, {UPDATES} writes: {ms(latencies)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=1000)
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    with ControlPlane() as plane:
        install_crds(plane)
        grant_job_roles(plane)
        plane.kubectl("create", "namespace", NAMESPACE)
        console = start_console(plane, "--log-level", "WARNING")
        try:
            asyncio.run(measure(plane, console, args.jobs))
        finally:
            console.process.close()


if __name__ == "__main__":
    main()
