"""What a reporter in a job's pod has, on the test control plane: the CA the progress endpoint is
verified with (the webhook's own, from its Secret) and a token bound to the pod with the job's
audience, minted by the apiserver (TokenRequest) as the kubelet's projected volume gets one."""

from __future__ import annotations

import base64
import json
from typing import Any

from support.controlplane import ControlPlane
from support.operator import SYSTEM_NAMESPACE, webhook_secret
from torchjob.kube.client import KubeClient


def endpoint_ca(control_plane: ControlPlane) -> bytes:
    """The PEM of the CA that signed the webhook's serving certificate (and so the endpoint's)."""
    secret = json.loads(
        control_plane.kubectl(
            "get", "secret", webhook_secret(), "-n", SYSTEM_NAMESPACE, "-o", "json"
        ).stdout
    )
    return base64.b64decode(secret["data"]["ca-bundle.crt"])


async def pod_token(
    api: KubeClient, namespace: str, pod: Any, audience: str, seconds: int = 600
) -> str:
    """A token of the namespace's default ServiceAccount bound to `pod` (its name and uid)."""
    request = {
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "TokenRequest",
        "spec": {
            "audiences": [audience],
            "expirationSeconds": seconds,
            "boundObjectRef": {
                "kind": "Pod",
                "apiVersion": "v1",
                "name": pod.metadata.name,
                "uid": pod.metadata.uid,
            },
        },
    }
    path = f"/api/v1/namespaces/{namespace}/serviceaccounts/default/token"
    answer = await api.request_json("POST", path, body=request)
    return str(answer["status"]["token"])
