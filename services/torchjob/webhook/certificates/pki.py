"""The webhook's own PKI as pure functions: a CA, a serving certificate it signs, and the rules for
renewing either. Time is always passed in, so every decision can be tested with a fake clock."""

from __future__ import annotations

import datetime
import ipaddress
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Final

from cryptography import x509
from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from torchjob.webhook.certificates.bundle import CA_VALIDITY as CA_VALIDITY
from torchjob.webhook.certificates.bundle import CERT_VALIDITY as CERT_VALIDITY
from torchjob.webhook.certificates.bundle import ROTATE_FRACTION as ROTATE_FRACTION
from torchjob.webhook.certificates.bundle import AnyIPAddress as AnyIPAddress
from torchjob.webhook.certificates.bundle import CertBundle as CertBundle
from torchjob.webhook.certificates.bundle import decoded_secret_data
from torchjob.webhook.certificates.bundle import secret_data as secret_data

# Certificates start a little in the past so that a peer whose clock lags ours accepts them.
BACKDATE: Final = datetime.timedelta(minutes=5)
CA_NAME_PREFIX: Final = "torchjob-webhook-ca"


def new_bundle(
    dns_names: Sequence[str],
    ip_addresses: Sequence[str | AnyIPAddress],
    now: datetime.datetime,
    ca_validity: datetime.timedelta = CA_VALIDITY,
    cert_validity: datetime.timedelta = CERT_VALIDITY,
) -> CertBundle:
    """A fresh CA and a serving certificate for the given names; `now` must be timezone-aware."""
    now = _aware(now)
    names = _SubjectNames.of(dns_names, ip_addresses)
    ca = _new_ca(now, ca_validity)
    return _to_bundle(ca, _issue_serving(ca, names, now, cert_validity), [ca.cert])


def renew(
    bundle: CertBundle,
    dns_names: Sequence[str],
    ip_addresses: Sequence[str | AnyIPAddress],
    now: datetime.datetime,
    ca_validity: datetime.timedelta = CA_VALIDITY,
    cert_validity: datetime.timedelta = CERT_VALIDITY,
    rotate_fraction: float = ROTATE_FRACTION,
) -> CertBundle | None:
    """The bundle to store instead of `bundle`, or None when it is still good.

    A CA near its end is replaced together with the serving certificate, and stays in
    `ca_bundle_pem` until it expires, so servers still presenting a certificate it signed remain
    trusted. Raises ValueError for a bundle that does not parse (see `bundle_from_secret_data`).
    """
    now = _aware(now)
    current = _parse(bundle)
    names = _SubjectNames.of(dns_names, ip_addresses)
    still_valid = _still_valid(current.trusted, now)
    if _nearly_expired(current.ca.cert, now, rotate_fraction):
        ca = _new_ca(now, ca_validity)
        serving = _issue_serving(ca, names, now, cert_validity)
        return _to_bundle(ca, serving, [ca.cert, *still_valid])
    trusted = [current.ca.cert, *still_valid]
    if _serving_cert_outdated(current, names, now, rotate_fraction):
        serving = _issue_serving(current.ca, names, now, cert_validity)
        return _to_bundle(current.ca, serving, trusted)
    trusted_pem = _certs_pem(_unique(trusted))
    if trusted_pem == bundle.ca_bundle_pem:
        return None
    return replace(bundle, ca_bundle_pem=trusted_pem)


@dataclass(frozen=True)
class Settled:
    """The bundle to keep, whether it differs from the one stored, and until when it needs no look:
    before `recheck_at`, `renew` leaves it as it is for the same names."""

    bundle: CertBundle
    changed: bool
    recheck_at: datetime.datetime


def settle(
    stored: CertBundle | None,
    dns_names: Sequence[str],
    ip_addresses: Sequence[str | AnyIPAddress],
    now: datetime.datetime,
    ca_validity: datetime.timedelta = CA_VALIDITY,
    cert_validity: datetime.timedelta = CERT_VALIDITY,
    rotate_fraction: float = ROTATE_FRACTION,
) -> Settled:
    """What to keep in place of `stored`: `renew`'s answer, or a fresh bundle when nothing usable is
    stored (None, or a bundle that does not parse)."""
    if stored is not None:
        try:
            renewed = renew(
                stored, dns_names, ip_addresses, now, ca_validity, cert_validity, rotate_fraction
            )
        except ValueError:
            pass  # garbled or edited by hand: starting over beats failing on every start forever
        else:
            kept = renewed or stored
            return Settled(kept, renewed is not None, recheck_at(kept, rotate_fraction))
    fresh = new_bundle(dns_names, ip_addresses, now, ca_validity, cert_validity)
    return Settled(fresh, True, recheck_at(fresh, rotate_fraction))


