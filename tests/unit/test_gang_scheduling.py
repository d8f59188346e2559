"""Gang scheduling: how a job's pods are grouped (its annotation, a Kueue queue, T9k's scheduler,
the reconciler's setting, what the cluster serves), what that adds to each pod and to the group
object, and how the planner creates, resizes and deletes the group and reports in the Scheduled
condition and its Events what the replicas wait for."""

from __future__ import annotations

from typing import Any

import pytest
from support.jobs import JobBuilder
from support.planning import META, NOW, TRAINER, conditions, services, spec

from torchjob.api import constants
from torchjob.api.objects import PodPhase
from torchjob.api.types import PyTorchTrainingJobSpec
from torchjob.lifecycle.conditions import Event
from torchjob.lifecycle.observe import GroupView, PodView, Refusal, view_group, view_pod
from torchjob.lifecycle.plan import Plan, plan
from torchjob.lifecycle.round import Observed
from torchjob.render.replica_objects import render_pod
from torchjob.render.scheduling import (
    ANNOTATION_GANG,
    COSCHEDULING_GROUP_LABEL,
    KUEUE_GATE,
    KUEUE_GROUP_LABEL,
    KUEUE_QUEUE_LABEL,
    KUEUE_TOTAL_ANNOTATION,
    VOLCANO_GROUP_ANNOTATION,
    Gang,
    GangMode,
    GangSetting,
    GangUnavailable,
    SchedulingSettings,
    decorate_pod,
    gang_of,
    min_count_patch,
    render_pod_group,
    shared_priority_class,
)
from torchjob.render.topology import replicas_of

# Every group kind a cluster may serve.
ALL_KINDS: frozenset[GangMode] = frozenset({"native", "volcano", "coscheduling", "t9k"})
NATIVE = Gang("native", "j", 3, 3)  # the gang of `spec()`: a master and two workers
OWNER = {"apiVersion": "batch.tensorstack.dev/v1beta1", "kind": "PyTorchTrainingJob", "uid": "u"}
PRIORITIES = ((90, "high"), (0, "low"), (50, "normal"))  # in no order: the thresholds decide


def served(*kinds: GangMode, **fields: Any) -> SchedulingSettings:
    return SchedulingSettings(served=frozenset(kinds), **fields)


def meta(
    annotations: dict[str, str] | None = None, labels: dict[str, str] | None = None
) -> dict[str, Any]:
    return {**META, "annotations": annotations or {}, "labels": labels or {}}


def t9k(queue: str = "team", priority: int | None = None) -> PyTorchTrainingJobSpec:
    scheduler: dict[str, Any] = {"queue": queue}
    if priority is not None:
        scheduler["priority"] = priority
    return spec(scheduler={"t9kScheduler": scheduler})


def elastic(low: int, high: int, expected: int | None = None) -> PyTorchTrainingJobSpec:
    """A master and two workers, elastic between `low` and `high` replicas."""
    bounds: dict[str, Any] = {"minReplicas": low, "maxReplicas": high}
    if expected is not None:
        bounds["expectedReplicas"] = expected
    job = JobBuilder().replicas("master", 1, container=TRAINER).replicas("worker", 2)
    return job.torchrun().elastic(**bounds).decoded_spec()


# --- the mode: gang_of ------------------------------------------------------------------------


def test_auto_groups_pods_natively_where_the_cluster_serves_native_podgroups() -> None:
    assert gang_of(META, spec(), served("native")) == NATIVE


def test_auto_places_pods_one_by_one_where_native_podgroups_are_not_served() -> None:
    assert gang_of(META, spec(), served("volcano")) == Gang("none", "j", 3, 3)


@pytest.mark.parametrize("setting", ["volcano", "coscheduling"])
def test_the_setting_chooses_the_mode_of_jobs_that_do_not_choose(setting: GangSetting) -> None:
    gang = gang_of(META, spec(), served(*ALL_KINDS, gang=setting))
    assert isinstance(gang, Gang) and gang.mode == setting


