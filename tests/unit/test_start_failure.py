"""Start failures: what the kubelet says of a container that cannot start, the StartFailure
condition and its Events, and the start deadline that fails the job, with what does not count
(scheduling gates, a paused job, a group waiting in its queue)."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

import pytest
from support.jobs import JobBuilder
from support.planning import META, NOW, conditions, gone, replica_pod, services, spec

from torchjob.api import constants
from torchjob.api.validation import validate
from torchjob.lifecycle.backoff import RestartRules
from torchjob.lifecycle.finishing import recorded_outcome
from torchjob.lifecycle.observe import CannotStart, GroupView, PodView, view_pod
from torchjob.lifecycle.plan import Plan, plan
from torchjob.lifecycle.round import Observed
from torchjob.lifecycle.times import format_time
from torchjob.reconciler.settings import parse
from torchjob.render.scheduling import KUEUE_GATE, Gang
from torchjob.views.cli import description, tables

PULL = CannotStart(
    "python",
    constants.REASON_IMAGE_PULL_FAILED,
    "ImagePullBackOff",
    'Back-off pulling image "nope:1"',
)
IMAGE = 'ImagePullBackOff: Back-off pulling image "nope:1"'  # PULL in the job's words
SECRET = CannotStart(
    "python",
    constants.REASON_CONTAINER_CONFIG_INVALID,
    "CreateContainerConfigError",
    'secret "s" not found',
)
JOB = spec(workers=2)


def pod(kind: str, index: int, **fields: Any) -> PodView:
    """A pending replica pod; `fields` says why it does not start."""
    return replica_pod(kind, index, **{"phase": "Pending", "containers": (), **fields})


def three(**worker1: Any) -> list[PodView]:
    return [pod("master", 0, bound=True), pod("worker", 0, bound=True), pod("worker", 1, **worker1)]


def decide(
    pods: list[PodView],
    status: dict[str, Any] | None = None,
    *,
    now: datetime = NOW,
    annotations: dict[str, str] | None = None,
    job: Any = JOB,
    setting: float = 600,
    **other: Any,
) -> Plan:
    meta = {**META, "annotations": annotations or {}}
    observed = Observed.of_json(meta, job, status, pods, services(job), now, **other)
    return plan(observed, RestartRules(start_deadline=int(setting)))


def failing_since(
    seconds_ago: float, reason: str = constants.REASON_IMAGE_PULL_FAILED
) -> dict[str, Any]:
    """A status whose StartFailure condition became True `seconds_ago`."""
    since = format_time(NOW - timedelta(seconds=seconds_ago))
    condition = {
        "type": "StartFailure",
        "status": "True",
        "reason": reason,
        "message": "m",
        "lastTransitionTime": since,
    }
    return {"phase": "Pending", "conditions": [condition]}


def start_condition(status: dict[str, Any]) -> dict[str, Any]:
    return next(c for c in status["conditions"] if c["type"] == "StartFailure")


def raw_pod(statuses: dict[str, Any]) -> dict[str, Any]:
    labels = {constants.LABEL_REPLICA_TYPE: "worker", constants.LABEL_REPLICA_INDEX: "0"}
    return {
        "metadata": {"name": "j-worker-0", "uid": "u", "labels": labels},
        "spec": {"containers": [{"name": "python"}]},
        "status": {"phase": "Pending", **statuses},
    }


def waiting(name: str, reason: str, message: str = "") -> dict[str, Any]:
    return {"name": name, "state": {"waiting": {"reason": reason, "message": message}}}


@pytest.mark.parametrize(
    ("said", "reason"),
    [
        ("ErrImagePull", constants.REASON_IMAGE_PULL_FAILED),
        ("ImagePullBackOff", constants.REASON_IMAGE_PULL_FAILED),
        ("InvalidImageName", constants.REASON_IMAGE_PULL_FAILED),
        ("ErrImageNeverPull", constants.REASON_IMAGE_PULL_FAILED),
        ("CreateContainerConfigError", constants.REASON_CONTAINER_CONFIG_INVALID),
        ("CreateContainerError", constants.REASON_CONTAINER_CONFIG_INVALID),
    ],
)
def test_the_kubelets_waiting_reasons_that_say_a_container_cannot_start(
    said: str, reason: str
) -> None:
    view = view_pod(raw_pod({"containerStatuses": [waiting("python", said, "it\n  cannot")]}))
    assert view is not None
    assert view.cannot_start == CannotStart("python", reason, said, "it cannot")


def test_an_init_container_that_cannot_start_is_read_first() -> None:
    statuses = {
        "initContainerStatuses": [
            waiting("setup", "CreateContainerConfigError", 'secret "s" not found')
        ],
        "containerStatuses": [waiting("python", "PodInitializing")],
    }
    view = view_pod(raw_pod(statuses))
    assert view is not None and view.cannot_start is not None
    assert (view.cannot_start.container, view.cannot_start.said) == (
        "setup",
        "CreateContainerConfigError",
    )


@pytest.mark.parametrize("said", ["ContainerCreating", "PodInitializing", "CrashLoopBackOff"])
def test_a_start_under_way_or_a_restart_is_no_start_failure(said: str) -> None:
    view = view_pod(raw_pod({"containerStatuses": [waiting("python", said)]}))
    assert view is not None and view.cannot_start is None


def test_a_replica_that_cannot_start_gives_the_condition_and_a_warning_event() -> None:
    decision = decide(three(cannot_start=PULL))
    condition = start_condition(decision.status)
    assert (condition["status"], condition["reason"]) == ("True", "ImagePullFailed")
    assert (
        condition["message"]
        == 'replica j-worker-1 cannot start: ImagePullBackOff: Back-off pulling image "nope:1"'
    )
    warnings = [e for e in decision.status_events if e.type == "Warning"]
    assert [(e.reason, e.message) for e in warnings] == [("ImagePullFailed", condition["message"])]
    assert decision.requeue_after == 600  # the clock starts now


def test_the_condition_names_the_replicas_that_fail_alike_together() -> None:
    pods = [
        pod("master", 0, cannot_start=SECRET),
        pod("worker", 0, cannot_start=PULL),
        pod("worker", 1, cannot_start=PULL),
    ]
    condition = start_condition(decide(pods).status)
    assert condition["reason"] == "ContainerConfigInvalid"  # the first replica's
    assert condition["message"] == (
        'replica j-master-0 cannot start: CreateContainerConfigError: secret "s" not found; '
        f"replicas j-worker-0, j-worker-1 cannot start: {IMAGE}"
    )


def test_a_pod_no_node_takes_is_a_start_failure() -> None:
    condition = start_condition(decide(three(unschedulable="0/3 nodes are available")).status)
    assert (condition["reason"], condition["message"]) == (
        "Unschedulable",
        "replica j-worker-1 cannot start: Unschedulable: 0/3 nodes are available",
    )


def test_an_event_again_only_when_the_reason_changes() -> None:
    status = decide(three(cannot_start=PULL)).status
    flipped = CannotStart("python", "ImagePullFailed", "ErrImagePull", "rpc error")
    same = decide(three(cannot_start=flipped), status)
    assert start_condition(same.status)["message"].endswith("ErrImagePull: rpc error")
    assert not [e for e in same.status_events if e.reason == "ImagePullFailed"]
    other = decide(three(cannot_start=SECRET), status)
    assert [e.reason for e in other.status_events if e.type == "Warning"] == [
        "ContainerConfigInvalid"
    ]
    # The deadline's clock runs on across the change of reason.
    assert (
        start_condition(other.status)["lastTransitionTime"]
        == start_condition(status)["lastTransitionTime"]
    )


def test_once_the_replicas_start_the_condition_is_false_and_the_clock_stops() -> None:
    status = decide(three(cannot_start=PULL)).status
    later = decide(three(bound=True, phase="Running"), status, now=NOW + timedelta(seconds=5))
    condition = start_condition(later.status)
    assert (condition["status"], condition["reason"]) == ("False", "Started")
    assert not [e for e in later.status_events if e.type == "Warning"]
    assert later.requeue_after is None


def test_at_its_start_deadline_the_job_fails_and_its_unfinished_pods_are_deleted() -> None:
    pods = three(cannot_start=PULL)
    before = decide(pods, failing_since(599))
    assert before.requeue_after == pytest.approx(1)
    assert not before.delete_pods
    decision = decide(pods, failing_since(600))
    assert sorted(decision.delete_pods) == sorted((p.name, p.uid) for p in pods)
    assert not decision.create_pods and decision.requeue_after is None
    assert conditions(decision.status)["Running"] == ("False", "ImagePullFailed")
    # The job says it failed once those pods are gone.
    done = decide(gone(decision, pods), decision.status, now=NOW + timedelta(seconds=1))
    assert done.status["phase"] == "Failed"
    failed = next(c for c in done.status["conditions"] if c["type"] == "Failed")
    assert (failed["status"], failed["reason"]) == ("True", "ImagePullFailed")
    assert failed["message"] == (
        f"the start deadline (10m) passed: replica j-worker-1 cannot start: {IMAGE}"
    )
    assert not done.create_pods and not done.delete_pods and done.requeue_after is None
    assert ("Warning", "ImagePullFailed") in [(e.type, e.reason) for e in done.status_events]
    assert conditions(done.status)["StartFailure"] == ("True", "ImagePullFailed")


def test_the_jobs_annotation_overrides_the_setting_and_zero_turns_it_off() -> None:
    pods = three(cannot_start=SECRET)
    annotation = constants.ANNOTATION_START_DEADLINE
    # The job fails: its status shows how while its pods stop.
    short = decide(pods, failing_since(5), annotations={annotation: "5"})
    assert conditions(short.status)["Running"] == ("False", "ContainerConfigInvalid")
    assert recorded_outcome(short.status) is not None
    assert decide(
        pods, failing_since(5), annotations={annotation: "6"}
    ).requeue_after == pytest.approx(1)
    off = decide(pods, failing_since(10_000), annotations={annotation: "0"})
    assert recorded_outcome(off.status) is None and off.requeue_after is None
    assert not off.delete_pods
    unset = decide(pods, failing_since(10_000), setting=0)
    assert recorded_outcome(unset.status) is None and not unset.delete_pods
    assert recorded_outcome(decide(pods, failing_since(30), setting=30).status) is not None


def test_waiting_for_a_turn_is_no_start_failure() -> None:
    gated = three(gates=(KUEUE_GATE,), unschedulable="gated")
    assert "StartFailure" not in conditions(
        decide(gated, gang=Gang("kueue", "j", 3, 3, queue="q")).status
    )
    paused = spec(workers=2, runMode={"pause": {"enabled": True}})
    assert "StartFailure" not in conditions(decide(three(cannot_start=PULL), job=paused).status)
    queued = Gang("volcano", "j", 3, 3, queue="research")
    waiting_group = GroupView("j", 3, False, False, "queue research is full")
    status = decide(
        three(unschedulable="queue is full"),
        failing_since(10_000),
        gang=queued,
        group=waiting_group,
    ).status
    assert conditions(status)["StartFailure"] == ("False", "Started")
    assert status["phase"] != "Failed"
    # Once the group is placed, a pod no node takes is a start failure again.
    placed = replace(waiting_group, scheduled=True, unschedulable=None)
    assert conditions(decide(three(unschedulable="no fit"), gang=queued, group=placed).status)[
        "StartFailure"
    ] == ("True", "Unschedulable")


def test_the_start_deadline_annotation_must_be_a_whole_number() -> None:
    job: dict[str, Any] = {
        "apiVersion": "batch.tensorstack.dev/v1beta1",
        "kind": "PyTorchTrainingJob",
        "metadata": {"name": "j", "annotations": {constants.ANNOTATION_START_DEADLINE: "5m"}},
        "spec": JOB.to_dict(),
    }
    errors = validate(job).errors
    path = f"metadata.annotations[{constants.ANNOTATION_START_DEADLINE}]"
    assert [e.path for e in errors] == [path]
    job["metadata"]["annotations"][constants.ANNOTATION_START_DEADLINE] = "0"
    assert not validate(job).errors


def test_the_reconcilers_start_deadline_setting() -> None:
    assert parse([]).start_deadline == 600
    assert parse(["--start-deadline", "0"]).start_deadline == 0
    with pytest.raises(SystemExit):
        parse(["--start-deadline", "-1"])


def listed_job(name: str, job_phase: str, *conditions: dict[str, Any]) -> dict[str, Any]:
    built = JobBuilder(name, "ns").replicas("worker", 1).build()
    built["status"] = {"phase": job_phase, "conditions": list(conditions)}
    return built


def test_the_list_says_why_replicas_cannot_start() -> None:
    holds = {"type": "StartFailure", "status": "True", "reason": "ImagePullFailed"}
    over = {**holds, "status": "False", "reason": "Started"}
    created = {"type": "Initialized", "status": "True", "reason": "ReplicasCreated"}
    jobs = [
        listed_job(
            "a", "Pending", holds, {**created, "lastTransitionTime": "2099-01-01T00:00:00Z"}
        ),
        listed_job("b", "Running", over),
        listed_job("c", "Failed", holds),
    ]
    rows = [line.split() for line in tables.list_table(jobs, NOW, wide=True).splitlines()]
    assert {row[0]: (row[1], row[-1]) for row in rows[1:]} == {
        "a": ("ImagePullFailed", "ImagePullFailed"),
        "b": ("Running", "<none>"),
        "c": ("Failed", "ImagePullFailed"),
    }
    text = description.describe(jobs[0], [], [], NOW)
    assert "StartFailure   True" in text
