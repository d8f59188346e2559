"""The console's job form as Kubeflow's PyTorchJob (`kubeflow.org/v1`): the same fields
(job_form.py) written as a PyTorchJob, the form a PyTorchJob the form wrote makes back,
and the form field an error about a PyTorchJob's field names.

The form's replicas are a Master (rank 0) and, beyond one, Workers; every replica runs the same
pod, in Kubeflow's container `pytorch`. With torchrun on the container's command is `torchrun`,
which reads the `PET_*` settings Kubeflow's environment gives it (`spec.nprocPerNode` among
them), and the form's command line its arguments (command_line.py). What a PyTorchJob
has no place for (a TensorBoard, a T9k Scheduler queue and priority, torchrun's restarts outside
an elastic job) is refused beside its field, never dropped."""

from __future__ import annotations

import copy
import re
from typing import Any

from torchjob.api import kubeflow_types
from torchjob.api.kubeflow import CLEAN_POD_POLICIES, DEFAULT_CONTAINER, MASTER, WORKER
from torchjob.api.types import API_VERSION, KIND
from torchjob.views.console.job_form import (
    FIELD_OF_PATH,
    INTEGER,
    JobForm,
    Manifest,
    NotShown,
    field_of_path,
    form_of,
    manifest_of,
)

TORCHRUN = "torchrun"
# The replica of the PyTorchTrainingJob the form writes, which a PyTorchJob's Master is read as.
TRAINING_MASTER_PATH = "spec.replicaSpecs[0]"
# The clean-up policy's value as Kubeflow's cleanPodPolicy (All, Unfinished, None).
CLEAN_POD_POLICY_OF = {ours: theirs for theirs, ours in CLEAN_POD_POLICIES.items()}
NO_PLACE = {
    "tensorboard": "Kubeflow's PyTorchJob has no TensorBoard: turn this off, or create a "
    "PyTorchTrainingJob",
    "queue": "Kubeflow's PyTorchJob has no T9k Scheduler queue: leave it empty, or create a "
    "PyTorchTrainingJob",
    "priority": "Kubeflow's PyTorchJob has no T9k Scheduler priority: leave it empty, or create "
    "a PyTorchTrainingJob",
    "max_restarts": "Kubeflow's PyTorchJob sets torchrun's restarts only in an elastic job "
    "(spec.elasticPolicy.maxRestarts, in the YAML view): leave it empty",
}


class NoKubeflowPlace(ValueError):
    """Fields the form has filled that Kubeflow's PyTorchJob has no place for, each with why."""

    def __init__(self, fields: dict[str, str]) -> None:
        super().__init__("; ".join(f"{name}: {message}" for name, message in fields.items()))
        self.fields = fields


def no_place_fields(form: JobForm) -> dict[str, str]:
    """The filled fields a PyTorchJob cannot hold, each with the message shown beside it."""
    filled = {
        "tensorboard": form.tensorboard,
        "queue": bool(form.queue),
        "priority": bool(form.priority),
        "max_restarts": bool(form.max_restarts),
    }
    return {name: NO_PLACE[name] for name, given in filled.items() if given}


def kubeflow_manifest_of(form: JobForm) -> Manifest:
    """The PyTorchJob of `form`, with only what the form gives; NoKubeflowPlace when a field
    it fills has no place in a PyTorchJob (UnreadableField, as manifest_of, for a command line
    that cannot be split)."""
    refused = no_place_fields(form)
    if refused:
        raise NoKubeflowPlace(refused)
    training = manifest_of(form)
    (replica,) = training["spec"]["replicaSpecs"]
    template = replica["template"]
    (container,) = template["spec"]["containers"]
    head = {"name": DEFAULT_CONTAINER, **({"image": container["image"]} if form.image else {})}
    command = {"command": [TORCHRUN]} if form.torchrun else {}
    rest = {key: value for key, value in container.items() if key not in head}
    template["spec"]["containers"] = [{**head, **command, **rest}]
    specs = {MASTER: _replica(replica, _master_count(form), template)}
    if (workers := _worker_count(form)) is not None:
        specs[WORKER] = _replica(replica, workers, template)
    spec: Manifest = {"pytorchReplicaSpecs": specs}
    if form.proc_per_node:
        # nprocPerNode is a string in the API ("4", "auto", "gpu").
        spec["nprocPerNode"] = form.proc_per_node
    run_policy = _run_policy(training["spec"].get("runPolicy") or {})
    if run_policy:
        spec["runPolicy"] = run_policy
    return {
        "apiVersion": kubeflow_types.API_VERSION,
        "kind": kubeflow_types.KIND,
        "metadata": training["metadata"],
        "spec": spec,
    }


def _master_count(form: JobForm) -> Any:
    """One Master (None: left to Kubeflow's default of one, as the form leaves it); a whole
    number below one as written, for the cluster to refuse beside the replicas."""
    if not form.replicas:
        return None
    if INTEGER.fullmatch(form.replicas) and int(form.replicas) < 1:
        return int(form.replicas)
    return 1


def _worker_count(form: JobForm) -> Any:
    """The Workers beyond the Master (None: none); a count that is no number as written, for
    the cluster to refuse beside the replicas."""
    if not form.replicas:
        return None
    if INTEGER.fullmatch(form.replicas):
        return int(form.replicas) - 1 if int(form.replicas) > 1 else None
    return form.replicas