@pytest.mark.parametrize("choice", ["native", "volcano", "coscheduling", "none"])
def test_the_jobs_annotation_overrides_the_setting(choice: GangMode) -> None:
    setting: GangSetting = "coscheduling" if choice == "volcano" else "volcano"
    gang = gang_of(meta({ANNOTATION_GANG: choice}), spec(), served(*ALL_KINDS, gang=setting))
    assert isinstance(gang, Gang) and gang.mode == choice


@pytest.mark.parametrize(
    ("mode", "api"),
    [
        ("native", "podgroups.scheduling.k8s.io/v1beta1"),
        ("volcano", "podgroups.scheduling.volcano.sh/v1beta1"),
        ("coscheduling", "podgroups.scheduling.x-k8s.io/v1alpha1"),
    ],
)
def test_a_mode_the_cluster_does_not_serve_is_unavailable_naming_its_api(
    mode: GangSetting, api: str
) -> None:
    by_setting = gang_of(META, spec(), served("t9k", gang=mode))
    by_annotation = gang_of(meta({ANNOTATION_GANG: mode}), spec(), served("t9k"))
    for gang in (by_setting, by_annotation):
        assert isinstance(gang, GangUnavailable)
        assert api in gang.message and f"'{mode}'" in gang.message


def test_none_is_never_unavailable() -> None:
    assert gang_of(META, spec(), served(gang="none")) == Gang("none", "j", 3, 3)


def test_a_kueue_queue_label_groups_the_whole_job_for_kueue_whatever_the_setting() -> None:
    job = meta(labels={KUEUE_QUEUE_LABEL: "team-a"})
    gang = gang_of(job, spec(), served("volcano", gang="volcano"))
    assert gang == Gang("kueue", "j", 3, 3, queue="team-a")


def test_an_elastic_job_in_a_kueue_queue_is_admitted_whole() -> None:
    job = meta(labels={KUEUE_QUEUE_LABEL: "team-a"})
    gang = gang_of(job, elastic(1, 5), served())
    assert isinstance(gang, Gang) and (gang.min_count, gang.total) == (3, 3)


@pytest.mark.parametrize(
    ("priority", "chosen"),
    [(0, "low"), (49, "low"), (50, "normal"), (89, "normal"), (90, "high"), (100, "high")],
)
def test_a_t9k_queue_mapped_to_kueue_takes_the_class_of_the_highest_threshold_reached(
    priority: int, chosen: str
) -> None:
    settings = served(t9k_queues="kueue", t9k_priority_classes=PRIORITIES)
    gang = gang_of(META, t9k("gpu-queue", priority), settings)
    assert gang == Gang("kueue", "j", 3, 3, "gpu-queue", priority_class=chosen)


def test_a_t9k_priority_below_every_threshold_takes_no_class() -> None:
    settings = served(t9k_queues="kueue", t9k_priority_classes=((10, "low"),))
    gang = gang_of(META, t9k("q", 5), settings)
    assert isinstance(gang, Gang) and gang.priority_class == ""


def test_a_t9k_job_forms_a_t9k_group_with_its_queue_and_priority_where_that_is_served() -> None:
    gang = gang_of(META, t9k("gpu-queue", 70), served("t9k", "native"))
    assert gang == Gang("t9k", "j", 3, 3, "gpu-queue", priority=70)


def test_a_t9k_job_is_placed_one_by_one_where_t9k_groups_are_not_served() -> None:
    gang = gang_of(META, t9k("gpu-queue", 70), served("native", gang="native"))
    assert isinstance(gang, Gang) and gang.mode == "none"


def test_an_elastic_job_needs_only_its_lower_bound_placed_together() -> None:
    gang = gang_of(META, elastic(2, 6, expected=5), served("native"))
    assert isinstance(gang, Gang) and (gang.min_count, gang.total) == (2, 5)


def test_an_elastic_lower_bound_above_the_replicas_asks_for_all_of_them() -> None:
    gang = gang_of(META, elastic(4, 6), served("native"))
    assert isinstance(gang, Gang) and (gang.min_count, gang.total) == (3, 3)


# --- what the gang adds to each pod: decorate_pod ---------------------------------------------


