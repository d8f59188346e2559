"""Real Kueue (v0.17, `make kueue-build`, tests/support/kueue.py) against our real webhook and
reconciler: two tenants' jobs on one ClusterQueue whose CPU quota holds one of them, a restart
and a deletion that release the group's Workload (lifecycle/kueue.py), and a preemption.

Everything Kueue does here is done by Kueue: its webhook gates each pod and adds its finalizer,
its pod-group controller makes one Workload of a job's pods (named after the job, the pod group),
its scheduler reserves the quota and lifts the gates, and it declares the Workload finished and
lets the pods go. The test plays kube-scheduler (it binds the pods Kueue let go to a node) and
the kubelet (support.kubelet); a job's master ends first, as it decides the job's outcome, and
the worker the reconciler then stops ends Failed: Kueue frees the group only because the
reconciler marks an ended job's pods `kueue.x-k8s.io/retriable-in-group: "false"`."""

from __future__ import annotations

import asyncio
import copy
import json
import secrets
import subprocess
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from kubernetes_asyncio import client
from playwright.async_api import Browser, expect
from support import ControlPlane
from support.cli import TORCHJOB
from support.cluster import condition
from support.console import Console, signed_in, tenant_token
from support.eventually import eventually
from support.kubelet import TestKubelet
from support.kueue import KueueManager, condition_status
from support.kueue import cluster_queue as kueue_quota
from support.kueue_jobs import (
    JOB_CPU,
    POD_CPU,
    QUEUE,
    QUOTA_CPU,
    QueuedJob,
    QuotaWatch,
    finish,
    grant_pending_workloads,
    open_tenant,
    release_leftovers,
    run,
    wait_admitted,
    wait_let_go,
    wait_released,
    wait_waiting_for_admission,
)
from support.processes import ServiceProcess
from support.scheduling import add_gpu_nodes, place
from support.trainer import TORCH_RUNTIME, TRAIN_JOB

from torchjob.render.scheduling import KUEUE_GATE, KUEUE_QUEUE_LABEL


@pytest.fixture(scope="module")
def kueue(control_plane: ControlPlane, crd: None) -> Iterator[KueueManager]:
    manager = KueueManager(control_plane).start()
    yield manager
    manager.close()


@pytest.fixture(scope="module")
def kueue_node(control_plane: ControlPlane) -> Iterator[str]:
    """A Ready node (no kubelet runs it: the test does) the test binds admitted pods to."""
    (name,) = add_gpu_nodes(control_plane, f"kueue-{secrets.token_hex(3)}", count=1, gpus=0)
    yield name
    control_plane.kubectl("delete", "node", name, "--wait=false", check=False)


@pytest.fixture
def tenants(
    control_plane: ControlPlane, kueue: KueueManager, reconciler: ServiceProcess
) -> Iterator[tuple[str, str]]:
    """Two namespaces that go through our webhook and that Kueue manages."""
    names = tuple(f"kueue-{tenant}-{secrets.token_hex(3)}" for tenant in ("a", "b"))
    for name in names:
        open_tenant(control_plane, name)
    yield names[0], names[1]
    for name in names:
        release_leftovers(control_plane, name)


@pytest.fixture
def cluster_queue(control_plane: ControlPlane, tenants: tuple[str, str]) -> Iterator[str]:
    """A ResourceFlavor, a ClusterQueue of QUOTA_CPU CPUs of it, and a LocalQueue QUEUE on it in
    each tenant namespace; the ClusterQueue's name once Kueue says it is active."""
    quota = str(int(QUOTA_CPU))
    with kueue_quota(control_plane, tenants[0], quota, dict.fromkeys(tenants, QUEUE)) as name:
        yield name


