"""Where the apiserver is and how the services prove who they are to it: its URL, the TLS context
that trusts its CA (and presents a client certificate, if any), and the bearer token.

In a pod these come from the service account's files and the KUBERNETES_SERVICE_* variables the
kubelet sets (`in_cluster`); from a kubeconfig, see `kube.kubeconfig`.
"""

from __future__ import annotations

import contextlib
import os
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

SERVICE_ACCOUNT = Path("/var/run/secrets/kubernetes.io/serviceaccount")
# client-go reads the token file again a minute after each read: the kubelet rotates a projected
# service-account token well before it expires, and the new one lands in the same file.
TOKEN_REREAD_SECONDS = 60.0


class ConfigError(Exception):
    """Neither a kubeconfig nor a pod's service account says how to reach the apiserver."""


class Token(Protocol):
    def authorization(self) -> str | None:
        """The Authorization header for the next request; None to send none."""


@dataclass(frozen=True)
class StaticToken:
    """A token that does not change (or none)."""

    token: str | None

    def authorization(self) -> str | None:
        return f"Bearer {self.token}" if self.token else None


@dataclass
class TokenFile:
    """A token read from a file, and read again once TOKEN_REREAD_SECONDS have passed since the
    last read. A failed or empty re-read keeps the token read before (the file is swapped, not
    edited, so it is missing only for an instant), and is tried again at the next request, as
    client-go keeps its cached token."""

    path: Path
    clock: Callable[[], float] = time.monotonic
    _header: str = field(default="", init=False)
    _read_at: float = field(default=float("-inf"), init=False)

    def __post_init__(self) -> None:
        try:
            token = self._read()
        except (OSError, ValueError) as error:
            raise ConfigError(f"cannot read the token file {self.path}: {error}") from error
        if not token:
            raise ConfigError(f"the token file {self.path} is empty")
        self._keep(token)

    def authorization(self) -> str | None:
        if self.clock() - self._read_at >= TOKEN_REREAD_SECONDS:
            with contextlib.suppress(OSError, ValueError):  # UnicodeDecodeError among them
                token = self._read()
                if token:
                    self._keep(token)
        return self._header or None

    def _read(self) -> str:
        return self.path.read_text().strip()

    def _keep(self, token: str) -> None:
        self._read_at = self.clock()
        self._header = f"Bearer {token}"


@dataclass(frozen=True)
class Credentials:
    """How to reach the apiserver: `host` is its URL (https://address:port)."""

    host: str
    tls: ssl.SSLContext
    token: Token
    # The name to check the apiserver's certificate against, when it is not the host's.
    server_name: str | None = None
    # The proxy a kubeconfig names for the cluster; otherwise the environment's (see client.py).
    proxy: str | None = None


def tls_context(
    *,
    ca_file: str | None = None,
    ca_data: str | None = None,
    cert_file: str | None = None,
    key_file: str | None = None,
    verify: bool = True,
) -> ssl.SSLContext:
    """A client TLS context trusting the CA given (the system's without one), presenting the
    client certificate given; `verify` False trusts any server (insecure-skip-tls-verify)."""
    context = ssl.create_default_context(cafile=ca_file, cadata=ca_data)
    if cert_file:
        context.load_cert_chain(cert_file, key_file)
    if not verify:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    return context


def in_cluster(directory: Path = SERVICE_ACCOUNT, *, with_token: bool = True) -> Credentials:
    """The pod's service account: its token and CA files, and the apiserver's Service address;
    without its token (`with_token` False) for a service that sends its users' credentials only
    (the console), whose pod mounts no token."""
    host = os.environ.get("KUBERNETES_SERVICE_HOST")
    port = os.environ.get("KUBERNETES_SERVICE_PORT")
    if not host or not port:
        raise ConfigError(
            "no kubeconfig given and not in a pod: KUBERNETES_SERVICE_HOST and "
            "KUBERNETES_SERVICE_PORT are not set"
        )
    if ":" in host:
        host = f"[{host}]"  # an IPv6 address
    ca_file = directory / "ca.crt"
    if not ca_file.is_file():
        raise ConfigError(f"no service account CA at {ca_file}")
    token: Token = TokenFile(directory / "token") if with_token else StaticToken(None)
    return Credentials(f"https://{host}:{port}", tls_context(ca_file=str(ca_file)), token)
