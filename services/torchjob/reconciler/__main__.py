"""`python -m torchjob.reconciler`: leader-elected; only the leader watches and acts."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys

import structlog
from aiohttp import web

from torchjob.kube.client import new_api_client
from torchjob.kube.controller import run_workers
from torchjob.kube.leader import LeaderElector
from torchjob.reconciler.controller import Reconciler
from torchjob.reconciler.health import Health
from torchjob.reconciler.settings import Settings, parse
from torchjob.runtime import logging as runtime_logging
from torchjob.runtime.probes import probe_app

log = structlog.get_logger("torchjob.reconciler")


async def lead(reconciler: Reconciler, settings: Settings, health: Health) -> None:
    """What the leader does: fill the caches, then reconcile until cancelled. An informer that
    stops ends leading (and the process) with an error."""
    async with asyncio.TaskGroup() as group:
        for n, informer in enumerate(reconciler.informers):
            group.create_task(health.run_informer(informer), name=f"informer-{n}")
        await asyncio.gather(*(i.synced.wait() for i in reconciler.informers))
        log.info("caches synced; reconciling", workers=settings.workers)
        await run_workers(
            reconciler.queue, reconciler.reconcile, settings.workers, "pytorchtrainingjob"
        )


async def serve(settings: Settings) -> int:
    api = await new_api_client(
        settings.kubeconfig, settings.max_connections, qps=settings.qps, burst=settings.burst
    )
    reconciler = Reconciler(api, settings)
    # The Lease has a client of its own, as in controller-runtime: renewals never queue behind
    # the reconciler's own requests for the rate limiter.
    lease_api = await new_api_client(settings.kubeconfig, max_connections=2)
    elector = LeaderElector(
        lease_api,
        settings.namespace,
        settings.lease_name,
        settings.identity,
        lease_seconds=settings.lease_duration,
        renew_deadline=settings.renew_deadline,
        retry_seconds=settings.retry_period,
    )
    health = Health(lambda: elector.is_leader, reconciler.informers)
    runner = web.AppRunner(probe_app(health.ready, health.healthy), access_log=None)
    await runner.setup()
    await web.TCPSite(runner, settings.probe_host, settings.probe_port).start()
    try:
        await elector.run(lambda: lead(reconciler, settings, health))
        log.warning("leadership lost; exiting so that a single leader acts")
        return 1
    finally:
        await runner.cleanup()
        await api.close()
        await lease_api.close()


async def main_async(settings: Settings) -> int:
    task = asyncio.current_task()
    assert task is not None
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, task.cancel)
    try:
        return await serve(settings)
    except asyncio.CancelledError:
        log.info("stopped")
        return 0


def main(argv: list[str] | None = None) -> None:
    settings = parse(argv)
    runtime_logging.configure("reconciler", settings.log_level)
    with contextlib.suppress(KeyboardInterrupt):
        sys.exit(asyncio.run(main_async(settings)))


if __name__ == "__main__":
    main()
