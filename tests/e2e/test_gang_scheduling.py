"""Gang scheduling on the real control plane with the real kube-scheduler: three jobs of four
one-GPU replicas on six GPUs (three fake nodes of two).

The pods reach the scheduler in an interleaved order, as they do on a busy cluster where the
pods of several jobs are created at once: each is created with a scheduling gate the test lifts
in turn (a-worker-0, b-worker-0, c-worker-0, a-worker-1, ...). Placed one by one, the first six
take all six GPUs, two to a job, and no job can ever start: a deadlock. In a native PodGroup
(scheduling.k8s.io/v1beta1), a job's pods are placed four together or not at all, so the jobs
run whole, one after another, and all succeed.

This module has a control plane of its own: its apiserver serves PodGroups (GenericWorkload)
and its kube-scheduler places the pods that name it, on nodes no other test sees."""

from __future__ import annotations

import json
import re
import secrets
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio import client, config
from support import ControlPlane
from support.eventually import eventually
from support.kubelet import TestKubelet
from support.operator import (
    OPT_IN_LABEL,
    reconciler_kubeconfig,
    start_reconciler,
    start_webhook,
    stop_webhook,
    wait_until_admitting,
)
from support.processes import ServiceProcess
from support.scheduling import (
    add_gpu_nodes,
    gang_control_plane,
    gpu_job,
    lift_gate,
)

from torchjob.api import constants
from torchjob.render.scheduling import (
    COSCHEDULING_GROUP_LABEL,
    KUEUE_GATE,
    KUEUE_GROUP_LABEL,
    KUEUE_QUEUE_LABEL,
    KUEUE_TOTAL_ANNOTATION,
    VOLCANO_GROUP_ANNOTATION,
)

FOREIGN_CRDS = Path(__file__).resolve().parents[1] / "data" / "crds"
SCHEDULER = "gang-test-scheduler"
JOBS = ("a", "b", "c")
REPLICAS = 4


@pytest.fixture(scope="module")
def gang_plane() -> Iterator[ControlPlane]:
    # Volcano's and scheduler-plugins' PodGroup CRDs as their projects publish them, so the
    # apiserver checks our PodGroups of those kinds against their schemas.
    with gang_control_plane(SCHEDULER, sorted(FOREIGN_CRDS.glob("*.yaml"))) as plane:
        add_gpu_nodes(plane, "gpu", count=3, gpus=2)
        yield plane


@pytest.fixture(scope="module")
def operator(gang_plane: ControlPlane) -> Iterator[ServiceProcess]:
    """The webhook and the reconciler with the chart's default (auto: native here)."""
    webhook = start_webhook(gang_plane)
    reconciler = start_reconciler(gang_plane, reconciler_kubeconfig(gang_plane))
    yield reconciler
    reconciler.close()
    stop_webhook(gang_plane, webhook)


@pytest.fixture
async def api(gang_plane: ControlPlane) -> AsyncIterator[client.ApiClient]:
    configuration = client.Configuration()
    await config.load_kube_config(str(gang_plane.kubeconfig), client_configuration=configuration)
    async with client.ApiClient(configuration) as api_client:
        yield api_client


@pytest.fixture
def gang_namespace(
    gang_plane: ControlPlane, operator: ServiceProcess, request: Any
) -> Iterator[str]:
    stem = re.sub(r"[^a-z0-9]+", "-", request.node.name.removeprefix("test_").lower())[:40]
    name = f"gang-{stem.strip('-')}-{secrets.token_hex(3)}"
    gang_plane.kubectl("create", "namespace", name)
    gang_plane.kubectl("label", "namespace", name, f"{OPT_IN_LABEL}=on")
    wait_until_admitting(gang_plane, name)
    yield name
    # The nodes are shared by the module's tests: free their GPUs. A pod bound to a node is
    # deleted gracefully by its kubelet, and these nodes have none.
    gang_plane.kubectl("delete", "pytorchtrainingjobs", "--all", "-n", name, "--wait=false")
    gang_plane.kubectl("delete", "pods", "--all", "-n", name, "--grace-period=0", "--force")
    gang_plane.kubectl("delete", "namespace", name, "--wait=false")


def submit(plane: ControlPlane, namespace: str, annotations: dict[str, str] | None = None) -> None:
    for job in JOBS:
        manifest = gpu_job(job, REPLICAS, SCHEDULER, annotations)
        plane.kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(manifest))


