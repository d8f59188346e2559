"""Kueue's visibility API (an aggregated API of Kueue's manager, v0.15 and later): the pending
Workloads of a LocalQueue, with their positions. Read with the caller's own client, so as the
user in the console and the CLI; a cluster without it answers 404 (NotFound), a user without
the right 403 (Forbidden), an API that does not answer 503."""

from __future__ import annotations

from typing import Any

from torchjob.kube.client import KubeClient
from torchjob.kube.errors import KubeError
from torchjob.kube.informer import path_segment

VISIBILITY_API = "/apis/visibility.kueue.x-k8s.io/v1beta2"


async def pending_workloads(
    client: KubeClient, namespace: str, queue: str
) -> tuple[dict[str, Any] | None, str]:
    """The LocalQueue's PendingWorkloadsSummary; None and why, when it could not be read."""
    path = (
        f"{VISIBILITY_API}/namespaces/{path_segment(namespace)}/localqueues/"
        f"{path_segment(queue)}/pendingworkloads"
    )
    try:
        answer: dict[str, Any] = await client.request_json("GET", path)
    except KubeError as error:
        return None, f"Kueue's visibility API: {error}"
    return answer, ""
