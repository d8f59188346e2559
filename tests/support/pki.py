"""A throwaway PKI for the test control plane: one CA, serving and client certificates, and the
RSA key that signs service-account tokens."""

from __future__ import annotations

import datetime
import ipaddress
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from torchjob.webhook.certificates.pki import key_usage

PrivateKey = ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey

# Long enough for any test session; the clock skew margin covers a just-started VM.
VALIDITY = datetime.timedelta(days=7)
CLOCK_SKEW = datetime.timedelta(hours=1)
DEFAULT_SERVING_HOSTS = ("127.0.0.1", "localhost")


@dataclass(frozen=True)
class CertAndKey:
    cert: x509.Certificate
    key: ec.EllipticCurvePrivateKey

    def write(self, cert_path: Path, key_path: Path) -> None:
        write_cert(cert_path, self.cert)
        write_private_key(key_path, self.key)


def new_ca(common_name: str = "torchjob-test-ca") -> CertAndKey:
    key = ec.generate_private_key(ec.SECP256R1())
    subject = _name(common_name)
    builder = (
        _builder(subject, subject, key.public_key())
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(key_usage(cert_sign=True), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
    )
    return CertAndKey(builder.sign(key, hashes.SHA256()), key)


def issue_serving_cert(ca: CertAndKey, common_name: str, hosts: Iterable[str] = ()) -> CertAndKey:
    """A server certificate valid for loopback plus `hosts` (DNS names or IP addresses)."""
    all_hosts = dict.fromkeys([*DEFAULT_SERVING_HOSTS, *hosts])  # ordered and unique
    san = x509.SubjectAlternativeName([_general_name(host) for host in all_hosts])
    return _issue(ca, _name(common_name), ExtendedKeyUsageOID.SERVER_AUTH, san)


def issue_client_cert(
    ca: CertAndKey, common_name: str, organizations: Iterable[str] = ()
) -> CertAndKey:
    """A client certificate; Kubernetes reads CN as the user name and each O as a group."""
    return _issue(ca, _name(common_name, organizations), ExtendedKeyUsageOID.CLIENT_AUTH)


def new_service_account_key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def write_cert(path: Path, cert: x509.Certificate) -> None:
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))


def write_private_key(path: Path, key: PrivateKey) -> None:
    pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    # Created owner-only from the start rather than chmod-ed after the key is on disk.
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as out:
        out.write(pem)


def write_public_key(path: Path, key: PrivateKey) -> None:
    pem = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    path.write_bytes(pem)


def _issue(
    ca: CertAndKey,
    subject: x509.Name,
    usage: x509.ObjectIdentifier,
    san: x509.SubjectAlternativeName | None = None,
) -> CertAndKey:
    key = ec.generate_private_key(ec.SECP256R1())
    builder = (
        _builder(subject, ca.cert.subject, key.public_key())
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(key_usage(cert_sign=False), critical=True)
        .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca.key.public_key()), critical=False
        )
    )
    if san is not None:
        builder = builder.add_extension(san, critical=False)
    return CertAndKey(builder.sign(ca.key, hashes.SHA256()), key)


def _builder(
    subject: x509.Name, issuer: x509.Name, public_key: ec.EllipticCurvePublicKey
) -> x509.CertificateBuilder:
    now = datetime.datetime.now(datetime.UTC)
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - CLOCK_SKEW)
        .not_valid_after(now + VALIDITY)
    )


def _name(common_name: str, organizations: Iterable[str] = ()) -> x509.Name:
    attributes = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, org) for org in organizations]
    return x509.Name([*attributes, x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _general_name(host: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(host))
    except ValueError:
        return x509.DNSName(host)
