"""What a Kubeflow PyTorchJob's users see of it, as Kubeflow's training-operator shows it: the
labels of its pods and Services, and its status (conditions Created, Running, Restarting,
Suspended, Succeeded, Failed and `replicaStatuses`), rendered from the lifecycle's own record of
the job (api/kubeflow.py). Pure.

Kubeflow has no condition for what only torchjob does: a replica that cannot start (our
StartFailure), a refused creation. Each is a Warning Event on the job and a condition of the
record (`status.torchjob.conditions`), and no Kubeflow condition: the last of those is the job's
state (`kubectl get`'s STATE column, the Kubeflow SDK), which must stay one of Kubeflow's. When
such a failure ends the job, Failed (`PyTorchJobFailed`) names our reason in its message."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

import orjson

from torchjob.api import constants, queries
from torchjob.api.kubeflow import DEFAULT_CONTAINER, MASTER, STATUS_RECORD, WORKER, kubeflow_type_of
from torchjob.render.environment import HANG_EXITS
from torchjob.render.topology import DEFAULT_MASTER_PORT, MASTER_PORT_NAME, Replica, replica_address

LABEL_PREFIX: Final = "training.kubeflow.org"
LABEL_JOB_NAME: Final = f"{LABEL_PREFIX}/job-name"
LABEL_OPERATOR_NAME: Final = f"{LABEL_PREFIX}/operator-name"
LABEL_REPLICA_TYPE: Final = f"{LABEL_PREFIX}/replica-type"
LABEL_REPLICA_INDEX: Final = f"{LABEL_PREFIX}/replica-index"
LABEL_JOB_ROLE: Final = f"{LABEL_PREFIX}/job-role"
OPERATOR_NAME: Final = "pytorchjob-controller"

Condition = dict[str, Any]
EnvVar = dict[str, Any]


@dataclass(frozen=True, slots=True)
class KubeflowCondition:
    """A condition of Kubeflow's PyTorchJob with its reason while it holds, and once it no
    longer does where Kubeflow gives it one. Each is the counterpart of one of the job's own
    conditions (lifecycle/conditions.py, `ConditionRow.kubeflow`)."""

    type: str
    reason: str
    false_reason: str = ""

    def holds(self, message: str) -> Condition:
        return _condition(self.type, "True", self.reason, message)

    def ended(self, message: str) -> Condition:
        return _condition(self.type, "False", self.false_reason, message)


SUSPENDED_REASON: Final = "PyTorchJobSuspended"
CREATED: Final = KubeflowCondition("Created", "PyTorchJobCreated")
RUNNING: Final = KubeflowCondition("Running", "PyTorchJobRunning", SUSPENDED_REASON)
RESTARTING: Final = KubeflowCondition("Restarting", "PyTorchJobRestarting")
SUSPENDED: Final = KubeflowCondition("Suspended", SUSPENDED_REASON, "PyTorchJobResumed")
SUCCEEDED: Final = KubeflowCondition("Succeeded", "PyTorchJobSucceeded")
FAILED: Final = KubeflowCondition("Failed", "PyTorchJobFailed")
KUBEFLOW_CONDITIONS: Final = (CREATED, RUNNING, RESTARTING, SUSPENDED, SUCCEEDED, FAILED)
# The conditions a PyTorchJob shows once it has ended (it has no phase of its own).
FINISHED_CONDITIONS: Final = (SUCCEEDED.type, FAILED.type)


def kubeflow_labels(job_name: str, replica: Replica) -> dict[str, str]:
    """Kubeflow's labels of a replica's pod and Service; `job-role: master` on the master."""
    labels = {
        LABEL_JOB_NAME: job_name,
        LABEL_OPERATOR_NAME: OPERATOR_NAME,
        LABEL_REPLICA_TYPE: replica.type,
        LABEL_REPLICA_INDEX: str(replica.index),
    }
    if replica.is_master:
        labels[LABEL_JOB_ROLE] = "master"
    return labels


def replica_type_labels(job_name: str, replica_type: str) -> dict[str, str]:
    """The labels every pod of one replica type carries (the scale subresource's selector)."""
    return {
        LABEL_JOB_NAME: job_name,
        LABEL_OPERATOR_NAME: OPERATOR_NAME,
        LABEL_REPLICA_TYPE: replica_type,
    }


def kubeflow_status(
    job_name: str,
    before: Mapping[str, Any],
    record: Mapping[str, Any],
    now: str,
    spec: Mapping[str, Any],
) -> dict[str, Any]:
    """The status of the PyTorchJob of `spec`: Kubeflow's conditions, moved on from `before`
    (the job's status as stored) to what the lifecycle's `record` says, its replica counts and
    times, and the record itself. Written as a merge patch: a count that fell to 0 is None."""
    conditions = [dict(c) for c in before.get("conditions") or [] if isinstance(c, dict)]
    for wanted in wanted_conditions(job_name, record, before, spec):
        conditions = set_condition(conditions, wanted, now)
    status: dict[str, Any] = {
        "conditions": conditions,
        "replicaStatuses": replica_statuses(job_name, record),
        STATUS_RECORD: dict(record),
    }
    for key in ("startTime", "completionTime"):
        if record.get(key):
            status[key] = record[key]
    scheduled = _condition_of(record, "Scheduled")
    if scheduled and scheduled.get("status") != "True":
        status["lastReconcileTime"] = now  # as Kubeflow: pods wait for their group
    return status


def wanted_conditions(
    job_name: str, record: Mapping[str, Any], before: Mapping[str, Any], spec: Mapping[str, Any]
) -> list[Condition]:
    """The conditions the record calls for, in the order Kubeflow sets them."""
    job = f"PyTorchJob {job_name}"
    phase = record.get("phase")
    wanted = [CREATED.holds(f"{job} is created.")]
    if phase == "Paused":
        if _condition_of(before, RUNNING.type).get("status") == "True":
            wanted.append(RUNNING.ended(f"{job} is suspended."))
        wanted.append(SUSPENDED.holds(f"{job} is suspended."))
        return wanted
    if _condition_of(before, SUSPENDED.type).get("status") == "True":
        wanted.append(SUSPENDED.ended(f"{job} is resumed."))
    failure = _condition_of(record, "ReplicaFailure")
    if phase == "Succeeded":
        wanted.append(SUCCEEDED.holds(f"{job} is successfully completed."))
    elif phase == "Failed":
        wanted.append(FAILED.holds(_failed(job_name, record)))
    elif gang := _gang_restarting(failure):
        wanted.append(RESTARTING.holds(f"{job} is {gang}"))
    elif restarting := _restarting(record, failure, spec):
        message = f"{job} is restarting because {restarting} replica(s) failed."
        wanted.append(RESTARTING.holds(message))
    elif phase == "Running":
        wanted.append(RUNNING.holds(f"{job} is running."))
    return wanted


def _failed(job_name: str, record: Mapping[str, Any]) -> str:
    """Kubeflow's message for how the job failed; our own for a failure Kubeflow has none for."""
    failed = _condition_of(record, "Failed")
    reason = failed.get("reason")
    if reason == constants.REASON_BACKOFF_LIMIT_EXCEEDED:
        return f"Job {job_name} has failed because it has reached the specified backoff limit"
    if reason == constants.REASON_DEADLINE_EXCEEDED:
        return f"Job {job_name} has failed because it was active longer than specified deadline"
    if reason in (constants.REASON_MASTER_FAILED, constants.REASON_REPLICA_FAILED):
        count = _failed_replicas(record) or "1"
        return f"PyTorchJob {job_name} is failed because {count} replica(s) failed."
    return f"PyTorchJob {job_name} has failed ({reason}): {failed.get('message', '')}"


# The record's ReplicaFailure reasons of a restart of every replica together (lifecycle/gang.py):
# a replica's failure in the Gang restart scope, or the progress deadline passed.
GANG_RESTART_REASONS: Final = frozenset(
    {constants.REASON_GANG_RESTARTING, constants.REASON_NO_PROGRESS}
)
GANG_RESTART: Final = "restarting every replica together"


def _gang_restarting(failure: Mapping[str, Any]) -> str:
    """`restarting every replica together: <why>`: what the record says of the gang restart
    under way; "" when none is. The restart counts once, whatever the replicas' phases show
    while the gang stops."""
    if failure.get("status") != "True" or failure.get("reason") not in GANG_RESTART_REASONS:
        return ""
    said = str(failure.get("message") or "")
    return said if said.startswith(GANG_RESTART) else f"{GANG_RESTART}: {said}"


def _restarting(
    record: Mapping[str, Any], failure: Mapping[str, Any], spec: Mapping[str, Any]
) -> str:
    """`1 Worker`: the replicas whose pod failed and that are being restarted (now, or after
    their restart delay), as their type's restartPolicy and their exit code say; "" when none
    is: a failure that ended the job, an elastic job's replica that failed for good while the
    others go on, or a creation the apiserver refused (which has no Kubeflow condition: it
    shows in status.torchjob and in a Warning Event)."""
    restarting_reasons = (constants.REASON_RESTART_BACKOFF, constants.REASON_REPLICA_FAILED)
    if failure.get("status") != "True" or failure.get("reason") not in restarting_reasons:
        return ""
    replica_specs = spec.get("pytorchReplicaSpecs") or {}

    def restarted(kind: str, replica: Mapping[str, Any]) -> bool:
        policy = (replica_specs.get(kubeflow_type_of(kind)) or {}).get("restartPolicy")
        return replica.get("phase") == "Failed" and queries.restarts_after_failure(
            str(policy or "OnFailure"), _exit_code(replica)
        )

    return _failed_replicas(record, restarted)


def _exit_code(replica: Mapping[str, Any]) -> int | None:
    """The exit code of the replica's training container (`pytorch`, else the first)."""
    containers = [c for c in replica.get("containers") or [] if isinstance(c, dict)]
    chosen = next((c for c in containers if c.get("name") == DEFAULT_CONTAINER), None)
    chosen = chosen or (containers[0] if containers else {})
    code = chosen.get("exitCode")
    return code if isinstance(code, int) else None


def _failed_replicas(
    record: Mapping[str, Any], counted: Callable[[str, Mapping[str, Any]], bool] | None = None
) -> str:
    """`1 Worker`: how many replicas of the first type that has any are `counted` (failed pods,
    by default); "" when no replica is."""
    for task in record.get("tasks") or []:
        kind = str(task.get("type", ""))
        count = sum(
            1
            for r in task.get("replicas") or []
            if (counted(kind, r) if counted else r.get("phase") == "Failed")
        )
        if count:
            return f"{count} {kubeflow_type_of(kind)}"
    return ""


def set_condition(conditions: list[Condition], new: Condition, now: str) -> list[Condition]:
    """Kubeflow's way to set a condition: nothing changes once the job has failed, and one of
    the same type, status and reason is kept as it is; otherwise the old one of its type goes
    and the new one is appended (so the last condition is the job's state). Running and
    Restarting replace each other, and a finished job's Running condition turns False."""
    if any(c.get("type") == FAILED.type and c.get("status") == "True" for c in conditions):
        return conditions
    current = next((c for c in conditions if c.get("type") == new["type"]), None)
    if current and (current.get("status"), current.get("reason")) == (new["status"], new["reason"]):
        return conditions
    stamped = {**new, "lastUpdateTime": now, "lastTransitionTime": now}
    if current and current.get("status") == new["status"]:
        stamped["lastTransitionTime"] = current.get("lastTransitionTime", now)
    kept = []
    for condition in conditions:
        kind = condition.get("type")
        if kind == new["type"] or {kind, new["type"]} == {RUNNING.type, RESTARTING.type}:
            continue
        if new["type"] in (SUCCEEDED.type, FAILED.type) and kind == RUNNING.type:
            condition = {**condition, "status": "False"}
        kept.append(condition)
    return [*kept, stamped]


def replica_statuses(job_name: str, record: Mapping[str, Any]) -> dict[str, Any]:
    """Per replica type (Kubeflow's key): its pods running (`active`), succeeded and failed,
    and the selector of its pods. As Kubeflow counts them, a suspended job has none active and
    a succeeded job's running pods count as succeeded."""
    out: dict[str, Any] = {}
    phase = record.get("phase")
    for task in record.get("tasks") or []:
        replica_type = str(task.get("type", ""))
        phases = [r.get("phase") for r in task.get("replicas") or []]
        labels = replica_type_labels(job_name, replica_type)
        counts = {
            "active": phases.count("Running"),
            "succeeded": phases.count("Succeeded"),
            "failed": phases.count("Failed"),
        }
        if phase == "Succeeded":
            counts["succeeded"] += counts["active"]
        if phase in ("Succeeded", "Paused"):
            counts["active"] = 0
        # A count of 0 is absent, as Kubeflow writes it; None removes a stored one (the status
        # is written as a merge patch, in which an absent key keeps its old value).
        entry: dict[str, Any] = {k: v or None for k, v in counts.items()}
        entry["selector"] = ",".join(f"{k}={v}" for k, v in sorted(labels.items()))
        out[kubeflow_type_of(replica_type)] = entry
    return out


def _condition(kind: str, status: str, reason: str, message: str) -> Condition:
    return {"type": kind, "status": status, "reason": reason, "message": message}


def _condition_of(status: Mapping[str, Any], kind: str) -> Mapping[str, Any]:
    for condition in status.get("conditions") or []:
        if isinstance(condition, dict) and condition.get("type") == kind:
            return condition
    return {}


# -- the environment -----------------------------------------------------------------------------


def kubeflow_env(
    spec: Mapping[str, Any], job_name: str, replica: Replica, service_scope: str
) -> list[EnvVar]:
    """The variables Kubeflow's training-operator gives every container of a replica, in its
    order: with a Master, the master's address and port, WORLD_SIZE, RANK and torchrun's node
    rank; `PET_NNODES`, or with an elasticPolicy the rendezvous settings; then torchjob's NCCL
    setting (`HANG_EXITS`). Addresses are the short names Kubeflow gives, under the job's
    Service with service scope `Job` (render/topology.py)."""
    replica_specs = spec.get("pytorchReplicaSpecs") or {}
    total = sum(_replicas(s) for s in replica_specs.values())
    nproc = str(spec.get("nprocPerNode") or "auto")
    values: list[tuple[str, str]] = [("PYTHONUNBUFFERED", "0")]
    if MASTER in replica_specs:
        port = str(_port(replica_specs[MASTER]))
        address = replica_address(job_name, MASTER.lower(), 0, service_scope)
        rank = replica.index + (1 if replica.type == WORKER.lower() else 0)
        values += [
            ("MASTER_PORT", port),
            ("PET_MASTER_PORT", port),
            ("MASTER_ADDR", address),
            ("PET_MASTER_ADDR", address),
            ("WORLD_SIZE", str(total * (int(nproc) if nproc.isdigit() else 1))),
            ("RANK", str(rank)),
            ("PET_NPROC_PER_NODE", nproc),
            ("PET_NODE_RANK", str(rank)),
        ]
    elastic = spec.get("elasticPolicy")
    if isinstance(elastic, Mapping):
        worker_0 = replica_address(job_name, WORKER.lower(), 0, service_scope)
        values += _elastic_env(elastic, replica_specs, worker_0)
    else:
        values.append(("PET_NNODES", str(total)))
    # What turns a collective that hangs into an exit, as in a PyTorchTrainingJob run by
    # torchrun (render/environment.py says why): every PyTorchJob gets torchrun's PET_*
    # variables, so any may run torchrun, and a plain process gets torch's own default.
    return [{"name": name, "value": value} for name, value in values] + list(HANG_EXITS)


def _elastic_env(
    elastic: Mapping[str, Any], replica_specs: Mapping[str, Any], worker_0: str
) -> list[tuple[str, str]]:
    worker = replica_specs.get(WORKER) or {}
    host = elastic.get("rdzvHost") or worker_0
    port = elastic.get("rdzvPort") or _port(worker)
    low, high = elastic.get("minReplicas"), elastic.get("maxReplicas")
    nnodes = f"{low or high}:{high or low}" if low or high else str(_replicas(worker))
    values = [
        ("PET_RDZV_ENDPOINT", f"{host}:{port}"),
        ("PET_RDZV_BACKEND", str(elastic.get("rdzvBackend") or "c10d")),
        ("PET_NNODES", nnodes),
    ]
    optional = [
        ("PET_MAX_RESTARTS", elastic.get("maxRestarts")),
        ("PET_NPROC_PER_NODE", elastic.get("nProcPerNode")),
        ("PET_RDZV_ID", elastic.get("rdzvId")),
    ]
    values += [(name, str(value)) for name, value in optional if value is not None]
    conf = elastic.get("rdzvConf")
    if conf:
        pairs = [f"{c.get('key', '')}={c.get('value', '')}" for c in conf if isinstance(c, dict)]
        values.append(("PET_RDZV_CONF", ",".join(pairs)))
    if elastic.get("standalone"):
        values.append(("PET_STANDALONE", ""))
    return values


def _replicas(replica_spec: Any) -> int:
    replicas = replica_spec.get("replicas") if isinstance(replica_spec, Mapping) else None
    return replicas if isinstance(replicas, int) else 1


def _port(replica_spec: Any) -> int:
    """The `pytorchjob-port` of the replica's `pytorch` container; 23456 when it has none."""
    template = replica_spec.get("template") if isinstance(replica_spec, Mapping) else None
    pod_spec = (template or {}).get("spec") or {}
    for container in pod_spec.get("containers") or []:
        if isinstance(container, dict) and container.get("name") == DEFAULT_CONTAINER:
            for port in container.get("ports") or []:
                if isinstance(port, dict) and port.get("name") == MASTER_PORT_NAME:
                    return int(port.get("containerPort") or DEFAULT_MASTER_PORT)
    return DEFAULT_MASTER_PORT


# -- autoscaling ---------------------------------------------------------------------------------


def render_autoscaler(
    job_meta: Mapping[str, Any], spec: Mapping[str, Any], owner: Mapping[str, Any]
) -> dict[str, Any] | None:
    """The HorizontalPodAutoscaler of a PyTorchJob whose elasticPolicy has metrics, as Kubeflow
    makes it: named after the job, scaling the job's Workers (through the scale subresource)
    between the policy's bounds; None for a job without metrics. It carries the hash of what
    was rendered: the apiserver rewrites quantities and fills in defaults, so the stored object
    is compared by that hash, not field by field."""
    elastic = spec.get("elasticPolicy")
    metrics = elastic.get("metrics") if isinstance(elastic, Mapping) else None
    if not isinstance(elastic, Mapping) or not metrics:
        return None
    name = str(job_meta["name"])
    hpa_spec: dict[str, Any] = {
        "scaleTargetRef": {"apiVersion": owner["apiVersion"], "kind": owner["kind"], "name": name},
        "maxReplicas": elastic.get("maxReplicas") or elastic.get("minReplicas") or 1,
        "metrics": list(metrics),
    }
    if elastic.get("minReplicas"):
        hpa_spec["minReplicas"] = elastic["minReplicas"]
    digest = hashlib.sha256(orjson.dumps(hpa_spec, option=orjson.OPT_SORT_KEYS)).hexdigest()[:16]
    return {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": {
            "name": name,
            "namespace": job_meta["namespace"],
            "labels": {constants.LABEL_JOB_NAME: name, LABEL_JOB_NAME: name},
            "annotations": {constants.ANNOTATION_SPEC_HASH: digest},
            "ownerReferences": [dict(owner)],
        },
        "spec": hpa_spec,
    }


def autoscaler_differs(desired: Mapping[str, Any], current: Mapping[str, Any]) -> bool:
    """Whether the stored autoscaler was not rendered from what the job asks for now."""
    return _spec_hash(desired) != _spec_hash(current)


def _spec_hash(obj: Mapping[str, Any]) -> object:
    return ((obj.get("metadata") or {}).get("annotations") or {}).get(
        constants.ANNOTATION_SPEC_HASH
    )
