"""The Pod the reconciler creates for one replica, and the headless Service that publishes its
address: the replica's own, or the job's (service scope, api/constants.py). Pure.

The pod is the replica's raw template plus identity labels, an ownerReference and scheduling
settings; the webhook rewrites it at admission (environment, command, restartPolicy), so what the
reconciler sends stays close to what the user wrote.
"""

from __future__ import annotations

from typing import Any

from torchjob.api import constants, queries
from torchjob.api.job_api import TRAINING_JOB, JobApi
from torchjob.api.jsoncopy import json_copy
from torchjob.api.objects import OwnerReference
from torchjob.api.types import PyTorchTrainingJobSpec
from torchjob.render.job_kinds import kind_of
from torchjob.render.topology import (
    DEFAULT_MASTER_PORT,
    MASTER_PORT_NAME,
    Replica,
    replica_name,
    service_name,
)


def owner_reference(job_meta: dict[str, Any], api: JobApi = TRAINING_JOB) -> OwnerReference:
    return {
        "apiVersion": api.api_version,
        "kind": api.kind,
        "name": job_meta["name"],
        "uid": job_meta["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


def replica_labels(job_name: str, replica: Replica, api: JobApi = TRAINING_JOB) -> dict[str, str]:
    """Our labels, which the caches select on, and T9k's owner label or Kubeflow's labels."""
    labels = {
        constants.LABEL_JOB_NAME: job_name,
        constants.LABEL_REPLICA_TYPE: replica.type,
        constants.LABEL_REPLICA_INDEX: str(replica.index),
    }
    if replica.is_master:
        labels[constants.LABEL_JOB_ROLE] = constants.JOB_ROLE_MASTER
    labels.update(kind_of(api).own_labels(job_name, replica))
    return labels


def prefer_other_nodes(pod_spec: dict[str, Any], nodes: tuple[str, ...]) -> None:
    """A preferred node affinity, of the highest weight, for any node but `nodes` (by name),
    beside the template's own affinity."""
    term = {
        "weight": 100,
        "preference": {
            "matchFields": [{"key": "metadata.name", "operator": "NotIn", "values": list(nodes)}]
        },
    }
    affinity = pod_spec.setdefault("affinity", {})
    node_affinity = affinity.setdefault("nodeAffinity", {})
    preferred = node_affinity.setdefault("preferredDuringSchedulingIgnoredDuringExecution", [])
    preferred.append(term)


def render_pod(
    job_meta: dict[str, Any],
    spec: PyTorchTrainingJobSpec,
    replica: Replica,
    annotations: dict[str, str],
    scheduler_name: str | None = constants.T9K_SCHEDULER_NAME,
    api: JobApi = TRAINING_JOB,
    avoid: tuple[str, ...] = (),
) -> dict[str, Any]:
    """The replica's pod as the reconciler creates it; `scheduler_name` places the pods of jobs
    that ask for the T9k scheduler (None: the T9k queue means something else, such as a Kueue
    queue, and the pods keep the template's scheduler); `avoid`: nodes it prefers not to run
    on (lifecycle/failing_nodes.py)."""
    replica_spec = queries.replica_spec(spec, replica.type)
    template = replica_spec.template
    metadata = json_copy(template.metadata or {}) if template else {}
    pod_spec = json_copy(template.spec or {}) if template else {}
    name = replica_name(job_meta["name"], replica.type, replica.index)
    labels = {**(metadata.get("labels") or {}), **replica_labels(job_meta["name"], replica, api)}
    t9k = spec.scheduler.t9k_scheduler if spec.scheduler else None
    if t9k is not None:
        if scheduler_name:
            pod_spec["schedulerName"] = scheduler_name
        labels[constants.LABEL_T9K_QUEUE] = t9k.queue or ""
        if t9k.priority is not None:
            labels[constants.LABEL_T9K_PRIORITY] = str(t9k.priority)
    pod_spec["restartPolicy"] = "Never"
    if avoid:
        prefer_other_nodes(pod_spec, avoid)
    if queries.service_scope(job_meta) == constants.SERVICE_SCOPE_JOB:
        # `<hostname>.<subdomain>` resolves once the job's headless Service selects the pod.
        pod_spec["hostname"], pod_spec["subdomain"] = name, job_meta["name"]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": job_meta["namespace"],
            "labels": labels,
            "annotations": {**(metadata.get("annotations") or {}), **annotations},
            "ownerReferences": [owner_reference(job_meta, api)],
        },
        "spec": pod_spec,
    }


def render_service(
    job_meta: dict[str, Any], replica: Replica, api: JobApi = TRAINING_JOB
) -> dict[str, Any]:
    """The headless Service that publishes the replica's address: its own, or with service
    scope `Job` the job's, which selects every replica pod of the job. It publishes not-ready
    addresses, so a replica's name resolves as soon as its pod has an IP, before it is ready:
    workers starting before the master can resolve it."""
    job_name, scope = job_meta["name"], queries.service_scope(job_meta)
    name = service_name(job_name, replica, scope)
    if scope == constants.SERVICE_SCOPE_JOB:
        labels = {constants.LABEL_JOB_NAME: job_name}
        selector = dict(labels)
    else:
        labels = replica_labels(job_name, replica, api)
        keys = (
            constants.LABEL_JOB_NAME,
            constants.LABEL_REPLICA_TYPE,
            constants.LABEL_REPLICA_INDEX,
        )
        selector = {k: labels[k] for k in keys}
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": name,
            "namespace": job_meta["namespace"],
            "labels": labels,
            "ownerReferences": [owner_reference(job_meta, api)],
        },
        "spec": {
            "clusterIP": "None",
            "publishNotReadyAddresses": True,
            "selector": selector,
            "ports": [
                {
                    "name": MASTER_PORT_NAME,
                    "port": DEFAULT_MASTER_PORT,
                    "targetPort": DEFAULT_MASTER_PORT,
                }
            ],
        },
    }
