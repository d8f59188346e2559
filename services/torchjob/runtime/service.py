"""The process around a leader-elected controller (the reconciler, the housekeeper): logging,
SIGTERM and SIGINT, the probe server, leader election on a Lease, and while leading the
controller's informers and workers. Only the leader watches and acts; losing the Lease ends the
process (exit status 1) so that a single leader ever acts, and the Deployment restarts it as a
candidate."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import signal
import sys
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Protocol

import structlog
import uvloop
from aiohttp import web
from prometheus_client import REGISTRY

from torchjob.kube.client import KubeClient, new_kube_client
from torchjob.kube.controller import run_workers
from torchjob.kube.informer import Informer
from torchjob.kube.leader import LeaderElector
from torchjob.kube.leader_thread import ElectionThread
from torchjob.kube.reconcile import JobKey, Result
from torchjob.kube.workqueue import WorkQueue
from torchjob.runtime import logging as runtime_logging
from torchjob.runtime import metrics as runtime_metrics
from torchjob.runtime.health import Health
from torchjob.runtime.probes import probe_app
from torchjob.runtime.settings import KUBEFLOW, TRAINER

log = structlog.get_logger("torchjob.runtime.service")


class Controller(Protocol):
    """Informers feeding a queue of keys, and the reconcile that drains it."""

    queue: WorkQueue[JobKey]

    @property
    def informers(self) -> list[Informer]: ...

    async def reconcile(self, key: JobKey) -> Result: ...


@dataclass(frozen=True, slots=True)
class Settings:
    """The settings every leader-elected controller takes (runtime/settings.py declares them)."""

    namespace: str
    lease_name: str
    identity: str
    lease_duration: float
    renew_deadline: float
    retry_period: float
    workers: int
    max_connections: int
    qps: float
    burst: int
    probe_host: str
    probe_port: int
    kubeconfig: str | None
    log_level: str
    # Kubeflow's PyTorchJob (kubeflow.org/v1) is served too (docs/kubeflow.md).
    kubeflow: bool = KUBEFLOW.default
    trainer: bool = TRAINER.default


# Builds the controller; it may first ask the apiserver what it serves.
Build = Callable[[KubeClient], Controller | Awaitable[Controller]]


def service_families(service: str, own: Iterable[str] = ()) -> runtime_metrics.Families:
    """What a controller service's /metrics exports: the scaffold's families, those named
    `torchjob_<service>_*`, and `own`."""
    prefix = f"torchjob_{service}_"
    named = {f.name for f in REGISTRY.collect() if f.name.startswith(prefix)}
    return runtime_metrics.Families(
        runtime_metrics.CONTROLLER
        | runtime_metrics.KUBE_CLIENT
        | runtime_metrics.INFORMER
        | named
        | set(own)
    )


def run_controller_service(
    service: str,
    controller_name: str,
    settings: Settings,
    build: Build,
    families: Iterable[str] = (),
) -> None:
    """Run the service until SIGTERM or SIGINT (exit 0) or until leadership is lost (exit 1).
    Its /metrics exports `service_families(service, families)`."""
    runtime_logging.configure(service, settings.log_level)
    exported = service_families(service, families)
    # uvloop, as the webhook runs on: its TLS transports read into buffers that stay unused until
    # data arrives, where asyncio's fill 256 KiB per connection (a controller keeps one per
    # watch), and its compiled loop takes less CPU per request.
    with (
        contextlib.suppress(KeyboardInterrupt),
        asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner,
    ):
        sys.exit(runner.run(_main_async(controller_name, settings, build, exported)))


async def _main_async(
    controller_name: str, settings: Settings, build: Build, exported: runtime_metrics.Families
) -> int:
    task = asyncio.current_task()
    assert task is not None
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, task.cancel)
    try:
        return await _serve(controller_name, settings, build, exported)
    except asyncio.CancelledError:
        log.info("stopped")
        return 0


async def _serve(
    controller_name: str, settings: Settings, build: Build, exported: runtime_metrics.Families
) -> int:
    api = await new_kube_client(
        settings.kubeconfig, settings.max_connections, qps=settings.qps, burst=settings.burst
    )
    built = build(api)
    controller = await built if inspect.isawaitable(built) else built
    # The Lease has a client of its own, as in controller-runtime, without a rate limit: renewals
    # never queue behind the controller's own requests. It campaigns on a loop of its own in a
    # thread (kube/leader_thread.py): a busy controller loop does not hold renewals back.
    elector = ElectionThread(
        lambda: new_kube_client(settings.kubeconfig, max_connections=2),
        lambda lease_api: LeaderElector(
            lease_api,
            settings.namespace,
            settings.lease_name,
            settings.identity,
            lease_seconds=settings.lease_duration,
            renew_deadline=settings.renew_deadline,
            retry_seconds=settings.retry_period,
        ),
    )
    health = Health(lambda: elector.is_leader, controller.informers)
    runner = web.AppRunner(
        probe_app(health.ready, health.healthy, exported.exposition), access_log=None
    )
    await runner.setup()
    await web.TCPSite(runner, settings.probe_host, settings.probe_port).start()
    try:
        await elector.run(lambda: _lead(controller_name, controller, settings, health))
        log.warning("leadership lost; exiting so that a single leader acts")
        return 1
    finally:
        await runner.cleanup()
        await api.close()


async def _lead(
    controller_name: str, controller: Controller, settings: Settings, health: Health
) -> None:
    """What the leader does: fill the caches, then reconcile until cancelled: a controller never
    acts on a cache that has not been listed yet. An informer that stops ends leading (and the
    process) with an error."""
    async with asyncio.TaskGroup() as group:
        for n, informer in enumerate(controller.informers):
            group.create_task(health.run_informer(informer), name=f"informer-{n}")
        await asyncio.gather(*(i.synced.wait() for i in controller.informers))
        log.info("caches synced; reconciling", controller=controller_name, workers=settings.workers)
        await run_workers(controller.queue, controller.reconcile, settings.workers, controller_name)
