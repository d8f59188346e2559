"""Pods a test creates itself, of no job's making (the reconciler's own come from
`torchjob.render.replica_objects.render_pod`)."""

from __future__ import annotations

from typing import Any


def bare_pod(
    name: str,
    *,
    labels: dict[str, str] | None = None,
    node: str | None = None,
    container: str = "pytorch",
    image: str = "trainer:1",
) -> dict[str, Any]:
    """A pod with one container: bound to `node` (a test kubelet's) when one is named, else
    left Pending, as no scheduler runs beside the control plane."""
    metadata: dict[str, Any] = {"name": name}
    if labels:
        metadata["labels"] = labels
    spec: dict[str, Any] = {"containers": [{"name": container, "image": image}]}
    if node:
        spec["nodeName"] = node
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}