def rendered_pod(**pod_spec: Any) -> dict[str, Any]:
    labels = {constants.LABEL_REPLICA_TYPE: "worker", constants.LABEL_REPLICA_INDEX: "0"}
    return {"metadata": {"name": "j-worker-0", "labels": labels}, "spec": {**pod_spec}}


def decorated(gang: Gang, settings: SchedulingSettings | None = None, **pod_spec: Any) -> Any:
    pod = rendered_pod(**pod_spec)
    decorate_pod(pod, gang, settings or SchedulingSettings())
    return pod


def test_a_native_member_names_its_group_in_its_spec() -> None:
    pod = decorated(NATIVE)
    assert pod["spec"]["schedulingGroup"] == {"podGroupName": "j"}
    assert "schedulerName" not in pod["spec"]


def test_a_volcano_member_names_its_group_and_goes_to_volcanos_scheduler() -> None:
    pod = decorated(Gang("volcano", "j", 3, 3), SchedulingSettings(volcano_scheduler="vc"))
    assert pod["metadata"]["annotations"][VOLCANO_GROUP_ANNOTATION] == "j"
    assert pod["spec"]["schedulerName"] == "vc"


def test_a_scheduler_the_template_names_is_kept() -> None:
    pod = decorated(Gang("volcano", "j", 3, 3), schedulerName="mine")
    assert pod["spec"]["schedulerName"] == "mine"


def test_a_coscheduling_member_carries_the_group_label_and_its_scheduler() -> None:
    pod = decorated(Gang("coscheduling", "j", 3, 3))
    assert pod["metadata"]["labels"][COSCHEDULING_GROUP_LABEL] == "j"
    assert pod["spec"]["schedulerName"] == "scheduler-plugins-scheduler"


def test_a_kueue_member_carries_the_queue_the_group_and_its_total() -> None:
    pod = decorated(Gang("kueue", "j", 3, 3, "team-a", "high"))
    assert pod["metadata"]["labels"][KUEUE_QUEUE_LABEL] == "team-a"
    assert pod["metadata"]["labels"][KUEUE_GROUP_LABEL] == "j"
    assert pod["metadata"]["annotations"][KUEUE_TOTAL_ANNOTATION] == "3"
    assert pod["spec"]["priorityClassName"] == "high"
    assert "schedulerName" not in pod["spec"]


def test_the_pods_of_a_t9k_job_that_chooses_volcano_go_to_volcanos_scheduler() -> None:
    job_meta = meta({ANNOTATION_GANG: "volcano"})
    job = t9k("gpu-queue")
    settings = served("volcano", "t9k")
    gang = gang_of(job_meta, job, settings)
    assert isinstance(gang, Gang) and gang.mode == "volcano"
    master = replicas_of(job)[0]
    pod = render_pod(job_meta, job, master, {}, settings.t9k_scheduler)
    decorate_pod(pod, gang, settings)
    assert pod["metadata"]["annotations"][VOLCANO_GROUP_ANNOTATION] == "j"
    assert pod["spec"]["schedulerName"] == settings.volcano_scheduler


def test_a_priority_class_the_template_names_is_kept() -> None:
    pod = decorated(Gang("kueue", "j", 3, 3, "q", "high"), priorityClassName="mine")
    assert pod["spec"]["priorityClassName"] == "mine"


def test_a_t9k_member_carries_the_t9k_group_queue_and_role_labels() -> None:
    labels = decorated(Gang("t9k", "j", 3, 3, "gpu-queue", priority=7))["metadata"]["labels"]
    assert labels[constants.LABEL_T9K_GROUP] == "j"
    assert labels[constants.LABEL_T9K_QUEUE] == "gpu-queue"
    assert labels[constants.LABEL_T9K_ROLE] == "worker"


def test_a_pod_placed_one_by_one_is_left_as_rendered() -> None:
    pod = decorated(Gang("none", "j", 3, 3))
    assert pod["spec"] == {}
    assert pod["metadata"]["labels"] == rendered_pod()["metadata"]["labels"]
    assert not pod["metadata"].get("annotations")


# --- the group object: render_pod_group, min_count_patch, shared_priority_class ---------------