def recheck_at(bundle: CertBundle, rotate_fraction: float = ROTATE_FRACTION) -> datetime.datetime:
    """The first moment `renew` could act on the bundle: a certificate it holds reaching its
    rotation point, or a trusted one expiring."""
    parsed = _parse(bundle)
    moments = [_rotation_point(parsed.ca.cert, rotate_fraction)]
    moments.append(_rotation_point(parsed.serving.cert, rotate_fraction))
    moments.extend(cert.not_valid_after_utc for cert in parsed.trusted)
    return min(moments)


def inspect(cert_pem: bytes, key_pem: bytes) -> datetime.datetime | None:
    """The end of validity of the certificate when `key_pem` is its private key, else None."""
    return not_after(cert_pem) if key_matches_cert(cert_pem, key_pem) else None


def bundle_from_secret_data(data: dict[str, str]) -> CertBundle | None:
    """The bundle stored by `secret_data`, or None when a key is missing or anything in it does not
    decode, parse or match (a CA key that is not the CA certificate's)."""
    try:
        bundle = decoded_secret_data(data)
        _parse(bundle)
    except (KeyError, ValueError):
        return None
    return bundle


def not_after(cert_pem: bytes) -> datetime.datetime:
    """The (timezone-aware) end of validity of the first certificate in `cert_pem`."""
    return x509.load_pem_x509_certificate(cert_pem).not_valid_after_utc


def key_matches_cert(cert_pem: bytes, key_pem: bytes) -> bool:
    """Whether `key_pem` is the private key of the first certificate in `cert_pem` (any key type);
    False when either does not parse."""
    try:
        key = serialization.load_pem_private_key(key_pem, password=None)
        cert = x509.load_pem_x509_certificate(cert_pem)
    except (ValueError, TypeError, UnsupportedAlgorithm):
        return False
    return key.public_key() == cert.public_key()


@dataclass(frozen=True)
class _KeyPair:
    cert: x509.Certificate
    key: ec.EllipticCurvePrivateKey


@dataclass(frozen=True)
class _ParsedBundle:
    ca: _KeyPair
    serving: _KeyPair
    trusted: list[x509.Certificate]


@dataclass(frozen=True)
class _SubjectNames:
    dns: tuple[str, ...]
    ips: tuple[AnyIPAddress, ...]

    @classmethod
    def of(
        cls, dns_names: Iterable[str], ip_addresses: Iterable[str | AnyIPAddress]
    ) -> _SubjectNames:
        names = cls(
            tuple(dict.fromkeys(dns_names)),
            tuple(dict.fromkeys(ipaddress.ip_address(str(ip)) for ip in ip_addresses)),
        )
        if not names.dns and not names.ips:
            raise ValueError("a serving certificate needs at least one DNS name or IP address")
        return names

    @classmethod
    def in_cert(cls, cert: x509.Certificate) -> _SubjectNames:
        try:
            san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        except x509.ExtensionNotFound:
            return cls((), ())
        return cls(tuple(san.get_values_for_type(x509.DNSName)), _ips_in(san))

    @property
    def common_name(self) -> str:
        return self.dns[0] if self.dns else str(self.ips[0])

    def same_as(self, other: _SubjectNames) -> bool:
        return set(self.dns) == set(other.dns) and set(self.ips) == set(other.ips)

    def extension(self) -> x509.SubjectAlternativeName:
        dns: list[x509.GeneralName] = [x509.DNSName(name) for name in self.dns]
        ips: list[x509.GeneralName] = [x509.IPAddress(ip) for ip in self.ips]
        return x509.SubjectAlternativeName(dns + ips)


def _ips_in(san: x509.SubjectAlternativeName) -> tuple[AnyIPAddress, ...]:
    # Networks are legal in an IPAddress SAN (for name constraints) but never in ours.
    values = san.get_values_for_type(x509.IPAddress)
    return tuple(
        ip for ip in values if isinstance(ip, ipaddress.IPv4Address | ipaddress.IPv6Address)
    )


def _new_ca(now: datetime.datetime, validity: datetime.timedelta) -> _KeyPair:
    key = ec.generate_private_key(ec.SECP256R1())
    # A distinct name per CA, so that the old and the new CA in one bundle are told apart by name
    # (by people, and by TLS stacks that look issuers up by subject alone).
    name = _name(f"{CA_NAME_PREFIX}@{int(now.timestamp())}")
    cert = (
        _builder(name, name, key.public_key(), now, now + validity)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(key_usage(cert_sign=True), critical=True)
        .sign(key, hashes.SHA256())
    )
    return _KeyPair(cert, key)


