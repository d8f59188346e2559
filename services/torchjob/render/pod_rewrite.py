"""The rewrite the webhook applies to a replica's pod at admission. Pure and idempotent.

The reconciler creates the pod from the replica's raw template; this turns it into a distributed
PyTorch replica: the training container gets the environment (the user's own variables win) and,
with torchrun, the torchrun command line; the pod's restartPolicy becomes Never (the reconciler
restarts replicas itself so one backoff budget covers them all); debug mode and resuming after a
pause replace the command and may drop the init containers. Outside debug mode the pod's first
init container waits until the master's name resolves (render/wait.py), and the pod gets what
restarting its containers in place needs (render/in_place.py) where the webhook and the job allow
it. The training container
gets what it needs to report progress, unless the job or the chart turned that off
(render/progress.py).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from torchjob.api import constants, queries
from torchjob.api.job_api import TRAINING_JOB, JobApi
from torchjob.api.kubeflow import DEFAULT_CONTAINER, MASTER
from torchjob.api.progress import JobRef, ProgressEndpoint, reporting_enabled
from torchjob.api.trainer import MASTER_PORT, NODE
from torchjob.api.types import PyTorchTrainingJob, PyTorchTrainingJobSpec, ReplicaSpec
from torchjob.render.environment import JobEnvironment, job_environment, torchrun_argv
from torchjob.render.in_place import add_in_place, wants_in_place
from torchjob.render.kubeflow import kubeflow_env
from torchjob.render.progress import ProgressParts, add_progress, annotation_patch, progress_parts
from torchjob.render.topology import (
    DEFAULT_MASTER_PORT,
    MASTER_PORT_NAME,
    Layout,
    Replica,
    layout_of,
)
from torchjob.render.trainer import trainer_env
from torchjob.render.wait import add_wait_for_master, python_of, wants_wait

DEFAULT_DEBUG_COMMAND = ["sleep", "inf"]


class PodRewriteError(ValueError):
    """The pod cannot be a replica of the job (unknown type or index, no container)."""


@dataclass(slots=True)
class Rewrite:
    pod: dict[str, Any]
    patch: list[dict[str, Any]] = field(default_factory=list)


class PreparedJob:
    """A job's typed model, and what the rewrite of each of its replica pods shares (which of the
    rewrite's steps apply, where each replica stands, the environment they have in common, the
    torchrun command line), each worked out once, when it is made. The webhook keeps one per
    stored job version: every replica pod of a job is admitted against the same one. It is only
    read once made."""

    __slots__ = (
        "debug",
        "environment",
        "in_place",
        "job",
        "layout",
        "progress_job",
        "replica_specs",
        "shared_torchrun_command",
        "spec",
        "torchrun",
        "waits_for_master",
    )

    def __init__(self, job: PyTorchTrainingJob, api: JobApi = TRAINING_JOB) -> None:
        self.job = job
        self.spec = spec = job.spec or PyTorchTrainingJobSpec()
        self.debug = queries.debug_enabled(spec)
        self.torchrun = queries.torchrun_enabled(spec)
        self.waits_for_master = wants_wait(spec)
        self.layout: Layout = layout_of(spec)
        meta = job.metadata or {}
        self.in_place = wants_in_place(meta, self.debug)
        self.environment: JobEnvironment = job_environment(
            spec,
            job_name=str(meta.get("name", "")),
            namespace=str(meta.get("namespace", "")),
            job_uid=str(meta.get("uid", "")),
            service_scope=queries.service_scope(meta),
        )
        # The job its pods report progress for, as the user wrote it (`api`); None: it said not to.
        self.progress_job = (
            JobRef(api, str(meta.get("namespace", "")), str(meta.get("name", "")))
            if reporting_enabled(meta.get("annotations"))
            else None
        )
        self.replica_specs: dict[str, ReplicaSpec] = {}
        for replica_spec in spec.replica_specs or []:
            self.replica_specs.setdefault(replica_spec.type or "", replica_spec)
        # The same for every replica unless the processes per node follow each container's GPUs.
        self.shared_torchrun_command: tuple[str, ...] | None = None
        master = self.layout.replica_at(*self.layout.master)
        if self.torchrun and self.environment.proc_per_node != "gpu" and master is not None:
            env = self.environment.for_replica(master, {})
            self.shared_torchrun_command = tuple(torchrun_argv(spec, env, []))

    def torchrun_command(self, env: list[dict[str, Any]]) -> list[str]:
        """The torchrun command line of a replica whose injected variables are `env`."""
        if self.shared_torchrun_command is not None:
            return list(self.shared_torchrun_command)
        return torchrun_argv(self.spec, env, [])

    def progress(self, endpoint: ProgressEndpoint | None) -> ProgressParts | None:
        """What its pods get to report progress to `endpoint`; None when they report nowhere."""
        if endpoint is None or self.progress_job is None:
            return None
        return progress_parts(self.progress_job, endpoint)


def prepared(job: PyTorchTrainingJob | PreparedJob) -> PreparedJob:
    return job if isinstance(job, PreparedJob) else PreparedJob(job)


def rewrite_pod(
    job: PyTorchTrainingJob | PreparedJob,
    pod: dict[str, Any],
    progress: ProgressEndpoint | None = None,
    in_place: bool = False,
) -> Rewrite:
    """The rewritten pod and the JSONPatch (against `pod`) that makes it. `pod` is left as it was;
    the rewritten pod shares with it whatever the rewrite does not change. `progress` is where
    the training processes report their progress (None: nowhere); `in_place`: pods are made to
    restart in place where their job allows it (render/in_place.py)."""
    job = prepared(job)
    labels = (pod.get("metadata") or {}).get("labels") or {}
    replica, replica_spec = _locate(job, labels)
    # Copy on write: the spec, its container list and the training container are new, and each
    # of the container's fields the rewrite changes is replaced, never changed in place; the rest
    # is shared with `pod`.
    pod_spec = dict(pod.get("spec") or {})
    out = {**pod, "spec": pod_spec}
    container_index, _ = queries.training_container_in(pod_spec)
    containers = list(pod_spec.get("containers") or [])
    if not containers:
        raise PodRewriteError("the pod has no container")
    python = python_of(containers[container_index])  # before torchrun replaces the command
    container = containers[container_index] = dict(containers[container_index])
    pod_spec["containers"] = containers
    env = job.environment.for_replica(replica, container)
    _merge_env(container, env)
    _ensure_master_port(container)
    _apply_command(job, replica_spec, container, env, resuming=_resuming(pod), pod_spec=pod_spec)
    if job.waits_for_master:
        add_wait_for_master(pod_spec, container, python)
    pod_spec["restartPolicy"] = "Never"
    if in_place and job.in_place:
        add_in_place(pod_spec, [container], replica_spec.restart_policy or "OnFailure", python)
    return _finish(job, progress, pod, out, [container])


def rewrite_kubeflow_pod(
    job: PyTorchTrainingJob | PreparedJob,
    kubeflow_spec: Mapping[str, Any],
    pod: dict[str, Any],
    progress: ProgressEndpoint | None = None,
    in_place: bool = False,
) -> Rewrite:
    """`rewrite_pod` for a Kubeflow PyTorchJob (`job` is the PyTorchTrainingJob that runs it,
    api/kubeflow.py): every container gets Kubeflow's environment (render/kubeflow.py; the
    user's own variables win) and what reporting progress needs, the `pytorch` container its
    port, and with a Master every pod waits until the master's name resolves."""
    job = prepared(job)
    meta = job.job.metadata or {}
    labels = (pod.get("metadata") or {}).get("labels") or {}
    replica, _ = _locate(job, labels)
    env = kubeflow_env(
        kubeflow_spec, str(meta.get("name", "")), replica, queries.service_scope(meta)
    )
    waits = MASTER in (kubeflow_spec.get("pytorchReplicaSpecs") or {})
    return _rewrite_as_written(
        job, pod, lambda _: env, DEFAULT_CONTAINER, waits, progress, in_place, everywhere=True
    )


