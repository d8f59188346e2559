"""`status.tensorboard` read off the TensorBoard's Deployment, Service and pods. Pure."""

from __future__ import annotations

from typing import Any

from torchjob.render.tensorboard import spec_hash, tensorboard_url

FIELDS = ("ready", "url", "reason", "message")
# What picks the TensorBoard's pods, which the spec hash does not cover: a tenant who may edit
# the Service could point it at a pod of their own. Each is put back when it differs.
PICKING_FIELDS = {
    "Service": (("spec", "selector"),),
    "Deployment": (("spec", "selector"), ("spec", "template", "metadata", "labels")),
}


def tensorboard_status(
    job_meta: dict[str, Any],
    desired_hash: str | None,
    deployment: dict[str, Any] | None,
    service: dict[str, Any] | None,
    pods: list[dict[str, Any]],
) -> dict[str, Any]:
    """Ready once the Deployment's current revision has a ready pod and the Service exists;
    otherwise a reason and a message. Every field is present (None when it does not apply), so a
    JSON merge patch of it also clears what no longer applies."""
    url = tensorboard_url(job_meta) if service is not None else None
    reason, message = _why_not_ready(desired_hash, deployment, service, pods)
    if reason is None:
        return {"ready": True, "url": url, "reason": None, "message": None}
    return {"ready": False, "url": url, "reason": reason, "message": message}


def drifted_fields(desired: dict[str, Any], current: dict[str, Any]) -> list[str]:
    """The fields that pick the object's pods and differ from what is rendered, as dotted paths."""
    return [
        ".".join(path)
        for path in PICKING_FIELDS.get(str(desired.get("kind")), ())
        if _at(current, path) != _at(desired, path)
    ]


def _at(obj: dict[str, Any], path: tuple[str, ...]) -> Any:
    for key in path:
        obj = obj.get(key) or {} if isinstance(obj, dict) else {}
    return obj or None


def failed_status(message: str) -> dict[str, Any]:
    """The apiserver refused the rendered TensorBoard (an invalid resources field, say)."""
    return {"ready": False, "url": None, "reason": "InvalidSpec", "message": message}


def stored_form(status: dict[str, Any] | None) -> dict[str, Any] | None:
    """What the apiserver keeps of a merge-patched status.tensorboard (nulls are dropped)."""
    if status is None:
        return None
    return {k: v for k, v in status.items() if v is not None}


def _why_not_ready(
    desired_hash: str | None,
    deployment: dict[str, Any] | None,
    service: dict[str, Any] | None,
    pods: list[dict[str, Any]],
) -> tuple[str | None, str]:
    if deployment is None or service is None:
        return "Creating", "creating the TensorBoard's Deployment and Service"
    generation = int((deployment.get("metadata") or {}).get("generation") or 0)
    status = deployment.get("status") or {}
    if spec_hash(deployment) != desired_hash or int(status.get("observedGeneration") or 0) < (
        generation
    ):
        return "Updating", "rolling out the TensorBoard for the changed tensorboardSpec"
    if int(status.get("readyReplicas") or 0) >= 1 and int(status.get("updatedReplicas") or 0) >= 1:
        return None, ""
    live = [p for p in pods if not (p.get("metadata") or {}).get("deletionTimestamp")]
    if live:
        newest = max(live, key=lambda p: str((p.get("metadata") or {}).get("creationTimestamp")))
        return _pod_problem(newest)
    for condition in status.get("conditions") or []:
        if condition.get("type") == "ReplicaFailure" and condition.get("status") == "True":
            return str(condition.get("reason") or "ReplicaFailure"), str(
                condition.get("message") or "the TensorBoard's pod could not be created"
            )
    return "Starting", "waiting for the TensorBoard's pod to be created"


def _pod_problem(pod: dict[str, Any]) -> tuple[str, str]:
    status = pod.get("status") or {}
    for container in status.get("containerStatuses") or []:
        waiting = (container.get("state") or {}).get("waiting")
        if isinstance(waiting, dict) and waiting.get("reason"):
            reason = str(waiting["reason"])
            return reason, str(
                waiting.get("message") or f"container {container.get('name')} is {reason}"
            )
        terminated = (container.get("state") or {}).get("terminated")
        if isinstance(terminated, dict):
            return "ContainerTerminated", (
                f"container {container.get('name')} exited with code {terminated.get('exitCode')}"
            )
    for condition in status.get("conditions") or []:
        if condition.get("type") == "PodScheduled" and condition.get("status") == "False":
            return str(condition.get("reason") or "Unschedulable"), str(
                condition.get("message") or "the TensorBoard's pod cannot be scheduled"
            )
    if (status.get("phase") or "Pending") == "Pending":
        return "PodPending", "the TensorBoard's pod is waiting to be scheduled and started"
    return "NotReady", "the TensorBoard's pod is running and not ready yet"
