"""Webhook settings, declared as runtime/settings.py says: each a flag, with an environment variable
as its default."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from torchjob.runtime.settings import (
    KUBEFLOW,
    PREFIX,
    TRAINER,
    Setting,
    common_settings,
    default_of,
    environment,
    parser_of,
    values_of,
)

MiB = 1024 * 1024


RESTART_IN_PLACE = Setting(
    "--restart-in-place",
    f"{PREFIX}RESTART_IN_PLACE",
    True,
    "make replica pods restart in place where the cluster can (render/in_place.py); a job's "
    "restart-in-place annotation may say not to",
)


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


def _positive(value: float) -> str | None:
    return None if value > 0 else "must be positive"


def _port(value: int) -> str | None:
    return None if 0 < value < 65536 else "must be a port from 1 to 65535"


# The progress endpoint (progress/endpoint.py): where training processes report, and what they
# may cost.
PROGRESS_SETTINGS: tuple[Setting, ...] = (
    Setting(
        "--progress",
        f"{PREFIX}PROGRESS",
        True,
        "serve the progress endpoint and point the pods' training containers at it",
    ),
    Setting(
        "--progress-port",
        f"{PREFIX}PROGRESS_PORT",
        9444,
        "the HTTPS port training processes report progress to",
        check=_port,
    ),
    Setting(
        "--progress-url",
        f"{PREFIX}PROGRESS_URL",
        None,
        "the base URL pods report progress to",
        documented_default="https://<service-name>.<namespace>.svc:<progress-port>",
    ),
    Setting(
        "--progress-write-seconds",
        f"{PREFIX}PROGRESS_WRITE_SECONDS",
        10.0,
        "at most one progress write per job this often per replica; the latest report wins",
        check=_positive,
    ),
    Setting(
        "--progress-rate",
        f"{PREFIX}PROGRESS_RATE",
        1.0,
        "progress reports accepted per second per job; beyond the burst 429 with Retry-After",
        check=_positive,
    ),
    Setting(
        "--progress-burst",
        f"{PREFIX}PROGRESS_BURST",
        10,
        "progress reports accepted at once per job",
        check=lambda value: None if value >= 1 else "must be at least 1",
    ),
)


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
    kubeflow: bool = KUBEFLOW.default
    trainer: bool = TRAINER.default
    # Replica pods get what restarting in place needs (render/in_place.py).
    restart_in_place: bool = RESTART_IN_PLACE.default
    # cert-manager mode: the CA that signs --cert-file (else ca.crt beside it, when there is one).
    ca_file: str | None = None
    # The progress endpoint (progress/endpoint.py): served, and named to the pod rewrite, when on.
    progress: bool = default_of(PROGRESS_SETTINGS, "progress")
    progress_port: int = default_of(PROGRESS_SETTINGS, "progress_port")
    progress_url: str | None = None
    progress_write_seconds: float = default_of(PROGRESS_SETTINGS, "progress_write_seconds")
    progress_rate: float = default_of(PROGRESS_SETTINGS, "progress_rate")
    progress_burst: int = default_of(PROGRESS_SETTINGS, "progress_burst")

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

    @property
    def progress_base_url(self) -> str:
        """Where pods report progress: the URL given, else the Service's name in the cluster
        (a name every serving certificate holds, and one a pod in any namespace resolves)."""
        if self.progress_url:
            return self.progress_url
        return f"https://{self.service_name}.{self.namespace}.svc:{self.progress_port}"


def _csv(text: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in text.split(",") if part.strip())


_LIMITS = Limits()
# What one admission may cost (Limits), gathered into Settings.limits.
LIMIT_SETTINGS: tuple[Setting, ...] = (
    Setting(
        "--max-body-bytes",
        f"{PREFIX}WEBHOOK_MAX_BODY_BYTES",
        _LIMITS.max_body_bytes,
        "the largest admission body read; larger ones are refused with 413",
    ),
    Setting(
        "--max-inflight-bytes",
        f"{PREFIX}WEBHOOK_MAX_INFLIGHT_BYTES",
        _LIMITS.max_inflight_bytes,
        "the admission bodies handled at once, in bytes; beyond it 429 with Retry-After",
    ),
    Setting(
        "--read-timeout-seconds",
        f"{PREFIX}WEBHOOK_READ_TIMEOUT",
        _LIMITS.read_timeout_seconds,
        "how long a request's body may take to arrive",
    ),
    Setting(
        "--handler-timeout-seconds",
        f"{PREFIX}WEBHOOK_HANDLER_TIMEOUT",
        _LIMITS.handler_timeout_seconds,
        "how long a request may take to be answered; keep it below the webhook's timeoutSeconds",
    ),
)


def declared(environ: Mapping[str, str]) -> tuple[Setting, ...]:
    # The reconciler's ServiceAccount, in the namespace the environment names, unless told.
    namespace = environ.get(f"{PREFIX}NAMESPACE", "torchjob-system")
    reconciler = f"system:serviceaccount:{namespace}:torchjob-reconciler"
    return (
        *common_settings("the namespace the webhook runs in"),
        Setting(
            "--service-name",
            f"{PREFIX}WEBHOOK_SERVICE",
            "torchjob-webhook",
            "the webhook's Service, named in its serving certificate",
        ),
        Setting(
            "--secret-name",
            f"{PREFIX}WEBHOOK_SECRET",
            "torchjob-webhook-tls",
            "the Secret the webhook keeps its CA and serving certificate in",
        ),
        Setting(
            "--mutating-config",
            f"{PREFIX}MUTATING_CONFIG",
            "torchjob-mutating",
            "the MutatingWebhookConfiguration its CA is patched into ('' for none)",
        ),
        Setting(
            "--validating-config",
            f"{PREFIX}VALIDATING_CONFIG",
            "torchjob-validating",
            "the ValidatingWebhookConfiguration its CA is patched into ('' for none)",
        ),
        Setting("--extra-dns-names", f"{PREFIX}WEBHOOK_DNS_NAMES", "", "comma-separated"),
        Setting("--ip-addresses", f"{PREFIX}WEBHOOK_IPS", "", "comma-separated SAN IPs"),
        Setting(
            "--pod-creators",
            f"{PREFIX}POD_CREATORS",
            reconciler,
            "comma-separated usernames allowed to create pods carrying the job label",
            documented_default="system:serviceaccount:<namespace>:torchjob-reconciler",
        ),
        Setting("--host", f"{PREFIX}WEBHOOK_HOST", "0.0.0.0", "the address admissions come to"),
        Setting("--port", f"{PREFIX}WEBHOOK_PORT", 9443, "the HTTPS port admissions come to"),
        Setting("--cert-file", f"{PREFIX}WEBHOOK_CERT_FILE", None, "cert-manager mode"),
        Setting("--key-file", f"{PREFIX}WEBHOOK_KEY_FILE", None, "cert-manager mode"),
        Setting(
            "--ca-file",
            f"{PREFIX}WEBHOOK_CA_FILE",
            None,
            "cert-manager mode: the CA pods verify the progress endpoint with",
            documented_default="ca.crt beside --cert-file",
        ),
        RESTART_IN_PLACE,
        Setting(
            "--rotate-check-seconds",
            f"{PREFIX}ROTATE_CHECK_SECONDS",
            3600.0,
            "how often the serving certificate is checked for renewal",
        ),
        *LIMIT_SETTINGS,
        *PROGRESS_SETTINGS,
    )


LIMIT_FIELDS = tuple(setting.field for setting in LIMIT_SETTINGS)


def parse(argv: list[str] | None = None) -> Settings:
    settings = declared(environment())
    parser = parser_of(
        "python -m torchjob.webhook", "torchjob admission webhook", settings, environment()
    )
    values = values_of(parser, settings, argv, environment())
    limits = Limits(**{name: values.pop(name) for name in LIMIT_FIELDS})
    if problem := limits.problem():
        parser.error(problem)
    for name in ("mutating_config", "validating_config"):
        values[name] = values[name] or None
    for name in ("extra_dns_names", "ip_addresses"):
        values[name] = _csv(values[name])
    values["pod_creators"] = frozenset(_csv(values["pod_creators"]))
    return Settings(**values, limits=limits)