def rewrite_trainjob_pod(
    job: PyTorchTrainingJob | PreparedJob,
    trainjob_spec: Mapping[str, Any],
    pod: dict[str, Any],
    progress: ProgressEndpoint | None = None,
    in_place: bool = False,
) -> Rewrite:
    """`rewrite_pod` for a Kubeflow Trainer TrainJob (`job` is the PyTorchTrainingJob that runs
    it, api/trainer.py): its `node` container gets torchrun's environment as Trainer sets it
    (render/trainer.py; the user's own variables win), Trainer's port and what reporting progress
    needs, and every node waits until the first node's name resolves."""
    job = prepared(job)
    meta = job.job.metadata or {}
    labels = (pod.get("metadata") or {}).get("labels") or {}
    replica, _ = _locate(job, labels)
    procs = (trainjob_spec.get("trainer") or {}).get("numProcPerNode")
    nodes = sum(count for _, count in job.layout.counts)

    def env(container: Mapping[str, Any]) -> list[dict[str, Any]]:
        name, scope = str(meta.get("name", "")), queries.service_scope(meta)
        asked = procs if isinstance(procs, int) else None
        return trainer_env(name, replica, nodes, asked, container, scope)

    return _rewrite_as_written(job, pod, env, NODE, True, progress, in_place, port=MASTER_PORT)


