"""The webhook's certificate work in a child process: the same answers as the pure functions, the
child's ValueError raised in the parent, and cryptography never imported by the serving process."""

from __future__ import annotations

import datetime
import subprocess
import sys

import pytest

from torchjob.webhook.certificates import process as certificate_process
from torchjob.webhook.certificates.bundle import (
    CA_VALIDITY,
    CERT_VALIDITY,
    ROTATE_FRACTION,
    secret_data,
)
from torchjob.webhook.certificates.pki import new_bundle, not_after, recheck_at

NOW = datetime.datetime(2030, 1, 1, tzinfo=datetime.UTC)
DNS_NAMES = ("torchjob-webhook.torchjob.svc",)
IPS = ("127.0.0.1",)
VALIDITIES = (CA_VALIDITY, CERT_VALIDITY)


async def test_settle_in_a_child_keeps_a_good_bundle() -> None:
    bundle = new_bundle(DNS_NAMES, IPS, NOW)

    settled = await certificate_process.settle(
        secret_data(bundle), DNS_NAMES, IPS, NOW, VALIDITIES, ROTATE_FRACTION
    )

    assert (settled.bundle, settled.changed) == (bundle, False)
    assert settled.recheck_at == recheck_at(bundle)
    assert settled.not_after == not_after(bundle.cert_pem)


async def test_settle_in_a_child_makes_a_bundle_for_garbled_data() -> None:
    settled = await certificate_process.settle(
        {"tls.crt": "not base64!"}, DNS_NAMES, IPS, NOW, VALIDITIES, ROTATE_FRACTION
    )

    assert settled.changed
    assert settled.not_after == not_after(settled.bundle.cert_pem)
    assert settled.recheck_at == recheck_at(settled.bundle)


async def test_a_value_error_in_the_child_is_raised_in_the_parent() -> None:
    with pytest.raises(ValueError, match="at least one DNS name"):
        await certificate_process.settle(None, (), (), NOW, VALIDITIES, ROTATE_FRACTION)


async def test_inspect_in_a_child() -> None:
    first, second = new_bundle(DNS_NAMES, IPS, NOW), new_bundle(DNS_NAMES, IPS, NOW)

    assert await certificate_process.inspect(first.cert_pem, first.key_pem) == not_after(
        first.cert_pem
    )
    assert await certificate_process.inspect(first.cert_pem, second.key_pem) is None


def test_the_serving_process_does_not_import_cryptography() -> None:
    probe = (
        "import sys, torchjob.webhook.__main__; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'cryptography'))"
    )
    imported = subprocess.run(
        [sys.executable, "-c", probe], check=True, capture_output=True, text=True
    ).stdout
    assert imported.strip() == "[]"
