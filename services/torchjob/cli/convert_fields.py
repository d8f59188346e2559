"""What `torchjob convert` does with every field of the two job specs: the field of the other API
that carries it, or why the other API cannot take it (then the conversion is refused, naming the
field, or with --drop-unsupported the field is left out and listed). convert.py's refusals say
what these rows say.

A Kubeflow Trainer TrainJob converts to and from a PyTorchJob, whose environment (torchrun's
PET_* variables) is the one a TrainJob's nodes get; to and from a PyTorchTrainingJob through it.

One row per field of the generated spec classes (api/types.py, api/kubeflow_types.py,
api/trainer_types.py), keyed by
its path as messages name it, with `[]` for an item of a list and `*` for a value of a map; a row
for a message field speaks for everything inside it. tests/unit/test_cli_convert.py walks the
generated classes: a field added to either API fails it until a row here says what becomes of it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from torchjob.api.kubeflow import RUN_POLICY


@dataclass(frozen=True, slots=True)
class Fate:
    """What becomes of one field in the other API: `to`, the field there that carries it (empty:
    none does); `refused`, why the other API cannot take it, or the values of it that `to` cannot
    carry (empty: it carries every value). A field set to a value that changes nothing (torchrun's
    settings without torchrun, the training operator as the manager) needs neither."""

    to: str = ""
    refused: str = ""


NO_SUCH_SETTING: Final = "a PyTorchJob has no such setting"
TORCHRUN_REFUSED: Final = (
    "Kubeflow runs the container's own command, which torchrun does not replace (put torchrun in "
    "the container's command; Kubeflow's PET_* variables configure it)"
)

# Each field of a PyTorchTrainingJob's spec, and what becomes of it in a PyTorchJob.
TRAINING_JOB_FIELDS: Final[Mapping[str, Fate]] = {
    # The key: `master` is Master, `worker` Worker; a job of other types cannot be converted.
    "spec.replicaSpecs[].type": Fate(to="spec.pytorchReplicaSpecs"),
    # A Master has exactly one replica in a PyTorchJob: a job of more cannot be converted.
    "spec.replicaSpecs[].replicas": Fate(to="spec.pytorchReplicaSpecs.*.replicas"),
    "spec.replicaSpecs[].restartPolicy": Fate(to="spec.pytorchReplicaSpecs.*.restartPolicy"),
    # The training container is named `pytorch`, as Kubeflow requires.
    "spec.replicaSpecs[].template": Fate(to="spec.pytorchReplicaSpecs.*.template"),
    "spec.replicaSpecs[].scalingWeight": Fate(refused="a PyTorchJob's replica specs have none"),
    # The older spelling of `enabled`, refused under that name.
    "spec.torchrunConfig.enable": Fate(refused=TORCHRUN_REFUSED),
    "spec.torchrunConfig.enabled": Fate(refused=TORCHRUN_REFUSED),
    "spec.torchrunConfig.minNodes": Fate(refused=NO_SUCH_SETTING),
    "spec.torchrunConfig.maxRestarts": Fate(
        to="spec.elasticPolicy.maxRestarts",
        refused="a PyTorchJob sets torchrun's restarts only in an elasticPolicy",
    ),
    "spec.torchrunConfig.procPerNode": Fate(to="spec.nprocPerNode"),
    # c10d is Kubeflow's default too.
    "spec.torchrunConfig.rdzvBackend": Fate(
        to="spec.elasticPolicy.rdzvBackend",
        refused="a PyTorchJob sets torchrun's rendezvous backend only in an elasticPolicy",
    ),
    "spec.torchrunConfig.extraOptions": Fate(refused=NO_SUCH_SETTING),
    "spec.elastic.enabled": Fate(to="spec.elasticPolicy"),
    # Kubeflow's bounds count Workers only: one less where the job has a Master.
    "spec.elastic.minReplicas": Fate(to="spec.elasticPolicy.minReplicas"),
    "spec.elastic.maxReplicas": Fate(to="spec.elasticPolicy.maxReplicas"),
    "spec.elastic.expectedReplicas": Fate(refused="a PyTorchJob's elasticPolicy has none"),
    **{
        f"spec.runPolicy.{field.torchjob}": Fate(to=f"spec.runPolicy.{field.kubeflow}")
        for field in RUN_POLICY
    },
    "spec.scheduler.t9kScheduler": Fate(
        refused="a PyTorchJob has no T9k scheduler queue (runPolicy.schedulingPolicy is "
        "Kubeflow's gang scheduling)"
    ),
    "spec.tensorboardSpec": Fate(refused="a PyTorchJob has no TensorBoard"),
    # Refused when enabled; a debug section that is not does nothing.
    "spec.runMode.debug": Fate(refused="a PyTorchJob has no debug mode"),
    "spec.runMode.pause.enabled": Fate(to="spec.runPolicy.suspend"),
    "spec.runMode.pause.resumeSpecs": Fate(refused="a PyTorchJob resumes its pods as created"),
}

# Each field of a PyTorchJob's spec, and what becomes of it in a PyTorchTrainingJob.
PYTORCHJOB_FIELDS: Final[Mapping[str, Fate]] = {
    **{
        f"spec.runPolicy.{field.kubeflow}": Fate(to=f"spec.runPolicy.{field.torchjob}")
        for field in RUN_POLICY
    },
    "spec.runPolicy.schedulingPolicy": Fate(
        refused="a PyTorchTrainingJob has no gang-scheduling policy of Kubeflow's shape "
        "(spec.scheduler.t9kScheduler is T9k's)"
    ),
    "spec.runPolicy.suspend": Fate(to="spec.runMode.pause.enabled"),
    # The training operator (or none) is torchjob itself, which runs every PyTorchTrainingJob.
    "spec.runPolicy.managedBy": Fate(refused="a PyTorchTrainingJob has none"),
    "spec.elasticPolicy": Fate(
        refused="a PyTorchTrainingJob's elastic jobs need torchrunConfig, which replaces the "
        "container's command; the PyTorchJob's container runs torchrun itself"
    ),
    # The key is the replica type: Master is `master`, Worker `worker`.
    "spec.pytorchReplicaSpecs.*.replicas": Fate(to="spec.replicaSpecs[].replicas"),
    # The `pytorch` container is the training container, named `python`.
    "spec.pytorchReplicaSpecs.*.template": Fate(to="spec.replicaSpecs[].template"),
    "spec.pytorchReplicaSpecs.*.restartPolicy": Fate(to="spec.replicaSpecs[].restartPolicy"),
    # "auto" is what a PyTorchTrainingJob without torchrun does.
    "spec.nprocPerNode": Fate(
        refused="a PyTorchTrainingJob sets processes per node through torchrunConfig, which "
        "replaces the container's command"
    ),
}


IN_RUNTIME: Final = (
    "a TrainJob takes this from its training runtime (torch-distributed's pod template has "
    "none): write a TrainingRuntime with it"
)

# Each field of a TrainJob's spec, and what becomes of it in a PyTorchJob (its first node the
# Master, the others Workers, all running the pod made from the TrainJob's runtime).
TRAINJOB_FIELDS: Final[Mapping[str, Fate]] = {
    "spec.runtimeRef": Fate(to="spec.pytorchReplicaSpecs.*.template"),
    # The initializers run as init containers of every node's pod, in the template.
    "spec.initializer": Fate(to="spec.pytorchReplicaSpecs.*.template"),
    "spec.trainer.image": Fate(to="spec.pytorchReplicaSpecs.*.template"),
    "spec.trainer.command": Fate(to="spec.pytorchReplicaSpecs.*.template"),
    "spec.trainer.args": Fate(to="spec.pytorchReplicaSpecs.*.template"),
    "spec.trainer.env": Fate(to="spec.pytorchReplicaSpecs.*.template"),
    "spec.trainer.resourcesPerNode": Fate(to="spec.pytorchReplicaSpecs.*.template"),
    "spec.trainer.numNodes": Fate(to="spec.pytorchReplicaSpecs.*.replicas"),
    "spec.trainer.numProcPerNode": Fate(to="spec.nprocPerNode"),
    # Their labels and annotations, on the pod template.
    "spec.runtimePatches": Fate(to="spec.pytorchReplicaSpecs.*.template"),
    "spec.suspend": Fate(to="spec.runPolicy.suspend"),
    "spec.activeDeadlineSeconds": Fate(to="spec.runPolicy.activeDeadlineSeconds"),
    # MultiKueue carries over; Trainer's own controller is Kubeflow's (unset).
    "spec.managedBy": Fate(to="spec.runPolicy.managedBy"),
}

# Each field of a PyTorchJob's spec, and what becomes of it in a TrainJob of the chart's
# torch-distributed runtime.
PYTORCHJOB_TO_TRAINJOB_FIELDS: Final[Mapping[str, Fate]] = {
    "spec.runPolicy.backoffLimit": Fate(refused=IN_RUNTIME + " (its node Job's backoffLimit)"),
    # "None", Kubeflow's default, is what a TrainJob does: its pods are kept.
    "spec.runPolicy.cleanPodPolicy": Fate(refused="a TrainJob keeps its pods (None) only"),
    "spec.runPolicy.ttlSecondsAfterFinished": Fate(refused=IN_RUNTIME + " (its JobSet's TTL)"),
    "spec.runPolicy.activeDeadlineSeconds": Fate(to="spec.activeDeadlineSeconds"),
    "spec.runPolicy.schedulingPolicy": Fate(
        refused="a TrainJob has no gang-scheduling policy of its own: queue it with Kueue"
    ),
    "spec.runPolicy.suspend": Fate(to="spec.suspend"),
    "spec.runPolicy.managedBy": Fate(to="spec.managedBy"),
    "spec.elasticPolicy": Fate(refused="a TrainJob is not elastic"),
    "spec.pytorchReplicaSpecs.*.replicas": Fate(to="spec.trainer.numNodes"),
    # The `pytorch` container's image, command, args, env and resources; the rest of the pod
    # belongs to the runtime, and is refused by path.
    "spec.pytorchReplicaSpecs.*.template": Fate(to="spec.trainer", refused=IN_RUNTIME),
    # OnFailure, Kubeflow's default, is what a TrainJob's nodes do.
    "spec.pytorchReplicaSpecs.*.restartPolicy": Fate(
        refused="a TrainJob's nodes restart OnFailure, unless its runtime says otherwise"
    ),
    # "auto" is a TrainJob's default too.
    "spec.nprocPerNode": Fate(
        to="spec.trainer.numProcPerNode", refused="a TrainJob's processes per node are a number"
    ),
}