async def assert_waits_while_the_first_runs(second: QueuedJob, watch: QuotaWatch) -> None:
    """The second job is Pending and says it waits for Kueue; its Workload has no quota, for
    want of it; its pods are still gated; the ClusterQueue holds one job and has one pending."""
    status = await second.status()
    assert status.get("phase") == "Pending"
    waiting = condition(status, "Scheduled")
    assert (waiting["status"], waiting["reason"]) == ("False", "WaitingForAdmission")
    assert f"queue {QUEUE}" in waiting["message"]
    reserved = await second.workload_said("QuotaReserved")
    assert reserved["status"] == "False"
    assert "insufficient unused quota for cpu" in reserved["message"]
    assert await second.workload_condition("Admitted") != "True"
    assert all(p.spec.scheduling_gates for p in (await second.pods()).values())

    async def one_held_one_pending() -> bool:
        held = await watch.sample()
        return (held.reserved_cpu, held.admitted, held.pending) == (JOB_CPU, 1, 1)

    await eventually(
        one_held_one_pending, "the ClusterQueue holding one job, one pending", explain=watch.last
    )


async def assert_one_job_at_a_time(first: QueuedJob, second: QueuedJob, watch: QuotaWatch) -> None:
    """The ClusterQueue never held more than its quota, nor two jobs at once, and Kueue reserved
    the second job's quota only once it had declared the first's Workload finished."""
    assert max(s.reserved_cpu for s in watch.samples) == JOB_CPU
    assert all(s.reserved_cpu <= QUOTA_CPU and s.used_cpu <= QUOTA_CPU for s in watch.samples)
    assert all(s.reserving <= 1 and s.admitted <= 1 for s in watch.samples)
    first_finished = (await first.workload_said("Finished"))["lastTransitionTime"]
    assert (await second.workload_said("QuotaReserved"))["lastTransitionTime"] >= first_finished


async def assert_place_in_queue_shown(
    plane: ControlPlane, console: Console, browser: Browser, job: QueuedJob
) -> None:
    """Where the waiting job stands, from Kueue's visibility API: in `torchjob get`, and on its
    console page read as its tenant, granted Kueue's role for its LocalQueue's pending
    Workloads."""
    expected = f"{QUEUE}, 1st of 1 waiting in it (1st in its ClusterQueue)"
    argv = [str(TORCHJOB), "get", job.name, f"--kubeconfig={plane.kubeconfig}", "-n", job.namespace]
    shown = await asyncio.to_thread(
        subprocess.run, argv, capture_output=True, text=True, timeout=60
    )
    assert f"Queue:       {expected}\n" in shown.stdout, shown.stdout + shown.stderr
    listed = await asyncio.to_thread(
        subprocess.run, [*argv[:1], "list", "-o", "wide", *argv[3:]], capture_output=True,
        text=True, timeout=60,
    )  # fmt: skip
    row = next(line for line in listed.stdout.splitlines() if line.startswith(job.name))
    assert f"{QUEUE} (1st)" in row, listed.stdout + listed.stderr
    token = tenant_token(plane, job.namespace, "edit")
    grant_pending_workloads(plane, job.namespace, "edit-user")
    context, page = await signed_in(browser, console, token)
    try:
        await page.goto(f"/ns/{job.namespace}/jobs/{job.name}")
        await expect(page.locator("#queue-position")).to_have_text(expected)
    finally:
        await context.close()


async def test_kueue_admits_the_second_tenants_job_once_the_first_is_done(
    kube_client: client.ApiClient,
    control_plane: ControlPlane,
    tenants: tuple[str, str],
    cluster_queue: str,
    kueue_node: str,
    kueue: KueueManager,
    console: Console,
    browser: Browser,
) -> None:
    first, second = (QueuedJob(kube_client, tenant, "train") for tenant in tenants)
    await first.create()
    watch = QuotaWatch(kube_client, cluster_queue)
    async with watch.sampling():
        await wait_admitted(first)
        await second.create()
        await wait_waiting_for_admission(second)
        await run(first, kueue_node)
        await assert_waits_while_the_first_runs(second, watch)
        await assert_place_in_queue_shown(control_plane, console, browser, second)
        await finish(first)
        await wait_released(first)
        await wait_admitted(second)
        await run(second, kueue_node)
        await finish(second)
        await wait_released(second)

        async def quota_free() -> bool:
            sample = await watch.sample()
            return (sample.reserved_cpu, sample.admitted) == (0, 0)

        await eventually(quota_free, "the ClusterQueue holding no quota", explain=watch.last)
    await assert_one_job_at_a_time(first, second, watch)
    for job in (first, second):
        status = await job.status()
        assert status["backoffCount"] == 0
        assert condition(status, "Completed")["status"] == "True"


