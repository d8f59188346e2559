"""The housekeeper's decisions: the clean-up table (policy x pod phase), TTL after the job ends,
and the TensorBoard's creation, roll-out, removal and status writes."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from support.jobs import JobBuilder

from torchjob.api import constants
from torchjob.api.types import PyTorchTrainingJobSpec
from torchjob.lifecycle.housekeeping import (
    HousekeepingObserved,
    HousekeepingPlan,
    Owned,
    TensorBoardObserved,
    clean_up,
    plan_housekeeping,
    view_owned,
)
from torchjob.render.tensorboard import render_deployment, render_service, spec_hash

NOW = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
META = {"name": "j", "namespace": "ns", "uid": "job-uid", "generation": 1}
PHASES = ("Pending", "Running", "Succeeded", "Failed", "Unknown")
TEMPLATE = {"spec": {"containers": [{"name": "python", "image": "i"}]}}


WORKERS = JobBuilder().replicas("worker", 2, template=TEMPLATE)


def terminal(phase: str = "Succeeded", finished: datetime = NOW) -> dict[str, Any]:
    kind = "Completed" if phase == "Succeeded" else "Failed"
    return {
        "phase": phase,
        "conditions": [{"type": kind, "status": "True", "reason": "r"}],
        "completionTime": finished.strftime("%Y-%m-%dT%H:%M:%SZ"),
    }


RUNNING = {"phase": "Running", "conditions": [{"type": "Running", "status": "True"}]}


def pods_in(*phases: str) -> list[Owned]:
    return [Owned(f"j-worker-{i}", f"uid-{i}", False, p, f"rv-{i}") for i, p in enumerate(phases)]


SERVICES = [Owned("j-worker-0", "s0", False), Owned("j-worker-1", "s1", False)]


def observe(
    job_spec: PyTorchTrainingJobSpec,
    status: dict[str, Any],
    pods: list[Owned] | None = None,
    services: list[Owned] | None = None,
    tensorboard: TensorBoardObserved | None = None,
    now: datetime = NOW,
) -> HousekeepingPlan:
    return plan_housekeeping(
        HousekeepingObserved(
            META,
            job_spec,
            status,
            pods if pods is not None else pods_in("Succeeded", "Running"),
            services if services is not None else SERVICES,
            tensorboard or TensorBoardObserved(),
            now,
        )
    )


# -- the clean-up decision table ------------------------------------------------------------------


@pytest.mark.parametrize("phase", PHASES)
@pytest.mark.parametrize("policy", [None, "None", "All", "Unfinished"])
def test_clean_up_table(policy: str | None, phase: str) -> None:
    pods = pods_in(phase)
    deleted_pods, deleted_services = clean_up(policy, pods, SERVICES)
    expected = {
        None: False,
        "None": False,
        "All": True,
        "Unfinished": phase not in ("Succeeded", "Failed"),
    }[policy]
    assert deleted_pods == (pods if expected else [])
    assert deleted_services == (SERVICES if policy == "All" else [])


@pytest.mark.parametrize("policy", ["All", "Unfinished"])
def test_pods_already_being_deleted_are_left_alone(policy: str) -> None:
    pods = [Owned("p", "u", True, "Running")]
    services = [Owned("s", "u", True)]
    assert clean_up(policy, pods, services) == ([], [])


@pytest.mark.parametrize("outcome", ["Succeeded", "Failed"])
def test_clean_up_after_success_and_failure(outcome: str) -> None:
    job = WORKERS.clone().spec(runPolicy={"cleanUpPolicy": "Unfinished"}).decoded_spec()
    result = observe(job, terminal(outcome), pods_in("Succeeded", "Running", "Failed", "Pending"))
    assert result.delete_pods == [("j-worker-1", "uid-1", "rv-1"), ("j-worker-3", "uid-3", "rv-3")]
    assert result.delete_services == []
    [event] = result.events
    assert event.reason == constants.REASON_CLEAN_UP
    assert event.message == "cleanUpPolicy Unfinished: deleting 2 pods of the finished job"


def test_all_deletes_pods_and_services_with_one_event() -> None:
    result = observe(
        WORKERS.clone().spec(runPolicy={"cleanUpPolicy": "All"}).decoded_spec(), terminal()
    )
    assert result.delete_pods == [("j-worker-0", "uid-0", "rv-0"), ("j-worker-1", "uid-1", "rv-1")]
    assert result.delete_services == [("j-worker-0", "s0"), ("j-worker-1", "s1")]
    assert [e.message for e in result.events] == [
        "cleanUpPolicy All: deleting 2 pods and 2 Services of the finished job"
    ]


@pytest.mark.parametrize("policy", ["All", "Unfinished"])
def test_nothing_is_cleaned_while_the_job_runs(policy: str) -> None:
    result = observe(
        WORKERS.clone().spec(runPolicy={"cleanUpPolicy": policy}).decoded_spec(), RUNNING
    )
    assert (result.delete_pods, result.delete_services, result.events) == ([], [], [])


def test_nothing_left_means_no_action_and_no_event() -> None:
    """What a restarted housekeeper sees after a finished clean-up."""
    result = observe(
        WORKERS.clone().spec(runPolicy={"cleanUpPolicy": "All"}).decoded_spec(), terminal(), [], []
    )
    assert (result.delete_pods, result.delete_services, result.events) == ([], [], [])


def test_a_half_done_clean_up_finishes_under_the_same_event_key() -> None:
    job = WORKERS.clone().spec(runPolicy={"cleanUpPolicy": "All"}).decoded_spec()
    first = observe(job, terminal())
    rest = observe(job, terminal(), [], SERVICES[1:])
    assert rest.delete_services == [("j-worker-1", "s1")]
    assert [e.key for e in rest.events] == [e.key for e in first.events]


def test_view_owned_reads_pods_and_services() -> None:
    pod = {
        "metadata": {"name": "p", "uid": "u", "deletionTimestamp": "t", "resourceVersion": "7"},
        "status": {},
    }
    assert view_owned(pod, pod=True) == Owned("p", "u", True, "Pending", "7")
    service = {"metadata": {"name": "s", "uid": "v"}}
    assert view_owned(service, pod=False) == Owned("s", "v", False, None)


# -- TTL ------------------------------------------------------------------------------------------


def test_ttl_waits_then_deletes_the_job_only() -> None:
    job = (
        WORKERS.clone()
        .spec(runPolicy={"ttlSecondsAfterFinished": 60, "cleanUpPolicy": "All"})
        .decoded_spec()
    )
    early = observe(job, terminal(finished=NOW - timedelta(seconds=20)))
    assert not early.delete_job
    assert early.requeue_after == pytest.approx(40)
    due = observe(job, terminal(finished=NOW - timedelta(seconds=60)))
    assert due.delete_job
    assert (due.delete_pods, due.create, due.write_tensorboard_status) == ([], [], False)
    assert [e.reason for e in due.events] == [constants.REASON_TTL_EXPIRED]


def test_ttl_zero_deletes_at_once_and_no_ttl_never() -> None:
    assert observe(
        WORKERS.clone().spec(runPolicy={"ttlSecondsAfterFinished": 0}).decoded_spec(), terminal()
    ).delete_job
    result = observe(WORKERS.decoded_spec(), terminal(finished=NOW - timedelta(days=300)))
    assert not result.delete_job
    assert result.requeue_after is None


def test_ttl_counts_from_completion_of_a_finished_job_only() -> None:
    job = WORKERS.clone().spec(runPolicy={"ttlSecondsAfterFinished": 0}).decoded_spec()
    assert not observe(job, RUNNING).delete_job


# -- TensorBoard ----------------------------------------------------------------------------------

TB = {"tensorboardSpec": {"image": "tb:1", "trainingLogFilesets": ["t9k://pvc/c/log"]}}


def rendered(job_spec: PyTorchTrainingJobSpec) -> tuple[dict[str, Any], dict[str, Any]]:
    assert job_spec.tensorboard_spec is not None
    return render_deployment(META, job_spec.tensorboard_spec), render_service(META)


def test_tensorboard_is_created_with_the_job_and_reported_creating() -> None:
    job = WORKERS.clone().spec(**TB).decoded_spec()
    result = observe(job, {})
    deployment, service = rendered(job)
    assert result.create == [service, deployment]
    assert [e.reason for e in result.events] == [constants.REASON_TENSORBOARD_CREATED]
    assert result.write_tensorboard_status
    assert result.tensorboard_status is not None
    assert result.tensorboard_status["reason"] == "Creating"


def test_tensorboard_stays_after_the_job_ends_and_status_is_written_once() -> None:
    job = WORKERS.clone().spec(runPolicy={"cleanUpPolicy": "All"}, **TB).decoded_spec()
    deployment, service = rendered(job)
    deployment["metadata"]["generation"] = 1
    deployment["status"] = {"observedGeneration": 1, "readyReplicas": 1, "updatedReplicas": 1}
    seen = TensorBoardObserved(deployment, service, [])
    first = observe(job, terminal(), tensorboard=seen)
    assert (first.create, first.update, first.delete_tensorboard) == ([], [], [])
    assert first.write_tensorboard_status
    assert first.tensorboard_status is not None
    assert first.tensorboard_status["ready"] is True
    stored = {"ready": True, "url": first.tensorboard_status["url"]}
    again = observe(job, {**terminal(), "tensorboard": stored}, tensorboard=seen)
    assert not again.write_tensorboard_status


def test_changed_tensorboard_spec_rolls_the_deployment() -> None:
    old_job = WORKERS.clone().spec(**TB).decoded_spec()
    deployment, service = rendered(old_job)
    new_job = (
        WORKERS.clone()
        .spec(tensorboardSpec={**TB["tensorboardSpec"], "image": "tb:2"})
        .decoded_spec()
    )
    result = observe(new_job, {}, tensorboard=TensorBoardObserved(deployment, service, []))
    new_deployment, _ = rendered(new_job)
    assert result.update == [(new_deployment, deployment)]
    assert result.create == []
    assert [e.reason for e in result.events] == [constants.REASON_TENSORBOARD_UPDATED]
    assert result.tensorboard_status is not None
    assert result.tensorboard_status["reason"] == "Updating"
    assert spec_hash(new_deployment) != spec_hash(deployment)


def test_removed_tensorboard_spec_removes_the_tensorboard_and_its_status() -> None:
    deployment, service = rendered(WORKERS.clone().spec(**TB).decoded_spec())
    for obj, uid in ((deployment, "d-uid"), (service, "s-uid")):
        obj["metadata"]["uid"] = uid
    result = observe(
        WORKERS.decoded_spec(),
        {"tensorboard": {"ready": True}},
        tensorboard=TensorBoardObserved(deployment, service),
    )
    assert result.delete_tensorboard == [
        ("Deployment", "j-tensorboard", "d-uid"),
        ("Service", "j-tensorboard", "s-uid"),
    ]
    assert result.write_tensorboard_status
    assert result.tensorboard_status is None
    assert observe(WORKERS.decoded_spec(), {}).write_tensorboard_status is False


def test_a_changed_service_selector_is_put_back_and_reported_once_per_change() -> None:
    job = WORKERS.clone().spec(**TB).decoded_spec()
    deployment, service = rendered(job)
    hijacked = {**service, "spec": {**service["spec"], "selector": {"app": "mine"}}}
    hijacked["metadata"] = {**service["metadata"], "resourceVersion": "7"}
    result = observe(job, {}, tensorboard=TensorBoardObserved(deployment, hijacked, []))
    assert result.update == [(service, hijacked)]
    assert [(e.type, e.reason) for e in result.events] == [
        ("Warning", constants.REASON_TENSORBOARD_RESTORED)
    ]
    assert "spec.selector" in result.events[0].message
    assert result.events[0].key.endswith("-Service-7")


def test_changed_pod_labels_of_the_deployment_are_put_back() -> None:
    job = WORKERS.clone().spec(**TB).decoded_spec()
    deployment, service = rendered(job)
    template = {**deployment["spec"]["template"], "metadata": {"labels": {"app": "mine"}}}
    changed = {**deployment, "spec": {**deployment["spec"], "template": template}}
    result = observe(job, {}, tensorboard=TensorBoardObserved(changed, service, []))
    assert result.update == [(deployment, changed)]
    assert "spec.template.metadata.labels" in result.events[0].message


def test_an_unchanged_tensorboard_is_left_alone() -> None:
    job = WORKERS.clone().spec(**TB).decoded_spec()
    deployment, service = rendered(job)
    # What the apiserver adds beside what is rendered is not a change.
    service["spec"]["clusterIP"] = "10.0.0.9"
    result = observe(job, {}, tensorboard=TensorBoardObserved(deployment, service, []))
    assert (result.create, result.update, result.events) == ([], [], [])