def group_of(gang: Gang, priority_class: str = "") -> dict[str, Any]:
    group = render_pod_group(META, gang, OWNER, priority_class)
    assert group is not None
    return group


def test_a_native_group_asks_for_its_minimum_in_its_gang_policy() -> None:
    group = group_of(Gang("native", "j", 2, 3))
    assert (group["apiVersion"], group["kind"]) == ("scheduling.k8s.io/v1beta1", "PodGroup")
    assert group["spec"] == {"schedulingPolicy": {"gang": {"minCount": 2}}}


@pytest.mark.parametrize(
    ("mode", "api_version"),
    [
        ("volcano", "scheduling.volcano.sh/v1beta1"),
        ("coscheduling", "scheduling.x-k8s.io/v1alpha1"),
    ],
)
def test_volcano_and_coscheduling_groups_ask_for_their_minimum_members(
    mode: GangMode, api_version: str
) -> None:
    group = group_of(Gang(mode, "j", 2, 3))
    assert group["apiVersion"] == api_version
    assert group["spec"] == {"minMember": 2}


def test_a_t9k_group_carries_its_queue_and_priority_but_no_priority_class() -> None:
    group = group_of(Gang("t9k", "j", 3, 3, "gpu-queue", priority=70), "high")
    assert group["apiVersion"] == "scheduler.tensorstack.dev/v1beta1"
    assert group["spec"] == {"minMember": 3, "queue": "gpu-queue", "priority": 70}


def test_a_group_is_the_jobs_own_named_and_labelled_for_it() -> None:
    metadata = group_of(NATIVE)["metadata"]
    assert metadata == {
        "name": "j",
        "namespace": "ns",
        "labels": {constants.LABEL_JOB_NAME: "j"},
        "ownerReferences": [OWNER],
    }


def test_a_group_is_placed_at_the_priority_its_replicas_share() -> None:
    assert group_of(Gang("volcano", "j", 3, 3), "high")["spec"]["priorityClassName"] == "high"
    # The gang's own class (from a T9k priority) wins over the templates'.
    gang = Gang("volcano", "j", 3, 3, priority_class="mapped")
    assert group_of(gang, "high")["spec"]["priorityClassName"] == "mapped"


@pytest.mark.parametrize("mode", ["kueue", "none"])
def test_kueue_and_none_have_no_group_object(mode: GangMode) -> None:
    assert render_pod_group(META, Gang(mode, "j", 3, 3, "q"), OWNER) is None


def test_the_minimum_is_patched_where_each_kind_keeps_it() -> None:
    native = {"spec": {"schedulingPolicy": {"gang": {"minCount": 2}}}}
    assert min_count_patch(Gang("native", "j", 2, 3)) == native
    for mode in ("volcano", "coscheduling", "t9k"):
        assert min_count_patch(Gang(mode, "j", 2, 3)) == {"spec": {"minMember": 2}}


def with_priorities(*names: str | None) -> PyTorchTrainingJobSpec:
    job = JobBuilder()
    for n, name in enumerate(names):
        job.replicas(f"type{n}", 1, container=TRAINER)
        if name is not None:
            job.pod_spec(f"type{n}", priorityClassName=name)
    return job.decoded_spec()


def test_the_shared_priority_class_is_the_one_every_replica_names() -> None:
    assert shared_priority_class(with_priorities("high", "high")) == "high"
    assert shared_priority_class(with_priorities("high", "low")) == ""
    assert shared_priority_class(with_priorities("high", None)) == ""
    assert shared_priority_class(with_priorities(None, None)) == ""


# --- what is observed of a group and of its pods: view_group, view_pod ------------------------


def group_object(
    spec_fields: dict[str, Any], status: dict[str, Any], deleting: bool = False
) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": "j"}
    if deleting:
        metadata["deletionTimestamp"] = "2026-01-01T11:59:00Z"
    return {"metadata": metadata, "spec": spec_fields, "status": status}


NATIVE_SPEC = {"schedulingPolicy": {"gang": {"minCount": 2}}}
SAID = "0/6 nodes are available: 6 Insufficient nvidia.com/gpu."