def _replica(replica: Manifest, count: Any, template: Manifest) -> Manifest:
    out: Manifest = {} if count is None else {"replicas": count}
    if "restartPolicy" in replica:
        out["restartPolicy"] = replica["restartPolicy"]
    out["template"] = copy.deepcopy(template)
    return out


def _run_policy(training: Manifest) -> Manifest:
    policy: Manifest = {}
    for key in ("backoffLimit", "activeDeadlineSeconds"):
        if key in training:
            policy[key] = training[key]
    if "cleanUpPolicy" in training:
        value = training["cleanUpPolicy"]
        # A value neither API knows is sent as written, for the cluster to refuse.
        policy["cleanPodPolicy"] = CLEAN_POD_POLICY_OF.get(value, value)
    return policy


def kubeflow_form_of(manifest: Any) -> JobForm | NotShown:
    """The form that writes `manifest` (a PyTorchJob) again, or why there is none: the form
    writes a Master and Workers of one pod, so anything else stays in the YAML view."""
    try:
        training = _training_equivalent(manifest)
    except (TypeError, ValueError, KeyError, AttributeError) as error:
        return NotShown((f"the form cannot show this PyTorchJob: {error}",))
    shown = form_of(training)
    if isinstance(shown, NotShown):
        # The reasons name the Master's fields, as the PyTorchJob spells them.
        master = f"spec.pytorchReplicaSpecs.{MASTER}"
        return NotShown(tuple(r.replace(TRAINING_MASTER_PATH, master) for r in shown.reasons))
    if no_place_fields(shown) or kubeflow_manifest_of(shown) != manifest:
        return NotShown(("the form writes a PyTorchJob's Master and Workers alike, and no more",))
    return shown


def _training_equivalent(manifest: Any) -> Manifest:
    """The PyTorchTrainingJob the form would write for the same fields as `manifest`."""
    spec = manifest["spec"]
    specs = spec["pytorchReplicaSpecs"]
    if set(specs) - {MASTER, WORKER}:
        raise ValueError(f"the form writes a Master and Workers, not {sorted(specs)}")
    master = specs[MASTER]
    workers = specs.get(WORKER, {}).get("replicas")
    template = copy.deepcopy(master["template"])
    containers = template["spec"]["containers"]
    torchrun = len(containers) == 1 and containers[0].get("command") == [TORCHRUN]
    if torchrun:
        del containers[0]["command"]
    replica: Manifest = {"type": "worker"}
    if isinstance(workers, int):
        replica["replicas"] = workers + 1
    elif WORKER not in specs and "replicas" in master:
        replica["replicas"] = master["replicas"]
    if "restartPolicy" in master:
        replica["restartPolicy"] = master["restartPolicy"]
    replica["template"] = template
    torchrun_config: Manifest = {"enabled": True} if torchrun else {}
    if "nprocPerNode" in spec:
        torchrun_config["procPerNode"] = spec["nprocPerNode"]
    policy = dict(spec.get("runPolicy") or {})
    if "cleanPodPolicy" in policy:
        value = policy.pop("cleanPodPolicy")
        policy["cleanUpPolicy"] = CLEAN_POD_POLICIES.get(value, value)
    training: Manifest = {"replicaSpecs": [replica]}
    training.update({"torchrunConfig": torchrun_config} if torchrun_config else {})
    training.update({"runPolicy": policy} if policy else {})
    metadata = manifest.get("metadata") or {}
    return {"apiVersion": API_VERSION, "kind": KIND, "metadata": metadata, "spec": training}


REPLICA_PATH = "spec.pytorchReplicaSpecs[]"
CONTAINER_PATH = f"{REPLICA_PATH}.template.spec.containers[]"
TRAINING_REPLICA_PATH = "spec.replicaSpecs[]"
# The form field of each PyTorchJob field path (a replica type and a list index written `[]`):
# the pod's fields as a PyTorchTrainingJob's, and Kubeflow's own.
KUBEFLOW_FIELD_OF_PATH = {
    **{
        path.replace(TRAINING_REPLICA_PATH, REPLICA_PATH): name
        for path, name in FIELD_OF_PATH.items()
        if path.startswith(TRAINING_REPLICA_PATH) or path.startswith("metadata.")
    },
    "spec.nprocPerNode": "proc_per_node",
    f"{CONTAINER_PATH}.command": "command_line",
    "spec.runPolicy.backoffLimit": "backoff_limit",
    "spec.runPolicy.activeDeadlineSeconds": "active_deadline_seconds",
    "spec.runPolicy.cleanPodPolicy": "clean_up_policy",
}
# A replica type as the webhook writes it (`.Master`) or the apiserver (`[Master]`).
REPLICA_KEY = re.compile(r"^spec\.pytorchReplicaSpecs(?:\.(\w+)|\[(\w+)\])")


def kubeflow_field_of_path(path: str) -> str | None:
    """The form field an error about PyTorchJob field `path` is shown beside, or None."""
    general = REPLICA_KEY.sub(REPLICA_PATH, path.strip())
    return field_of_path(general, KUBEFLOW_FIELD_OF_PATH)