async def pods_by_name(core: client.CoreV1Api, namespace: str) -> dict[str, Any]:
    listed = await core.list_namespaced_pod(namespace)
    return {pod.metadata.name: pod for pod in listed.items}


def arrival_order() -> list[str]:
    return [f"{job}-worker-{i}" for i in range(REPLICAS) for job in JOBS]


async def all_pods_created(
    core: client.CoreV1Api, namespace: str, count: int = len(JOBS) * REPLICAS
) -> dict[str, Any]:
    async def created() -> bool:
        return len(await pods_by_name(core, namespace)) == count

    await eventually(created, "every replica's pod created")
    return await pods_by_name(core, namespace)


def unschedulable(pod: Any) -> bool:
    return any(
        c.type == "PodScheduled" and c.status == "False" and c.reason == "Unschedulable"
        for c in pod.status.conditions or []
    )


async def job_status(api: client.ApiClient, namespace: str, name: str) -> dict[str, Any]:
    job = await client.CustomObjectsApi(api).get_namespaced_custom_object(
        "batch.tensorstack.dev", "v1beta1", namespace, "pytorchtrainingjobs", name
    )
    return dict(job.get("status") or {})


def condition(status: dict[str, Any], kind: str) -> dict[str, Any]:
    return next((c for c in status.get("conditions") or [] if c["type"] == kind), {})


async def test_placed_one_by_one_the_jobs_deadlock(
    gang_plane: ControlPlane, gang_namespace: str, api: client.ApiClient
) -> None:
    """The same jobs with gang scheduling off (the job's own annotation): six pods take the six
    GPUs, two to each job, and the other six wait for GPUs nobody will free."""
    core = client.CoreV1Api(api)
    submit(gang_plane, gang_namespace, {constants.ANNOTATION_GANG_SCHEDULING: "none"})
    pods = await all_pods_created(core, gang_namespace)
    assert all(pod.spec.scheduling_group is None for pod in pods.values())
    for name in arrival_order():
        await lift_gate(core, gang_namespace, name)

        async def settled(pod_name: str = name) -> bool:
            pod = await core.read_namespaced_pod(pod_name, gang_namespace)
            return bool(pod.spec.node_name) or unschedulable(pod)

        await eventually(settled, f"{name} placed or found unschedulable")
    pods = await pods_by_name(core, gang_namespace)
    for job in JOBS:
        mine = [pod for name, pod in pods.items() if name.startswith(f"{job}-")]
        said = [c.message for p in mine for c in p.status.conditions or [] if c.message]
        assert sum(1 for pod in mine if pod.spec.node_name) == 2, (job, said)
        assert sum(1 for pod in mine if unschedulable(pod)) == 2, job
    for job in JOBS:
        status = await job_status(api, gang_namespace, job)
        assert status.get("phase") == "Pending"
        assert not condition(status, "Scheduled"), "a job placed pod by pod has no group state"


async def test_gangs_run_whole_in_turn_and_all_succeed(
    gang_plane: ControlPlane, gang_namespace: str, api: client.ApiClient
) -> None:
    core = client.CoreV1Api(api)
    kubelet = TestKubelet(api, gang_namespace)
    submit(gang_plane, gang_namespace)
    pods = await all_pods_created(core, gang_namespace)
    assert {p.spec.scheduling_group.pod_group_name for p in pods.values()} == set(JOBS)
    groups = json.loads(
        gang_plane.kubectl("get", "podgroups", "-n", gang_namespace, "-o", "json").stdout
    )
    assert {
        g["metadata"]["name"]: g["spec"]["schedulingPolicy"]["gang"]["minCount"]
        for g in groups["items"]
    } == dict.fromkeys(JOBS, REPLICAS)
    for name in arrival_order():
        await lift_gate(core, gang_namespace, name)
    holding_at_once: list[set[str]] = []

    async def all_succeeded() -> bool:
        """Play the kubelet: run the pods placed; a job whose replicas all run trains and
        succeeds, once every other unfinished job's status says why it cannot be placed."""
        statuses = {job: await job_status(api, gang_namespace, job) for job in JOBS}
        waiting = {
            job
            for job, status in statuses.items()
            if condition(status, "Scheduled").get("reason") == constants.REASON_UNSCHEDULABLE
        }
        unfinished = {job for job, status in statuses.items() if status.get("phase") != "Succeeded"}
        pods = await pods_by_name(core, gang_namespace)
        holding = {
            n.split("-")[0]
            for n, p in pods.items()
            if p.spec.node_name and p.status.phase not in ("Succeeded", "Failed")
        }
        holding_at_once.append(holding)
        for job in sorted(holding):
            mine = {n: p for n, p in pods.items() if n.startswith(f"{job}-")}
            for n, p in mine.items():
                if p.spec.node_name and p.status.phase == "Pending":
                    await kubelet.run(n)
            others_told = unfinished - {job} <= waiting
            if all(p.status.phase == "Running" for p in mine.values()) and others_told:
                for n in sorted(mine, reverse=True):  # workers first, worker-0 last
                    await kubelet.finish(n, 0)
        return not unfinished

    await eventually(all_succeeded, "every job succeeded", timeout=300, interval=0.5)
    assert max(len(h) for h in holding_at_once) == 1, "two jobs held GPUs at once"
    for job in JOBS:
        scheduled = condition(await job_status(api, gang_namespace, job), "Scheduled")
        assert (scheduled["status"], scheduled["reason"]) == ("True", constants.REASON_SCHEDULED)
    events = await core.list_namespaced_event(gang_namespace)
    reasons = {(e.involved_object.name, e.reason) for e in events.items}
    assert any(reason == constants.REASON_UNSCHEDULABLE for _, reason in reasons)


