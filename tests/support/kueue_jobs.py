"""Jobs on real Kueue (tests/e2e/test_kueue.py): a tenant's namespace that Kueue manages, a job
labelled with its tenant's LocalQueue, a watch of a ClusterQueue's quota, and the steps the test
plays for kube-scheduler and the kubelet while Kueue does all of Kueue's part."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

from kubernetes_asyncio import client

from support import ControlPlane
from support.bench import sampled
from support.cluster import Job
from support.eventually import eventually_sync
from support.jobs import JobBuilder
from support.kueue import (
    API_VERSION,
    MANAGED_LABEL,
    Cluster,
    QuotaSample,
    condition_status,
    quota_sample,
)
from support.operator import OPT_IN_LABEL, wait_until_admitting
from support.scheduling import place
from torchjob.api import constants
from torchjob.render.scheduling import (
    KUEUE_FINALIZER,
    KUEUE_GATE,
    KUEUE_GROUP_LABEL,
    KUEUE_PRIORITY_LABEL,
    KUEUE_QUEUE_LABEL,
    KUEUE_TOTAL_ANNOTATION,
)

KUEUE_GROUP, KUEUE_VERSION = API_VERSION.split("/")
QUEUE = "training"  # each tenant's LocalQueue
# A job is a master and a worker of one CPU each; the quota holds one job, not two.
POD_CPU, JOB_CPU, QUOTA_CPU = "1", 2.0, 2.0
# What the kubelet reports for a container it stopped with SIGTERM.
STOPPED_EXIT_CODE = 143


def open_tenant(plane: ControlPlane, name: str) -> None:
    """The namespace `name`, going through our webhook and managed by Kueue, once our webhook
    admits there and its default ServiceAccount (which pods need) exists."""
    plane.kubectl("create", "namespace", name)
    plane.kubectl("label", "namespace", name, f"{OPT_IN_LABEL}=on", f"{MANAGED_LABEL}=on")
    wait_until_admitting(plane, name)

    def has_default_account() -> bool:
        found = plane.kubectl("get", "serviceaccount", "default", "-n", name, check=False)
        return found.returncode == 0

    eventually_sync(has_default_account, f"the default ServiceAccount of {name}")


def release_leftovers(plane: Cluster, namespace: str) -> None:
    """The namespace deleted. A pod Kueue still holds (a test failed before Kueue let it go)
    is let go first, so that the namespace can go."""
    plane.kubectl("delete", "pytorchtrainingjobs", "--all", "-n", namespace, "--wait=false")
    listed = plane.kubectl("get", "pods", "-n", namespace, "-o", "json", check=False)
    for pod in json.loads(listed.stdout or '{"items": []}')["items"]:
        if KUEUE_FINALIZER in (pod["metadata"].get("finalizers") or ()):
            unheld = json.dumps({"metadata": {"finalizers": None}})
            name = pod["metadata"]["name"]
            plane.kubectl("patch", "pod", name, "-n", namespace, "--type=merge", "-p", unheld)
    plane.kubectl("delete", "namespace", namespace, "--wait=false")


class QuotaWatch:
    """The ClusterQueue's status, sampled every few hundred milliseconds while a test runs."""

    def __init__(self, api: client.ApiClient, name: str) -> None:
        self.objects = client.CustomObjectsApi(api)
        self.name = name
        self.samples: list[QuotaSample] = []
        self.status: dict[str, Any] = {}

    async def sample(self) -> QuotaSample:
        queue = await self.objects.get_cluster_custom_object(
            KUEUE_GROUP, KUEUE_VERSION, "clusterqueues", self.name
        )
        self.status = dict(queue.get("status") or {})
        taken = quota_sample(self.status)
        self.samples.append(taken)
        return taken

    def last(self) -> str:
        return f"{self.name}: status: {json.dumps(self.status)}"

    @contextlib.asynccontextmanager
    async def sampling(self, interval: float = 0.25) -> AsyncIterator[QuotaWatch]:
        async with sampled(self.sample, interval):
            yield self


