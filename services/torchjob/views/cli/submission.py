"""A PyTorchTrainingJob from the flags of `torchjob submit` (Arena's `submit pytorch` and ours).
Pure: the flags come in as a `Submission`, the job manifest goes out as a plain dict; admission
(defaulting, validation) is the caller's, so the result is checked by the same rules as
`kubectl apply` and `torchjob run`.

The job has one replica spec, `worker`, of `workers` replicas; its replica 0 is the master (the
T9k convention for a job without a `master` type), so the same job runs with plain `python` and
with torchrun. Each replica's pod has one container, `python`, the training container.
"""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass
from typing import Any

from torchjob.api import constants, types
from torchjob.api.queries import GPU_RESOURCE, TRAINING_CONTAINER_NAME

REPLICA_TYPE = "worker"
DEFAULT_SYNC_IMAGE = "alpine/git:2.47.2"
DEFAULT_SYNC_DIR = "/workspace"
SYNC_CONTAINER = "git-sync"
SYNC_VOLUME = "code"
PYTHONS = ("python", "python3")
_TOLERATION = re.compile(r"^(?P<key>[^=:]+)(=(?P<value>[^:]*))?(:(?P<effect>[A-Za-z]+))?$")
TOLERATION_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")


class SubmissionError(ValueError):
    """A flag that cannot become part of a job; the message names the flag."""


@dataclass(frozen=True, slots=True)
class DataMount:
    """`--data claim:/mount/path`: a PersistentVolumeClaim mounted in every replica."""

    claim: str
    path: str

    @classmethod
    def parse(cls, text: str) -> DataMount:
        claim, sep, path = text.partition(":")
        if not sep or not claim or not path.startswith("/"):
            raise SubmissionError(
                f"--data {text!r}: write CLAIM:/mount/path (a PersistentVolumeClaim's name and "
                "an absolute path in the container)"
            )
        return cls(claim, posixpath.normpath(path))


@dataclass(frozen=True, slots=True)
class Submission:
    """What `torchjob submit` was given; None is "not given" (the API's default applies)."""

    name: str
    image: str
    command: tuple[str, ...] = ()
    namespace: str | None = None
    workers: int = 1
    gpus: int = 0
    cpu: str | None = None
    memory: str | None = None
    cpu_limit: str | None = None
    memory_limit: str | None = None
    working_dir: str | None = None
    env: tuple[str, ...] = ()
    data: tuple[str, ...] = ()
    image_pull_policy: str | None = None
    # Code from git, cloned by an init container into the working directory.
    sync_mode: str | None = None
    sync_source: str | None = None
    sync_branch: str | None = None
    sync_image: str = DEFAULT_SYNC_IMAGE
    # TensorBoard over --logdir, which must lie on a --data claim.
    tensorboard: bool = False
    tensorboard_image: str | None = None
    logdir: str | None = None
    # Placement.
    node_selector: tuple[str, ...] = ()
    tolerations: tuple[str, ...] = ()
    priority_class: str | None = None
    queue: str | None = None
    queue_priority: int | None = None
    # torchrun and the run policy.
    torchrun: bool = False
    nproc_per_node: str | None = None
    max_restarts: int | None = None
    elastic_min: int | None = None
    elastic_max: int | None = None
    restart_policy: str | None = None
    backoff_limit: int | None = None
    deadline: int | None = None
    cleanup_policy: str | None = None
    ttl: int | None = None
    labels: tuple[str, ...] = ()

    @property
    def uses_torchrun(self) -> bool:
        return (
            self.torchrun
            or self.nproc_per_node is not None
            or self.max_restarts is not None
            or self.elastic_min is not None
            or self.elastic_max is not None
        )


