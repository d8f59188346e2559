"""The webhook's certificate bundle as PEMs, and as the Secret that keeps it: stored, loaded and
presented as they are; making and checking them is `pki`'s."""

from __future__ import annotations

import base64
import binascii
import datetime
import ipaddress
from dataclasses import dataclass
from typing import Final

CA_VALIDITY: Final = datetime.timedelta(days=3650)
CERT_VALIDITY: Final = datetime.timedelta(days=365)
# Renewing with a third of the lifetime left gives months of slack for a failed renewal to be
# noticed and retried, and for every replica and webhook configuration to pick up the result.
ROTATE_FRACTION: Final = 1 / 3

AnyIPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

# Keys of the Secret; tls.crt and tls.key are where a kubernetes.io/tls Secret keeps its pair.
SECRET_CA_CERT: Final = "ca.crt"
SECRET_CA_KEY: Final = "ca.key"
SECRET_TLS_CERT: Final = "tls.crt"
SECRET_TLS_KEY: Final = "tls.key"
SECRET_CA_BUNDLE: Final = "ca-bundle.crt"


@dataclass(frozen=True)
class CertBundle:
    """PEM-encoded CA and serving key pairs. `ca_bundle_pem` is what clients must trust: the
    current CA, plus the previous one while it is still valid after a CA rotation."""

    ca_cert_pem: bytes
    ca_key_pem: bytes
    cert_pem: bytes
    key_pem: bytes
    ca_bundle_pem: bytes


def secret_data(bundle: CertBundle) -> dict[str, str]:
    """The bundle as the base64 `data` of a Secret."""
    return {key: base64.b64encode(pem).decode("ascii") for key, pem in _pem_by_secret_key(bundle)}


def decoded_secret_data(data: dict[str, str]) -> CertBundle:
    """The PEMs stored by `secret_data`, unchecked. Raises KeyError for a missing key and
    ValueError for a value that is not base64."""
    return CertBundle(
        ca_cert_pem=_b64decode(data[SECRET_CA_CERT]),
        ca_key_pem=_b64decode(data[SECRET_CA_KEY]),
        cert_pem=_b64decode(data[SECRET_TLS_CERT]),
        key_pem=_b64decode(data[SECRET_TLS_KEY]),
        ca_bundle_pem=_b64decode(data[SECRET_CA_BUNDLE]),
    )


def _pem_by_secret_key(bundle: CertBundle) -> list[tuple[str, bytes]]:
    return [
        (SECRET_CA_CERT, bundle.ca_cert_pem),
        (SECRET_CA_KEY, bundle.ca_key_pem),
        (SECRET_TLS_CERT, bundle.cert_pem),
        (SECRET_TLS_KEY, bundle.key_pem),
        (SECRET_CA_BUNDLE, bundle.ca_bundle_pem),
    ]


def _b64decode(value: str) -> bytes:
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, TypeError) as error:
        raise ValueError(f"not base64: {error}") from error