class QueuedJob(Job):
    """A job labelled with its tenant's LocalQueue, as Kueue and our reconciler see it; with
    `priority`, its pods name that WorkloadPriorityClass (Kueue's label in the template)."""

    def __init__(
        self,
        api: client.ApiClient,
        namespace: str,
        name: str,
        restart_policy: str = "Never",
        priority: str | None = None,
    ) -> None:
        container = {
            "name": "python",
            "image": "i",
            "command": ["python"],
            "args": ["t.py"],
            "resources": {"requests": {"cpu": POD_CPU}},
        }
        manifest = (
            JobBuilder(name)
            .metadata(labels={KUEUE_QUEUE_LABEL: QUEUE})
            .replicas("master", 1, container=container)
            .replicas("worker", 1, container=container)
            .restart_policy(restart_policy)
            .build()
        )
        if priority is not None:
            for replica in manifest["spec"]["replicaSpecs"]:
                replica["template"].setdefault("metadata", {})["labels"] = {
                    KUEUE_PRIORITY_LABEL: priority
                }
        super().__init__(api, namespace, manifest)
        self.master, self.worker = f"{name}-master-0", f"{name}-worker-0"

    async def every_pod(self) -> dict[str, Any]:
        """Its pods, those being deleted included (Kueue holds them until it lets them go)."""
        selector = f"{self.job_name_label}={self.name}"
        listed = await self.core.list_namespaced_pod(self.namespace, label_selector=selector)
        return {p.metadata.name: p for p in listed.items}

    async def workload(self) -> dict[str, Any]:
        """Kueue's Workload of the job's pod group: named after the group, the job's name."""
        found = await self.objects.get_namespaced_custom_object(
            KUEUE_GROUP, KUEUE_VERSION, self.namespace, "workloads", self.name
        )
        return dict(found)

    async def workload_condition(self, kind: str) -> str | None:
        try:
            return condition_status(await self.workload(), kind)
        except client.ApiException as error:
            if error.status == 404:
                return None
            raise

    async def workload_said(self, kind: str) -> dict[str, Any]:
        """The Workload's condition of type `kind`."""
        conditions = (await self.workload()).get("status", {}).get("conditions", [])
        return dict(next(c for c in conditions if c["type"] == kind))


async def wait_waiting_for_admission(job: QueuedJob) -> None:
    """Both pods exist, gated by Kueue, in its pod group; the job says it waits for Kueue."""
    await job.wait_pods({job.master, job.worker})

    async def waiting() -> bool:
        scheduled = [
            c for c in (await job.status()).get("conditions", []) if c["type"] == "Scheduled"
        ]
        return bool(scheduled) and scheduled[0]["reason"] == constants.REASON_WAITING_FOR_ADMISSION

    await job.wait("the job says it waits for Kueue's admission", waiting)
    for pod in (await job.pods()).values():
        assert KUEUE_GATE in {g.name for g in pod.spec.scheduling_gates or ()}, pod.metadata.name
        assert KUEUE_FINALIZER in (pod.metadata.finalizers or ()), pod.metadata.name
        assert pod.metadata.labels[KUEUE_GROUP_LABEL] == job.name
        assert pod.metadata.labels[KUEUE_QUEUE_LABEL] == QUEUE
        assert pod.metadata.annotations[KUEUE_TOTAL_ANNOTATION] == "2"


async def wait_admitted(job: QueuedJob) -> None:
    """Kueue admits the job's Workload, one pod set of both pods (a master and a worker of the
    same shape), owned by both pods, and lifts every gate of its own from both of them."""

    async def admitted() -> bool:
        if await job.workload_condition("Admitted") != "True":
            return False
        pods = await job.pods()
        return len(pods) == 2 and not any(p.spec.scheduling_gates for p in pods.values())

    await job.wait("Kueue admitted the job's pod group and lifted its gates", admitted)
    workload = await job.workload()
    assert workload["metadata"]["annotations"]["kueue.x-k8s.io/is-group-workload"] == "true"
    owners = {(o["kind"], o["name"]) for o in workload["metadata"]["ownerReferences"]}
    assert owners == {("Pod", job.master), ("Pod", job.worker)}
    assert [p["count"] for p in workload["spec"]["podSets"]] == [2]
    assert workload["status"]["admission"]["podSetAssignments"][0]["resourceUsage"] == {
        "cpu": str(int(JOB_CPU))
    }