def _rewrite_as_written(
    job: PreparedJob,
    pod: dict[str, Any],
    env_of: Callable[[Mapping[str, Any]], list[dict[str, Any]]],
    training_name: str,
    waits: bool,
    progress: ProgressEndpoint | None,
    in_place: bool,
    *,
    everywhere: bool = False,
    port: int = DEFAULT_MASTER_PORT,
) -> Rewrite:
    """The rewrite of a pod of a job written in another API, whose command is the user's own:
    the training container (`training_name`, else the first) gets the environment `env_of` it
    (every container does, `everywhere`), the master `port`, and with `waits` the pod waits
    until the master's name resolves."""
    labels = (pod.get("metadata") or {}).get("labels") or {}
    _, replica_spec = _locate(job, labels)
    pod_spec = dict(pod.get("spec") or {})
    out = {**pod, "spec": pod_spec}
    containers = [dict(c) for c in pod_spec.get("containers") or []]
    if not containers:
        raise PodRewriteError("the pod has no container")
    pod_spec["containers"] = containers
    names = [c.get("name") for c in containers]
    training = containers[names.index(training_name) if training_name in names else 0]
    for container in containers if everywhere else [training]:
        _merge_env(container, env_of(container))
    _ensure_master_port(training, port)
    if waits:
        add_wait_for_master(pod_spec, training, python_of(training))
    pod_spec["restartPolicy"] = "Never"
    if in_place and job.in_place:
        policy = replica_spec.restart_policy or "OnFailure"
        add_in_place(pod_spec, [training], policy, python_of(training))
    return _finish(job, progress, pod, out, containers if everywhere else [training])


def _locate(job: PreparedJob, labels: dict[str, Any]) -> tuple[Replica, ReplicaSpec]:
    kind = labels.get(constants.LABEL_REPLICA_TYPE)
    index_text = labels.get(constants.LABEL_REPLICA_INDEX, "")
    index = int(index_text) if isinstance(index_text, str) and index_text.isdigit() else -1
    replica = job.layout.replica_at(kind, index) if isinstance(kind, str) else None
    if replica is None:
        raise PodRewriteError(f"the job has no replica {kind}/{index_text}")
    return replica, job.replica_specs[replica.type]


# The helpers below replace a field of a copied container rather than change it in place: the
# field's value is still the pod's own.


def _merge_env(container: dict[str, Any], injected: list[dict[str, Any]]) -> None:
    own = container.get("env")
    if not own:  # most containers set none of their own
        container["env"] = list(injected)
        return
    present = {e.get("name") for e in own if isinstance(e, dict)}
    container["env"] = [*own, *(e for e in injected if e["name"] not in present)]


