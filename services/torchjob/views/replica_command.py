"""The command line a job's replicas run: the first replica's pod as the reconciler creates it,
rewritten as the webhook rewrites it (its kind's rewrite, with torchrun's flags from
render/environment.py), read back from its training container. Pure."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from torchjob.api import queries
from torchjob.api.job_api import JobApi
from torchjob.api.model import ModelError
from torchjob.api.types import PyTorchTrainingJob
from torchjob.render.job_kinds import kind_of
from torchjob.render.pod_rewrite import PodRewriteError, PreparedJob
from torchjob.render.replica_objects import render_pod
from torchjob.render.topology import replicas_of


def training_container_named(
    pod_spec: dict[str, Any], container_name: str | None
) -> tuple[int, dict[str, Any] | None]:
    """The container named `container_name`, else torchjob's training container (`python`, else
    the first); (index, container)."""
    if container_name is not None:
        for index, container in enumerate(pod_spec.get("containers") or []):
            if isinstance(container, dict) and container.get("name") == container_name:
                return index, container
    return queries.training_container_in(pod_spec)


def replica_command(job: Mapping[str, Any], api: JobApi) -> list[str]:
    """The command, then the arguments, that the training container of the job's first replica
    runs; [] for a job whose pods cannot be made (the webhook refuses it)."""
    kind = kind_of(api)
    try:
        typed = PyTorchTrainingJob.from_dict(kind.training_job(dict(job)))
        spec = typed.spec
        if spec is None or not spec.replica_specs:
            return []
        meta = dict(job.get("metadata") or {})
        pod = render_pod(meta, spec, replicas_of(spec)[0], {}, None, api)
        rewritten = kind.rewrite_pod(PreparedJob(typed, api), job.get("spec") or {}, pod).pod
    except (ModelError, PodRewriteError, KeyError, ValueError):
        return []
    _, container = training_container_named(rewritten["spec"], kind.training_container)
    if container is None:
        return []
    return [str(word) for word in (container.get("command") or []) + (container.get("args") or [])]
