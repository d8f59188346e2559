"""The webhook's PKI on a fake clock: what a new bundle contains, when renew() acts and what it
keeps, and the Secret encoding."""

from __future__ import annotations

import base64
import datetime
import ipaddress
import ssl
from collections.abc import Sequence
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509 import verification
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from torchjob.webhook.certificates.pki import (
    BACKDATE,
    CA_VALIDITY,
    CERT_VALIDITY,
    ROTATE_FRACTION,
    CertBundle,
    bundle_from_secret_data,
    inspect,
    key_matches_cert,
    new_bundle,
    not_after,
    recheck_at,
    renew,
    secret_data,
    settle,
)

NOW = datetime.datetime(2030, 1, 1, tzinfo=datetime.UTC)
SECOND = datetime.timedelta(seconds=1)
DAY = datetime.timedelta(days=1)
DNS_NAMES = ("torchjob-webhook.torchjob.svc", "torchjob-webhook.torchjob.svc.cluster.local")
IPS = ("127.0.0.1", "::1")


def cert(pem: bytes) -> x509.Certificate:
    return x509.load_pem_x509_certificate(pem)


def trusted(bundle: CertBundle) -> list[x509.Certificate]:
    return x509.load_pem_x509_certificates(bundle.ca_bundle_pem)


def rotate_point(pem: bytes) -> datetime.datetime:
    """The moment less than ROTATE_FRACTION of the certificate's lifetime is left."""
    parsed = cert(pem)
    lifetime = parsed.not_valid_after_utc - parsed.not_valid_before_utc
    return parsed.not_valid_after_utc - lifetime * ROTATE_FRACTION


def verify_server(
    bundle: CertBundle,
    name: x509.DNSName | x509.IPAddress,
    now: datetime.datetime,
    serving_pem: bytes | None = None,
) -> None:
    """Raises unless the serving certificate chains to a CA of the bundle, carries `name` and is
    for TLS servers (the verifier enforces the serverAuth extended key usage)."""
    verifier = (
        verification.PolicyBuilder()
        .store(verification.Store(trusted(bundle)))
        .time(now)
        .build_server_verifier(name)
    )
    verifier.verify(cert(serving_pem or bundle.cert_pem), [])


def renew_at(
    bundle: CertBundle,
    now: datetime.datetime,
    dns: Sequence[str] = DNS_NAMES,
    ips: Sequence[str] = IPS,
) -> CertBundle | None:
    return renew(bundle, dns, ips, now)


@pytest.fixture(scope="module")
def bundle() -> CertBundle:
    return new_bundle(DNS_NAMES, IPS, NOW)


@pytest.mark.parametrize(
    "name",
    [
        *(x509.DNSName(name) for name in DNS_NAMES),
        *(x509.IPAddress(ipaddress.ip_address(ip)) for ip in IPS),
    ],
    ids=lambda name: str(name.value),
)
def test_new_serving_cert_chains_to_the_ca_for_every_name(
    bundle: CertBundle, name: x509.DNSName | x509.IPAddress
) -> None:
    verify_server(bundle, name, NOW)


def test_new_serving_cert_is_refused_for_another_name(bundle: CertBundle) -> None:
    with pytest.raises(verification.VerificationError):
        verify_server(bundle, x509.DNSName("other.torchjob.svc"), NOW)


def test_new_ca_signs_certificates_and_the_serving_cert_serves(bundle: CertBundle) -> None:
    ca, serving = cert(bundle.ca_cert_pem), cert(bundle.cert_pem)
    constraints = ca.extensions.get_extension_for_class(x509.BasicConstraints)
    assert constraints.critical and constraints.value.ca
    assert ca.extensions.get_extension_for_class(x509.KeyUsage).value.key_cert_sign
    usages = serving.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(usages) == [ExtendedKeyUsageOID.SERVER_AUTH]
    common_name = serving.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value
    assert common_name == DNS_NAMES[0]
    for public_key in (ca.public_key(), serving.public_key()):
        assert isinstance(public_key, ec.EllipticCurvePublicKey)
        assert isinstance(public_key.curve, ec.SECP256R1)
    assert trusted(bundle) == [ca]


def test_new_bundle_has_the_default_lifetimes(bundle: CertBundle) -> None:
    assert not_after(bundle.ca_cert_pem) == NOW + CA_VALIDITY
    assert not_after(bundle.cert_pem) == NOW + CERT_VALIDITY