async def test_a_failed_worker_requeues_the_group_and_a_deleted_job_frees_its_quota(
    kube_client: client.ApiClient,
    tenants: tuple[str, str],
    cluster_queue: str,
    kueue_node: str,
    kueue: KueueManager,
) -> None:
    """Kueue holds a pod of an admitted group that is deleted until a replacement of its role
    exists, and a replica's replacement has its name: the reconciler deletes the group's
    Workload, Kueue lets both pods go (stopping the master), and the new pods wait for and get a
    new admission; the worker's failure is charged once, the master's stop not. Deleting the job
    then frees the ClusterQueue's quota, which Kueue would otherwise hold with the pods."""
    job = QueuedJob(kube_client, tenants[0], "requeued", restart_policy="OnFailure")
    await job.create()
    watch = QuotaWatch(kube_client, cluster_queue)
    async with watch.sampling():
        await wait_admitted(job)
        await run(job, kueue_node)
        first = {p.metadata.uid for p in (await job.pods()).values()}
        await job.kubelet.finish(job.worker, 1)
        await wait_let_go(job, first, "Kueue letting the old pods go, the Workload released")
        await wait_admitted(job)
        assert not first & {p.metadata.uid for p in (await job.pods()).values()}
        await run(job, kueue_node)
        status = await job.status()
        assert status["backoffCount"] == 1
        events = await job.core.list_namespaced_event(
            job.namespace, field_selector=f"involvedObject.name={job.name}"
        )
        assert any("Deleted Kueue Workload: requeued" in e.message for e in events.items)
        second = {p.metadata.uid for p in (await job.pods()).values()}
        await job.delete()
        await wait_let_go(job, second, "Kueue letting the deleted job's pods go")

        async def quota_free() -> bool:
            sample = await watch.sample()
            return (sample.reserved_cpu, sample.admitted) == (0, 0)

        await eventually(quota_free, "the ClusterQueue holding no quota", explain=watch.last)
    assert all(s.reserved_cpu <= QUOTA_CPU for s in watch.samples)


async def test_a_higher_priority_job_preempts_a_running_one_which_waits_and_runs_again(
    kube_client: client.ApiClient,
    tenants: tuple[str, str],
    cluster_queue: str,
    kueue_node: str,
    kueue: KueueManager,
) -> None:
    """Preemption is a pause: Kueue evicts the running low-priority job's group for the high
    one (it stops its pods), the reconciler releases the evicted Workload once they stopped (the
    high job's quota is reserved only then), and the job's new pods wait in the queue, not
    charged, its status and Event naming why; once the high job is done, Kueue admits the low one
    again and it runs to success."""
    prefix = tenants[0]
    low = QueuedJob(kube_client, tenants[0], "low", "OnFailure", priority=f"{prefix}-low")
    high = QueuedJob(kube_client, tenants[1], "high", "OnFailure", priority=f"{prefix}-high")
    watch = QuotaWatch(kube_client, cluster_queue)
    async with watch.sampling():
        await low.create()
        await wait_admitted(low)
        await run(low, kueue_node)
        first = {p.metadata.uid for p in (await low.pods()).values()}
        await high.create()

        async def evicted() -> bool:
            pods = (await low.every_pod()).values()
            return all(p.metadata.deletion_timestamp for p in pods if p.metadata.uid in first)

        await low.wait("Kueue evicting the low job's group for the high one", evicted)
        await asyncio.sleep(1)  # while the evicted pods still run, the quota stays theirs
        assert await high.workload_condition("QuotaReserved") != "True"
        stopped_at = datetime.now(UTC).replace(microsecond=0)
        await wait_let_go(low, first, "Kueue letting the stopped pods go")
        await wait_admitted(high)
        reserved = (await high.workload_said("QuotaReserved"))["lastTransitionTime"]
        assert datetime.fromisoformat(reserved) >= stopped_at, (reserved, stopped_at)
        await wait_waiting_for_admission(low)
        events = await low.core.list_namespaced_event(
            low.namespace, field_selector="involvedObject.name=low,reason=Preempted"
        )
        said = " ".join(e.message for e in events.items)
        assert "Preempted to accommodate a workload" in said, said
        assert (await low.status())["backoffCount"] == 0
        await run(high, kueue_node)
        await finish(high)
        await wait_released(high)
        await wait_admitted(low)
        await run(low, kueue_node)
        status = await finish(low)
    assert status["backoffCount"] == 0
    assert condition(status, "Completed")["status"] == "True"
    assert all(s.reserved_cpu <= QUOTA_CPU for s in watch.samples)


