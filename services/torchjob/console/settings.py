"""Console settings, declared as runtime/settings.py says: each a flag, with an environment variable
as its default."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from torchjob.runtime.settings import (
    PREFIX,
    Setting,
    common_settings,
    environment,
    parser_of,
    values_of,
)

AUTH_TOKEN = "token"
AUTH_PROXY = "proxy"


@dataclass(frozen=True, slots=True)
class Settings:
    namespace: str
    probe_port: int
    kubeconfig: str | None
    log_level: str
    kubeflow: bool
    trainer: bool
    host: str
    port: int
    auth_mode: str
    proxy_user_header: str
    proxy_groups_header: str
    external_url: str | None
    namespaces: tuple[str, ...]
    prometheus_url: str | None
    session_idle_seconds: float
    session_max_seconds: float
    max_body_bytes: int
    tensorboard_url: str | None


def _positive(value: float) -> str | None:
    return None if value > 0 else "must be positive"


def _an_origin(value: str | None) -> str | None:
    """The TensorBoards' base is an origin: each board's host is made from its host and port."""
    if not value or re.fullmatch(r"https?://[a-z0-9.-]+(:[0-9]+)?/?", value):
        return None
    return "must be http(s)://host[:port], a domain in lower case, with no path"


# The console's own settings, after every service's (common_settings).
CONSOLE_SETTINGS: tuple[Setting, ...] = (
    Setting("--host", f"{PREFIX}CONSOLE_HOST", "0.0.0.0", "the address pages are served on"),
    Setting("--port", f"{PREFIX}CONSOLE_PORT", 8000, "the plain-HTTP port pages are served on"),
    Setting(
        "--auth-mode",
        f"{PREFIX}CONSOLE_AUTH_MODE",
        AUTH_TOKEN,
        "token: each user signs in with a bearer token of their own; proxy: a trusted "
        "authenticating proxy names the user in headers and the console impersonates them",
        choices=(AUTH_TOKEN, AUTH_PROXY),
    ),
    Setting(
        "--proxy-user-header",
        f"{PREFIX}CONSOLE_PROXY_USER_HEADER",
        "X-Forwarded-User",
        "proxy mode: the header the proxy names the user in",
    ),
    Setting(
        "--proxy-groups-header",
        f"{PREFIX}CONSOLE_PROXY_GROUPS_HEADER",
        "X-Forwarded-Groups",
        "proxy mode: the header the proxy lists the user's groups in, comma-separated",
    ),
    Setting(
        "--external-url",
        f"{PREFIX}CONSOLE_EXTERNAL_URL",
        None,
        "the console's address as browsers reach it; a change must come from this origin",
        documented_default="the origin of the request's own Host",
    ),
    Setting(
        "--namespaces",
        f"{PREFIX}CONSOLE_NAMESPACES",
        "",
        "comma-separated namespaces offered to users who may not list namespaces",
    ),
    Setting(
        "--prometheus-url",
        f"{PREFIX}CONSOLE_PROMETHEUS_URL",
        None,
        "the cluster's Prometheus, for resource use over time; else metrics.k8s.io samples",
    ),
    Setting(
        "--session-idle-seconds",
        f"{PREFIX}CONSOLE_SESSION_IDLE_SECONDS",
        3600.0,
        "a session unused this long is signed out",
        check=_positive,
    ),
    Setting(
        "--session-max-seconds",
        f"{PREFIX}CONSOLE_SESSION_MAX_SECONDS",
        43200.0,
        "a session is signed out this long after sign-in (sooner when its token expires)",
        check=_positive,
    ),
    Setting(
        "--max-body-bytes",
        f"{PREFIX}CONSOLE_MAX_BODY_BYTES",
        256 * 1024,
        "the largest form or YAML accepted; larger ones are refused with 413",
        check=lambda value: None if value >= 1024 else "must be at least 1024",
    ),
    Setting(
        "--tensorboard-url",
        f"{PREFIX}CONSOLE_TENSORBOARD_URL",
        None,
        "the base of the TensorBoards' own origins (https://tb.example.com): a job's TensorBoard "
        "is served at https://<label>.tb.example.com, whose wildcard name and certificate route "
        "here; unset, the console passes no TensorBoard on and shows how to reach it instead",
        check=_an_origin,
    ),
)


def declared(environ: Mapping[str, str]) -> tuple[Setting, ...]:
    del environ  # every default is fixed
    return (*common_settings("the namespace the console runs in"), *CONSOLE_SETTINGS)


def _csv(text: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in text.split(",") if part.strip())


def parse(argv: list[str] | None = None) -> Settings:
    settings = declared(environment())
    parser = parser_of("python -m torchjob.console", "torchjob console", settings, environment())
    values = values_of(parser, settings, argv, environment())
    values["namespaces"] = _csv(values["namespaces"])
    values["external_url"] = (values["external_url"] or "").rstrip("/") or None
    values["prometheus_url"] = (values["prometheus_url"] or "").rstrip("/") or None
    values["tensorboard_url"] = (values["tensorboard_url"] or "").rstrip("/") or None
    return Settings(**values)