def _issue_serving(
    ca: _KeyPair, names: _SubjectNames, now: datetime.datetime, validity: datetime.timedelta
) -> _KeyPair:
    key = ec.generate_private_key(ec.SECP256R1())
    # Never outlives its CA: a chain is only as valid as its shortest-lived link.
    end = min(now + validity, ca.cert.not_valid_after_utc)
    ca_key_id = ca.cert.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value
    cert = (
        _builder(_name(names.common_name), ca.cert.subject, key.public_key(), now, end)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(key_usage(cert_sign=False), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(names.extension(), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ca_key_id),
            critical=False,
        )
        .sign(ca.key, hashes.SHA256())
    )
    return _KeyPair(cert, key)


def _builder(
    subject: x509.Name,
    issuer: x509.Name,
    public_key: ec.EllipticCurvePublicKey,
    now: datetime.datetime,
    end: datetime.datetime,
) -> x509.CertificateBuilder:
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - BACKDATE)
        .not_valid_after(end)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(public_key), critical=False)
    )


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def key_usage(*, cert_sign: bool) -> x509.KeyUsage:
    """Digital signature, and for a CA certificate and CRL signing too."""
    return x509.KeyUsage(
        digital_signature=True,
        content_commitment=False,
        key_encipherment=False,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=cert_sign,
        crl_sign=cert_sign,
        encipher_only=False,
        decipher_only=False,
    )


def _nearly_expired(cert: x509.Certificate, now: datetime.datetime, fraction: float) -> bool:
    return now > _rotation_point(cert, fraction)


def _rotation_point(cert: x509.Certificate, fraction: float) -> datetime.datetime:
    """When the certificate has `fraction` of its lifetime left."""
    lifetime = cert.not_valid_after_utc - cert.not_valid_before_utc
    return cert.not_valid_after_utc - lifetime * fraction


def _serving_cert_outdated(
    bundle: _ParsedBundle, wanted: _SubjectNames, now: datetime.datetime, fraction: float
) -> bool:
    serving = bundle.serving
    return (
        _nearly_expired(serving.cert, now, fraction)
        or not _SubjectNames.in_cert(serving.cert).same_as(wanted)
        or not _issued_by(serving.cert, bundle.ca.cert)
        or not _belongs_to(serving.key, serving.cert)
    )


def _issued_by(cert: x509.Certificate, ca: x509.Certificate) -> bool:
    try:
        cert.verify_directly_issued_by(ca)
    except (ValueError, TypeError, InvalidSignature):
        return False
    return True


def _belongs_to(key: ec.EllipticCurvePrivateKey, cert: x509.Certificate) -> bool:
    return key.public_key() == cert.public_key()


def _still_valid(
    certs: Iterable[x509.Certificate], now: datetime.datetime
) -> list[x509.Certificate]:
    return [cert for cert in certs if cert.not_valid_after_utc > now]


def _unique(certs: Iterable[x509.Certificate]) -> list[x509.Certificate]:
    # Certificates compare equal when their DER encodings do.
    return list(dict.fromkeys(certs))


def _to_bundle(ca: _KeyPair, serving: _KeyPair, trusted: Iterable[x509.Certificate]) -> CertBundle:
    return CertBundle(
        ca_cert_pem=_certs_pem([ca.cert]),
        ca_key_pem=_key_pem(ca.key),
        cert_pem=_certs_pem([serving.cert]),
        key_pem=_key_pem(serving.key),
        ca_bundle_pem=_certs_pem(_unique(trusted)),
    )


def _parse(bundle: CertBundle) -> _ParsedBundle:
    """Raises ValueError for anything that does not parse, and for a CA key that is not the CA
    certificate's: without it no new certificate can be signed."""
    try:
        ca = _KeyPair(_load_cert(bundle.ca_cert_pem), _load_key(bundle.ca_key_pem))
        serving = _KeyPair(_load_cert(bundle.cert_pem), _load_key(bundle.key_pem))
        trusted = x509.load_pem_x509_certificates(bundle.ca_bundle_pem)
    except (TypeError, UnsupportedAlgorithm) as error:
        raise ValueError(f"unusable certificate bundle: {error}") from error
    if not _belongs_to(ca.key, ca.cert):
        raise ValueError("the CA key does not belong to the CA certificate")
    return _ParsedBundle(ca, serving, trusted)


def _load_cert(pem: bytes) -> x509.Certificate:
    return x509.load_pem_x509_certificate(pem)


def _load_key(pem: bytes) -> ec.EllipticCurvePrivateKey:
    key = serialization.load_pem_private_key(pem, password=None)
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        raise ValueError(f"expected an EC private key, got {type(key).__name__}")
    return key


def _certs_pem(certs: Iterable[x509.Certificate]) -> bytes:
    return b"".join(cert.public_bytes(serialization.Encoding.PEM) for cert in certs)


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _aware(now: datetime.datetime) -> datetime.datetime:
    if now.tzinfo is None:
        raise ValueError("`now` must be timezone-aware")
    return now
