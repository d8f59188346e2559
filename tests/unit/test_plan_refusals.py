"""The apiserver's refusals of a job's creations, as the planner observes them: a permanent one
(422 Invalid, 400) fails the job naming it, a transient one (403 quota, 409, 429, 5xx) is shown
in ReplicaFailure while the creation is retried, and one that no longer matters is history."""

from __future__ import annotations

from typing import Any

import pytest
from support.planning import META, NOW, conditions, replica_pod, services, spec

from torchjob.lifecycle.failures import retry_delay
from torchjob.lifecycle.observe import PodView, Refusal
from torchjob.lifecycle.plan import Plan, plan
from torchjob.lifecycle.round import Observed

QUOTA = 'pods "j-worker-1" is forbidden: exceeded quota: one, requested: pods=1'
INVALID = 'Pod "j-worker-0" is invalid: spec.containers[0].volumeMounts[0].name: Not found'


def refused(
    refusal: Refusal,
    pods: list[PodView] | None = None,
    status: dict[str, Any] | None = None,
    svcs: frozenset[str] | None = None,
) -> Plan:
    job = spec()
    observed = Observed.of_json(
        META,
        job,
        status,
        pods or [],
        services(job) if svcs is None else svcs,
        NOW,
        (refusal,),
    )
    return plan(observed)


@pytest.mark.parametrize("code", [403, 409, 429, 500, 503, 504])
def test_a_transient_refusal_is_shown_and_retried(code: int) -> None:
    result = refused(Refusal("pod", "j-worker-1", QUOTA, code))
    assert result.status["phase"] == "Pending"
    failure = next(c for c in result.status["conditions"] if c["type"] == "ReplicaFailure")
    assert (failure["status"], failure["reason"]) == ("True", "PodCreationFailed")
    assert failure["message"] == f"creating pod j-worker-1: {QUOTA}"
    assert len(result.create_pods) == 3  # tried again
    assert "Failed" not in conditions(result.status)


@pytest.mark.parametrize("code", [400, 422])
def test_a_permanent_refusal_fails_the_job_at_once(code: int) -> None:
    result = refused(Refusal("pod", "j-worker-0", INVALID, code))
    assert result.status["phase"] == "Failed"
    assert conditions(result.status)["Failed"] == ("True", "PodCreationFailed")
    failed = next(c for c in result.status["conditions"] if c["type"] == "Failed")
    assert INVALID in failed["message"]
    assert result.create_pods == []
    assert [(e.type, e.reason) for e in result.status_events] == [("Warning", "PodCreationFailed")]
    assert "completionTime" in result.status


def test_an_invalid_service_name_fails_the_job() -> None:
    said = 'Service "resnet.v2-worker-0" is invalid: metadata.name: Invalid value'
    result = refused(
        Refusal("service", "j-worker-0", said, 422),
        svcs=frozenset({"j-master-0"}),
    )
    assert result.status["phase"] == "Failed"
    assert conditions(result.status)["Failed"] == ("True", "ServiceCreationFailed")


def test_a_refusal_of_an_object_that_exists_since_is_history() -> None:
    job = spec()
    pods = [
        replica_pod(k, i, uid=f"u{k}{i}") for k, i in (("master", 0), ("worker", 0), ("worker", 1))
    ]
    result = refused(Refusal("pod", "j-worker-1", INVALID, 422), pods=pods)
    assert result.status["phase"] == "Running"
    assert "ReplicaFailure" not in conditions(result.status)
    assert plan(Observed.of_json(META, job, None, pods, services(job), NOW)).status == (
        result.status
    )


def test_a_refusal_while_paused_is_history() -> None:
    job = spec(runMode={"pause": {"enabled": True}})
    observed = Observed.of_json(
        META, job, None, [], services(job), NOW, (Refusal("pod", "j-worker-0", QUOTA, 403),)
    )
    assert "ReplicaFailure" not in conditions(plan(observed).status)


def test_the_refusal_goes_once_the_creation_passes() -> None:
    shown = refused(Refusal("pod", "j-worker-1", QUOTA, 403)).status
    job = spec()
    pods = [
        replica_pod(k, i, "Pending", uid=f"u{k}{i}")
        for k, i in (("master", 0), ("worker", 0), ("worker", 1))
    ]
    after = plan(Observed.of_json(META, job, shown, pods, services(job), NOW)).status
    assert conditions(after)["ReplicaFailure"] == ("False", "NoReplicaFailure")


def test_a_refused_round_is_retried_after_a_doubling_delay() -> None:
    assert [retry_delay(n) for n in range(1, 12)] == [
        1.0,
        2.0,
        4.0,
        8.0,
        16.0,
        32.0,
        64.0,
        128.0,
        256.0,
        300.0,
        300.0,
    ]
