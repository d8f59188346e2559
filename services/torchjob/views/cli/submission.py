"""A PyTorchTrainingJob from the flags of `torchjob submit` (Arena's `submit pytorch` and ours).
Pure: the flags come in as a `Submission` and are read into the job recipe the console's form
fills in too (render/recipe.py), each refusal naming its flag; the recipe is rendered as a
PyTorchTrainingJob, a plain dict. Admission (defaulting, validation) is the caller's, so the
result is checked by the same rules as `kubectl apply` and `torchjob run`.

The job has one replica spec of `workers` replicas (render/training_recipe.py). Each replica's
pod has one container, `python`, the training container.
"""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass
from typing import Any

from torchjob.api import constants
from torchjob.api.job_api import TRAINING_JOB
from torchjob.api.queries import GPU_RESOURCE
from torchjob.render.job_kinds import kind_of
from torchjob.render.recipe import (
    GitCode,
    JobRecipe,
    Pairs,
    TensorBoard,
    Toleration,
    Volume,
    render_job,
)

DEFAULT_SYNC_IMAGE = "alpine/git:2.47.2"
DEFAULT_SYNC_DIR = "/workspace"
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
    return render_job(recipe_of(s), kind_of(TRAINING_JOB))


def recipe_of(s: Submission) -> JobRecipe:
    """The recipe the flags describe; SubmissionError naming a flag that cannot be part of it."""
    if not s.command and not s.sync_source:
        raise SubmissionError("give the command to run after `--` (e.g. -- python train.py)")
    labels = tuple(_pairs(s.labels, "--label").items())
    command, args = _command(s)
    working_dir = s.working_dir or (DEFAULT_SYNC_DIR if s.sync_source else None)
    env = tuple(_pairs(s.env, "--env").items())
    requests, limits = _resources(s)
    volumes = tuple(_data_volumes(s))
    code = _code(s, working_dir)
    selector = tuple(_pairs(s.node_selector, "--selector").items())
    tolerations = tuple(_toleration(t) for t in s.tolerations)
    if s.queue is None and s.queue_priority is not None:
        raise SubmissionError("--queue-priority needs --queue (the T9k scheduler's queue)")
    tensorboard = _tensorboard(s) if s.tensorboard or s.logdir is not None else None
    return JobRecipe(
        name=s.name,
        namespace=s.namespace or None,
        labels=labels,
        replicas=s.workers,
        restart_policy=s.restart_policy,
        image=s.image,
        image_pull_policy=s.image_pull_policy or None,
        command=command,
        args=args,
        working_dir=working_dir,
        env=env,
        requests=requests,
        limits=limits,
        volumes=volumes,
        code=code,
        node_selector=selector,
        tolerations=tolerations,
        priority_class=s.priority_class or None,
        queue=s.queue,
        queue_priority=s.queue_priority,
        torchrun=s.uses_torchrun,
        proc_per_node=s.nproc_per_node,
        max_restarts=s.max_restarts,
        elastic_min=s.elastic_min,
        elastic_max=s.elastic_max,
        backoff_limit=s.backoff_limit,
        active_deadline_seconds=s.deadline,
        clean_up_policy=s.cleanup_policy,
        ttl_seconds_after_finished=s.ttl,
        tensorboard=tensorboard,
    )


def _command(s: Submission) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The training container's command and args: with torchrun, which replaces the command,
    its arguments are the script and its own."""
    if not s.uses_torchrun:
        return s.command, ()
    if s.command and posixpath.basename(s.command[0]) in PYTHONS:
        return (), s.command[1:]
    return (), s.command


def _resources(s: Submission) -> tuple[Pairs, Pairs]:
    """--cpu and --memory are requests and, unless --cpu-limit or --memory-limit say more, the
    limits too (what a replica asks for is what it may use); GPUs are limits, as Kubernetes
    requires of extended resources, and requests alike."""
    if s.gpus < 0:
        raise SubmissionError(f"--gpus {s.gpus}: must be 0 or more")
    requests: list[tuple[str, str]] = []
    limits: list[tuple[str, str]] = []
    for name, request, limit in (
        ("cpu", s.cpu, s.cpu_limit),
        ("memory", s.memory, s.memory_limit),
        (GPU_RESOURCE, str(s.gpus) if s.gpus else None, None),
    ):
        if request:
            requests.append((name, request))
        if limit or request:
            limits.append((name, limit or request or ""))
    return tuple(requests), tuple(limits)


def _data_volumes(s: Submission) -> list[Volume]:
    return [
        Volume(f"data-{index}", mount.path, claim=mount.claim)
        for index, mount in enumerate(DataMount.parse(d) for d in s.data)
    ]


def _code(s: Submission, working_dir: str | None) -> GitCode | None:
    if s.sync_mode not in (None, "git"):
        raise SubmissionError(f"--sync-mode {s.sync_mode!r}: only git is supported")
    if s.sync_mode == "git" and not s.sync_source:
        raise SubmissionError("--sync-mode git needs --sync-source (the repository's URL)")
    if not s.sync_source:
        return None
    assert working_dir is not None  # the sync directory is the default
    return GitCode(s.sync_source, working_dir, s.sync_image, s.sync_branch)


def _tensorboard(s: Submission) -> TensorBoard:
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
            return TensorBoard(image=s.tensorboard_image, filesets=(fileset,))
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


def _toleration(text: str) -> Toleration:
    """`all` tolerates every taint; `key[=value][:Effect]` one (any effect when none is given)."""
    if text == "all":
        return Toleration()
    match = _TOLERATION.match(text)
    if match is None:
        raise SubmissionError(f"--toleration {text!r}: write KEY[=VALUE][:EFFECT] or all")
    if match["effect"] and match["effect"] not in TOLERATION_EFFECTS:
        raise SubmissionError(
            f"--toleration {text!r}: the effect must be one of {', '.join(TOLERATION_EFFECTS)}"
        )
    return Toleration(match["key"], match["value"], match["effect"] or None)
