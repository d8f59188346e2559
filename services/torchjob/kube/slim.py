"""What the reconciler's caches keep of each replica pod and Service: only the fields it reads.
Pure; applied by the informers (`Informer(transform=...)`) once per listed or watched object,
before the object is cached or handed to a handler.

A full pod is several kilobytes (its spec above all: the containers' commands, env, volumes,
probes); the reconciler reads its name, labels, a few annotations, its owner, its deletion, the
names of its containers and its status. At 20,000 pods the difference is most of the process.

Every field read of a cached pod or Service, and so kept here:
- the informer: metadata.name, namespace, resourceVersion; apiVersion and kind (kept for any
  consumer of the cache that names the object);
- `informer.controller_uid` and `resources.owner_job_key`: metadata.ownerReferences (the
  controlling one) and the job-name label;
- `lifecycle.observe.view_pod`: the replica-type and replica-index labels, the backoff-count,
  consecutive-restarts and debug annotations and Kueue's retriable-in-group (a job that ended
  marks its pods so, once), Kueue's pod-group label and metadata.finalizers (a pod Kueue holds
  while it is deleted), metadata.uid and deletionTimestamp, the names of spec.containers
  (which one is the training container), and status: phase, reason, message, startTime and
  each containerStatus's name, state, restartCount and lastState.terminated; for restarts in
  place, the restart agent among spec.initContainers (its name and rules), its
  initContainerStatus and the restarts-asked annotation; spec.nodeName (gang scheduling, and
  the node a pod is lost with); the names of spec.schedulingGates and the status conditions that say
  the pod is unschedulable or stopped by the cluster (KEPT_CONDITIONS: their type, status,
  reason and message);
- `reconciler.controller`: a Service's name;
- `lifecycle.nodes.view_node` (slim_node): a Node's name and deletionTimestamp, and its Ready
  condition's status and lastTransitionTime.
A new reader of any other field must add it here; tests/unit/test_slim_cache.py checks that the
lifecycle plans the same from slim pods as from full ones.

The informer keeps what is left as JSON bytes (`informer.ObjectStore`), a few hundred bytes a pod.
"""

from __future__ import annotations

from typing import Any

from torchjob.api import constants
from torchjob.render.in_place import AGENT
from torchjob.render.scheduling import KUEUE_GROUP_LABEL, KUEUE_RETRIABLE_ANNOTATION

KubeObject = dict[str, Any]

KEPT_METADATA = ("name", "namespace", "uid", "resourceVersion", "deletionTimestamp", "finalizers")
KEPT_LABELS = (
    constants.LABEL_JOB_NAME,
    constants.LABEL_REPLICA_TYPE,
    constants.LABEL_REPLICA_INDEX,
    KUEUE_GROUP_LABEL,
)
KEPT_ANNOTATIONS = (
    constants.ANNOTATION_BACKOFF_COUNT,
    constants.ANNOTATION_CONSECUTIVE_RESTARTS,
    constants.ANNOTATION_GANG_RESTARTS,
    constants.ANNOTATION_DEBUG,
    constants.ANNOTATION_RESTARTS_ASKED,
    constants.ANNOTATION_DIAGNOSES_ASKED,
    KUEUE_RETRIABLE_ANNOTATION,
)
KEPT_POD_STATUS = ("phase", "reason", "message", "startTime")
KEPT_CONTAINER_STATUS = ("name", "state", "restartCount")
KEPT_CONDITIONS = ("PodScheduled", "TerminationTarget", "DisruptionTarget")
KEPT_CONDITION_FIELDS = ("type", "status", "reason", "message")
KEPT_NODE_METADATA = ("name", "resourceVersion", "deletionTimestamp")
KEPT_NODE_CONDITION_FIELDS = ("type", "status", "lastTransitionTime")


def slim_pod(pod: KubeObject) -> KubeObject:
    """The pod with only the fields the reconciler reads."""
    slim = _slim_object(pod)
    spec = pod.get("spec") or {}
    containers = spec.get("containers")
    if isinstance(containers, list):
        slim["spec"] = _containers(containers)
    agent = _agent(spec.get("initContainers"))
    if agent:
        slim["spec"] = {**slim.get("spec", {}), "initContainers": [agent]}
    placement = _placement(spec)
    if placement:
        slim["spec"] = {**slim.get("spec", {}), **placement}
    status = pod.get("status")
    if isinstance(status, dict):
        slim["status"] = _slim_status(status)
    return slim


def slim_service(service: KubeObject) -> KubeObject:
    """The Service with only the fields the reconciler reads: its identity and its owner."""
    return _slim_object(service)


def _slim_object(obj: KubeObject) -> KubeObject:
    slim: KubeObject = {}
    for key in ("apiVersion", "kind"):
        if key in obj:
            slim[key] = obj[key]
    metadata = obj.get("metadata")
    if isinstance(metadata, dict):
        slim["metadata"] = _slim_metadata(metadata)
    return slim