async def test_a_kueue_job_waits_for_admission_and_starts_when_the_gate_is_lifted(
    gang_plane: ControlPlane, gang_namespace: str, api: client.ApiClient
) -> None:
    """Kueue's side is played by the test, after its documentation for plain pod groups: its
    webhook gates every pod it manages (here the template carries the gate it would add), and
    admitting the group lifts the gate from every pod. Our side: the pod-group label and
    total-count annotation on every pod, the queue label copied, no PodGroup of ours."""
    core = client.CoreV1Api(api)
    manifest = gpu_job("k", REPLICAS, SCHEDULER)
    manifest["metadata"]["labels"] = {KUEUE_QUEUE_LABEL: "team-a"}
    template = manifest["spec"]["replicaSpecs"][0]["template"]
    template["spec"]["schedulingGates"] = [{"name": KUEUE_GATE}]
    gang_plane.kubectl("apply", "-n", gang_namespace, "-f", "-", input=json.dumps(manifest))

    async def waiting() -> bool:
        status = await job_status(api, gang_namespace, "k")
        scheduled = condition(status, "Scheduled")
        return scheduled.get("reason") == constants.REASON_WAITING_FOR_ADMISSION

    await eventually(waiting, "the job says it waits for Kueue's admission")
    pods = await pods_by_name(core, gang_namespace)
    assert len(pods) == REPLICAS
    for pod in pods.values():
        assert pod.metadata.labels[KUEUE_QUEUE_LABEL] == "team-a"
        assert pod.metadata.labels[KUEUE_GROUP_LABEL] == "k"
        assert pod.metadata.annotations[KUEUE_TOTAL_ANNOTATION] == str(REPLICAS)
        assert pod.spec.scheduling_group is None
    listed = gang_plane.kubectl(
        "get", "podgroups.scheduling.k8s.io", "-n", gang_namespace, "-o", "name"
    )
    assert listed.stdout.strip() == ""
    for name in pods:
        await lift_gate(core, gang_namespace, name)

    async def placed() -> bool:
        status = await job_status(api, gang_namespace, "k")
        return condition(status, "Scheduled").get("status") == "True"

    await eventually(placed, "every pod placed once Kueue lifted the gate")


