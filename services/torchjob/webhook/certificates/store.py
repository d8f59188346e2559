"""Where the webhook's certificates live: a Secret shared by every replica (self-managed mode), the
caBundle of the webhook configurations, or files kept current by cert-manager."""

from __future__ import annotations

import base64
import contextlib
import datetime
import os
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any, Final

from torchjob.api.constants import FIELD_MANAGER
from torchjob.kube.client import KubeClient
from torchjob.kube.errors import Conflict, NotFound
from torchjob.kube.informer import ResourceKind
from torchjob.kube.resources import SECRETS
from torchjob.kube.rest import Resources
from torchjob.webhook.certificates import pki
from torchjob.webhook.certificates.bundle import (
    CA_VALIDITY,
    CERT_VALIDITY,
    ROTATE_FRACTION,
    AnyIPAddress,
    CertBundle,
    decoded_secret_data,
    secret_data,
)

# kubernetes.io/tls: the apiserver insists on tls.crt and tls.key, and the Secret can be mounted
# or inspected like any other TLS Secret (cert-manager's included). The CA pair rides along under
# extra keys, which the type allows.
SECRET_TYPE: Final = "kubernetes.io/tls"
MANAGED_BY_LABELS: Final = {"app.kubernetes.io/managed-by": FIELD_MANAGER}
# A conflict means another replica wrote in between, and what it wrote is normally good; running
# out of attempts takes replicas that keep disagreeing (different names, skewed clocks).
MAX_ATTEMPTS: Final = 5
STRATEGIC_MERGE_PATCH: Final = "application/strategic-merge-patch+json"
MUTATING_CONFIGURATIONS: Final = ResourceKind(
    "admissionregistration.k8s.io", "v1", "mutatingwebhookconfigurations"
)
VALIDATING_CONFIGURATIONS: Final = ResourceKind(
    "admissionregistration.k8s.io", "v1", "validatingwebhookconfigurations"
)

Clock = Callable[[], datetime.datetime]
KubeObject = dict[str, Any]
# Who owns the Secret (an ownerReference): resolved when it is written, None for no owner.
OwnerLookup = Callable[[], Awaitable[KubeObject | None]]


def utc_now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


class SecretCertificateStore:
    """A CA and serving certificate kept in one Secret, created when absent and renewed when due.

    Safe with several replicas: every write is a create or a resourceVersion-guarded replace, and
    whoever loses the race re-reads and adopts the winner's bundle, so all end with one CA.
    """

    def __init__(
        self,
        api_client: KubeClient,
        namespace: str,
        secret_name: str,
        dns_names: Sequence[str],
        ip_addresses: Sequence[str | AnyIPAddress],
        rotate_fraction: float = ROTATE_FRACTION,
        clock: Clock = utc_now,
        ca_validity: datetime.timedelta = CA_VALIDITY,
        cert_validity: datetime.timedelta = CERT_VALIDITY,
        owner: OwnerLookup | None = None,
    ) -> None:
        self._resources = Resources(api_client)
        self._owner = owner
        self._namespace = namespace
        self._secret_name = secret_name
        self._dns_names = list(dns_names)
        self._ip_addresses = list(ip_addresses)
        self._rotate_fraction = rotate_fraction
        self._clock = clock
        self._ca_validity = ca_validity
        self._cert_validity = cert_validity
        self._settled: pki.Settled | None = None

    async def ensure(self) -> CertBundle:
        """The bundle in the Secret, after creating or renewing it if needed.

        Raises Conflict if replicas still disagree after MAX_ATTEMPTS, and any other KubeError.
        """
        for _ in range(MAX_ATTEMPTS - 1):
            with contextlib.suppress(Conflict):
                return await self._ensure_once()
        return await self._ensure_once()

    async def _ensure_once(self) -> CertBundle:
        secret = await self._read()
        owner = await self._owner() if self._owner is not None else None
        settled = self._settled
        if secret is not None and settled is not None and self._still_holds(secret, settled):
            changed = False
        else:
            settled = self._settle(secret.get("data") or {} if secret is not None else None)
            changed = settled.changed
        if secret is None:
            await self._create(settled.bundle, owner)
        elif changed or _lacks_owner(secret, owner):
            # A Secret written before it had an owner is adopted (with the bundle it holds when
            # that is still good), so that it goes with its owner.
            await self._replace(secret, settled.bundle, owner)
        self._settled = settled
        return settled.bundle

    @property
    def not_after(self) -> datetime.datetime:
        """When the serving certificate of the bundle `ensure` returned last expires."""
        if self._settled is None:
            raise RuntimeError("no bundle yet: call ensure() first")
        return pki.not_after(self._settled.bundle.cert_pem)

    def _still_holds(self, secret: KubeObject, settled: pki.Settled) -> bool:
        """Whether the Secret holds what was settled last, with nothing due yet: then there is
        nothing to look at again, and no certificate is parsed."""
        return (secret.get("data") or {}) == secret_data(settled.bundle) and (
            self._clock() < settled.recheck_at
        )

    def _settle(self, stored_data: dict[str, str] | None) -> pki.Settled:
        # On the event loop: a settle takes about a millisecond, a new CA and certificate included
        # (tests/bench/certificates.py), and runs only when the Secret changed or something is due.
        return pki.settle(
            _stored_bundle(stored_data),
            self._dns_names,
            self._ip_addresses,
            self._clock(),
            self._ca_validity,
            self._cert_validity,
            self._rotate_fraction,
        )

    async def _read(self) -> KubeObject | None:
        try:
            return await self._resources.get(SECRETS, self._namespace, self._secret_name)
        except NotFound:
            return None

    async def _create(self, bundle: CertBundle, owner: KubeObject | None) -> CertBundle:
        metadata: KubeObject = {
            "name": self._secret_name,
            "namespace": self._namespace,
            "labels": dict(MANAGED_BY_LABELS),
        }
        if owner is not None:
            metadata["ownerReferences"] = [owner]
        secret = {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": metadata,
            "type": SECRET_TYPE,
            "data": secret_data(bundle),
        }
        await self._resources.create(SECRETS, self._namespace, secret)
        return bundle

    async def _replace(
        self, secret: KubeObject, bundle: CertBundle, owner: KubeObject | None
    ) -> CertBundle:
        # The resourceVersion read along with the Secret makes this fail with Conflict if anyone
        # wrote since. The type is left as found: it cannot be changed in place.
        secret["data"] = secret_data(bundle)
        metadata = secret["metadata"]
        if owner is not None and _lacks_owner(secret, owner):
            metadata["ownerReferences"] = [*(metadata.get("ownerReferences") or []), owner]
        await self._resources.replace(SECRETS, self._namespace, self._secret_name, secret)
        return bundle


