"""The reconciler's planner as unit tests drive it: a job spec, the round's observations, the
plan and the status it writes."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from support.jobs import JobBuilder
from torchjob.api import constants
from torchjob.api.types import PyTorchTrainingJobSpec
from torchjob.lifecycle.backoff import DEFAULT_RULES, RestartRules
from torchjob.lifecycle.observe import ContainerView, PodView
from torchjob.lifecycle.plan import Plan, plan
from torchjob.lifecycle.round import Observed

NOW = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
META = {"name": "j", "namespace": "ns", "uid": "job-uid", "generation": 1}
# A job whose replicas restart one by one (a job not run by torchrun restarts as a gang unless
# its annotation says otherwise).
REPLICA_SCOPE: dict[str, Any] = {
    **META,
    "annotations": {constants.ANNOTATION_RESTART_SCOPE: constants.RESTART_SCOPE_REPLICA},
}
TRAINER = {"name": "python", "image": "i", "args": ["t.py"]}


def spec(
    policy: str = "OnFailure", workers: int = 2, master: bool = True, **extra: Any
) -> PyTorchTrainingJobSpec:
    """A master (unless not `master`) and `workers` workers restarted by `policy`, at most three
    times; `extra` replaces top-level spec fields."""
    job = JobBuilder()
    if master:
        job.replicas("master", 1, container=TRAINER, restartPolicy=policy)
    job.replicas("worker", workers, container=TRAINER, restartPolicy=policy)
    return job.run_policy(backoffLimit=3).spec(**extra).decoded_spec()


def services(job: PyTorchTrainingJobSpec) -> frozenset[str]:
    """The names of every replica's Service."""
    return frozenset(
        f"j-{r.type}-{i}" for r in job.replica_specs or [] for i in range(r.replicas or 1)
    )


def observe(
    job: PyTorchTrainingJobSpec,
    pods: list[PodView],
    status: dict[str, Any] | None = None,
    now: datetime = NOW,
    svcs: frozenset[str] | None = None,
    meta: dict[str, Any] = META,
    rules: RestartRules = DEFAULT_RULES,
) -> Plan:
    """The plan for one round that observes `pods` (and every Service unless `svcs`), of the
    job of metadata `meta`, under `rules`."""
    return plan(
        Observed.of_json(meta, job, status, pods, services(job) if svcs is None else svcs, now),
        rules,
    )


def settle(
    job: PyTorchTrainingJobSpec, pods: list[PodView], meta: dict[str, Any] = META
) -> dict[str, Any]:
    """The status after the replicas were created and observed."""
    return observe(job, pods, meta=meta).status


def conditions(status: dict[str, Any]) -> dict[str, tuple[str, str]]:
    """Each condition's status and reason, by type."""
    return {c["type"]: (c["status"], c["reason"]) for c in status["conditions"]}


def gone(result: Plan, pods: list[PodView]) -> list[PodView]:
    """`pods` once those `result` deletes, and those being deleted already, are gone: nothing
    holds a deleted pod back in these tests."""
    deleted = {uid for _, uid in [*result.delete_pods, *result.force_delete_pods]}
    return [p for p in pods if p.uid not in deleted and not p.deleting]


def stopped(
    job: PyTorchTrainingJobSpec,
    result: Plan,
    pods: list[PodView],
    now: datetime = NOW,
    meta: dict[str, Any] = META,
    rules: RestartRules = DEFAULT_RULES,
) -> Plan:
    """The round after `result`, which observed `pods`: the pods it deleted are gone, and the
    status it wrote is read back (a job that ended says so once its pods have stopped)."""
    return observe(job, gone(result, pods), result.status, now, meta=meta, rules=rules)


def replica_pod(kind: str, index: int, phase: Any = "Running", **fields: Any) -> PodView:
    """The pod `j-<kind>-<index>` (uid `uid-<kind>-<index>` unless `uid`) in `phase`, with
    `fields` (any of PodView's); a Failed one's training container terminated with its
    exit_code unless `containers` says otherwise. Every test builds its pods here, so a new
    field of PodView changes this one place (tests/unit/test_test_imports.py holds them to it)."""
    code = fields.pop("exit_code", None)
    ended = (ContainerView("python", "terminated", code),) if phase == "Failed" else ()
    return PodView(
        name=f"j-{kind}-{index}",
        uid=fields.pop("uid", f"uid-{kind}-{index}"),
        replica_type=kind,
        index=index,
        phase=phase,
        exit_code=code,
        deleting=fields.pop("deleting", False),
        backoff_count=fields.pop("backoff_count", 0),
        debug=fields.pop("debug", False),
        containers=fields.pop("containers", ended),
        **fields,
    )