@pytest.mark.parametrize(
    ("mode", "group_kind", "scheduler"),
    [
        ("volcano", "podgroups.scheduling.volcano.sh", "volcano"),
        ("coscheduling", "podgroups.scheduling.x-k8s.io", "scheduler-plugins-scheduler"),
    ],
)
async def test_volcano_and_coscheduling_groups_pass_their_own_schemas(
    gang_plane: ControlPlane,
    gang_namespace: str,
    api: client.ApiClient,
    mode: str,
    group_kind: str,
    scheduler: str,
) -> None:
    core = client.CoreV1Api(api)
    manifest = gpu_job("v", REPLICAS, SCHEDULER, {constants.ANNOTATION_GANG_SCHEDULING: mode})
    del manifest["spec"]["replicaSpecs"][0]["template"]["spec"]["schedulerName"]
    gang_plane.kubectl("apply", "-n", gang_namespace, "-f", "-", input=json.dumps(manifest))
    pods = await all_pods_created(core, gang_namespace, REPLICAS)
    group = json.loads(
        gang_plane.kubectl("get", group_kind, "v", "-n", gang_namespace, "-o", "json").stdout
    )
    assert group["spec"]["minMember"] == REPLICAS
    assert group["metadata"]["ownerReferences"][0]["kind"] == "PyTorchTrainingJob"
    for pod in pods.values():
        assert pod.spec.scheduler_name == scheduler
        if mode == "volcano":
            assert pod.metadata.annotations[VOLCANO_GROUP_ANNOTATION] == "v"
        else:
            assert pod.metadata.labels[COSCHEDULING_GROUP_LABEL] == "v"

    # A minimum changed by someone else is set back to the job's (a merge patch of the group).
    lowered = json.dumps({"spec": {"minMember": 1}})
    gang_plane.kubectl(
        "patch", group_kind, "v", "-n", gang_namespace, "--type=merge", "-p", lowered
    )

    async def restored() -> bool:
        got = gang_plane.kubectl("get", group_kind, "v", "-n", gang_namespace, "-o", "json")
        return bool(json.loads(got.stdout)["spec"]["minMember"] == REPLICAS)

    await eventually(restored, "the group's minimum set back to the job's")


async def test_a_kueue_eviction_stops_the_job_cleanly_and_it_runs_again_when_readmitted(
    gang_plane: ControlPlane, gang_namespace: str, api: client.ApiClient
) -> None:
    """Kueue's eviction of an admitted pod group, played as its documentation describes: each
    pod gets the TerminationTarget condition and is deleted, its `kueue.x-k8s.io/managed`
    finalizer keeping it until Kueue lets it go. The job is not failed and counts no restart;
    its pods are created again, wait for readmission, and the job then succeeds."""
    core = client.CoreV1Api(api)
    kubelet = TestKubelet(api, gang_namespace)
    manifest = gpu_job("e", REPLICAS, SCHEDULER)
    manifest["metadata"]["labels"] = {KUEUE_QUEUE_LABEL: "team-a"}
    manifest["spec"]["replicaSpecs"][0]["template"]["spec"]["schedulingGates"] = [
        {"name": KUEUE_GATE}
    ]
    gang_plane.kubectl("apply", "-n", gang_namespace, "-f", "-", input=json.dumps(manifest))
    first = await admit_and_run(core, kubelet, api, gang_namespace, "e")
    for name in first:
        await core.patch_namespaced_pod(
            name, gang_namespace, {"metadata": {"finalizers": [KUEUE_FINALIZER]}}
        )
        await core.patch_namespaced_pod_status(
            name,
            gang_namespace,
            {"status": {"conditions": [KUEUE_EVICTION]}},
        )
        await core.delete_namespaced_pod(name, gang_namespace)

    async def preempted() -> bool:
        status = await job_status(api, gang_namespace, "e")
        return condition(status, "Scheduled").get("reason") == constants.REASON_PREEMPTED

    await eventually(preempted, "the job says it was preempted")
    for name in first:  # Kueue lets the evicted pods go
        await core.patch_namespaced_pod(name, gang_namespace, {"metadata": {"finalizers": None}})
        gang_plane.kubectl(
            "delete", "pod", name, "-n", gang_namespace, "--grace-period=0", "--force"
        )
    second = await admit_and_run(core, kubelet, api, gang_namespace, "e")
    assert set(second.values()).isdisjoint(first.values()), "the pods were created again"
    for name in sorted(second, reverse=True):
        await kubelet.finish(name, 0)

    async def succeeded() -> dict[str, Any] | None:
        status = await job_status(api, gang_namespace, "e")
        return status if status.get("phase") == "Succeeded" else None

    status = await eventually(succeeded, "the readmitted job succeeded")
    assert status["backoffCount"] == 0
    assert all(task["restartCount"] == 0 for task in status["tasks"])
    events = await core.list_namespaced_event(gang_namespace)
    assert any(e.reason == constants.REASON_PREEMPTED for e in events.items)


KUEUE_FINALIZER = "kueue.x-k8s.io/managed"
KUEUE_EVICTION = {
    "type": "TerminationTarget",
    "status": "True",
    "reason": "WorkloadEvictedDueToPreempted",
    "message": "Preempted to accommodate a workload of higher priority",
    "lastTransitionTime": "2026-01-01T00:00:00Z",
}