def test_a_native_group_initially_scheduled_is_placed() -> None:
    status = {"conditions": [{"type": "PodGroupInitiallyScheduled", "status": "True"}]}
    assert view_group(group_object(NATIVE_SPEC, status)) == GroupView("j", 2, False, True, None)


def test_a_native_group_not_initially_scheduled_says_what_the_scheduler_said() -> None:
    condition = {
        "type": "PodGroupInitiallyScheduled",
        "status": "False",
        "reason": "Unschedulable",
        "message": SAID,
    }
    group = view_group(group_object(NATIVE_SPEC, {"conditions": [condition]}))
    assert (group.scheduled, group.unschedulable) == (False, SAID)


def test_a_native_group_without_conditions_is_neither_placed_nor_unschedulable() -> None:
    group = view_group(group_object(NATIVE_SPEC, {}, deleting=True))
    assert group == GroupView("j", 2, True, False, None)


def test_a_running_volcano_group_is_placed() -> None:
    group = view_group(group_object({"minMember": 3}, {"phase": "Running"}))
    assert group == GroupView("j", 3, False, True, None)


def test_an_unschedulable_volcano_group_says_why() -> None:
    condition = {"type": "Unschedulable", "status": "True", "message": SAID}
    group = view_group(
        group_object({"minMember": 3}, {"phase": "Inqueue", "conditions": [condition]})
    )
    assert (group.scheduled, group.unschedulable) == (False, SAID)


def test_a_volcano_group_running_since_it_was_unschedulable_is_placed() -> None:
    condition = {"type": "Unschedulable", "status": "True", "message": SAID}
    group = view_group(
        group_object({"minMember": 3}, {"phase": "Running", "conditions": [condition]})
    )
    assert (group.scheduled, group.unschedulable) == (True, None)


@pytest.mark.parametrize(
    ("phase", "placed"), [("Scheduled", True), ("Running", True), ("Pending", False)]
)
def test_a_coscheduling_group_is_placed_once_scheduled(phase: str, placed: bool) -> None:
    assert view_group(group_object({"minMember": 3}, {"phase": phase})).scheduled is placed


def member(
    kind: str,
    index: int,
    phase: PodPhase = "Pending",
    *,
    node: str = "",
    gates: tuple[str, ...] = (),
    unschedulable: str | None = None,
) -> PodView:
    """A replica pod as the reconciler observes it: placed on `node`, held by `gates`, or found
    unschedulable by the scheduler saying so."""
    labels = {constants.LABEL_REPLICA_TYPE: kind, constants.LABEL_REPLICA_INDEX: str(index)}
    pod_spec: dict[str, Any] = {"containers": [TRAINER]}
    if node:
        pod_spec["nodeName"] = node
    if gates:
        pod_spec["schedulingGates"] = [{"name": g} for g in gates]
    status: dict[str, Any] = {"phase": phase}
    if unschedulable is not None:
        status["conditions"] = [
            {
                "type": "PodScheduled",
                "status": "False",
                "reason": "Unschedulable",
                "message": unschedulable,
            }
        ]
    metadata = {"name": f"j-{kind}-{index}", "uid": f"uid-{kind}-{index}", "labels": labels}
    view = view_pod({"metadata": metadata, "spec": pod_spec, "status": status})
    assert view is not None
    return view


def test_a_pod_is_seen_bound_gated_or_unschedulable() -> None:
    assert member("worker", 0, node="n1").bound
    assert member("worker", 0, gates=(KUEUE_GATE,)).gates == (KUEUE_GATE,)
    assert member("worker", 0, unschedulable=SAID).unschedulable == SAID
    assert not member("worker", 0).placed
    assert member("worker", 0, "Running").placed


# --- the planner: the group object ------------------------------------------------------------


def gang_plan(
    job: PyTorchTrainingJobSpec,
    pods: list[PodView],
    gang: Gang | GangUnavailable | None = NATIVE,
    group: GroupView | None = None,
    status: dict[str, Any] | None = None,
    refusals: tuple[Refusal, ...] = (),
) -> Plan:
    observed = Observed.of_json(
        META, job, status, pods, services(job), NOW, refusals, gang=gang, group=group
    )
    return plan(observed)


