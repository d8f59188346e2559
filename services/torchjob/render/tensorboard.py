"""The Deployment and the ClusterIP Service of a job's TensorBoard. Pure.

Every log source is a directory on a PersistentVolumeClaim: `t9k://pvc/<claim>/<subpath>` in
`trainingLogFilesets`, or `logDir.pvc[{name, subPath[]}]`. Each claim is mounted read-only once,
at `/logs/<claim>`, however many of its directories are read; one source is passed to TensorBoard
as `--logdir`, several as `--logdir_spec name:path,...`. The pod meets the `restricted` Pod
Security Standard: it runs as an unprivileged user with no capabilities and a read-only root.
"""

from __future__ import annotations

import hashlib
import posixpath
from dataclasses import dataclass
from typing import Any

import orjson

from torchjob.api import constants
from torchjob.api.jsoncopy import json_copy
from torchjob.api.types import TensorBoardSpec
from torchjob.render.replica_objects import owner_reference

NAME_SUFFIX = "-tensorboard"
CONTAINER_NAME = "tensorboard"
PORT = 6006
PORT_NAME = "http"
LOG_ROOT = "/logs"
# nobody: TensorBoard images commonly run as root, which `restricted` forbids.
RUN_AS = 65534


@dataclass(frozen=True, slots=True)
class LogSource:
    """A directory to read: `subpath` inside claim `claim` ("" for the whole claim)."""

    claim: str
    subpath: str

    @property
    def path(self) -> str:
        return posixpath.join(LOG_ROOT, self.claim, self.subpath).rstrip("/")

    @property
    def run_name(self) -> str:
        # `--logdir_spec` splits entries on ',' and a name from its path on the first ':'.
        name = posixpath.join(self.claim, self.subpath).rstrip("/")
        return name.replace(",", "_").replace(":", "_")


def _clean_subpath(subpath: str) -> str:
    """Relative to its claim; never above it (validation refuses `..`, this is the backstop)."""
    parts = [p for p in posixpath.normpath("/" + subpath).split("/") if p and p != ".."]
    return "/".join(parts)


def log_sources(spec: TensorBoardSpec) -> list[LogSource]:
    """Filesets first, then logDir.pvc, in the order written, each directory once."""
    sources: list[LogSource] = []
    for fileset in spec.training_log_filesets or []:
        if not fileset.startswith(constants.T9K_PVC_PREFIX):
            continue  # validation refuses other schemes
        claim, _, subpath = fileset.removeprefix(constants.T9K_PVC_PREFIX).partition("/")
        if claim:
            sources.append(LogSource(claim, _clean_subpath(subpath)))
    for pvc in (spec.log_dir.pvc if spec.log_dir else None) or []:
        if not pvc.name:
            continue
        for subpath in pvc.sub_path or [""]:
            sources.append(LogSource(pvc.name, _clean_subpath(subpath)))
    return list(dict.fromkeys(sources))


def tensorboard_name(job_name: str) -> str:
    """`<job>-tensorboard`; a name too long for a Service is shortened with a hash of it, so two
    long job names sharing a prefix still get different TensorBoards."""
    name = job_name + NAME_SUFFIX
    if len(name) <= constants.DNS_LABEL_MAX:
        return name
    digest = hashlib.sha256(job_name.encode()).hexdigest()[:8]
    room = constants.DNS_LABEL_MAX - len(NAME_SUFFIX) - len(digest) - 1
    return f"{job_name[:room].rstrip('-.')}-{digest}{NAME_SUFFIX}"


def tensorboard_labels(job_name: str) -> dict[str, str]:
    return {constants.LABEL_TENSORBOARD: job_name}


def tensorboard_url(job_meta: dict[str, Any]) -> str:
    """The Service's in-cluster URL."""
    return f"http://{tensorboard_name(job_meta['name'])}.{job_meta['namespace']}.svc:{PORT}/"


def tensorboard_args(sources: list[LogSource]) -> list[str]:
    if len(sources) == 1:
        logs = ["--logdir", sources[0].path]
    elif sources:
        logs = ["--logdir_spec", ",".join(f"{s.run_name}:{s.path}" for s in sources)]
    else:
        logs = ["--logdir", LOG_ROOT]
    return [*logs, "--host", "0.0.0.0", "--port", str(PORT)]


