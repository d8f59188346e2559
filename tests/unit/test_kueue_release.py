"""A job whose Kueue pod group has a pod Kueue holds while it is deleted releases the group's
Workload (lifecycle/kueue.py): Kueue lets such a pod go only once a replacement of its role
exists, and our replacement has the replica's name, which the held pod keeps. Deleting the
Workload is Kueue's own way of letting every pod of a group go; tests/e2e/test_kueue.py shows
it on real Kueue (a worker restarted, a job deleted)."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from typing import Any

from support.planning import META, NOW, TRAINER, replica_pod, services, settle, spec
from support.recording import RecordingApiserver

from torchjob.kube.reconcile import JobKey
from torchjob.kube.slim import slim_pod
from torchjob.lifecycle.kueue import workload_to_release
from torchjob.lifecycle.observe import ContainerView, PodView, view_pod
from torchjob.lifecycle.plan import Plan, plan
from torchjob.lifecycle.round import Observed
from torchjob.render.scheduling import KUEUE_FINALIZER, KUEUE_GROUP_LABEL, Gang

KUEUE = Gang("kueue", "j", 3, 3, "team-a")


def member(kind: str, index: int, phase: Any = "Running", **fields: Any) -> PodView:
    return replica_pod(kind, index, phase, kueue_group="j", **fields)


def running() -> list[PodView]:
    return [member(k, i) for k, i in (("master", 0), ("worker", 0), ("worker", 1))]


def held_worker() -> PodView:
    """worker-1 failed and is being deleted for its restart; Kueue's finalizer holds it."""
    failed = (ContainerView("python", "terminated", 1),)
    return member("worker", 1, "Failed", exit_code=1, containers=failed, deleting=True,
                  held_by_kueue=True)  # fmt: skip


def round_of(pods: list[PodView], status: dict[str, Any], gang: Gang | None = KUEUE) -> Plan:
    job = spec()
    return plan(Observed.of_json(META, job, status, pods, services(job), NOW, gang=gang))


def test_a_pod_kueue_holds_while_the_job_goes_on_releases_the_workload() -> None:
    pods = [*running()[:2], held_worker()]
    result = round_of(pods, settle(spec(), running()))
    assert result.release_workload == "j"
    taken = ("worker", 1)  # its name is still the held pod's
    assert taken not in {(p.replica.type, p.replica.index) for p in result.create_pods}


def test_nothing_is_released_while_no_pod_is_held() -> None:
    status = settle(spec(), running())
    assert round_of(running(), status).release_workload is None
    deleting = [*running()[:2], member("worker", 1, "Failed", deleting=True)]
    assert round_of(deleting, status).release_workload is None  # no finalizer of Kueue's
    no_group = [replica_pod("worker", 0, deleting=True, held_by_kueue=True)]
    assert workload_to_release(no_group, NOW).workload is None


def test_the_workload_waits_until_the_pods_being_stopped_on_a_node_stopped() -> None:
    """Kueue frees the quota as the Workload goes: not while a pod it holds still runs on a
    node, unless that pod's deletion grace is over (as Kueue counts a pod stuck stopping)."""
    due = NOW + timedelta(seconds=30)
    stopping = member("master", 0, deleting=True, held_by_kueue=True, bound=True, deletion_due=due)
    pods = [stopping, running()[1], held_worker()]
    waiting = round_of(pods, settle(spec(), running()))
    assert waiting.release_workload is None
    assert waiting.requeue_after is not None and 0 < waiting.requeue_after <= 30
    stopped = replace(stopping, phase="Failed")
    assert round_of([stopped, *pods[1:]], settle(spec(), running())).release_workload == "j"
    assert workload_to_release(pods, due + timedelta(seconds=1)).workload == "j"
    unbound = replace(stopping, bound=False)  # gated, never placed: holds nothing
    assert workload_to_release([unbound, *pods[1:]], NOW).workload == "j"


def test_an_ended_job_ends_its_group_instead_keeping_its_finished_pods() -> None:
    """Deleting the Workload would make Kueue delete every pod of the group, the master that
    succeeded (and its log) with them: an ended job marks its pods instead."""
    stopped = member("worker", 0, "Failed", deleting=True, held_by_kueue=True)
    pods = [member("master", 0, "Succeeded", exit_code=0), stopped, running()[2]]
    result = round_of(pods, settle(spec(), running()))
    assert result.release_workload is None
    assert result.end_group


def test_the_group_label_and_the_finalizer_are_read_from_the_pod_and_kept_in_the_cache() -> None:
    pod: dict[str, Any] = {
        "metadata": {
            "name": "j-worker-0",
            "uid": "u",
            "labels": {
                "batch.tensorstack.dev/replica-type": "worker",
                "batch.tensorstack.dev/replica-index": "0",
                KUEUE_GROUP_LABEL: "j",
            },
            "finalizers": [KUEUE_FINALIZER, "other/finalizer"],
            "deletionTimestamp": "2026-01-01T00:00:00Z",
        },
        "spec": {"containers": [TRAINER]},
        "status": {"phase": "Failed"},
    }
    seen = view_pod(slim_pod(pod))
    assert seen is not None and seen.held_by_kueue and seen.kueue_group == "j"
    not_deleted = {k: v for k, v in pod["metadata"].items() if k != "deletionTimestamp"}
    alive = view_pod(slim_pod({**pod, "metadata": not_deleted}))
    assert alive is not None and not alive.held_by_kueue
    let_go = view_pod(slim_pod({**pod, "metadata": {**pod["metadata"], "finalizers": []}}))
    assert let_go is not None and not let_go.held_by_kueue


async def test_the_executor_deletes_the_workload_and_passes_over_one_gone() -> None:
    job = {"apiVersion": "batch.tensorstack.dev/v1beta1", "kind": "PyTorchTrainingJob"}
    for missing in (False, True):
        api = RecordingApiserver(*(["j"] if missing else []))
        acting = api.executor()
        released = Plan(release_workload="j")
        await acting.execute(JobKey("ns", "j"), {**job, "metadata": dict(META)}, spec(), released)
        await acting.events.flush()
        workload = "/apis/kueue.x-k8s.io/v1beta2/namespaces/ns/workloads/j"
        assert api.deletes == [workload]
