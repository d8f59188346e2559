"""Who a request acts as, and the client that acts as them: the user's own bearer token (token
mode), or the console's ServiceAccount impersonating the user a trusted proxy named (proxy mode).

The console has no credentials of its own that could read anything: in token mode its pod mounts
no token at all, and the apiserver's address and CA are all it keeps of its kubeconfig."""

from __future__ import annotations

import base64
from dataclasses import dataclass, field
from typing import Any

import orjson

from torchjob.kube.client import KubeClient
from torchjob.kube.credentials import Credentials, StaticToken, Token, in_cluster

SELF_SUBJECT_REVIEWS = "/apis/authentication.k8s.io/v1/selfsubjectreviews"
# A user's pages hold a few watches (a list, a job, its Events, a log) at once.
USER_CONNECTIONS = 8


@dataclass(frozen=True)
class Identity:
    """The user the apiserver knows: as its SelfSubjectReview says, or as the proxy named them."""

    username: str
    groups: tuple[str, ...] = ()
    uid: str = ""

    @property
    def service_account_namespace(self) -> str | None:
        """The namespace of a ServiceAccount user (system:serviceaccount:<ns>:<name>)."""
        parts = self.username.split(":")
        if len(parts) == 4 and parts[:2] == ["system", "serviceaccount"]:
            return parts[2]
        return None


@dataclass(frozen=True)
class ApiServer:
    """Where the apiserver is, the CA it is trusted by, and the console's own token (proxy mode
    only: it impersonates with it)."""

    server: Credentials
    own_token: Token = field(default_factory=lambda: StaticToken(None))

    def as_token_holder(self, token: str) -> KubeClient:
        """A client that sends `token` and nothing else of the console's."""
        credentials = Credentials(
            self.server.host,
            self.server.tls,
            StaticToken(token),
            server_name=self.server.server_name,
            proxy=self.server.proxy,
        )
        return KubeClient(credentials, max_connections=USER_CONNECTIONS)

    def impersonating(self, identity: Identity) -> KubeClient:
        """A client of the console's own token that acts as `identity` (Impersonate-*)."""
        credentials = Credentials(
            self.server.host,
            self.server.tls,
            self.own_token,
            server_name=self.server.server_name,
            proxy=self.server.proxy,
        )
        headers = [("Impersonate-User", identity.username)]
        headers += [("Impersonate-Group", group) for group in identity.groups]
        return KubeClient(credentials, max_connections=USER_CONNECTIONS, headers=headers)


def locate(kubeconfig: str | None, *, own_token: bool) -> ApiServer:
    """The apiserver of the kubeconfig (without its user's credentials), else of the pod; with
    the pod's or the kubeconfig's own token when `own_token` (proxy mode)."""
    if kubeconfig:
        from torchjob.kube import kubeconfig as kubeconfig_files

        server = kubeconfig_files.load_server(kubeconfig)
        token: Token = StaticToken(None)
        if own_token:
            token = kubeconfig_files.load_token(kubeconfig)
        return ApiServer(server, token)
    pod = in_cluster(with_token=own_token)
    return ApiServer(pod, pod.token)


async def review(client: KubeClient) -> Identity:
    """Who the client's credentials are, by a SelfSubjectReview (an Unauthorized error for a
    token the apiserver refuses)."""
    body = {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}
    answer = await client.request_json("POST", SELF_SUBJECT_REVIEWS, body=body)
    info = (answer.get("status") or {}).get("userInfo") or {}
    return Identity(
        username=str(info.get("username") or ""),
        groups=tuple(str(g) for g in info.get("groups") or ()),
        uid=str(info.get("uid") or ""),
    )


def token_expiry(token: str) -> float | None:
    """When a JWT says it expires (its `exp`, unchecked: the apiserver decides whether a token is
    valid; this only ends a session no later than its token); None for any other token."""
    parts = token.split(".")
    if len(parts) != 3:
        return None
    try:
        padded = parts[1] + "=" * (-len(parts[1]) % 4)
        claims: Any = orjson.loads(base64.urlsafe_b64decode(padded))
    except (ValueError, orjson.JSONDecodeError):
        return None
    expiry = claims.get("exp") if isinstance(claims, dict) else None
    return float(expiry) if isinstance(expiry, int | float) else None