def _volumes(sources: list[LogSource]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    claims = list(dict.fromkeys(s.claim for s in sources))
    volumes: list[dict[str, Any]] = [{"name": "tmp", "emptyDir": {}}]
    mounts: list[dict[str, Any]] = [{"name": "tmp", "mountPath": "/tmp"}]
    for index, claim in enumerate(claims):
        name = f"logs-{index}"
        volumes.append(
            {"name": name, "persistentVolumeClaim": {"claimName": claim, "readOnly": True}}
        )
        mounts.append(
            {"name": name, "mountPath": posixpath.join(LOG_ROOT, claim), "readOnly": True}
        )
    return volumes, mounts


def _pod_template(job_name: str, spec: TensorBoardSpec) -> dict[str, Any]:
    sources = log_sources(spec)
    volumes, mounts = _volumes(sources)
    container: dict[str, Any] = {
        "name": CONTAINER_NAME,
        "image": spec.image or "",
        "command": ["tensorboard"],
        "args": tensorboard_args(sources),
        # TensorBoard writes its run info under the temp dir and caches under HOME.
        "env": [{"name": "HOME", "value": "/tmp"}],
        "ports": [{"name": PORT_NAME, "containerPort": PORT, "protocol": "TCP"}],
        "readinessProbe": {
            "httpGet": {"path": "/", "port": PORT_NAME},
            "periodSeconds": 10,
        },
        "volumeMounts": mounts,
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"]},
            "readOnlyRootFilesystem": True,
            "runAsNonRoot": True,
        },
    }
    if spec.resources:
        container["resources"] = json_copy(spec.resources)
    return {
        "metadata": {"labels": tensorboard_labels(job_name)},
        "spec": {
            "containers": [container],
            "volumes": volumes,
            "automountServiceAccountToken": False,
            "enableServiceLinks": False,
            "securityContext": {
                "runAsNonRoot": True,
                "runAsUser": RUN_AS,
                "runAsGroup": RUN_AS,
                "seccompProfile": {"type": "RuntimeDefault"},
            },
        },
    }


def _metadata(job_meta: dict[str, Any]) -> dict[str, Any]:
    return {
        "name": tensorboard_name(job_meta["name"]),
        "namespace": job_meta["namespace"],
        "labels": tensorboard_labels(job_meta["name"]),
        "ownerReferences": [owner_reference(job_meta)],
    }


def _with_hash(obj: dict[str, Any]) -> dict[str, Any]:
    digest = hashlib.sha256(orjson.dumps(obj, option=orjson.OPT_SORT_KEYS)).hexdigest()[:16]
    obj["metadata"]["annotations"] = {constants.ANNOTATION_SPEC_HASH: digest}
    return obj


def render_deployment(job_meta: dict[str, Any], spec: TensorBoardSpec) -> dict[str, Any]:
    """One replica; Recreate, so the old pod lets go of a ReadWriteOnce claim before the new one
    needs it."""
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": _metadata(job_meta),
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": tensorboard_labels(job_meta["name"])},
            "strategy": {"type": "Recreate"},
            "revisionHistoryLimit": 1,  # a roll leaves one old ReplicaSet, not ten
            "template": _pod_template(job_meta["name"], spec),
        },
    }
    return _with_hash(deployment)


def render_service(job_meta: dict[str, Any]) -> dict[str, Any]:
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _metadata(job_meta),
        "spec": {
            "type": "ClusterIP",
            "selector": tensorboard_labels(job_meta["name"]),
            "ports": [
                {"name": PORT_NAME, "port": PORT, "targetPort": PORT_NAME, "protocol": "TCP"}
            ],
        },
    }
    return _with_hash(service)


def spec_hash(obj: dict[str, Any] | None) -> str | None:
    """The hash a rendered (or observed) TensorBoard object carries."""
    if obj is None:
        return None
    annotations = (obj.get("metadata") or {}).get("annotations") or {}
    value = annotations.get(constants.ANNOTATION_SPEC_HASH)
    return value if isinstance(value, str) else None