async def run(job: QueuedJob, node: str) -> None:
    """Bind the admitted pods to `node` and run them, as the scheduler and the kubelet do."""
    for name in (job.master, job.worker):
        await place(job.core, job.namespace, name, node)
        await job.kubelet.run(name)
    await job.wait_phase("Running")


async def finish(job: QueuedJob) -> dict[str, Any]:
    """The master exits 0; the reconciler stops the worker, which the kubelet stops (SIGTERM)
    and confirms gone; the job then says it succeeded. Its status."""
    await job.kubelet.finish(job.master, 0)

    async def worker_deleted() -> bool:
        worker = (await job.every_pod()).get(job.worker)
        return worker is not None and worker.metadata.deletion_timestamp is not None

    await job.wait("the reconciler stopping the worker once the master succeeded", worker_deleted)
    await job.kubelet.finish(job.worker, STOPPED_EXIT_CODE)
    await job.kubelet.confirm_deletion(job.worker)
    return await job.wait_phase("Succeeded")


async def wait_released(job: QueuedJob) -> None:
    """Kueue declares the job's Workload finished and lets every pod of the group go: the
    worker being deleted is gone, the master has no finalizer of Kueue's left."""

    async def released() -> bool:
        if await job.workload_condition("Finished") != "True":
            return False
        pods = await job.every_pod()
        return set(pods) == {job.master} and not any(
            KUEUE_FINALIZER in (p.metadata.finalizers or ()) for p in pods.values()
        )

    await job.wait("Kueue finished the Workload and let the pods go", released)


async def stop_deleted_pods(job: QueuedJob) -> None:
    """As the kubelet: each pod of the job being deleted has its containers stopped (SIGTERM)
    and is confirmed gone; Kueue's finalizer keeps it until Kueue lets it go."""
    for name, pod in (await job.every_pod()).items():
        if pod.metadata.deletion_timestamp is None:
            continue
        if pod.status.phase not in ("Succeeded", "Failed"):
            await job.kubelet.finish(name, STOPPED_EXIT_CODE)
        with contextlib.suppress(client.ApiException):  # gone meanwhile
            await job.kubelet.confirm_deletion(name)


async def wait_let_go(job: QueuedJob, uids: set[str], what: str) -> None:
    """Until none of the pods `uids` is left, acting as the kubelet of those being deleted."""

    async def gone() -> bool:
        await stop_deleted_pods(job)
        return not uids & {p.metadata.uid for p in (await job.every_pod()).values()}

    await job.wait(what, gone)


def grant_pending_workloads(plane: ControlPlane, namespace: str, account: str) -> None:
    """What Kueue's release grants with its `pending-workloads-lq-viewer` role: reading the
    LocalQueues' pending Workloads (the visibility API), here for one ServiceAccount of
    `namespace`, in it."""
    rules = [
        {
            "apiGroups": ["visibility.kueue.x-k8s.io"],
            "resources": ["localqueues/pendingworkloads"],
            "verbs": ["get"],
        }
    ]
    rbac = "rbac.authorization.k8s.io/v1"
    name = "kueue-pending-workloads-viewer"
    role = {"apiVersion": rbac, "kind": "Role", "metadata": {"name": name}, "rules": rules}
    binding = {
        "apiVersion": rbac,
        "kind": "RoleBinding",
        "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
        "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": namespace}],
    }
    items = {"apiVersion": "v1", "kind": "List", "items": [role, binding]}
    plane.kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(items))