def _stored_bundle(data: dict[str, str] | None) -> CertBundle | None:
    """What is stored, or None when a key is missing or a value is not base64 (a bundle whose PEMs
    do not parse is `pki.settle`'s to find)."""
    if data is None:
        return None
    try:
        return decoded_secret_data(data)
    except (KeyError, ValueError):
        return None


def _lacks_owner(secret: KubeObject, owner: KubeObject | None) -> bool:
    references = secret["metadata"].get("ownerReferences") or []
    present = {reference.get("uid") for reference in references}
    return owner is not None and owner["uid"] not in present


def webhook_configuration_owner(api_client: KubeClient, validating_name: str) -> OwnerLookup:
    """The ValidatingWebhookConfiguration as the owner of the Secret: the Secret's CA exists to be
    trusted by that configuration, and goes when it goes (`helm uninstall`), through the garbage
    collector. None while the configuration does not exist."""
    resources = Resources(api_client)

    async def lookup() -> KubeObject | None:
        try:
            configuration = await resources.get(VALIDATING_CONFIGURATIONS, "", validating_name)
        except NotFound:
            return None
        return {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingWebhookConfiguration",
            "name": validating_name,
            "uid": configuration["metadata"]["uid"],
        }

    return lookup


async def patch_ca_bundle(
    api_client: KubeClient,
    ca_bundle_pem: bytes,
    mutating_name: str | None,
    validating_name: str | None,
) -> None:
    """Sets `clientConfig.caBundle` of every webhook in the named configurations (None skips one),
    writing only those that differ. A missing configuration raises NotFound."""
    resources = Resources(api_client)
    ca_bundle = base64.b64encode(ca_bundle_pem).decode("ascii")
    named = ((MUTATING_CONFIGURATIONS, mutating_name), (VALIDATING_CONFIGURATIONS, validating_name))
    for kind, name in named:
        if name is None:
            continue
        configuration = await resources.get(kind, "", name)
        body = _ca_bundle_patch(configuration.get("webhooks") or [], ca_bundle)
        if body is not None:
            await resources.patch(kind, "", name, body, content_type=STRATEGIC_MERGE_PATCH)


def _ca_bundle_patch(webhooks: list[Any], ca_bundle: str) -> dict[str, Any] | None:
    # A strategic merge patch matches webhooks by name, not by position, so a configuration
    # edited since it was read (the chart upgraded, a webhook added) is patched correctly.
    stale = [
        hook["name"]
        for hook in webhooks
        if (hook.get("clientConfig") or {}).get("caBundle") != ca_bundle
    ]
    if not stale:
        return None
    return {"webhooks": [{"name": name, "clientConfig": {"caBundle": ca_bundle}} for name in stale]}


class FileCertificateSource:
    """A certificate and key kept current on disk by someone else: cert-manager, through a mounted
    Secret, whose kubelet swaps both files at once behind a symlink."""

    def __init__(self, cert_file: str | os.PathLike[str], key_file: str | os.PathLike[str]):
        self._files = (Path(cert_file), Path(key_file))
        self._checked: tuple[bytes, bytes, datetime.datetime] | None = None

    async def load(self) -> tuple[bytes, bytes, datetime.datetime]:
        """The certificate and key PEMs, and when the certificate expires. Raises OSError for
        missing files, and ValueError for a key that is not the certificate's (a half-written
        update: call again later). Files read as they were last time are not checked again."""
        cert_file, key_file = self._files
        cert_pem, key_pem = cert_file.read_bytes(), key_file.read_bytes()
        if self._checked is not None and self._checked[:2] == (cert_pem, key_pem):
            return self._checked
        expires = pki.inspect(cert_pem, key_pem)
        if expires is None:
            raise ValueError(f"{key_file} is not the private key of {cert_file}")
        self._checked = (cert_pem, key_pem, expires)
        return self._checked
