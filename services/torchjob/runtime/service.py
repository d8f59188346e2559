"""The process around a leader-elected controller (the reconciler, the housekeeper): logging,
SIGTERM and SIGINT, the probe server, leader election on a Lease, and while leading the
controller's informers and workers. Only the leader watches and acts; losing the Lease ends the
process (exit status 1) so that a single leader ever acts, and the Deployment restarts it as a
candidate."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import socket
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import structlog
from aiohttp import web
from kubernetes_asyncio import client

from torchjob.kube.client import new_api_client
from torchjob.kube.controller import Result, run_controller
from torchjob.kube.informer import Informer
from torchjob.kube.leader import run_as_leader
from torchjob.kube.workqueue import WorkQueue
from torchjob.runtime import logging as runtime_logging
from torchjob.runtime.probes import probe_app

log = structlog.get_logger("torchjob.runtime.service")


class ControllerSettings(Protocol):
    """What the scaffold reads from a service's settings."""

    @property
    def namespace(self) -> str: ...
    @property
    def lease_name(self) -> str: ...
    @property
    def identity(self) -> str: ...
    @property
    def workers(self) -> int: ...
    @property
    def max_connections(self) -> int: ...
    @property
    def probe_host(self) -> str: ...
    @property
    def probe_port(self) -> int: ...
    @property
    def kubeconfig(self) -> str | None: ...
    @property
    def log_level(self) -> str: ...


class Controller(Protocol):
    """Informers feeding a queue of keys, and the reconcile that drains it."""

    queue: WorkQueue[str]

    @property
    def informers(self) -> list[Informer]: ...

    async def reconcile(self, key: str) -> Result: ...


@dataclass(frozen=True, slots=True)
class Settings:
    """The flags every leader-elected controller takes."""

    namespace: str
    lease_name: str
    identity: str
    workers: int
    max_connections: int
    probe_host: str
    probe_port: int
    kubeconfig: str | None
    log_level: str


def _env(name: str, default: str) -> str:
    return os.environ.get(f"TORCHJOB_{name}", default)


def parse_settings(
    argv: list[str] | None, prog: str, service: str, default_workers: int
) -> Settings:
    """Command-line flags, each with an environment variable as its default: TORCHJOB_<SERVICE>_
    LEASE and TORCHJOB_<SERVICE>_WORKERS for the service's own, the shared ones unprefixed."""
    prefix = service.upper()
    p = argparse.ArgumentParser(prog=prog, description=f"torchjob {service}")
    p.add_argument(
        "--namespace",
        default=_env("NAMESPACE", "torchjob-system"),
        help="where the leader Lease lives",
    )
    p.add_argument("--lease-name", default=_env(f"{prefix}_LEASE", f"torchjob-{service}"))
    p.add_argument("--identity", default=_env("POD_NAME", socket.gethostname()))
    p.add_argument(
        "--workers", type=int, default=int(_env(f"{prefix}_WORKERS", str(default_workers)))
    )
    p.add_argument(
        "--max-connections",
        type=int,
        default=int(_env("MAX_CONNECTIONS", "100")),
        help="concurrent requests to the apiserver",
    )
    p.add_argument("--probe-host", default=_env("PROBE_HOST", "0.0.0.0"))
    p.add_argument("--probe-port", type=int, default=int(_env("PROBE_PORT", "8080")))
    p.add_argument("--kubeconfig", default=os.environ.get("KUBECONFIG") or None)
    p.add_argument("--log-level", default=_env("LOG_LEVEL", "INFO"))
    a = p.parse_args(argv)
    return Settings(
        namespace=a.namespace,
        lease_name=a.lease_name,
        identity=a.identity,
        workers=a.workers,
        max_connections=a.max_connections,
        probe_host=a.probe_host,
        probe_port=a.probe_port,
        kubeconfig=a.kubeconfig,
        log_level=a.log_level,
    )


Build = Callable[[client.ApiClient], Controller]


def run_controller_service(
    service: str, controller_name: str, settings: ControllerSettings, build: Build
) -> None:
    """Run the service until SIGTERM or SIGINT (exit 0) or until leadership is lost (exit 1)."""
    runtime_logging.configure(service, settings.log_level)
    with contextlib.suppress(KeyboardInterrupt):
        sys.exit(asyncio.run(_main_async(controller_name, settings, build)))


async def _main_async(controller_name: str, settings: ControllerSettings, build: Build) -> int:
    task = asyncio.current_task()
    assert task is not None
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, task.cancel)
    try:
        return await _serve(controller_name, settings, build)
    except asyncio.CancelledError:
        log.info("stopped")
        return 0


async def _serve(controller_name: str, settings: ControllerSettings, build: Build) -> int:
    api = await new_api_client(settings.kubeconfig, settings.max_connections)
    controller = build(api)
    runner = web.AppRunner(probe_app(lambda: None), access_log=None)
    await runner.setup()
    await web.TCPSite(runner, settings.probe_host, settings.probe_port).start()
    try:
        await run_as_leader(
            api,
            settings.namespace,
            settings.lease_name,
            settings.identity,
            lambda: run_controller(
                controller.informers,
                controller.queue,
                controller.reconcile,
                settings.workers,
                controller_name,
            ),
        )
        log.warning("leadership lost; exiting so that a single leader acts")
        return 1
    finally:
        await runner.cleanup()
        await api.close()
