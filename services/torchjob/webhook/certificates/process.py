"""The webhook's certificate work, done in a short-lived child process.

Making, parsing and checking certificates needs `cryptography`, which costs a process about 10 MB
of resident memory from its import on (and more once it has made a key), for as long as the process
lives. The serving process needs it only at start and when a certificate is due, so it asks a
child, `python -m torchjob.webhook.certificates.process`, and never imports it itself. One JSON
request on the child's stdin, one JSON reply on its stdout:

- `settle`: the Secret's data (or null), the names and the validities -> the data to keep, whether
  it changed, when to look again and when the serving certificate expires (`pki.settle`);
- `inspect`: a certificate and key PEM -> when the certificate expires, or null when the key is
  not its own (`pki.inspect`).

A ValueError in the child (names that make no certificate) comes back as a ValueError.
"""

from __future__ import annotations

import asyncio
import datetime
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

import orjson

from torchjob.webhook.certificates.bundle import CertBundle, decoded_secret_data, secret_data

MODULE: Final = "torchjob.webhook.certificates.process"
# A child that takes longer is stuck: the work is a few milliseconds after its imports.
TIMEOUT_SECONDS: Final = 60.0


class CertificateProcessError(RuntimeError):
    """The child failed other than with a ValueError: it crashed, timed out or replied garbage."""


@dataclass(frozen=True)
class Settled:
    """`pki.Settled`, and the end of validity of the bundle's serving certificate."""

    bundle: CertBundle
    changed: bool
    recheck_at: datetime.datetime
    not_after: datetime.datetime


async def settle(
    stored_data: dict[str, str] | None,
    dns_names: Sequence[str],
    ip_addresses: Sequence[str],
    now: datetime.datetime,
    validities: tuple[datetime.timedelta, datetime.timedelta],
    rotate_fraction: float,
) -> Settled:
    """`pki.settle` of the bundle in a Secret's data, in a child process."""
    ca_validity, cert_validity = validities
    reply = await _ask(
        {
            "op": "settle",
            "stored": stored_data,
            "dns_names": list(dns_names),
            "ip_addresses": [str(ip) for ip in ip_addresses],
            "now": now.isoformat(),
            "ca_validity": ca_validity.total_seconds(),
            "cert_validity": cert_validity.total_seconds(),
            "rotate_fraction": rotate_fraction,
        }
    )
    return Settled(
        decoded_secret_data(reply["bundle"]),
        bool(reply["changed"]),
        datetime.datetime.fromisoformat(reply["recheck_at"]),
        datetime.datetime.fromisoformat(reply["not_after"]),
    )


async def inspect(cert_pem: bytes, key_pem: bytes) -> datetime.datetime | None:
    """`pki.inspect`, in a child process."""
    reply = await _ask({"op": "inspect", "cert": cert_pem.decode(), "key": key_pem.decode()})
    expires = reply["not_after"]
    return None if expires is None else datetime.datetime.fromisoformat(expires)


async def _ask(request: dict[str, Any]) -> dict[str, Any]:
    child = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        MODULE,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        out, err = await asyncio.wait_for(child.communicate(orjson.dumps(request)), TIMEOUT_SECONDS)
    except TimeoutError:
        child.kill()
        await child.wait()
        raise CertificateProcessError(f"no reply within {TIMEOUT_SECONDS:.0f}s") from None
    if child.returncode != 0:
        tail = err.decode(errors="replace").strip().splitlines()[-1:] or ["no output"]
        raise CertificateProcessError(f"exited with code {child.returncode}: {tail[0]}")
    try:
        reply: dict[str, Any] = orjson.loads(out)
    except orjson.JSONDecodeError as error:
        raise CertificateProcessError(f"unreadable reply: {error}") from error
    if "error" in reply:
        raise ValueError(reply["error"])
    return reply


# -- the child -----------------------------------------------------------------------------------


def _answer(request: dict[str, Any]) -> dict[str, Any]:
    # Imported here: the serving process imports this module for the functions above.
    from torchjob.webhook.certificates import pki

    if request["op"] == "inspect":
        expires = pki.inspect(request["cert"].encode(), request["key"].encode())
        return {"not_after": None if expires is None else expires.isoformat()}
    settled = pki.settle(
        _stored_bundle(request["stored"]),
        request["dns_names"],
        request["ip_addresses"],
        datetime.datetime.fromisoformat(request["now"]),
        datetime.timedelta(seconds=request["ca_validity"]),
        datetime.timedelta(seconds=request["cert_validity"]),
        request["rotate_fraction"],
    )
    return {
        "bundle": secret_data(settled.bundle),
        "changed": settled.changed,
        "recheck_at": settled.recheck_at.isoformat(),
        "not_after": pki.not_after(settled.bundle.cert_pem).isoformat(),
    }


def _stored_bundle(data: dict[str, str] | None) -> CertBundle | None:
    """What is stored, or None when a key is missing or a value is not base64 (a bundle whose PEMs
    do not parse is `settle`'s to find)."""
    if data is None:
        return None
    try:
        return decoded_secret_data(data)
    except (KeyError, ValueError):
        return None


def main() -> None:
    try:
        reply = _answer(orjson.loads(sys.stdin.buffer.read()))
    except ValueError as error:
        reply = {"error": str(error)}
    sys.stdout.buffer.write(orjson.dumps(reply))


if __name__ == "__main__":
    main()