async def test_a_trainjob_waits_for_kueue_as_a_pod_group_and_runs_once_admitted(
    kube_client: client.ApiClient,
    control_plane: ControlPlane,
    tenants: tuple[str, str],
    cluster_queue: str,
    kueue_node: str,
    kueue: KueueManager,
) -> None:
    """A Kubeflow Trainer TrainJob labelled with its LocalQueue, as Kueue users label one: its
    nodes are one pod group that waits while another tenant's job holds the quota, and runs,
    ungated, once that job is done; its Workload then finishes with it."""
    first = QueuedJob(kube_client, tenants[0], "train")
    await first.create()
    await wait_admitted(first)
    namespace = tenants[1]
    runtime = copy.deepcopy(TORCH_RUNTIME)
    runtime["kind"], runtime["metadata"] = "TrainingRuntime", {"name": "torch-distributed"}
    control_plane.kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(runtime))
    trainjob = copy.deepcopy(TRAIN_JOB)
    trainjob["metadata"] = {"name": "tj", "labels": {KUEUE_QUEUE_LABEL: QUEUE}}
    trainjob["spec"]["runtimeRef"] = {"name": "torch-distributed", "kind": "TrainingRuntime"}
    trainjob["spec"]["trainer"]["resourcesPerNode"] = {"requests": {"cpu": POD_CPU}}
    control_plane.kubectl("create", "-n", namespace, "-f", "-", input=json.dumps(trainjob))
    core = client.CoreV1Api(kube_client)
    names = ["tj-node-0", "tj-node-1"]

    async def gated() -> bool:
        pods = (await core.list_namespaced_pod(namespace)).items
        return sorted(p.metadata.name for p in pods if KUEUE_GATE in gates_of(p)) == names

    await eventually(gated, "the TrainJob's nodes held by Kueue's gate", timeout=60)
    await run(first, kueue_node)
    await finish(first)
    await wait_released(first)

    async def ungated() -> bool:
        pods = (await core.list_namespaced_pod(namespace)).items
        return len(pods) == 2 and not any(gates_of(p) for p in pods)

    await eventually(ungated, "Kueue admitting the TrainJob's pod group", timeout=60)
    kubelet = TestKubelet(kube_client, namespace)
    for name in names:
        await place(core, namespace, name, kueue_node)
        await kubelet.run(name)
    await kubelet.finish(names[0], 0)

    def complete() -> bool:
        shown = control_plane.kubectl("get", "trainjob", "tj", "-n", namespace, "-o", "json")
        conditions = json.loads(shown.stdout).get("status", {}).get("conditions") or []
        return any(c["type"] == "Complete" and c["status"] == "True" for c in conditions)

    await kubelet.finish(names[1], 0)
    await eventually(complete, "the TrainJob Complete", timeout=60)
    workloads = client.CustomObjectsApi(kube_client)

    async def finished() -> bool:
        found = await workloads.get_namespaced_custom_object(
            "kueue.x-k8s.io", "v1beta2", namespace, "workloads", "tj"
        )
        return condition_status(found, "Finished") == "True"

    await eventually(finished, "Kueue's Workload of the TrainJob finished", timeout=60)


def gates_of(pod: Any) -> set[str]:
    return {gate.name for gate in pod.spec.scheduling_gates or ()}