def test_serving_cert_never_outlives_its_ca() -> None:
    short_lived_ca = new_bundle(DNS_NAMES, IPS, NOW, ca_validity=datetime.timedelta(days=30))
    assert not_after(short_lived_ca.cert_pem) == not_after(short_lived_ca.ca_cert_pem)


def test_new_bundle_completes_a_tls_handshake(tmp_path: Path) -> None:
    # OpenSSL checks validity against the real clock, so this bundle is made at the real time.
    bundle = new_bundle(DNS_NAMES, IPS, datetime.datetime.now(datetime.UTC))
    server, client = tls_contexts(bundle, tmp_path)
    handshake(server, client, DNS_NAMES[1])


def tls_contexts(bundle: CertBundle, directory: Path) -> tuple[ssl.SSLContext, ssl.SSLContext]:
    cert_file, key_file = directory / "tls.crt", directory / "tls.key"
    cert_file.write_bytes(bundle.cert_pem)
    key_file.write_bytes(bundle.key_pem)
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server.load_cert_chain(cert_file, key_file)
    return server, ssl.create_default_context(cadata=bundle.ca_bundle_pem.decode())


def handshake(server: ssl.SSLContext, client: ssl.SSLContext, hostname: str) -> None:
    """A full TLS handshake in memory; raises ssl.SSLError if either side refuses the other."""
    to_server, to_client = ssl.MemoryBIO(), ssl.MemoryBIO()
    client_side = client.wrap_bio(to_client, to_server, server_hostname=hostname)
    server_side = server.wrap_bio(to_server, to_client, server_side=True)
    pending = [client_side, server_side]
    for _ in range(10):  # a handshake takes a few flights; more means something is stuck
        for side in list(pending):
            try:
                side.do_handshake()
                pending.remove(side)
            except ssl.SSLWantReadError:
                pass
        if not pending:
            return
    raise AssertionError("the TLS handshake did not finish")


def test_renew_leaves_a_fresh_bundle_alone(bundle: CertBundle) -> None:
    assert renew_at(bundle, NOW) is None
    assert renew_at(bundle, rotate_point(bundle.cert_pem) - SECOND) is None


def test_renew_ignores_the_order_of_names(bundle: CertBundle) -> None:
    assert renew_at(bundle, NOW, dns=DNS_NAMES[::-1], ips=IPS[::-1]) is None


def test_renew_reissues_the_serving_cert_at_the_rotate_point(bundle: CertBundle) -> None:
    when = rotate_point(bundle.cert_pem) + SECOND
    renewed = renew_at(bundle, when)
    assert renewed is not None
    assert renewed.cert_pem != bundle.cert_pem
    assert renewed.key_pem != bundle.key_pem
    assert (renewed.ca_cert_pem, renewed.ca_key_pem) == (bundle.ca_cert_pem, bundle.ca_key_pem)
    assert renewed.ca_bundle_pem == bundle.ca_bundle_pem
    assert not_after(renewed.cert_pem) == when + CERT_VALIDITY
    verify_server(renewed, x509.DNSName(DNS_NAMES[0]), when)
    assert renew_at(renewed, when) is None


@pytest.mark.parametrize(
    ("dns", "ips"),
    [
        ([*DNS_NAMES, "torchjob-webhook"], IPS),
        (DNS_NAMES[:1], IPS),
        (DNS_NAMES, IPS[:1]),
        (DNS_NAMES, [*IPS, "10.0.0.7"]),
    ],
    ids=["dns-added", "dns-removed", "ip-removed", "ip-added"],
)
def test_renew_reissues_the_serving_cert_for_changed_names(
    bundle: CertBundle, dns: Sequence[str], ips: Sequence[str]
) -> None:
    renewed = renew_at(bundle, NOW, dns=dns, ips=ips)
    assert renewed is not None
    assert renewed.ca_cert_pem == bundle.ca_cert_pem
    for name in dns:
        verify_server(renewed, x509.DNSName(name), NOW)
    for ip in ips:
        verify_server(renewed, x509.IPAddress(ipaddress.ip_address(ip)), NOW)
    assert renew_at(renewed, NOW, dns=dns, ips=ips) is None


