"""What a replica's pod gets so that its training processes can report progress (api/progress.py):
the projected volume holding a token whose audience names the job and the endpoint's CA
certificate, its mount and the three variables in each training container, and the pod
annotation the certificate is read from. Pure.

Every replica pod of a job gets the same parts, so they are made once per job and endpoint
(`progress_parts`) and shared: the rewritten pods and their patches hold them, and nothing changes
them.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Final

from torchjob.api.progress import (
    ANNOTATION_PROGRESS_CA,
    CA_FILE,
    ENV_CA_CERT,
    ENV_TOKEN,
    ENV_URL,
    MOUNT_PATH,
    TOKEN_EXPIRATION_SECONDS,
    TOKEN_FILE,
    VOLUME_NAME,
    JobRef,
    ProgressEndpoint,
)

EnvVar = dict[str, Any]
# The downward API's path to the CA annotation, in the bracket form the kubelet accepts for a key
# holding a '/'.
CA_FIELD_PATH: Final = f"metadata.annotations['{ANNOTATION_PROGRESS_CA}']"
# JSONPatch path of the annotation: '/' in a key is written '~1' (RFC 6901).
CA_ANNOTATION_PATH: Final = "/metadata/annotations/" + ANNOTATION_PROGRESS_CA.replace("/", "~1")


@dataclass(frozen=True, slots=True)
class ProgressParts:
    """What every replica pod of one job gets for one endpoint."""

    ca_pem: str
    volume: dict[str, Any]
    mount: dict[str, Any]
    env: list[EnvVar]


@functools.lru_cache(maxsize=512)
def progress_parts(job: JobRef, endpoint: ProgressEndpoint) -> ProgressParts:
    """The volume, mount and variables of `job`'s pods reporting to `endpoint` (made once for
    every replica pod of a job, since each asks for them)."""
    token = {
        "audience": job.audience,
        "expirationSeconds": TOKEN_EXPIRATION_SECONDS,
        "path": TOKEN_FILE,
    }
    ca = {"items": [{"path": CA_FILE, "fieldRef": {"fieldPath": CA_FIELD_PATH}}]}
    volume = {
        "name": VOLUME_NAME,
        "projected": {"sources": [{"serviceAccountToken": token}, {"downwardAPI": ca}]},
    }
    env = [
        {"name": ENV_URL, "value": endpoint.url(job)},
        {"name": ENV_CA_CERT, "value": f"{MOUNT_PATH}/{CA_FILE}"},
        {"name": ENV_TOKEN, "value": f"{MOUNT_PATH}/{TOKEN_FILE}"},
    ]
    mount = {"name": VOLUME_NAME, "mountPath": MOUNT_PATH, "readOnly": True}
    return ProgressParts(endpoint.ca_pem, volume, mount, env)


def add_progress(
    parts: ProgressParts,
    pod: dict[str, Any],
    containers: Iterable[dict[str, Any]],
    merge_env: Callable[[dict[str, Any], list[EnvVar]], None],
) -> None:
    """Give `containers` (copies the rewrite owns, in `pod`'s own copied spec) what reporting
    needs: the volume in the pod, the mount and, through `merge_env`, the variables in each, and
    the CA annotation on `pod`. Idempotent: a part already there is not added again."""
    pod_spec = pod["spec"]
    volumes = pod_spec.get("volumes") or []
    present = next((v for v in volumes if v.get("name") == VOLUME_NAME), None)
    if present is not None and present != parts.volume:
        # The user's own volume of that name: a second one would be refused by the apiserver,
        # and theirs holds no token for this job, so the pod reports nothing.
        return
    chosen = [c for c in containers if _mount_free(c, parts.mount)]
    if not chosen:
        return
    if present is None:
        pod_spec["volumes"] = [*volumes, parts.volume]
    for container in chosen:
        mounts = container.get("volumeMounts") or []
        if parts.mount not in mounts:
            container["volumeMounts"] = [*mounts, parts.mount]
        merge_env(container, parts.env)
    metadata = pod.get("metadata") or {}
    annotations = metadata.get("annotations") or {}
    if annotations.get(ANNOTATION_PROGRESS_CA) != parts.ca_pem:
        annotations = {**annotations, ANNOTATION_PROGRESS_CA: parts.ca_pem}
        pod["metadata"] = {**metadata, "annotations": annotations}


def _mount_free(container: dict[str, Any], mount: dict[str, Any]) -> bool:
    """Whether `container` can take the mount: it has it already, or nothing of its own is
    mounted at that path. A container that mounts something else there keeps it and reports
    nothing (two mounts at one path are refused by the apiserver)."""
    for own in container.get("volumeMounts") or []:
        if own == mount:
            return True
        if str(own.get("mountPath", "")).rstrip("/") == MOUNT_PATH:
            return False
    return True


def annotation_patch(before: dict[str, Any], after: dict[str, Any]) -> list[dict[str, Any]]:
    """The JSONPatch operation (against `before`) that sets `after`'s CA annotation, if any."""
    value = ((after.get("metadata") or {}).get("annotations") or {}).get(ANNOTATION_PROGRESS_CA)
    metadata = before.get("metadata") or {}
    annotations = metadata.get("annotations")
    if value is None or (annotations or {}).get(ANNOTATION_PROGRESS_CA) == value:
        return []
    if not metadata:
        return [
            {
                "op": "add",
                "path": "/metadata",
                "value": {"annotations": {ANNOTATION_PROGRESS_CA: value}},
            }
        ]
    if annotations is None:
        return [
            {"op": "add", "path": "/metadata/annotations", "value": {ANNOTATION_PROGRESS_CA: value}}
        ]
    # `add` on an object's member sets it, whether or not it was there (RFC 6902).
    return [{"op": "add", "path": CA_ANNOTATION_PATH, "value": value}]
