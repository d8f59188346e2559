"""The console's job form as Kubeflow's PyTorchJob (`kubeflow.org/v1`): the same fields
(job_form.py), and so the same recipe, rendered as a PyTorchJob (render/kubeflow_recipe.py);
the form a PyTorchJob the form wrote makes back, and the form field an error about a
PyTorchJob's field names.

The form's replicas are a Master (rank 0) and, beyond one, Workers; every replica runs the same
pod, in Kubeflow's container `pytorch`. With torchrun on the container's command is `torchrun`,
and the form's command line its arguments (command_line.py). What a PyTorchJob has no place for
(a TensorBoard, a T9k Scheduler queue and priority, torchrun's restarts outside an elastic job) is
refused beside its field, never dropped."""

from __future__ import annotations

import copy
import re
from typing import Any

from torchjob.api.job_api import KUBEFLOW_JOB
from torchjob.api.kubeflow import CLEAN_POD_POLICIES, MASTER, WORKER
from torchjob.api.types import API_VERSION, KIND
from torchjob.render.job_kinds import kind_of
from torchjob.render.kubeflow_recipe import TORCHRUN
from torchjob.views.console.job_form import (
    FIELD_OF_PATH,
    JobForm,
    Manifest,
    NoFormPlace,
    NotShown,
    field_of_path,
    form_of,
    kind_manifest_of,
)

# The replica of the PyTorchTrainingJob the form writes, which a PyTorchJob's Master is read as.
TRAINING_MASTER_PATH = "spec.replicaSpecs[0]"
# Fields the form has filled that a PyTorchJob has no place for (render/kubeflow_recipe.py).
NoKubeflowPlace = NoFormPlace


def kubeflow_manifest_of(form: JobForm) -> Manifest:
    """The PyTorchJob of `form`, with only what the form gives; NoKubeflowPlace when a field
    it fills has no place in a PyTorchJob (UnreadableField, as manifest_of, for a command line
    that cannot be split)."""
    return kind_manifest_of(form, kind_of(KUBEFLOW_JOB))


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
    try:
        written = kubeflow_manifest_of(shown)
    except NoFormPlace:
        written = None
    if written != manifest:
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
