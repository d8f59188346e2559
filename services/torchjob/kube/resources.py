"""The kinds the controllers and the `torchjob` commands list, watch and write, the index of what a
job controls, and a job's work-queue key."""

from __future__ import annotations

from typing import Any

from torchjob.api.job_api import KUBEFLOW_JOB, TRAINING_JOB, JobApi, api_of
from torchjob.kube.informer import ResourceKind
from torchjob.kube.reconcile import JobKey
from torchjob.render.scheduling import GROUP_KINDS, GangMode


def job_resource(api: JobApi) -> ResourceKind:
    """Where jobs of `api` live."""
    return ResourceKind(api.group, api.version, api.plural)


JOBS = job_resource(TRAINING_JOB)
KUBEFLOW_JOBS = job_resource(KUBEFLOW_JOB)
PODS = ResourceKind("", "v1", "pods")
SERVICES = ResourceKind("", "v1", "services")
NODES = ResourceKind("", "v1", "nodes")
DEPLOYMENTS = ResourceKind("apps", "v1", "deployments")
REPLICASETS = ResourceKind("apps", "v1", "replicasets")
AUTOSCALERS = ResourceKind("autoscaling", "v2", "horizontalpodautoscalers")
EVENTS = ResourceKind("events.k8s.io", "v1", "events")
# The same Events in the core API's shape (involvedObject, message), as `torchjob get` reads them.
CORE_EVENTS = ResourceKind("", "v1", "events")
SECRETS = ResourceKind("", "v1", "secrets")
LEASES = ResourceKind("coordination.k8s.io", "v1", "leases")
POD_METRICS = ResourceKind("metrics.k8s.io", "v1beta1", "pods")
NODE_METRICS = ResourceKind("metrics.k8s.io", "v1beta1", "nodes")
CLAIMS = ResourceKind("", "v1", "persistentvolumeclaims")
# Kueue's Workloads (v0.15 and later serve v1beta2): that of a job's pod group is deleted so that
# Kueue lets the group's pods go (lifecycle/kueue.py).
KUEUE_WORKLOADS = ResourceKind("kueue.x-k8s.io", "v1beta2", "workloads")
# The PodGroup kinds of each gang mode (render/scheduling.py).
GROUP_RESOURCES: dict[GangMode, ResourceKind] = {
    mode: ResourceKind(kind.group, kind.version, kind.plural) for mode, kind in GROUP_KINDS.items()
}


# The index (over `informer.controller_uid`) of the objects a job controls, by the job's uid.
OWNER_INDEX = "owner"
# The index of pods by the node they are bound to (spec.nodeName).
NODE_INDEX = "node"


def pod_node(pod: dict[str, Any]) -> list[str]:
    """Index function: the node a pod is bound to; none for a pod not placed yet."""
    node = (pod.get("spec") or {}).get("nodeName")
    return [node] if isinstance(node, str) and node else []


def owner_job_key(obj: dict[str, Any]) -> JobKey | None:
    """The key of the job controlling a labelled pod or Service; None for one that no job
    controls (someone else made it: ignored, never adopted)."""
    meta = obj.get("metadata") or {}
    owner = next((r for r in meta.get("ownerReferences") or [] if r.get("controller")), None)
    if owner is None:
        return None
    return JobKey(str(meta.get("namespace")), str(owner.get("name")), api_of(owner).kind)