def test_renew_reissues_a_serving_cert_from_another_ca(bundle: CertBundle) -> None:
    stranger = new_bundle(DNS_NAMES, IPS, NOW)
    mixed = CertBundle(
        bundle.ca_cert_pem,
        bundle.ca_key_pem,
        stranger.cert_pem,
        stranger.key_pem,
        bundle.ca_bundle_pem,
    )
    renewed = renew_at(mixed, NOW)
    assert renewed is not None
    assert renewed.ca_cert_pem == bundle.ca_cert_pem
    verify_server(renewed, x509.DNSName(DNS_NAMES[0]), NOW)


def test_renew_reissues_a_serving_cert_whose_key_does_not_match(bundle: CertBundle) -> None:
    other_key = new_bundle(DNS_NAMES, IPS, NOW).key_pem
    mismatched = CertBundle(
        bundle.ca_cert_pem, bundle.ca_key_pem, bundle.cert_pem, other_key, bundle.ca_bundle_pem
    )
    renewed = renew_at(mismatched, NOW)
    assert renewed is not None
    assert key_matches_cert(renewed.cert_pem, renewed.key_pem)


def test_ca_rotation_keeps_the_old_ca_trusted_until_it_expires(bundle: CertBundle) -> None:
    old_ca = cert(bundle.ca_cert_pem)
    rotation = rotate_point(bundle.ca_cert_pem) + SECOND
    # Renewing the serving cert on schedule up to there leaves one still signed by the old CA.
    before = renew_at(bundle, rotation - CERT_VALIDITY / 2) or bundle
    rotated = renew_at(before, rotation)
    assert rotated is not None
    new_ca = cert(rotated.ca_cert_pem)
    assert new_ca != old_ca
    assert trusted(rotated) == [new_ca, old_ca]
    name = x509.DNSName(DNS_NAMES[0])
    verify_server(rotated, name, rotation)
    verify_server(rotated, name, rotation, serving_pem=before.cert_pem)

    current = rotated
    for step in range(1, 50):  # month by month, past the old CA's end
        now = rotation + step * datetime.timedelta(days=30)
        current = renew_at(current, now) or current
        assert cert(current.ca_cert_pem) == new_ca
        assert (old_ca in trusted(current)) == (now < old_ca.not_valid_after_utc)
        verify_server(current, name, now)
    assert trusted(current) == [new_ca]


def test_renew_drops_an_expired_old_ca_even_when_nothing_else_is_due(bundle: CertBundle) -> None:
    rotation = rotate_point(bundle.ca_cert_pem) + SECOND
    rotated = renew_at(bundle, rotation)
    assert rotated is not None
    old_ca_end = not_after(bundle.ca_cert_pem)
    # A serving cert issued just before the old CA ends (for a changed name), so that just after
    # it ends only the trust bundle is out of date.
    fresh = renew_at(rotated, old_ca_end - SECOND, dns=DNS_NAMES[:1])
    assert fresh is not None and len(trusted(fresh)) == 2
    after_old_ca = old_ca_end + SECOND
    trimmed = renew_at(fresh, after_old_ca, dns=DNS_NAMES[:1])
    assert trimmed is not None
    assert trusted(trimmed) == [cert(rotated.ca_cert_pem)]
    assert trimmed.cert_pem == fresh.cert_pem
    assert renew_at(trimmed, after_old_ca, dns=DNS_NAMES[:1]) is None


def test_an_expired_ca_is_replaced_without_keeping_it(bundle: CertBundle) -> None:
    after_ca = not_after(bundle.ca_cert_pem) + SECOND
    renewed = renew_at(bundle, after_ca)
    assert renewed is not None
    assert trusted(renewed) == [cert(renewed.ca_cert_pem)]
    verify_server(renewed, x509.DNSName(DNS_NAMES[0]), after_ca)


def test_secret_data_round_trips(bundle: CertBundle) -> None:
    data = secret_data(bundle)
    assert set(data) == {"ca.crt", "ca.key", "tls.crt", "tls.key", "ca-bundle.crt"}
    assert base64.b64decode(data["tls.crt"]) == bundle.cert_pem
    assert bundle_from_secret_data(data) == bundle