def build_job(s: Submission) -> dict[str, Any]:
    """The job manifest the flags describe (not yet defaulted)."""
    if not s.command and not s.sync_source:
        raise SubmissionError("give the command to run after `--` (e.g. -- python train.py)")
    metadata: dict[str, Any] = {"name": s.name}
    if s.namespace:
        metadata["namespace"] = s.namespace
    if s.labels:
        metadata["labels"] = _pairs(s.labels, "--label")
    spec: dict[str, Any] = {"replicaSpecs": [_replica_spec(s)]}
    if s.uses_torchrun:
        torchrun: dict[str, Any] = {"enabled": True}
        if s.nproc_per_node is not None:
            torchrun["procPerNode"] = s.nproc_per_node
        if s.max_restarts is not None:
            torchrun["maxRestarts"] = s.max_restarts
        spec["torchrunConfig"] = torchrun
    if s.elastic_min is not None or s.elastic_max is not None:
        elastic: dict[str, Any] = {"enabled": True}
        if s.elastic_min is not None:
            elastic["minReplicas"] = s.elastic_min
        if s.elastic_max is not None:
            elastic["maxReplicas"] = s.elastic_max
        spec["elastic"] = elastic
    run_policy = {
        key: value
        for key, value in (
            ("backoffLimit", s.backoff_limit),
            ("activeDeadlineSeconds", s.deadline),
            ("cleanUpPolicy", s.cleanup_policy),
            ("ttlSecondsAfterFinished", s.ttl),
        )
        if value is not None
    }
    if run_policy:
        spec["runPolicy"] = run_policy
    if s.queue is not None:
        t9k: dict[str, Any] = {"queue": s.queue}
        if s.queue_priority is not None:
            t9k["priority"] = s.queue_priority
        spec["scheduler"] = {"t9kScheduler": t9k}
    elif s.queue_priority is not None:
        raise SubmissionError("--queue-priority needs --queue (the T9k scheduler's queue)")
    if s.tensorboard or s.logdir is not None:
        spec["tensorboardSpec"] = _tensorboard(s)
    return {
        "apiVersion": types.API_VERSION,
        "kind": types.KIND,
        "metadata": metadata,
        "spec": spec,
    }


def _replica_spec(s: Submission) -> dict[str, Any]:
    container: dict[str, Any] = {"name": TRAINING_CONTAINER_NAME, "image": s.image}
    if s.image_pull_policy:
        container["imagePullPolicy"] = s.image_pull_policy
    command = list(s.command)
    if s.uses_torchrun:
        # torchrun replaces the container's command; its arguments are the script and its own.
        if command and posixpath.basename(command[0]) in PYTHONS:
            command = command[1:]
        if command:
            container["args"] = command
    elif command:
        container["command"] = command
    working_dir = s.working_dir or (DEFAULT_SYNC_DIR if s.sync_source else None)
    if working_dir:
        container["workingDir"] = working_dir
    if s.env:
        container["env"] = [{"name": k, "value": v} for k, v in _pairs(s.env, "--env").items()]
    resources = _resources(s)
    if resources:
        container["resources"] = resources
    pod: dict[str, Any] = {"containers": [container]}
    volumes, mounts = _data_volumes(s)
    if s.sync_mode not in (None, "git"):
        raise SubmissionError(f"--sync-mode {s.sync_mode!r}: only git is supported")
    if s.sync_mode == "git" and not s.sync_source:
        raise SubmissionError("--sync-mode git needs --sync-source (the repository's URL)")
    if s.sync_source:
        assert working_dir is not None
        volumes.append({"name": SYNC_VOLUME, "emptyDir": {}})
        mount = {"name": SYNC_VOLUME, "mountPath": working_dir}
        mounts.append(mount)
        pod["initContainers"] = [_sync_container(s, working_dir, mount)]
    if mounts:
        container["volumeMounts"] = mounts
    if volumes:
        pod["volumes"] = volumes
    if s.node_selector:
        pod["nodeSelector"] = _pairs(s.node_selector, "--selector")
    if s.tolerations:
        pod["tolerations"] = [_toleration(t) for t in s.tolerations]
    if s.priority_class:
        pod["priorityClassName"] = s.priority_class
    replica: dict[str, Any] = {"type": REPLICA_TYPE, "replicas": s.workers}
    if s.restart_policy is not None:
        replica["restartPolicy"] = s.restart_policy
    replica["template"] = {"spec": pod}
    return replica


