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
from torchjob.kube.leader import run_as_leader
from torchjob.reconciler.controller import Reconciler
from torchjob.reconciler.settings import Settings, parse
from torchjob.runtime import logging as runtime_logging
from torchjob.runtime.probes import probe_app

log = structlog.get_logger("torchjob.reconciler")


async def lead(reconciler: Reconciler, settings: Settings) -> None:
    """What the leader does: fill the caches, then reconcile until cancelled."""
    informers = [
        asyncio.create_task(i.run(), name=f"informer-{n}")
        for n, i in enumerate(reconciler.informers)
    ]
    try:
        await asyncio.gather(*(i.synced.wait() for i in reconciler.informers))
        log.info("caches synced; reconciling", workers=settings.workers)
        await run_workers(
            reconciler.queue, reconciler.reconcile, settings.workers, "pytorchtrainingjob"
        )
    finally:
        for task in informers:
            task.cancel()
        await asyncio.gather(*informers, return_exceptions=True)


async def serve(settings: Settings) -> int:
    api = await new_api_client(
        settings.kubeconfig, settings.max_connections, qps=settings.qps, burst=settings.burst
    )
    reconciler = Reconciler(api, settings)
    runner = web.AppRunner(probe_app(lambda: None), access_log=None)
    await runner.setup()
    await web.TCPSite(runner, settings.probe_host, settings.probe_port).start()
    try:
        await run_as_leader(
            api,
            settings.namespace,
            settings.lease_name,
            settings.identity,
            lambda: lead(reconciler, settings),
        )
        log.warning("leadership lost; exiting so that a single leader acts")
        return 1
    finally:
        await runner.cleanup()
        await api.close()


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