def b64(content: bytes) -> str:
    return base64.b64encode(content).decode()


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("tls.key", None),
        ("ca.crt", "not base64!"),
        ("ca.crt", b64(b"-----BEGIN CERTIFICATE-----\ngarbage\n-----END CERTIFICATE-----\n")),
        ("tls.crt", b64(b"")),
        ("ca-bundle.crt", b64(b"no certificates here")),
        ("ca.key", b64(b"not a key")),
        ("ca.key", "other-ca-key"),
    ],
    ids=["missing", "not-base64", "bad-pem", "empty", "no-certs", "bad-key", "foreign-ca-key"],
)
def test_garbled_secret_data_gives_none(bundle: CertBundle, key: str, value: str | None) -> None:
    data = secret_data(bundle)
    if value is None:
        del data[key]
    elif value == "other-ca-key":
        data[key] = b64(new_bundle(DNS_NAMES, IPS, NOW).ca_key_pem)
    else:
        data[key] = value
    assert bundle_from_secret_data(data) is None


def test_empty_secret_data_gives_none() -> None:
    assert bundle_from_secret_data({}) is None


def test_key_matches_cert(bundle: CertBundle) -> None:
    assert key_matches_cert(bundle.cert_pem, bundle.key_pem)
    assert not key_matches_cert(bundle.cert_pem, bundle.ca_key_pem)
    assert not key_matches_cert(b"garbage", bundle.key_pem)


def test_naive_time_is_refused() -> None:
    with pytest.raises(ValueError, match="timezone-aware"):
        new_bundle(DNS_NAMES, IPS, datetime.datetime(2030, 1, 1))


def test_a_certificate_needs_a_name() -> None:
    with pytest.raises(ValueError, match="at least one"):
        new_bundle([], [], NOW)


# -- settle: what the Secret store decides ---------------------------------------------------------


def test_settle_makes_a_bundle_when_nothing_usable_is_stored() -> None:
    garbled = CertBundle(b"x", b"x", b"x", b"x", b"x")

    for stored in (None, garbled):
        settled = settle(stored, DNS_NAMES, IPS, NOW)

        assert settled.changed
        assert bundle_from_secret_data(secret_data(settled.bundle)) == settled.bundle


def test_settle_keeps_a_good_bundle_until_its_recheck_moment() -> None:
    bundle = new_bundle(DNS_NAMES, IPS, NOW)
    first = settle(bundle, DNS_NAMES, IPS, NOW)

    assert (first.bundle, first.changed) == (bundle, False)
    # The serving certificate's rotation point comes first: a third of its year left.
    assert first.recheck_at == not_after(bundle.cert_pem) - (CERT_VALIDITY + BACKDATE) / 3
    assert renew(bundle, DNS_NAMES, IPS, first.recheck_at - SECOND) is None
    assert renew(bundle, DNS_NAMES, IPS, first.recheck_at + SECOND) is not None

    later = settle(bundle, DNS_NAMES, IPS, first.recheck_at + SECOND)
    assert later.changed and later.bundle.cert_pem != bundle.cert_pem
    assert later.recheck_at > first.recheck_at


def test_recheck_comes_when_an_old_trusted_ca_expires() -> None:
    bundle = new_bundle(DNS_NAMES, IPS, NOW)
    rotated = renew(bundle, DNS_NAMES, IPS, not_after(bundle.ca_cert_pem) - 30 * DAY)
    assert rotated is not None and rotated.ca_bundle_pem.count(b"BEGIN CERTIFICATE") == 2

    moment = recheck_at(rotated)

    assert moment == not_after(bundle.ca_cert_pem)
    assert renew(rotated, DNS_NAMES, IPS, moment - SECOND) is None
    assert renew(rotated, DNS_NAMES, IPS, moment + SECOND) is not None


def test_settle_refuses_names_that_make_no_certificate() -> None:
    with pytest.raises(ValueError, match="at least one DNS name"):
        settle(None, (), (), NOW)


def test_inspect_gives_the_end_of_validity_only_for_a_matching_key() -> None:
    first, second = new_bundle(DNS_NAMES, IPS, NOW), new_bundle(DNS_NAMES, IPS, NOW)

    assert inspect(first.cert_pem, first.key_pem) == not_after(first.cert_pem)
    assert inspect(first.cert_pem, second.key_pem) is None
    assert inspect(b"garbage", first.key_pem) is None
