"""A job whose pods form a Kueue pod group tells Kueue, once the job has ended, that the group is
over (lifecycle/kueue.py): Kueue frees the group's quota and lets its pods go only once
every pod succeeded, unless a pod carries `kueue.x-k8s.io/retriable-in-group: "false"`. The
workers the reconciler stops after the master succeeded end Failed, and so do the failed pods of
a job that failed: without the annotation their quota would be held for ever
(tests/e2e/test_kueue.py shows it on real Kueue)."""

from __future__ import annotations

from typing import Any

from support.planning import META, NOW, TRAINER, replica_pod, services, settle, spec
from support.recording import RecordingApiserver

from torchjob.api.objects import PodPhase
from torchjob.api.types import PyTorchTrainingJobSpec
from torchjob.kube.reconcile import JobKey
from torchjob.kube.slim import slim_pod
from torchjob.lifecycle.observe import ContainerView, PodView, view_pod
from torchjob.lifecycle.plan import Plan, plan
from torchjob.lifecycle.round import Observed
from torchjob.render.scheduling import (
    KUEUE_RETRIABLE_ANNOTATION,
    Gang,
    GangUnavailable,
    kueue_group_ended_patch,
)

KUEUE = Gang("kueue", "j", 3, 3, "team-a")
EVERY_POD = [
    ("j-master-0", "uid-master-0"),
    ("j-worker-0", "uid-worker-0"),
    ("j-worker-1", "uid-worker-1"),
]


def member(kind: str, index: int, phase: PodPhase = "Running", **fields: Any) -> PodView:
    code = {"Succeeded": 0, "Failed": 1}.get(phase)
    ended = (ContainerView("python", "terminated", code),) if code is not None else ()
    return replica_pod(kind, index, phase, exit_code=code, containers=ended, **fields)


def running(**fields: Any) -> list[PodView]:
    return [member(k, i, **fields) for k, i in (("master", 0), ("worker", 0), ("worker", 1))]


def round_of(
    pods: list[PodView],
    status: dict[str, Any] | None = None,
    gang: Gang | GangUnavailable | None = KUEUE,
    job: PyTorchTrainingJobSpec | None = None,
) -> Plan:
    job = job or spec()
    return plan(Observed.of_json(META, job, status, pods, services(job), NOW, gang=gang))


def test_a_running_kueue_group_is_left_as_it_is() -> None:
    assert round_of(running(), settle(spec(), running())).end_group == []


def test_the_master_succeeding_ends_the_group_on_every_pod_with_the_workers_stopping() -> None:
    pods = [member("master", 0, "Succeeded"), *running()[1:]]
    result = round_of(pods, settle(spec(), running()))
    assert sorted(result.end_group) == EVERY_POD
    assert sorted(name for name, _ in result.delete_pods) == ["j-worker-0", "j-worker-1"]


def test_the_round_that_says_the_job_succeeded_still_ends_the_group() -> None:
    """The workers ended Failed once stopped: no later round of the job acts but on what its
    last status says, so the ending round and those after it name what is left."""
    stopping = round_of(
        [member("master", 0, "Succeeded"), *running()[1:]], settle(spec(), running())
    )
    ended = [member("master", 0, "Succeeded"), *(member("worker", i, "Failed") for i in (0, 1))]
    succeeded = round_of(ended, stopping.status)
    assert succeeded.status["phase"] == "Succeeded"
    assert sorted(succeeded.end_group) == EVERY_POD
    after = round_of(ended, succeeded.status)
    assert sorted(after.end_group) == EVERY_POD
    told = [member(p.replica_type, p.index, p.phase, group_ended=True) for p in ended]
    assert round_of(told, succeeded.status).end_group == []


def test_a_failed_job_ends_its_group_and_replaces_nothing() -> None:
    never = spec("Never")
    pods = [member("master", 0, "Failed"), *running()[1:]]
    result = round_of(pods, settle(never, running()), job=never)
    assert sorted(result.end_group) == EVERY_POD
    assert result.create_pods == []


def test_pods_that_already_say_so_and_groups_of_other_kinds_are_left_alone() -> None:
    pods = [member("master", 0, "Succeeded", group_ended=True), *running()[1:]]
    status = settle(spec(), running())
    assert sorted(round_of(pods, status).end_group) == EVERY_POD[1:]
    for other in (Gang("native", "j", 3, 3), Gang("none", "j", 3, 3), None):
        assert round_of(pods, status, gang=other).end_group == []


def test_the_annotation_is_read_from_the_pod_and_kept_in_the_cache() -> None:
    pod: dict[str, Any] = {
        "metadata": {
            "name": "j-worker-0",
            "uid": "u",
            "labels": {
                "batch.tensorstack.dev/replica-type": "worker",
                "batch.tensorstack.dev/replica-index": "0",
            },
            "annotations": {KUEUE_RETRIABLE_ANNOTATION: "false", "other": "x"},
        },
        "spec": {"containers": [TRAINER]},
        "status": {"phase": "Failed"},
    }
    seen = view_pod(slim_pod(pod))
    assert seen is not None and seen.group_ended
    unmarked = view_pod({**pod, "metadata": {**pod["metadata"], "annotations": {}}})
    assert unmarked is not None and not unmarked.group_ended
    assert kueue_group_ended_patch() == {
        "metadata": {"annotations": {KUEUE_RETRIABLE_ANNOTATION: "false"}}
    }


async def test_the_executor_patches_each_pod_named_and_passes_over_one_gone() -> None:
    api = RecordingApiserver("j-worker-0")
    acting = api.executor()
    job = {"apiVersion": "batch.tensorstack.dev/v1beta1", "kind": "PyTorchTrainingJob"}
    ended = Plan(end_group=list(EVERY_POD))
    await acting.execute(JobKey("ns", "j"), {**job, "metadata": dict(META)}, spec(), ended)
    await acting.events.flush()
    assert [path.rsplit("/", 1)[-1] for path, _ in api.patches] == ["j-master-0", "j-worker-1"]
    assert all(body == kueue_group_ended_patch() for _, body in api.patches)