def native_group(min_count: int = 3, **fields: Any) -> GroupView:
    view: dict[str, Any] = {"deleting": False, "scheduled": False, "unschedulable": None}
    return GroupView("j", min_count, **{**view, **fields})


def replicas(phase: PodPhase = "Pending", **fields: Any) -> list[PodView]:
    """A pod for each of the three replicas of `spec()`."""
    return [member(k, i, phase, **fields) for k, i in (("master", 0), ("worker", 0), ("worker", 1))]


def test_a_native_group_is_created_in_the_same_plan_as_the_pods() -> None:
    result = gang_plan(spec(), [])
    assert result.create_group
    assert len(result.create_pods) == 3
    assert not (result.resize_group or result.delete_group)


def test_an_existing_group_of_the_gangs_minimum_is_left_alone() -> None:
    result = gang_plan(spec(), replicas(), group=native_group(3))
    assert not (result.create_group or result.resize_group or result.delete_group)


def test_a_group_whose_minimum_differs_is_resized() -> None:
    result = gang_plan(spec(), replicas(), group=native_group(2))
    assert result.resize_group and not result.create_group


def test_no_pod_joins_a_group_being_deleted() -> None:
    result = gang_plan(spec(), [], group=native_group(3, deleting=True))
    assert result.create_pods == []
    assert not (result.create_group or result.resize_group or result.delete_group)


def test_pausing_deletes_the_group_with_the_pods() -> None:
    paused = spec(runMode={"pause": {"enabled": True}})
    result = gang_plan(paused, replicas("Running"), group=native_group(3))
    assert result.delete_group
    assert len(result.delete_pods) == 3
    assert not result.create_group


def test_a_group_already_being_deleted_is_not_deleted_again() -> None:
    paused = spec(runMode={"pause": {"enabled": True}})
    result = gang_plan(paused, [], group=native_group(3, deleting=True))
    assert not result.delete_group


def test_a_job_the_cluster_cannot_group_as_asked_fails() -> None:
    said = "gang scheduling 'volcano' needs podgroups.scheduling.volcano.sh/v1beta1, ..."
    result = gang_plan(spec(), [], GangUnavailable(said))
    assert result.status["phase"] == "Failed"
    assert conditions(result.status)["Failed"] == ("True", constants.REASON_GANG_UNAVAILABLE)
    failed = next(c for c in result.status["conditions"] if c["type"] == "Failed")
    assert failed["message"] == said
    assert result.create_pods == [] and not result.create_group
    assert Event("Warning", constants.REASON_GANG_UNAVAILABLE, said) in result.status_events


def test_pods_placed_one_by_one_need_no_group() -> None:
    for gang in (None, Gang("none", "j", 3, 3), Gang("kueue", "j", 3, 3, "q")):
        result = gang_plan(spec(), [], gang)
        assert len(result.create_pods) == 3
        assert not (result.create_group or result.resize_group or result.delete_group)


def test_a_permanent_refusal_of_the_group_fails_the_job() -> None:
    refusal = Refusal("podgroup", "j", 'PodGroup "j" is invalid', 422)
    result = gang_plan(spec(), [], refusals=(refusal,))
    assert conditions(result.status)["Failed"] == (
        "True",
        constants.REASON_POD_GROUP_CREATION_FAILED,
    )
    assert result.create_pods == [] and not result.create_group


def test_a_transient_refusal_of_the_group_is_shown_and_retried() -> None:
    refusal = Refusal("podgroup", "j", "exceeded quota", 403)
    result = gang_plan(spec(), [], refusals=(refusal,))
    assert result.create_group
    assert conditions(result.status)["ReplicaFailure"] == (
        "True",
        constants.REASON_POD_GROUP_CREATION_FAILED,
    )


# --- the planner: the Scheduled condition and its Events --------------------------------------


def scheduled(result: Plan) -> dict[str, Any]:
    return next(c for c in result.status["conditions"] if c["type"] == "Scheduled")


def scheduling_events(result: Plan) -> list[Event]:
    return [e for e in result.status_events if e.reason in ("Scheduled", "Unschedulable")]


