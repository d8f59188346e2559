"""Webhook settings: command-line flags, each with an environment variable as its default."""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass, field

from torchjob.runtime.service import env, kubeflow_flag, number

MiB = 1024 * 1024


@dataclass(frozen=True, slots=True)
class Limits:
    """What one admission request may cost the webhook.

    The body bound follows from what kube-apiserver can send: an AdmissionReview carries the
    object and, on UPDATE, its old version too, each at most the 1.5 MiB etcd stores
    (`--max-request-bytes`), plus the review's own small envelope; a pod on CREATE is at most the
    3 MiB the apiserver accepts as a request body. 4 MiB covers both with room to spare, and
    anything larger cannot have come from the apiserver.
    """

    # The largest body read; a larger one is answered 413 from its Content-Length, unread.
    max_body_bytes: int = 4 * MiB
    # The bodies being read or answered at once, counted by their Content-Length (1 MiB more is
    # kept for bodies of 64 KiB or less). Only one body over 64 KiB is parsed at a time, up to 18
    # times its size as Python objects (the allocator keeps about 10 times more between such
    # bodies), so admissions take at most about this + 1 MiB, plus 28 times max_body_bytes, plus
    # 13 MiB for small bodies: about 135 MiB by default, 225 MiB with the process (measured).
    max_inflight_bytes: int = 8 * MiB
    # The whole body must have arrived this long after the headers (a half-sent body is cut off).
    read_timeout_seconds: float = 2.0
    # A request not answered this long after its headers is refused; below the apiserver's own
    # webhook timeout, so that the refusal and not a timeout reaches the user.
    handler_timeout_seconds: float = 4.0

    @property
    def loop_stall_seconds(self) -> float:
        """How long the event loop may go without running before the probes report it stuck:
        well above the handler timeout, since no admission holds the loop anywhere near that."""
        return 2 * self.handler_timeout_seconds + 2

    def problem(self) -> str | None:
        if self.max_body_bytes < 1024:
            return "--max-body-bytes must be at least 1024"
        if self.max_inflight_bytes < self.max_body_bytes:
            return "--max-inflight-bytes must be at least --max-body-bytes"
        if not 0 < self.read_timeout_seconds <= self.handler_timeout_seconds:
            return "--read-timeout-seconds must be positive and at most --handler-timeout-seconds"
        return None


@dataclass(frozen=True, slots=True)
class Settings:
    namespace: str
    service_name: str
    secret_name: str
    mutating_config: str | None
    validating_config: str | None
    extra_dns_names: tuple[str, ...]
    ip_addresses: tuple[str, ...]
    pod_creators: frozenset[str]
    host: str
    port: int
    probe_port: int
    cert_file: str | None
    key_file: str | None
    rotate_check_seconds: float
    kubeconfig: str | None
    log_level: str
    limits: Limits = field(default_factory=Limits)
    # Kubeflow's PyTorchJobs are admitted too, and their pods read from a cache of them.
    kubeflow: bool = False

    @property
    def dns_names(self) -> list[str]:
        svc, ns = self.service_name, self.namespace
        return [
            svc,
            f"{svc}.{ns}",
            f"{svc}.{ns}.svc",
            f"{svc}.{ns}.svc.cluster.local",
            *self.extra_dns_names,
        ]

    @property
    def certificates_from_files(self) -> bool:
        return bool(self.cert_file and self.key_file)


def _csv(text: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in text.split(",") if part.strip())