async def admit_and_run(
    core: client.CoreV1Api,
    kubelet: TestKubelet,
    api: client.ApiClient,
    namespace: str,
    job: str,
) -> dict[str, str]:
    """Wait until the job's pods wait for Kueue, admit them (lift the gate), run them once
    placed, and wait until the job runs; the pods' uids by name."""

    async def gated() -> bool:
        pods = await pods_by_name(core, namespace)
        live = [p for p in pods.values() if not p.metadata.deletion_timestamp]
        return len(live) == REPLICAS and all(p.spec.scheduling_gates for p in live)

    await eventually(gated, "the job's pods wait for Kueue's admission")
    pods = await pods_by_name(core, namespace)
    for name in pods:
        await lift_gate(core, namespace, name)

    async def running() -> bool:
        for name, pod in (await pods_by_name(core, namespace)).items():
            if pod.spec.node_name and pod.status.phase == "Pending":
                await kubelet.run(name)
        return (await job_status(api, namespace, job)).get("phase") == "Running"

    await eventually(running, "the admitted job runs")
    return {name: pod.metadata.uid for name, pod in (await pods_by_name(core, namespace)).items()}


async def test_a_paused_job_gives_up_its_group_and_resumes_in_a_new_one(
    gang_plane: ControlPlane, gang_namespace: str, api: client.ApiClient
) -> None:
    """Pausing deletes the pods and the PodGroup (the scheduler's state of the group is that of
    its first placement); resuming creates a new group before the new pods, which are placed
    together again. An elastic job's group needs only its lower bound together."""
    core = client.CoreV1Api(api)
    kubelet = TestKubelet(api, gang_namespace)
    manifest = gpu_job("p", REPLICAS, SCHEDULER)
    spec = manifest["spec"]
    del spec["replicaSpecs"][0]["template"]["spec"]["schedulingGates"]
    spec["torchrunConfig"]["minNodes"] = 2
    spec["elastic"] = {"enabled": True, "minReplicas": 2, "maxReplicas": REPLICAS}
    gang_plane.kubectl("apply", "-n", gang_namespace, "-f", "-", input=json.dumps(manifest))
    first = await group_of(gang_plane, gang_namespace, "p")
    assert first["spec"]["schedulingPolicy"]["gang"]["minCount"] == 2

    async def placed() -> bool:
        status = await job_status(api, gang_namespace, "p")
        return condition(status, "Scheduled").get("status") == "True"

    await eventually(placed, "the job's pods placed together")
    pause = {"spec": {"runMode": {"pause": {"enabled": True}}}}
    gang_plane.kubectl(
        "patch", "ptj", "p", "-n", gang_namespace, "--type=merge", "-p", json.dumps(pause)
    )

    async def pods_deleted() -> bool:
        pods = await pods_by_name(core, gang_namespace)
        for name, pod in pods.items():  # the kubelet confirms each deletion
            if pod.metadata.deletion_timestamp:
                gang_plane.kubectl(
                    "delete", "pod", name, "-n", gang_namespace, "--grace-period=0", "--force"
                )
        return not pods

    await eventually(pods_deleted, "the paused job's pods deleted")

    async def group_gone() -> bool:
        listed = gang_plane.kubectl("get", "podgroups", "-n", gang_namespace, "-o", "name")
        return listed.stdout.strip() == ""

    await eventually(group_gone, "the paused job's PodGroup deleted")
    resume = {"spec": {"runMode": {"pause": {"enabled": False}}}}
    gang_plane.kubectl(
        "patch", "ptj", "p", "-n", gang_namespace, "--type=merge", "-p", json.dumps(resume)
    )
    second = await group_of(gang_plane, gang_namespace, "p")
    assert second["metadata"]["uid"] != first["metadata"]["uid"]
    await eventually(placed, "the resumed job's pods placed together")
    for name in await pods_by_name(core, gang_namespace):
        await kubelet.run(name)


async def group_of(plane: ControlPlane, namespace: str, name: str) -> dict[str, Any]:
    async def created() -> bool:
        got = plane.kubectl("get", "podgroups", name, "-n", namespace, check=False)
        return got.returncode == 0

    await eventually(created, f"the PodGroup {name} created")
    got = plane.kubectl("get", "podgroups", name, "-n", namespace, "-o", "json")
    group: dict[str, Any] = json.loads(got.stdout)
    return group