def test_pods_placed_one_by_one_have_no_scheduled_condition() -> None:
    for gang in (None, Gang("none", "j", 3, 3)):
        assert "Scheduled" not in conditions(gang_plan(spec(), replicas(), gang).status)


def test_a_group_whose_pods_wait_for_the_scheduler_is_scheduling() -> None:
    for pods in ([], replicas()):
        result = gang_plan(spec(), pods, group=native_group())
        assert conditions(result.status)["Scheduled"] == ("False", constants.REASON_SCHEDULING)
        assert scheduling_events(result) == []


def test_a_group_the_scheduler_cannot_place_is_unschedulable_with_its_message() -> None:
    result = gang_plan(spec(), replicas(), group=native_group(unschedulable=SAID))
    condition = scheduled(result)
    assert (condition["status"], condition["reason"]) == ("False", "Unschedulable")
    assert SAID in condition["message"]
    assert scheduling_events(result) == [Event("Warning", "Unschedulable", condition["message"])]


def test_a_pod_the_scheduler_cannot_place_makes_the_group_unschedulable() -> None:
    pods = [*replicas()[:2], member("worker", 1, unschedulable=SAID)]
    condition = scheduled(gang_plan(spec(), pods, group=native_group()))
    assert (condition["status"], condition["reason"]) == ("False", "Unschedulable")
    assert SAID in condition["message"]


def test_an_unschedulable_job_is_warned_of_once() -> None:
    first = gang_plan(spec(), replicas(), group=native_group(unschedulable=SAID))
    again = gang_plan(
        spec(), replicas(), group=native_group(unschedulable=SAID), status=first.status
    )
    assert scheduling_events(again) == []


def test_pods_held_by_kueues_gate_wait_for_admission() -> None:
    kueue = Gang("kueue", "j", 3, 3, "team-a")
    result = gang_plan(spec(), replicas(gates=(KUEUE_GATE, "other/gate")), kueue)
    condition = scheduled(result)
    assert (condition["status"], condition["reason"]) == ("False", "WaitingForAdmission")
    assert "team-a" in condition["message"]


def test_pods_held_by_other_gates_are_scheduling_gated() -> None:
    result = gang_plan(spec(), replicas(gates=("example.com/arrival",)), group=native_group())
    condition = scheduled(result)
    assert (condition["status"], condition["reason"]) == ("False", "SchedulingGated")
    assert "example.com/arrival" in condition["message"]


def test_a_group_whose_pods_are_all_bound_is_scheduled_and_announced() -> None:
    waiting = gang_plan(spec(), replicas(), group=native_group(unschedulable=SAID))
    bound = [*replicas("Running")[:2], member("worker", 1, node="n1")]
    result = gang_plan(spec(), bound, group=native_group(scheduled=True), status=waiting.status)
    condition = scheduled(result)
    assert (condition["status"], condition["reason"]) == ("True", "Scheduled")
    assert scheduling_events(result) == [Event("Normal", "Scheduled", condition["message"])]


def test_a_group_is_not_scheduled_while_a_replica_has_no_pod() -> None:
    result = gang_plan(spec(), replicas("Running")[:2], group=native_group(scheduled=True))
    assert conditions(result.status)["Scheduled"][0] == "False"


def test_a_paused_group_is_not_scheduled() -> None:
    paused = spec(runMode={"pause": {"enabled": True}})
    result = gang_plan(paused, [], group=None)
    assert conditions(result.status)["Scheduled"] == ("False", constants.REASON_PAUSED)


def test_a_group_being_deleted_says_nothing_of_the_pods_to_come() -> None:
    """On resume the old group is still being deleted; what the scheduler said of it is not
    about the pods of the new group, which do not exist yet."""
    paused = gang_plan(spec(runMode={"pause": {"enabled": True}}), [], group=None)
    old = native_group(deleting=True, unschedulable=SAID)
    resumed = gang_plan(spec(), [], group=old, status=paused.status)
    assert conditions(resumed.status)["Scheduled"] == ("False", constants.REASON_SCHEDULING)
    assert scheduling_events(resumed) == []
