"""The serving certificate: the SSLContext the server presents, and what keeps it current.

The certificate comes from a Secret the webhook keeps itself (or from files, for cert-manager) and
is reloaded into the live SSLContext, so a rotation needs no restart and drops no connection.
"""

from __future__ import annotations

import asyncio
import datetime
import ssl
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import structlog
from aiohttp import web

from torchjob.kube.client import KubeClient
from torchjob.webhook.certificates.bundle import CertBundle
from torchjob.webhook.certificates.store import (
    FileCertificateSource,
    SecretCertificateStore,
    patch_ca_bundle,
    webhook_configuration_owner,
)
from torchjob.webhook.settings import Settings

log = structlog.get_logger("torchjob.webhook")

# Loads the current certificate into the SSLContext when it changed.
Refresh = Callable[[], Awaitable[None]]


class ServingCertificate:
    """The SSLContext the server presents, and the certificate files it was loaded from."""

    def __init__(self) -> None:
        self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.context.minimum_version = ssl.TLSVersion.TLSv1_2
        self._dir = Path(tempfile.mkdtemp(prefix="torchjob-webhook-tls-"))
        self.expires_at: float = 0.0
        self.loaded_pems = b""  # the certificate and key PEMs presented now, one after the other
        # The CA (or CAs, during a CA rotation) clients verify it with; empty while unknown.
        self.ca_pem = b""

    def load(self, cert_pem: bytes, key_pem: bytes, expires: datetime.datetime) -> bool:
        """Present this certificate, which expires at `expires`, on every new handshake; False
        when it is already loaded."""
        if cert_pem + key_pem == self.loaded_pems:
            return False
        cert, key = self._dir / "tls.crt", self._dir / "tls.key"
        key.touch(mode=0o600)
        key.write_bytes(key_pem)
        cert.write_bytes(cert_pem)
        self.context.load_cert_chain(cert, key)
        self.loaded_pems = cert_pem + key_pem
        self.expires_at = expires.timestamp()
        return True

    def problem(self) -> str | None:
        if not self.loaded_pems:
            return "no serving certificate yet"
        if self.expires_at <= time.time():
            return "the serving certificate has expired"
        return None

    def close(self) -> None:
        for path in self._dir.iterdir():
            path.unlink()
        self._dir.rmdir()


def refresher(settings: Settings, tls: ServingCertificate, api: KubeClient) -> Refresh:
    """What loads the certificate the settings name: from files, or from the Secret the webhook
    keeps (through `api`)."""
    if settings.certificates_from_files:
        return _file_refresher(settings, tls)
    return _secret_refresher(settings, tls, api)


async def refresh_periodically(refresh: Refresh, every: float) -> None:
    """Re-check the certificate every `every` seconds; a failed check keeps the current one."""
    while True:
        await asyncio.sleep(every)
        try:
            await refresh()
        except Exception:
            log.exception("certificate refresh failed; serving the current one")


def _secret_refresher(settings: Settings, tls: ServingCertificate, api: KubeClient) -> Refresh:
    store = SecretCertificateStore(
        api,
        settings.namespace,
        settings.secret_name,
        settings.dns_names,
        list(settings.ip_addresses),
        owner=(
            webhook_configuration_owner(api, settings.validating_config)
            if settings.validating_config
            else None
        ),
    )

    async def refresh() -> None:
        bundle: CertBundle = await store.ensure()
        expires = store.not_after
        # Trust first, then present: clients must accept a new CA before they meet it.
        await patch_ca_bundle(
            api, bundle.ca_bundle_pem, settings.mutating_config, settings.validating_config
        )
        if tls.load(bundle.cert_pem, bundle.key_pem, expires):
            log.info("serving certificate loaded", expires_at=expires.isoformat())
        tls.ca_pem = bundle.ca_bundle_pem

    return refresh


def _file_refresher(settings: Settings, tls: ServingCertificate) -> Refresh:
    source = FileCertificateSource(settings.cert_file or "", settings.key_file or "")
    # cert-manager writes the issuing CA as ca.crt into the Secret it keeps the pair in.
    ca_file = Path(settings.ca_file or Path(settings.cert_file or "").with_name("ca.crt"))

    async def refresh() -> None:
        cert, key, expires = await source.load()
        if tls.load(cert, key, expires):
            log.info("serving certificate loaded from files", cert_file=settings.cert_file)
        tls.ca_pem = _ca_of(ca_file)

    return refresh


def _ca_of(ca_file: Path) -> bytes:
    """The CA file's PEM; nothing when there is none (a file small enough to read in passing)."""
    return ca_file.read_bytes() if ca_file.is_file() else b""


# Where the application keeps the serving certificate: set by `app.init_app`, read by
# `__main__` (the admission port's context) and the progress endpoint (its own port's).
TLS = web.AppKey("tls", ServingCertificate)
