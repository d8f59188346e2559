"""A recipe (render/recipe.py) as a PyTorchTrainingJob's spec: one replica spec, `worker`, whose
replica 0 is the master (the T9k convention for a job without a `master` type), so the same job
runs with plain `python` and with torchrun; torchrun, the elastic bounds, the run policy, the T9k
Scheduler and the TensorBoard where the recipe gives them. Pure."""

from __future__ import annotations

from torchjob.render.recipe import JobRecipe, Manifest, pod_template, put, tensorboard_spec

REPLICA_TYPE = "worker"


def training_recipe_spec(recipe: JobRecipe) -> Manifest:
    """The PyTorchTrainingJob spec `recipe` describes: every field of a recipe has a place."""
    spec: Manifest = {"replicaSpecs": [_replica_spec(recipe)]}
    torchrun: Manifest = {"enabled": True} if recipe.torchrun else {}
    # procPerNode is a string in the API ("4" or "gpu").
    put(torchrun, "procPerNode", recipe.proc_per_node)
    put(torchrun, "maxRestarts", recipe.max_restarts)
    put(spec, "torchrunConfig", torchrun)
    if recipe.elastic_min is not None or recipe.elastic_max is not None:
        elastic: Manifest = {"enabled": True}
        put(elastic, "minReplicas", recipe.elastic_min)
        put(elastic, "maxReplicas", recipe.elastic_max)
        spec["elastic"] = elastic
    policy: Manifest = {}
    put(policy, "backoffLimit", recipe.backoff_limit)
    put(policy, "activeDeadlineSeconds", recipe.active_deadline_seconds)
    put(policy, "cleanUpPolicy", recipe.clean_up_policy)
    put(policy, "ttlSecondsAfterFinished", recipe.ttl_seconds_after_finished)
    put(spec, "runPolicy", policy)
    t9k: Manifest = {}
    put(t9k, "queue", recipe.queue)
    put(t9k, "priority", recipe.queue_priority)
    put(spec, "scheduler", {"t9kScheduler": t9k} if t9k else {})
    if recipe.tensorboard is not None:
        spec["tensorboardSpec"] = tensorboard_spec(recipe.tensorboard)
    return spec


def _replica_spec(recipe: JobRecipe) -> Manifest:
    replica: Manifest = {"type": REPLICA_TYPE}
    put(replica, "replicas", recipe.replicas)
    put(replica, "restartPolicy", recipe.restart_policy)
    replica["template"] = pod_template(recipe)
    return replica
