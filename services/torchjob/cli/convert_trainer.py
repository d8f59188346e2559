"""`torchjob convert` of Kubeflow Trainer's TrainJob, to and from Kubeflow's PyTorchJob: the one
API whose environment is a TrainJob's (torchrun's PET_* variables), through which a TrainJob also
converts to and from a PyTorchTrainingJob (cli/convert.py).

A TrainJob (with the training runtime it is made from in the same file, as `torchjob run` reads
it) becomes the PyTorchJob of its nodes: the first node the Master, the others Workers, each
running the pod made from the runtime with the TrainJob's overrides (api/trainer.py), its `node`
container named `pytorch`. A PyTorchJob becomes a TrainJob of the chart's `torch-distributed`
runtime: its `pytorch` container's image, command, args, environment and resources are the
trainer's, its replicas the nodes. What a TrainJob keeps in its runtime instead (the rest of the
pod: volumes, other containers, placement) is refused by path, as cli/convert_fields.py says.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

from torchjob.api.job_api import KUBEFLOW_JOB, TRAIN_JOB
from torchjob.api.jsoncopy import json_copy
from torchjob.api.kubeflow import (
    DEFAULT_CONTAINER,
    KUBEFLOW_MANAGER,
    MASTER,
    WORKER,
    ordered_replica_specs,
)
from torchjob.api.kubeflow_admission import default_pytorchjob, validate_pytorchjob
from torchjob.api.trainer import (
    NODE,
    TRAINER_MANAGER,
    copied_runtime,
    node_count,
    node_pod_template,
    replicated_job,
    training_spec,
)
from torchjob.api.trainer_admission import default_trainjob, validate_trainjob
from torchjob.cli.manifest import InvalidManifest, admit
from torchjob.render.trainer import procs_per_node_of
from torchjob.render.trainer_recipe import DEFAULT_RUNTIME

# The container fields a TrainJob's trainer carries; any other is the runtime's.
TRAINER_CONTAINER_FIELDS: Final = {
    "image": "image",
    "command": "command",
    "args": "args",
    "env": "env",
    "resources": "resourcesPerNode",
}
# The container fields a PyTorchJob's `pytorch` container may set that change nothing.
INERT_CONTAINER_FIELDS: Final = frozenset({"name", "ports"})
TORCHRUN_NEEDED: Final = (
    "a TrainJob's nodes get torchrun's PET_* variables, not MASTER_ADDR, WORLD_SIZE and RANK: "
    "start the command with torchrun"
)

Dropped = Callable[..., None]
Renamed = Callable[[dict[str, Any], str, str, str], None]


class NotConvertible(Exception):
    """What stops the conversion whatever is dropped; `errors` are `field.path: why` lines."""

    def __init__(self, errors: list[str]) -> None:
        super().__init__("; ".join(errors))
        self.errors = errors


def trainjob_to_pytorchjob(document: dict[str, Any], rename: Renamed) -> dict[str, Any]:
    """The PyTorchJob that runs the nodes of the TrainJob `document` as its runtime makes them."""
    job = admit(document).manifest
    runtime = copied_runtime(job)
    if runtime is None:
        raise NotConvertible(
            [
                "spec.runtimeRef: the training runtime the TrainJob is made from is not in the "
                "file: add it as another document"
            ]
        )
    spec, made_from = job.get("spec") or {}, runtime.get("spec") or {}
    node_job = replicated_job(made_from, NODE) or {}
    template = node_pod_template(spec, made_from, node_job)
    restart = (template.get("spec") or {}).pop("restartPolicy", None) or "OnFailure"
    rename({"template": template}, NODE, DEFAULT_CONTAINER, "spec.runtimeRef")
    nodes = node_count(spec, made_from)
    replicas = {MASTER: {"replicas": 1, "restartPolicy": restart, "template": template}}
    if nodes > 1:
        worker = {"replicas": nodes - 1, "restartPolicy": restart, "template": json_copy(template)}
        replicas[WORKER] = worker
    training = next(c for c in template["spec"]["containers"] if c["name"] == DEFAULT_CONTAINER)
    asked = (spec.get("trainer") or {}).get("numProcPerNode")
    out_spec = {
        "pytorchReplicaSpecs": replicas,
        "nprocPerNode": procs_per_node_of(asked if isinstance(asked, int) else None, training),
        "runPolicy": _kubeflow_run_policy(spec, made_from),
    }
    out = {
        "apiVersion": KUBEFLOW_JOB.api_version,
        "kind": KUBEFLOW_JOB.kind,
        "metadata": job["metadata"],
        "spec": out_spec,
    }
    defaulted, _ = default_pytorchjob(out)
    checked = validate_pytorchjob(defaulted)
    if not checked.allowed:
        raise NotConvertible([f"the PyTorchJob would be refused: {e}" for e in checked.errors])
    return defaulted


def _kubeflow_run_policy(spec: dict[str, Any], made_from: dict[str, Any]) -> dict[str, Any]:
    run_policy = training_spec(spec, made_from)["runPolicy"]
    out: dict[str, Any] = {"backoffLimit": run_policy["backoffLimit"], "cleanPodPolicy": "None"}
    for key in ("activeDeadlineSeconds", "ttlSecondsAfterFinished"):
        if key in run_policy:
            out[key] = run_policy[key]
    if spec.get("suspend"):
        out["suspend"] = True
    manager = spec.get("managedBy")
    if manager and manager != TRAINER_MANAGER:
        out["managedBy"] = manager
    return out


def pytorchjob_to_trainjob(document: dict[str, Any], dropped: Dropped) -> dict[str, Any]:
    """The TrainJob of the chart's torch-distributed runtime that runs the PyTorchJob `document`
    (defaulted, validated); `dropped(row, path=, value=)` refuses (or drops) what it cannot
    carry."""
    job, _ = default_pytorchjob(document)
    result = validate_pytorchjob(job)
    if not result.allowed:
        raise InvalidManifest([str(e) for e in result.errors])
    spec = job.get("spec") or {}
    replicas = ordered_replica_specs(spec.get("pytorchReplicaSpecs") or {})
    first_type, first = replicas[0]
    for kind, replica in replicas[1:]:
        if replica.get("template") != first.get("template"):
            raise NotConvertible(
                [
                    f"spec.pytorchReplicaSpecs.{kind}.template: differs from the {first_type}'s: "
                    "a TrainJob's nodes all run one pod template"
                ]
            )
    trainer = _trainer(first, f"spec.pytorchReplicaSpecs.{first_type}.template", dropped)
    trainer["numNodes"] = sum(int(replica.get("replicas") or 1) for _, replica in replicas)
    nproc = str(spec.get("nprocPerNode") or "auto")
    if nproc.isdigit():
        trainer["numProcPerNode"] = int(nproc)
    elif nproc != "auto":
        dropped("spec.nprocPerNode", value=nproc)
    for kind, replica in replicas:
        if replica.get("restartPolicy") not in (None, "OnFailure"):
            path = f"spec.pytorchReplicaSpecs.{kind}.restartPolicy"
            dropped("spec.pytorchReplicaSpecs.*.restartPolicy", path=path)
    out_spec: dict[str, Any] = {"runtimeRef": {"name": DEFAULT_RUNTIME}, "trainer": trainer}
    out_spec.update(_trainjob_run_policy(spec.get("runPolicy") or {}, dropped))
    if spec.get("elasticPolicy") is not None:
        dropped("spec.elasticPolicy")
    out = {
        "apiVersion": TRAIN_JOB.api_version,
        "kind": TRAIN_JOB.kind,
        "metadata": job["metadata"],
        "spec": out_spec,
    }
    defaulted, _ = default_trainjob(out)
    checked = validate_trainjob(defaulted, resolved=False)
    if not checked.allowed:
        raise NotConvertible([f"the TrainJob would be refused: {e}" for e in checked.errors])
    return defaulted


def _trainer(replica: dict[str, Any], path: str, dropped: Dropped) -> dict[str, Any]:
    """The trainer overrides of the replica's `pytorch` container; anything else in its pod
    refused by path."""
    template = json_copy(replica.get("template") or {})
    row = "spec.pytorchReplicaSpecs.*.template"
    for key in template:
        if key != "spec":
            dropped(row, path=f"{path}.{key}")
    pod = template.get("spec") or {}
    for key in pod:
        if key != "containers":
            dropped(row, path=f"{path}.spec.{key}")
    containers = pod.get("containers") or []
    for index, container in enumerate(containers):
        if container.get("name") != DEFAULT_CONTAINER:
            dropped(row, path=f"{path}.spec.containers[{index}]")
    training: dict[str, Any] = next(
        (c for c in containers if c.get("name") == DEFAULT_CONTAINER), {}
    )
    at = f"{path}.spec.containers[{containers.index(training) if training else 0}]"
    trainer: dict[str, Any] = {}
    for key, value in training.items():
        if key in TRAINER_CONTAINER_FIELDS:
            trainer[TRAINER_CONTAINER_FIELDS[key]] = value
        elif key not in INERT_CONTAINER_FIELDS:
            dropped(row, path=f"{at}.{key}")
    words = [*(trainer.get("command") or []), *(trainer.get("args") or [])]
    if not any("torchrun" in word or "torch.distributed.run" in word for word in words):
        raise NotConvertible([f"{at}.command: {TORCHRUN_NEEDED}"])
    return trainer


def _trainjob_run_policy(run_policy: dict[str, Any], dropped: Dropped) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key in ("backoffLimit", "ttlSecondsAfterFinished", "schedulingPolicy"):
        if run_policy.get(key) is not None:
            dropped(f"spec.runPolicy.{key}")
    if run_policy.get("cleanPodPolicy") not in (None, "None"):
        dropped("spec.runPolicy.cleanPodPolicy", value=run_policy["cleanPodPolicy"])
    if run_policy.get("activeDeadlineSeconds") is not None:
        out["activeDeadlineSeconds"] = run_policy["activeDeadlineSeconds"]
    if run_policy.get("suspend"):
        out["suspend"] = True
    manager = run_policy.get("managedBy")
    if manager and manager != KUBEFLOW_MANAGER:
        out["managedBy"] = manager
    return out
