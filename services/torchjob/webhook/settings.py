"""Webhook settings: command-line flags, each with an environment variable as its default."""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass

from torchjob.runtime.service import env, number


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
    a = p.parse_args(argv)
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
    )
