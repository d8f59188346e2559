"""A recipe (render/recipe.py) as Kubeflow's PyTorchJob's spec: the recipe's replicas are a
Master (rank 0) and, beyond one, Workers, every one running the same pod in Kubeflow's container
`pytorch`. With torchrun the container's command is `torchrun`, which reads the `PET_*` settings
Kubeflow's environment gives it (`spec.nprocPerNode` among them), and the recipe's args are its
arguments. What a PyTorchJob has no place for (a TensorBoard, a T9k Scheduler queue and priority,
torchrun's restarts and elastic bounds outside `spec.elasticPolicy`) is refused by name, never
dropped. Pure."""

from __future__ import annotations

import copy
import dataclasses
from typing import Any

from torchjob.api.kubeflow import CLEAN_POD_POLICIES, DEFAULT_CONTAINER, MASTER, WORKER
from torchjob.render.recipe import Count, JobRecipe, Manifest, NoPlace, pod_template, put

TORCHRUN = "torchrun"
# The clean-up policy's value as Kubeflow's cleanPodPolicy (All, Unfinished, None).
CLEAN_POD_POLICY_OF = {ours: theirs for theirs, ours in CLEAN_POD_POLICIES.items()}
ELASTIC = (
    "Kubeflow's PyTorchJob writes its elastic bounds in spec.elasticPolicy, with its own "
    "rendezvous: write the PyTorchJob's YAML, or create a PyTorchTrainingJob"
)
# Why each recipe field a PyTorchJob has no place for is refused.
NO_PLACE = {
    "tensorboard": "Kubeflow's PyTorchJob has no TensorBoard: turn this off, or create a "
    "PyTorchTrainingJob",
    "queue": "Kubeflow's PyTorchJob has no T9k Scheduler queue: leave it empty, or create a "
    "PyTorchTrainingJob",
    "queue_priority": "Kubeflow's PyTorchJob has no T9k Scheduler priority: leave it empty, or "
    "create a PyTorchTrainingJob",
    "max_restarts": "Kubeflow's PyTorchJob sets torchrun's restarts only in an elastic job "
    "(spec.elasticPolicy.maxRestarts, in the YAML view): leave it empty",
    "elastic_min": ELASTIC,
    "elastic_max": ELASTIC,
}


def kubeflow_recipe_spec(recipe: JobRecipe) -> Manifest:
    """The PyTorchJob spec `recipe` describes; NoPlace naming the fields it cannot hold."""
    refused = {
        name: why for name, why in NO_PLACE.items() if getattr(recipe, name) not in (None, "")
    }
    if refused:
        raise NoPlace(refused)
    pod = dataclasses.replace(recipe, container=DEFAULT_CONTAINER)
    template = pod_template(pod, (TORCHRUN,) if recipe.torchrun else ())
    specs = {MASTER: _replica(recipe, _master_count(recipe.replicas), template)}
    if (workers := _worker_count(recipe.replicas)) is not None:
        specs[WORKER] = _replica(recipe, workers, template)
    spec: Manifest = {"pytorchReplicaSpecs": specs}
    # nprocPerNode is a string in the API ("4", "auto", "gpu").
    put(spec, "nprocPerNode", recipe.proc_per_node)
    policy: Manifest = {}
    put(policy, "backoffLimit", recipe.backoff_limit)
    put(policy, "activeDeadlineSeconds", recipe.active_deadline_seconds)
    # A value neither API knows is sent as written, for the cluster to refuse.
    clean_up = recipe.clean_up_policy
    put(policy, "cleanPodPolicy", CLEAN_POD_POLICY_OF.get(clean_up, clean_up) if clean_up else None)
    put(policy, "ttlSecondsAfterFinished", recipe.ttl_seconds_after_finished)
    put(spec, "runPolicy", policy)
    return spec


def _master_count(replicas: Count | None) -> Any:
    """One Master (None: left to Kubeflow's default of one); a whole number below one as given,
    for the cluster to refuse."""
    if replicas is None:
        return None
    if isinstance(replicas, int) and replicas < 1:
        return replicas
    return 1


def _worker_count(replicas: Count | None) -> Any:
    """The Workers beyond the Master (None: none); a count that is no number as given, for the
    cluster to refuse."""
    if isinstance(replicas, int):
        return replicas - 1 if replicas > 1 else None
    return replicas


def _replica(recipe: JobRecipe, count: Any, template: Manifest) -> Manifest:
    out: Manifest = {} if count is None else {"replicas": count}
    put(out, "restartPolicy", recipe.restart_policy)
    out["template"] = copy.deepcopy(template)
    return out
