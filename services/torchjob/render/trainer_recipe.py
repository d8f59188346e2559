"""A recipe (render/recipe.py) as Kubeflow Trainer's TrainJob's spec: a job of the chart's
`torch-distributed` runtime whose trainer overrides are the recipe's container (image, command,
args, environment, resources) and node count. With torchrun the command is `torchrun`, which reads
the `PET_*` settings torchjob sets in the `node` container, and the recipe's args are its
arguments. What a TrainJob keeps in its runtime, not in itself (the pod's volumes, code, placement,
restarts, clean-up) or has no place for (a TensorBoard, a T9k Scheduler queue) is refused by name,
never dropped. Pure."""

from __future__ import annotations

from typing import Final

from torchjob.render.recipe import JobRecipe, Manifest, NoPlace, put

TORCHRUN: Final = "torchrun"
# The runtime a recipe's TrainJob names: the one the chart ships, as Trainer does.
DEFAULT_RUNTIME: Final = "torch-distributed"
IN_RUNTIME: Final = (
    "a TrainJob takes this from its runtime's pod template: write it in a TrainingRuntime, or "
    "create a PyTorchTrainingJob"
)
NO_PLACE: Final = {
    "tensorboard": "a TrainJob has no TensorBoard: turn this off, or create a PyTorchTrainingJob",
    "queue": "a TrainJob has no T9k Scheduler queue: queue it with Kueue's label instead",
    "queue_priority": "a TrainJob has no T9k Scheduler priority: leave it empty",
    "max_restarts": "a TrainJob does not set torchrun's restarts: leave it empty",
    "elastic_min": "a TrainJob is not elastic: leave it empty",
    "elastic_max": "a TrainJob is not elastic: leave it empty",
    "restart_policy": IN_RUNTIME,
    "backoff_limit": IN_RUNTIME,
    "clean_up_policy": "a TrainJob's pods are kept for their logs: leave it empty",
    "ttl_seconds_after_finished": IN_RUNTIME,
    "image_pull_policy": IN_RUNTIME,
    "working_dir": IN_RUNTIME,
    "volumes": IN_RUNTIME,
    "code": IN_RUNTIME,
    "node_selector": IN_RUNTIME,
    "tolerations": IN_RUNTIME,
    "priority_class": IN_RUNTIME,
}


def trainer_recipe_spec(recipe: JobRecipe) -> Manifest:
    """The TrainJob spec `recipe` describes; NoPlace naming the fields it cannot hold."""
    refused = {
        name: why for name, why in NO_PLACE.items() if getattr(recipe, name) not in (None, "", ())
    }
    if recipe.proc_per_node not in (None, "") and not str(recipe.proc_per_node).isdigit():
        refused["proc_per_node"] = "a TrainJob's processes per node are a number (unset: auto)"
    if refused:
        raise NoPlace(refused)
    trainer: Manifest = {}
    put(trainer, "image", recipe.image)
    command = (TORCHRUN,) if recipe.torchrun else ()
    put(trainer, "command", list(command + recipe.command))
    put(trainer, "args", list(recipe.args))
    put(trainer, "env", [{"name": k, "value": v} for k, v in recipe.env])
    put(trainer, "numNodes", recipe.replicas)
    resources: Manifest = {}
    put(resources, "requests", dict(recipe.requests))
    put(resources, "limits", dict(recipe.limits))
    put(trainer, "resourcesPerNode", resources)
    if recipe.proc_per_node:
        trainer["numProcPerNode"] = int(recipe.proc_per_node)
    spec: Manifest = {"runtimeRef": {"name": DEFAULT_RUNTIME}}
    put(spec, "trainer", trainer)
    put(spec, "activeDeadlineSeconds", recipe.active_deadline_seconds)
    return spec