def parse(argv: list[str] | None = None) -> Settings:
    p = argparse.ArgumentParser(
        prog="python -m torchjob.webhook", description="torchjob admission webhook"
    )
    namespace = env("NAMESPACE", "torchjob-system")
    p.add_argument(
        "--namespace",
        default=namespace,
        help="the namespace the webhook runs in ($TORCHJOB_NAMESPACE)",
    )
    p.add_argument("--service-name", default=env("WEBHOOK_SERVICE", "torchjob-webhook"))
    p.add_argument("--secret-name", default=env("WEBHOOK_SECRET", "torchjob-webhook-tls"))
    p.add_argument("--mutating-config", default=env("MUTATING_CONFIG", "torchjob-mutating"))
    p.add_argument("--validating-config", default=env("VALIDATING_CONFIG", "torchjob-validating"))
    p.add_argument("--extra-dns-names", default=env("WEBHOOK_DNS_NAMES"), help="comma-separated")
    p.add_argument("--ip-addresses", default=env("WEBHOOK_IPS"), help="comma-separated SAN IPs")
    p.add_argument(
        "--pod-creators",
        default=env("POD_CREATORS", f"system:serviceaccount:{namespace}:torchjob-reconciler"),
        help="comma-separated usernames allowed to create pods carrying the job label",
    )
    p.add_argument("--host", default=env("WEBHOOK_HOST", "0.0.0.0"))
    number(p, "--port", "WEBHOOK_PORT", 9443, "the HTTPS port admissions come to")
    number(
        p, "--probe-port", "PROBE_PORT", 8080, "the plain-HTTP port of /healthz, /readyz, /metrics"
    )
    p.add_argument(
        "--cert-file", default=env("WEBHOOK_CERT_FILE") or None, help="cert-manager mode"
    )
    p.add_argument("--key-file", default=env("WEBHOOK_KEY_FILE") or None, help="cert-manager mode")
    number(
        p,
        "--rotate-check-seconds",
        "ROTATE_CHECK_SECONDS",
        3600.0,
        "how often the serving certificate is checked for renewal",
    )
    p.add_argument("--kubeconfig", default=os.environ.get("KUBECONFIG") or None)
    p.add_argument("--log-level", default=env("LOG_LEVEL", "INFO"))
    defaults = Limits()
    number(
        p,
        "--max-body-bytes",
        "WEBHOOK_MAX_BODY_BYTES",
        defaults.max_body_bytes,
        "the largest admission body read; larger ones are refused with 413",
    )
    number(
        p,
        "--max-inflight-bytes",
        "WEBHOOK_MAX_INFLIGHT_BYTES",
        defaults.max_inflight_bytes,
        "the admission bodies handled at once, in bytes; beyond it 429 with Retry-After",
    )
    number(
        p,
        "--read-timeout-seconds",
        "WEBHOOK_READ_TIMEOUT",
        defaults.read_timeout_seconds,
        "how long a request's body may take to arrive",
    )
    number(
        p,
        "--handler-timeout-seconds",
        "WEBHOOK_HANDLER_TIMEOUT",
        defaults.handler_timeout_seconds,
        "how long a request may take to be answered; keep it below the webhook's timeoutSeconds",
    )
    kubeflow_flag(p)
    a = p.parse_args(argv)
    limits = Limits(
        max_body_bytes=a.max_body_bytes,
        max_inflight_bytes=a.max_inflight_bytes,
        read_timeout_seconds=a.read_timeout_seconds,
        handler_timeout_seconds=a.handler_timeout_seconds,
    )
    if problem := limits.problem():
        p.error(problem)
    return Settings(
        namespace=a.namespace,
        service_name=a.service_name,
        secret_name=a.secret_name,
        mutating_config=a.mutating_config or None,
        validating_config=a.validating_config or None,
        extra_dns_names=_csv(a.extra_dns_names),
        ip_addresses=_csv(a.ip_addresses),
        pod_creators=frozenset(_csv(a.pod_creators)),
        host=a.host,
        port=a.port,
        probe_port=a.probe_port,
        cert_file=a.cert_file,
        key_file=a.key_file,
        rotate_check_seconds=a.rotate_check_seconds,
        kubeconfig=a.kubeconfig,
        log_level=a.log_level,
        limits=limits,
        kubeflow=a.kubeflow,
    )
