"""ServiceAccount tokens as a tenant could never make them: for tests of who may report progress."""

from __future__ import annotations

import base64
import json
import time

from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding, rsa


def _decode(part: str) -> bytes:
    return base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))


def _encode(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def expired_copy(token: str, signing_key_pem: bytes) -> str:
    """`token` with its times an hour in the past, signed again with the service-account key
    the apiserver trusts (RS256, as kube-apiserver signs): a token that was valid, and expired."""
    header, payload, _ = token.split(".")
    claims = json.loads(_decode(payload))
    now = int(time.time())
    claims.update(iat=now - 7200, nbf=now - 7200, exp=now - 3600)
    key = serialization.load_pem_private_key(signing_key_pem, password=None)
    assert isinstance(key, rsa.RSAPrivateKey), "kube-apiserver's key here is RSA"
    body = f"{header}.{_encode(json.dumps(claims).encode())}"
    signature = key.sign(body.encode(), padding.PKCS1v15(), hashes.SHA256())
    return f"{body}.{_encode(signature)}"
