"""Certificates made in the serving process: what they cost it.

The webhook makes and checks its certificates in its own process (`webhook/certificates/pki.py`,
called by `store.py` on the event loop). Until commit 6247108 a short-lived child process did that
work, so that the serving process never imported `cryptography`; this bench weighed the child at
that commit (`git show 6247108:tests/bench/certificates.py`), and docs/architecture.md keeps the
figures and the decision. What it measures now, in this one run:

- memory: the resident set of a fresh process after importing the webhook (`python -m
  torchjob.webhook`'s imports, `cryptography` among them), then after making a bundle;
- one settle of an empty Secret (a new CA and serving certificate): on the loop, as the store does
  it, and in a worker thread;
- admissions answered while certificates are made: job validations sent at a fixed pace through
  the admission routes (tests/support/webhook.py) on this process's event loop, idle and while
  settles run each way; p50/p99/max per way, and each over idle.

Prints figures; the exit status says nothing about them.

    .venv/bin/python tests/bench/certificates.py [--settles N]
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

TESTS_DIR = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(TESTS_DIR))

from support.stats import percentile  # noqa: E402
from support.webhook import JOB, admission_app, review, serving  # noqa: E402

from torchjob.runtime import logging as runtime_logging  # noqa: E402
from torchjob.webhook.certificates import pki  # noqa: E402

DNS_NAMES = ("torchjob-webhook.torchjob.svc",)
IPS = ("127.0.0.1",)
NOW = datetime.datetime(2030, 1, 1, tzinfo=datetime.UTC)
# Validations are sent at a fixed pace, whatever the answers take; settles have a pause between.
SEND_EVERY = 0.01
PAUSE = 0.05

RSS_PROBE = """
import sys
def rss_mib():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
import torchjob.webhook.__main__
from torchjob.webhook.certificates import pki
print(rss_mib())
import datetime
pki.settle(None, ["a.svc"], ["127.0.0.1"], datetime.datetime.now(datetime.UTC))
print(rss_mib())
"""


def resident_mib() -> tuple[float, float]:
    """Median over five fresh processes of each step's resident set."""
    runs = [
        [
            float(line)
            for line in subprocess.run(
                [sys.executable, "-c", RSS_PROBE], check=True, capture_output=True, text=True
            ).stdout.split()
        ]
        for _ in range(5)
    ]
    served, made = (statistics.median(step) for step in zip(*runs, strict=True))
    return served, made


def settle_here() -> None:
    pki.settle(None, DNS_NAMES, IPS, NOW)


async def on_loop() -> None:
    settle_here()


async def in_thread() -> None:
    await asyncio.to_thread(settle_here)


WAYS: dict[str, Callable[[], Awaitable[None]]] = {
    "on the loop": on_loop,
    "worker thread": in_thread,
}


async def settle_seconds(way: Callable[[], Awaitable[None]], settles: int) -> float:
    took = []
    for _ in range(settles):
        start = time.perf_counter()
        await way()
        took.append(time.perf_counter() - start)
    return statistics.median(took)


async def admissions_during(
    way: Callable[[], Awaitable[None]] | None, settles: int, idle_seconds: float
) -> list[float]:
    """Latencies of validations sent every `SEND_EVERY` seconds while `settles` settles run, one
    after another with a pause between (with no way, for `idle_seconds`). Each latency is counted
    from when its validation was due to be sent, so a loop too busy to send it counts too."""
    body = review(JOB)
    latencies: list[float] = []
    async with serving(admission_app()) as client:

        async def admit(due: float) -> None:
            async with client.post("/validate/pytorchtrainingjobs", json=body) as answer:
                await answer.read()
            latencies.append(time.perf_counter() - due)

        async def send_until(done: asyncio.Event) -> None:
            sent: set[asyncio.Task[None]] = set()
            due = time.perf_counter()
            while not done.is_set():
                await asyncio.sleep(max(0.0, due - time.perf_counter()))
                task = asyncio.create_task(admit(due))
                sent.add(task)
                task.add_done_callback(sent.discard)
                due += SEND_EVERY
            await asyncio.gather(*sent)

        done = asyncio.Event()
        sender = asyncio.create_task(send_until(done))
        if way is None:
            await asyncio.sleep(idle_seconds)
        else:
            for _ in range(settles):
                await asyncio.sleep(PAUSE)
                await way()
        done.set()
        await sender
    return latencies


def quantile_ms(values: list[float], percent: int) -> float:
    return percentile(values, percent) * 1000


async def main(settles: int) -> None:
    runtime_logging.configure("bench", "WARNING")  # not a line per admission
    served, made = resident_mib()
    print("Resident memory of a fresh process (median of 5)")
    print(f"  webhook imported, cryptography too  {served:6.1f} MiB")
    growth = f"(+{made - served:.1f}, x{made / served:.2f})"
    print(f"  + one bundle made                   {made:6.1f} MiB  {growth}")

    print(f"\nOne settle of an empty Secret (median of {settles})")
    seconds = {name: await settle_seconds(way, settles) for name, way in WAYS.items()}
    for name, took in seconds.items():
        ratio = took / seconds["on the loop"]
        print(f"  {name:14} {took * 1000:8.1f} ms   x{ratio:6.1f} over on the loop")

    print(f"\nValidations sent every {SEND_EVERY * 1000:.0f} ms while {settles} settles run")
    await admissions_during(None, settles, 1.0)  # warms the routes and the client up, unreported
    idle = await admissions_during(None, settles, (seconds["on the loop"] + PAUSE) * settles)
    idle_p50, idle_p99 = quantile_ms(idle, 50), quantile_ms(idle, 99)
    print(
        f"  {'way':14} {'n':>6} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8} {'p50 x':>7} {'p99 x':>7}"
    )
    print(f"  {'idle':14} {len(idle):6} {idle_p50:8.2f} {idle_p99:8.2f} {max(idle) * 1000:8.2f}")
    for name, way in WAYS.items():
        busy = await admissions_during(way, settles, 0)
        p50, p99 = quantile_ms(busy, 50), quantile_ms(busy, 99)
        print(
            f"  {name:14} {len(busy):6} {p50:8.2f} {p99:8.2f} {max(busy) * 1000:8.2f}"
            f" {p50 / idle_p50:7.2f} {p99 / idle_p99:7.2f}"
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--settles", type=int, default=20)
    asyncio.run(main(parser.parse_args().settles))