def _resources(s: Submission) -> dict[str, Any]:
    """--cpu and --memory are requests and, unless --cpu-limit or --memory-limit say more, the
    limits too (what a replica asks for is what it may use); GPUs are limits, as Kubernetes
    requires of extended resources, and requests alike."""
    if s.gpus < 0:
        raise SubmissionError(f"--gpus {s.gpus}: must be 0 or more")
    requests: dict[str, Any] = {}
    limits: dict[str, Any] = {}
    for name, request, limit in (
        ("cpu", s.cpu, s.cpu_limit),
        ("memory", s.memory, s.memory_limit),
        (GPU_RESOURCE, str(s.gpus) if s.gpus else None, None),
    ):
        if request:
            requests[name] = request
        if limit or request:
            limits[name] = limit or request
    resources: dict[str, Any] = {}
    if requests:
        resources["requests"] = requests
    if limits:
        resources["limits"] = limits
    return resources


def _data_volumes(s: Submission) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    volumes: list[dict[str, Any]] = []
    mounts: list[dict[str, Any]] = []
    for index, mount in enumerate(DataMount.parse(d) for d in s.data):
        name = f"data-{index}"
        volumes.append({"name": name, "persistentVolumeClaim": {"claimName": mount.claim}})
        mounts.append({"name": name, "mountPath": mount.path})
    return volumes, mounts


def _sync_container(s: Submission, working_dir: str, mount: dict[str, Any]) -> dict[str, Any]:
    clone = ["git", "clone", "--depth", "1"]
    if s.sync_branch:
        clone += ["--branch", s.sync_branch]
    assert s.sync_source is not None
    return {
        "name": SYNC_CONTAINER,
        "image": s.sync_image,
        "command": [*clone, s.sync_source, working_dir],
        "volumeMounts": [dict(mount)],
    }


def _tensorboard(s: Submission) -> dict[str, Any]:
    if s.logdir is None:
        raise SubmissionError("--tensorboard needs --logdir, a directory on a --data claim")
    if not s.tensorboard_image:
        raise SubmissionError(
            "--tensorboard needs --tensorboard-image (an image with the tensorboard command)"
        )
    logdir = posixpath.normpath(s.logdir)
    for mount in (DataMount.parse(d) for d in s.data):
        if logdir == mount.path or logdir.startswith(mount.path.rstrip("/") + "/"):
            subpath = posixpath.relpath(logdir, mount.path)
            fileset = constants.T9K_PVC_PREFIX + mount.claim
            if subpath != ".":
                fileset += "/" + subpath
            return {"image": s.tensorboard_image, "trainingLogFilesets": [fileset]}
    raise SubmissionError(
        f"--logdir {s.logdir}: not on any --data claim; TensorBoard reads the logs from a "
        "PersistentVolumeClaim, so give --data CLAIM:/path with the log directory under /path"
    )


def _pairs(items: tuple[str, ...], flag: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise SubmissionError(f"{flag} {item!r}: write KEY=VALUE")
        out[key] = value
    return out


def _toleration(text: str) -> dict[str, str]:
    """`all` tolerates every taint; `key[=value][:Effect]` one (any effect when none is given)."""
    if text == "all":
        return {"operator": "Exists"}
    match = _TOLERATION.match(text)
    if match is None:
        raise SubmissionError(f"--toleration {text!r}: write KEY[=VALUE][:EFFECT] or all")
    toleration = {"key": match["key"]}
    if match["value"] is not None:
        toleration.update(operator="Equal", value=match["value"])
    else:
        toleration["operator"] = "Exists"
    if match["effect"]:
        if match["effect"] not in TOLERATION_EFFECTS:
            raise SubmissionError(
                f"--toleration {text!r}: the effect must be one of {', '.join(TOLERATION_EFFECTS)}"
            )
        toleration["effect"] = match["effect"]
    return toleration