def _ensure_master_port(container: dict[str, Any], number: int = DEFAULT_MASTER_PORT) -> None:
    ports = container.get("ports") or []
    for port in ports:
        if port.get("containerPort") == number or port.get("name") == MASTER_PORT_NAME:
            return
    master = {"name": MASTER_PORT_NAME, "containerPort": number, "protocol": "TCP"}
    container["ports"] = [*ports, master]


def _resuming(pod: dict[str, Any]) -> bool:
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    return annotations.get(constants.ANNOTATION_RESUMING) == "true"


def _apply_command(
    job: PreparedJob,
    replica_spec: ReplicaSpec,
    container: dict[str, Any],
    env: list[dict[str, Any]],
    *,
    resuming: bool,
    pod_spec: dict[str, Any],
) -> None:
    spec = job.spec
    if job.debug:
        debug = _debug_spec(spec, replica_spec.type or "")
        container["command"] = list(debug.get("command") or DEFAULT_DEBUG_COMMAND)
        container.pop("args", None)
        if debug.get("skipInitContainer"):
            pod_spec.pop("initContainers", None)
        return
    if resuming:
        _apply_resume(spec, replica_spec.type or "", container, pod_spec)
    if job.torchrun:
        container["command"] = job.torchrun_command(env)
    # args stay as written: torchrun's script and its arguments, or python's


def _debug_spec(spec: PyTorchTrainingJobSpec, replica_type: str) -> dict[str, Any]:
    debug = spec.run_mode.debug if spec.run_mode else None
    for entry in (debug.replica_specs if debug else None) or []:
        if entry.type == replica_type:
            return entry.to_dict()
    return {}


def _apply_resume(
    spec: PyTorchTrainingJobSpec,
    replica_type: str,
    container: dict[str, Any],
    pod_spec: dict[str, Any],
) -> None:
    pause = spec.run_mode.pause if spec.run_mode else None
    for entry in (pause.resume_specs if pause else None) or []:
        if entry.type != replica_type:
            continue
        if entry.command is not None:
            container["command"] = list(entry.command)
        if entry.args is not None:
            container["args"] = list(entry.args)
        if entry.skip_init_container:
            pod_spec.pop("initContainers", None)


def _finish(
    job: PreparedJob,
    progress: ProgressEndpoint | None,
    pod: dict[str, Any],
    out: dict[str, Any],
    training: list[dict[str, Any]],
) -> Rewrite:
    """The rewrite of `pod` into `out`, once the `training` containers (those that got the
    job's variables) also got what reporting progress needs."""
    parts = job.progress(progress)
    if parts is None:
        return Rewrite(out, _patch(pod.get("spec") or {}, out["spec"]))
    add_progress(parts, out, training, _merge_env)
    return Rewrite(out, annotation_patch(pod, out) + _patch(pod.get("spec") or {}, out["spec"]))


# The fields of a pod's spec a rewrite may set or remove, in the order the patch names them: it
# leaves every other field as it was, shared with the pod it was given.
REWRITTEN_FIELDS = ("containers", "initContainers", "restartPolicy", "volumes")
_PATHS = {key: f"/spec/{key}" for key in REWRITTEN_FIELDS}


def _patch(before: dict[str, Any], after: dict[str, Any]) -> list[dict[str, Any]]:
    """Top-level JSONPatch operations on /spec turning `before` into `after`, which differ in
    REWRITTEN_FIELDS at most."""
    ops: list[dict[str, Any]] = []
    for key in REWRITTEN_FIELDS:
        if key not in before and key not in after:
            continue
        if key not in after:
            ops.append({"op": "remove", "path": _PATHS[key]})
        elif before.get(key) != after[key]:
            ops.append(
                {
                    "op": "add" if key not in before else "replace",
                    "path": _PATHS[key],
                    "value": after[key],
                }
            )
    return ops