def _slim_metadata(metadata: KubeObject) -> KubeObject:
    slim = {key: metadata[key] for key in KEPT_METADATA if key in metadata}
    for field, kept in (("labels", KEPT_LABELS), ("annotations", KEPT_ANNOTATIONS)):
        values = metadata.get(field)
        if isinstance(values, dict):
            chosen = {key: values[key] for key in kept if key in values}
            if chosen:
                slim[field] = chosen
    references = metadata.get("ownerReferences")
    if isinstance(references, list):
        # Only the controlling reference is read (`controller_uid`); the others are dropped.
        controlling = [r for r in references if isinstance(r, dict) and r.get("controller")]
        if controlling:
            slim["ownerReferences"] = controlling[:1]
    return slim


def _containers(containers: list[Any]) -> KubeObject:
    """The spec as `queries.training_container_in` reads it: the containers by name alone."""
    return {"containers": [_container_name(c) for c in containers]}


def _agent(init_containers: Any) -> KubeObject | None:
    """The restart agent as `render.in_place.restarts_in_place` reads it: its name and rules."""
    for container in init_containers if isinstance(init_containers, list) else ():
        if isinstance(container, dict) and container.get("name") == AGENT:
            return {"name": AGENT, "restartPolicyRules": container.get("restartPolicyRules")}
    return None


def _container_name(container: Any) -> Any:
    if isinstance(container, dict) and "name" in container:
        return {"name": container["name"]}
    return container if not isinstance(container, dict) else {}


def _placement(spec: KubeObject) -> KubeObject:
    """Where the scheduler put the pod, and the gates it waits for."""
    placement: KubeObject = {}
    if spec.get("nodeName"):
        placement["nodeName"] = spec["nodeName"]
    gates = spec.get("schedulingGates")
    if isinstance(gates, list) and gates:
        placement["schedulingGates"] = [
            {"name": g.get("name")} if isinstance(g, dict) else g for g in gates
        ]
    return placement


def _conditions(conditions: list[Any]) -> list[Any]:
    """The conditions `view_pod` reads: a pod not placed (PodScheduled False) or being stopped
    for other work; a placed pod's PodScheduled True says nothing the node name does not."""
    return [
        {key: c[key] for key in KEPT_CONDITION_FIELDS if key in c}
        for c in conditions
        if isinstance(c, dict)
        and c.get("type") in KEPT_CONDITIONS
        and (c.get("type") != "PodScheduled" or c.get("status") == "False")
    ]


def _slim_status(status: KubeObject) -> KubeObject:
    slim = {key: status[key] for key in KEPT_POD_STATUS if key in status}
    conditions = status.get("conditions")
    kept = _conditions(conditions) if isinstance(conditions, list) else []
    if kept:
        slim["conditions"] = kept
    statuses = status.get("containerStatuses")
    if isinstance(statuses, list):
        slim["containerStatuses"] = [_container_status(s) for s in statuses]
    # An init container that waits may be one the kubelet cannot start (an image it cannot pull:
    # lifecycle/observe.py), the restart agent's restarts are the restarts in place a pod made;
    # the others say nothing the reconciler reads.
    waiting = [
        _container_status(s)
        for s in status.get("initContainerStatuses") or ()
        if isinstance(s, dict) and ("waiting" in (s.get("state") or {}) or s.get("name") == AGENT)
    ]
    if waiting:
        slim["initContainerStatuses"] = waiting
    return slim


def _container_status(status: Any) -> Any:
    if not isinstance(status, dict):
        return status
    slim = {key: status[key] for key in KEPT_CONTAINER_STATUS if key in status}
    # How its last run ended: a failure restarted in place (lifecycle/observe.py).
    ended = (status.get("lastState") or {}).get("terminated")
    if ended:
        slim["lastState"] = {"terminated": ended}
    return slim


def slim_node(node: KubeObject) -> KubeObject:
    """The Node as `lifecycle.nodes.view_node` reads it: its name, whether it is being deleted,
    and its Ready condition's status and lastTransitionTime. A node's status (images, addresses,
    capacity, the other conditions' heartbeats) is most of it, and every node of the cluster is
    cached."""
    slim: KubeObject = _slim_object(node)
    slim["metadata"] = {
        key: value for key, value in slim.get("metadata", {}).items() if key in KEPT_NODE_METADATA
    }
    conditions = (node.get("status") or {}).get("conditions")
    ready = [
        {key: c[key] for key in KEPT_NODE_CONDITION_FIELDS if key in c}
        for c in conditions or ()
        if isinstance(c, dict) and c.get("type") == "Ready"
    ]
    if ready:
        slim["status"] = {"conditions": ready}
    return slim


def job_without_status(job: KubeObject) -> KubeObject:
    """A job as pod admission reads it (the webhook's cache): everything but its status, which
    the reconciler rewrites as the replicas move and admission never reads, and managedFields."""
    slim = {key: value for key, value in job.items() if key != "status"}
    metadata = job.get("metadata")
    if isinstance(metadata, dict) and "managedFields" in metadata:
        slim["metadata"] = {k: v for k, v in metadata.items() if k != "managedFields"}
    return slim
