"""Reconciler settings: command-line flags, each with an environment variable as its default."""

from __future__ import annotations

import argparse
import os
import socket
from dataclasses import dataclass

# A job of N replicas asks for 2N creations at once (a pod and a Service each), then a status
# write per change. controller-runtime's 20/30 would make a 50-replica job wait seconds for its
# pods; 50/100 starts it in one burst and sustains 2.5x that, while the apiserver's own priority
# and fairness still protects it from us.
DEFAULT_QPS = 50.0
DEFAULT_BURST = 100


@dataclass(frozen=True, slots=True)
class Settings:
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
    scheduler_name: str
    probe_host: str
    probe_port: int
    kubeconfig: str | None
    log_level: str


def _env(name: str, default: str) -> str:
    return os.environ.get(f"TORCHJOB_{name}", default)


def number(parser: argparse.ArgumentParser, flag: str, env: str, default: float, help: str) -> None:
    """A numeric flag whose default comes from TORCHJOB_<env>, of the default's own type."""
    kind = type(default)
    parser.add_argument(flag, type=kind, default=kind(_env(env, str(default))), help=help)


def parse(argv: list[str] | None = None) -> Settings:
    p = argparse.ArgumentParser(
        prog="python -m torchjob.reconciler", description="torchjob reconciler"
    )
    p.add_argument(
        "--namespace",
        default=_env("NAMESPACE", "torchjob-system"),
        help="where the leader Lease lives",
    )
    p.add_argument("--lease-name", default=_env("RECONCILER_LEASE", "torchjob-reconciler"))
    p.add_argument("--identity", default=_env("POD_NAME", socket.gethostname()))
    # kube-controller-manager's flags and defaults: a standby takes over at most about
    # lease-duration + retry-period after the leader vanishes; the leader stops acting once it
    # has failed to renew for renew-deadline (an apiserver outage longer than that restarts it).
    number(
        p,
        "--leader-elect-lease-duration",
        "LEADER_ELECT_LEASE_DURATION",
        15.0,
        "seconds a standby waits after the last renewal before taking the lease",
    )
    number(
        p,
        "--leader-elect-renew-deadline",
        "LEADER_ELECT_RENEW_DEADLINE",
        10.0,
        "seconds the leader keeps trying to renew before it gives up leading",
    )
    number(
        p,
        "--leader-elect-retry-period",
        "LEADER_ELECT_RETRY_PERIOD",
        2.0,
        "seconds between attempts to acquire or renew the lease",
    )
    p.add_argument("--workers", type=int, default=int(_env("RECONCILER_WORKERS", "4")))
    number(p, "--max-connections", "MAX_CONNECTIONS", 100, "concurrent requests to the apiserver")
    number(
        p,
        "--qps",
        "KUBE_QPS",
        DEFAULT_QPS,
        "requests a second to the apiserver, watches aside (0 or less: no client-side limit)",
    )
    number(p, "--burst", "KUBE_BURST", DEFAULT_BURST, "requests sent at once before --qps applies")
    p.add_argument("--scheduler-name", default=_env("T9K_SCHEDULER_NAME", "t9k-scheduler"))
    p.add_argument("--probe-host", default=_env("PROBE_HOST", "0.0.0.0"))
    p.add_argument("--probe-port", type=int, default=int(_env("PROBE_PORT", "8080")))
    p.add_argument("--kubeconfig", default=os.environ.get("KUBECONFIG") or None)
    p.add_argument("--log-level", default=_env("LOG_LEVEL", "INFO"))
    a = p.parse_args(argv)
    return Settings(
        namespace=a.namespace,
        lease_name=a.lease_name,
        identity=a.identity,
        lease_duration=a.leader_elect_lease_duration,
        renew_deadline=a.leader_elect_renew_deadline,
        retry_period=a.leader_elect_retry_period,
        workers=a.workers,
        max_connections=a.max_connections,
        qps=a.qps,
        burst=a.burst,
        scheduler_name=a.scheduler_name,
        probe_host=a.probe_host,
        probe_port=a.probe_port,
        kubeconfig=a.kubeconfig,
        log_level=a.log_level,
    )
