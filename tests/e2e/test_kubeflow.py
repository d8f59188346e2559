"""Kubeflow's PyTorchJob (kubeflow.org/v1) on the real control plane, as a Kubeflow user sees it:
the webhook defaults and validates PyTorchJobs and rewrites their pods, the reconciler and the
housekeeper run them with `--kubeflow`, and the test plays the kubelet. Each test reads what
`kubectl` shows: the stored job, its conditions and `replicaStatuses`, its pods, Services and
Events."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from kubernetes_asyncio import client
from support import ControlPlane
from support.cluster import Cluster
from support.eventually import eventually
from support.informers import running
from support.kubeflow import (
    JOB_NAME_LABEL,
    JOB_ROLE_LABEL,
    OPERATOR_NAME,
    OPERATOR_NAME_LABEL,
    REPLICA_INDEX_LABEL,
    REPLICA_TYPE_LABEL,
    KubeflowJob,
    condition_of,
    env_of,
    example,
    pod_names,
    pytorchjob,
    replica_spec,
)
from support.operator import (
    grant_lease,
    housekeeper_kubeconfig,
    reconciler_kubeconfig,
    start_housekeeper,
    start_reconciler,
)
from support.processes import ServiceProcess
from support.tables import printed_rows

from torchjob.api import constants
from torchjob.api.kubeflow_admission import UNSUPPORTED
from torchjob.kube.client import KubeClient
from torchjob.kube.informer import Informer, KubeObject
from torchjob.kube.resources import KUBEFLOW_JOBS

RESOURCE = "pytorchjobs.kubeflow.org"
SIMPLE = "pytorch-simple"


@pytest.fixture(scope="module")
def kubeflow_reconciler(
    control_plane: ControlPlane, webhook_server: ServiceProcess
) -> Iterator[ServiceProcess]:
    """The reconciler running PyTorchJobs too, under a Lease of its own."""
    process = start_reconciler(
        control_plane,
        reconciler_kubeconfig(control_plane),
        "kubeflow-r1",
        "--kubeflow",
        "--lease-name",
        "kubeflow-e2e-reconciler",
    )
    yield process
    process.close()


@pytest.fixture(scope="module")
def kubeflow_housekeeper(control_plane: ControlPlane, crd: None) -> Iterator[ServiceProcess]:
    """The housekeeper running PyTorchJobs' clean-up and TTL too, under a Lease of its own."""
    lease = "kubeflow-e2e-housekeeper"
    kubeconfig = housekeeper_kubeconfig(control_plane)
    grant_lease(control_plane, "housekeeper", lease)
    process = start_housekeeper(kubeconfig, "kubeflow-h1", "--kubeflow", "--lease-name", lease)
    yield process
    process.close()


@pytest.fixture
def operator(
    kubeflow_reconciler: ServiceProcess, kubeflow_housekeeper: ServiceProcess
) -> tuple[ServiceProcess, ServiceProcess]:
    return kubeflow_reconciler, kubeflow_housekeeper


class Shown:
    """Every condition the namespace's PyTorchJobs have shown, from a watch of its own: a
    condition shown for less than a poll of the status is seen all the same."""

    def __init__(self, api: KubeClient, namespace: str) -> None:
        self.seen: list[tuple[str, dict[str, Any]]] = []  # (job, condition)
        self.informer = Informer(
            api,
            KUBEFLOW_JOBS,
            namespace=namespace,
            on_add=self._seen,
            on_update=lambda _, new: self._seen(new),
            retry_cap=1.0,
        )

    def _seen(self, job: KubeObject) -> None:
        for c in (job.get("status") or {}).get("conditions") or []:
            self.seen.append((job["metadata"]["name"], dict(c)))

    async def condition(self, job: KubeflowJob, kind: str, status: str = "True") -> dict[str, Any]:
        def found() -> dict[str, Any]:
            for name, c in self.seen:
                if name == job.name and c.get("type") == kind and c.get("status") == status:
                    return c
            return {}

        found_condition: dict[str, Any] = await eventually(
            found,
            f"{job.name} to show {kind}={status}",
            interval=0.05,
            explain=lambda: f"shown: {[c for n, c in self.seen if n == job.name][-8:]}",
        )
        return found_condition


@pytest.fixture
async def shown(service_client: KubeClient, admitted_namespace: str) -> AsyncIterator[Shown]:
    history = Shown(service_client, admitted_namespace)
    async with running(history.informer):
        yield history


def selector(job: str, replica_type: str) -> str:
    return (
        f"{JOB_NAME_LABEL}={job},{OPERATOR_NAME_LABEL}={OPERATOR_NAME},"
        f"{REPLICA_TYPE_LABEL}={replica_type}"
    )


def kubectl_state(control_plane: ControlPlane, namespace: str, name: str) -> str:
    """The STATE column `kubectl get pytorchjobs` prints for the job."""
    out = control_plane.kubectl("get", RESOURCE, "-n", namespace).stdout.splitlines()
    assert out[0].split()[:2] == ["NAME", "STATE"], out
    rows = {line.split()[0]: line.split() for line in out[1:]}
    return rows[name][1] if len(rows[name]) == 3 else ""


async def running_job(
    api: client.ApiClient, namespace: str, manifest: dict[str, Any], masters: int, workers: int
) -> KubeflowJob:
    """The job created, its pods all running and its Running condition True."""
    job = await KubeflowJob(api, namespace, manifest).create()
    await job.wait_pods(pod_names(job.name, masters, workers))
    await job.run_all()
    await job.wait_condition("Running")
    return job


# -- 1. the seed example ----------------------------------------------------------------------


async def test_the_seed_example_runs_as_kubeflow_runs_it(
    control_plane: ControlPlane,
    kube_client: client.ApiClient,
    admitted_namespace: str,
    operator: Any,
) -> None:
    ns = admitted_namespace
    job = await KubeflowJob(kube_client, ns, example(SIMPLE)).create()
    expected = {f"{SIMPLE}-master-0", f"{SIMPLE}-worker-0", f"{SIMPLE}-worker-1"}

    # Kubeflow's defaults, stored (the port is added to the pods, not to the job: docs/kubeflow.md).
    spec = (await job.get())["spec"]
    assert spec["runPolicy"]["cleanPodPolicy"] == "None", spec
    assert spec["runPolicy"].get("suspend") is False, spec
    assert spec["nprocPerNode"] == "auto", spec
    for kind, replicas in (("Master", 1), ("Worker", 2)):
        replica = spec["pytorchReplicaSpecs"][kind]
        assert (replica["replicas"], replica["restartPolicy"]) == (replicas, "OnFailure")

    created = condition_of(await job.wait_condition("Created"), "Created")
    assert created is not None
    assert (created["reason"], created["message"]) == (
        "PyTorchJobCreated",
        f"PyTorchJob {SIMPLE} is created.",
    )

    pods = await job.wait_pods(expected)
    await job.wait_services(expected)
    services = await job.service_objects()
    for name in expected:
        kind, index = name.split("-")[-2:]
        want = {
            JOB_NAME_LABEL: SIMPLE,
            OPERATOR_NAME_LABEL: OPERATOR_NAME,
            REPLICA_TYPE_LABEL: kind,
            REPLICA_INDEX_LABEL: index,
        }
        pod_labels = pods[name].metadata.labels
        assert {k: pod_labels.get(k) for k in want} == want, pod_labels
        assert pod_labels.get(JOB_ROLE_LABEL) == ("master" if kind == "master" else None)
        service = services[name]
        assert {k: service.metadata.labels.get(k) for k in want} == want, service.metadata
        assert service.spec.cluster_ip == "None"
        rank = int(index) + (1 if kind == "worker" else 0)
        [training] = [c for c in pods[name].spec.containers if c.name == "pytorch"]
        ports = {(p.name, p.container_port) for p in training.ports or []}
        assert ("pytorchjob-port", 23456) in ports, training.ports
        for container in pods[name].spec.containers:
            env = env_of(container)
            assert {
                k: env.get(k)
                for k in ("MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK", "PYTHONUNBUFFERED")
            } == {
                "MASTER_ADDR": f"{SIMPLE}-master-0",
                "MASTER_PORT": "23456",
                "WORLD_SIZE": "3",
                "RANK": str(rank),
                "PYTHONUNBUFFERED": "0",
            }, (name, env)

    cluster = Cluster(kube_client, ns)

    async def creations_recorded() -> bool:
        notes = {e.message for e in await cluster.events(SIMPLE, "SuccessfulCreate")}
        return {f"Created pod: {n}" for n in expected} <= notes

    await eventually(creations_recorded, "the pods' creation as Events on the PyTorchJob")

    await job.run_all()
    running_condition = condition_of(await job.wait_condition("Running"), "Running")
    assert running_condition is not None
    assert (running_condition["reason"], running_condition["message"]) == (
        "PyTorchJobRunning",
        f"PyTorchJob {SIMPLE} is running.",
    )
    assert kubectl_state(control_plane, ns, SIMPLE) == "Running"

    await job.kubelet.finish(f"{SIMPLE}-master-0", 0)
    status = await job.wait_condition("Succeeded")
    assert [(c["type"], c["status"]) for c in status["conditions"]] == [
        ("Created", "True"),
        ("Running", "False"),
        ("Succeeded", "True"),
    ], status["conditions"]
    succeeded = condition_of(status, "Succeeded")
    assert succeeded is not None
    assert succeeded["reason"] == "PyTorchJobSucceeded"
    assert succeeded["message"] == f"PyTorchJob {SIMPLE} is successfully completed."
    assert status["completionTime"]
    replicas = status["replicaStatuses"]
    assert replicas["Master"]["succeeded"] == 1, replicas
    assert replicas["Master"]["selector"] == selector(SIMPLE, "master")
    assert replicas["Worker"]["selector"] == selector(SIMPLE, "worker")
    assert kubectl_state(control_plane, ns, SIMPLE) == "Succeeded"
    # A finished job has no replica active (Kubeflow counts the running ones as succeeded).
    assert [r.get("active") for r in replicas.values()] == [None, None], replicas


# -- 2. restarting ----------------------------------------------------------------------------


async def test_a_failed_worker_restarts_and_the_job_runs_again(
    kube_client: client.ApiClient, admitted_namespace: str, operator: Any, shown: Shown
) -> None:
    """In the Replica restart scope (the annotation; the default of an elastic job) the failed
    Worker alone is restarted, as Kubeflow restarts it."""
    manifest = pytorchjob("restarts")
    scope = {constants.ANNOTATION_RESTART_SCOPE: constants.RESTART_SCOPE_REPLICA}
    manifest["metadata"]["annotations"] = scope
    job = await running_job(kube_client, admitted_namespace, manifest, 1, 1)
    master = (await job.pods())[f"{job.name}-master-0"]
    worker = f"{job.name}-worker-0"
    old = (await job.pods())[worker]
    await job.kubelet.finish(worker, 1)
    restarting = await shown.condition(job, "Restarting")
    assert restarting["reason"] == "PyTorchJobRestarting"
    assert restarting["message"] == (
        f"PyTorchJob {job.name} is restarting because 1 Worker replica(s) failed."
    )
    await job.wait_new_pod(worker, old.metadata.uid)
    cluster = Cluster(kube_client, admitted_namespace)

    async def deletion_recorded() -> bool:
        deleted = await cluster.events(job.name, "SuccessfulDelete")
        return f"Deleted pod: {worker}" in {e.message for e in deleted}

    await eventually(deletion_recorded, "the failed pod's deletion as an Event on the job")
    await job.kubelet.run(worker)

    async def running_again() -> bool:
        status = await job.status()
        found = condition_of(status, "Running")
        return (
            found is not None
            and found["status"] == "True"
            and condition_of(status, "Restarting") is None
        )

    await job.wait("Running True and Restarting gone", running_again)
    assert (await job.pods())[f"{job.name}-master-0"].metadata.uid == master.metadata.uid


async def test_a_failed_worker_restarts_the_gang_once(
    kube_client: client.ApiClient, admitted_namespace: str, operator: Any, shown: Shown
) -> None:
    """A PyTorchJob without an elasticPolicy restarts as a gang: every pod stopped and created
    again together, counted once in its record (`status.torchjob`), Restarting meanwhile; each
    container has torchjob's NCCL setting."""
    manifest = pytorchjob("gang", workers=2, run_policy={"backoffLimit": 4})
    job = await running_job(kube_client, admitted_namespace, manifest, 1, 2)
    every = pod_names(job.name, 1, 2)
    first = await job.pods()
    for pod in first.values():
        assert env_of(pod.spec.containers[0])["TORCH_NCCL_ASYNC_ERROR_HANDLING"] == "3"
    await job.kubelet.finish(f"{job.name}-worker-1", 1)
    restarting = await shown.condition(job, "Restarting")
    assert restarting["reason"] == "PyTorchJobRestarting"

    async def all_replaced() -> bool:
        pods = await job.pods()
        return set(pods) == every and all(
            pods[n].metadata.uid != first[n].metadata.uid for n in every
        )

    await job.wait("every pod created again", all_replaced)
    for pod in (await job.pods()).values():
        assert pod.metadata.annotations[constants.ANNOTATION_GANG_RESTARTS] == "1"
    record = (await job.status())["torchjob"]
    assert (record["backoffCount"], record["gangRestarts"]) == (1, 1)
    assert len(record["gangRestartTimes"]) == 1
    await job.run_all()

    async def running_again() -> bool:
        status = await job.status()
        found = condition_of(status, "Running")
        return found is not None and found["status"] == "True"

    await job.wait("Running True again", running_again)
    status = await job.status()
    assert condition_of(status, "Restarting") is None
    assert (status["torchjob"]["backoffCount"], status["torchjob"]["gangRestarts"]) == (1, 1)


# -- 3. the run policy ------------------------------------------------------------------------


async def test_backoff_limit_fails_the_job(
    kube_client: client.ApiClient, admitted_namespace: str, operator: Any
) -> None:
    manifest = pytorchjob("backoff", run_policy={"backoffLimit": 1})
    job = await running_job(kube_client, admitted_namespace, manifest, 1, 1)
    worker = f"{job.name}-worker-0"
    restarts = 0
    for _ in range(3):  # the limit is 1: the second failure at the latest fails the job
        old = (await job.pods())[worker]
        await job.kubelet.finish(worker, 1)

        async def failed_or_replaced(uid: str = old.metadata.uid) -> bool:
            failed = condition_of(await job.status(), "Failed")
            if failed is not None and failed["status"] == "True":
                return True
            pod = (await job.pods()).get(worker)
            return pod is not None and pod.metadata.uid != uid

        await job.wait("the job failed or the worker recreated", failed_or_replaced)
        if condition_of(await job.status(), "Failed"):
            break
        restarts += 1
        await job.kubelet.run(worker)
    status = await job.status()
    failed = condition_of(status, "Failed")
    assert failed is not None and failed["status"] == "True", status
    assert restarts == 1, "one restart allowed, the next failure fails the job"
    assert failed["reason"] == "PyTorchJobFailed"
    assert failed["message"] == (
        f"Job {job.name} has failed because it has reached the specified backoff limit"
    )
    assert status["completionTime"]


async def test_kubectl_says_why_a_replica_cannot_start(
    control_plane: ControlPlane,
    kube_client: client.ApiClient,
    admitted_namespace: str,
    operator: Any,
) -> None:
    job = await KubeflowJob(
        kube_client, admitted_namespace, pytorchjob("unpulled", workers=0)
    ).create()
    [master] = pod_names(job.name, 1, 0)
    await job.wait_pods(pod_names(job.name, 1, 0))
    await job.kubelet.cannot_start(master, "ImagePullBackOff", 'Back-off pulling image "nope:1"')

    def start_column() -> str:
        shown = control_plane.kubectl("get", "pytorchjobs", job.name, "-n", job.namespace)
        [row] = printed_rows(shown.stdout)
        return row["START"]

    await eventually(start_column, "kubectl's START column", explain=start_column)
    assert start_column() == "ImagePullFailed"


async def test_active_deadline_fails_the_job(
    kube_client: client.ApiClient, admitted_namespace: str, operator: Any
) -> None:
    manifest = pytorchjob("deadline", run_policy={"activeDeadlineSeconds": 3})
    job = await KubeflowJob(kube_client, admitted_namespace, manifest).create()
    await job.wait_pods(pod_names(job.name, 1, 1))
    for name in await job.pods():
        try:
            await job.kubelet.run(name)
        except client.ApiException as error:
            if error.status != 404:  # past the deadline already, the pod is gone
                raise
    status = await job.wait_condition("Failed")
    failed = condition_of(status, "Failed")
    assert failed is not None
    assert failed["reason"] == "PyTorchJobFailed"
    assert failed["message"] == (
        f"Job {job.name} has failed because it was active longer than specified deadline"
    )
    assert status["completionTime"]
    running_condition = condition_of(status, "Running")
    assert running_condition is None or running_condition["status"] == "False", status


async def test_restart_policy_never_fails_the_job_on_a_failed_worker(
    kube_client: client.ApiClient, admitted_namespace: str, operator: Any
) -> None:
    manifest = pytorchjob("never", restart_policy="Never")
    job = await running_job(kube_client, admitted_namespace, manifest, 1, 1)
    await job.kubelet.finish(f"{job.name}-worker-0", 1)
    status = await job.wait_condition("Failed")
    failed = condition_of(status, "Failed")
    assert failed is not None
    assert failed["reason"] == "PyTorchJobFailed"
    assert (
        failed["message"] == f"PyTorchJob {job.name} is failed because 1 Worker replica(s) failed."
    )
    assert status["replicaStatuses"]["Worker"].get("failed") == 1, status["replicaStatuses"]
    assert status["completionTime"]


async def test_clean_pod_policy_after_success(
    kube_client: client.ApiClient, admitted_namespace: str, operator: Any
) -> None:
    """Three jobs succeed with a worker still running: the worker is stopped before each job
    says it succeeded, whatever the policy; then All deletes every pod and Service, Running and
    None keep the rest. (Kubeflow's Running deletes the running pods' Services too; torchjob
    keeps them: docs/kubeflow.md, differences kept on purpose.)"""
    jobs = {}
    for policy in ("All", "Running", "None"):
        manifest = pytorchjob(f"clean-{policy.lower()}", run_policy={"cleanPodPolicy": policy})
        jobs[policy] = await running_job(kube_client, admitted_namespace, manifest, 1, 1)
    # None finishes first, so that the housekeeper has its finish before the others'.
    for job in reversed(jobs.values()):
        await job.wait_services(pod_names(job.name, 1, 1))
        await job.kubelet.finish(f"{job.name}-master-0", 0)
        await job.wait_condition("Succeeded")

    every = jobs["All"]
    await every.wait_pods(set())
    await every.wait_services(set())
    running = jobs["Running"]
    await running.wait_pods({f"{running.name}-master-0"})
    cluster = Cluster(kube_client, admitted_namespace)
    assert await cluster.events(every.name, constants.REASON_CLEAN_UP)
    # The housekeeper has cleaned up after the two that finished after it.
    kept = jobs["None"]
    assert set(await kept.pods()) == {f"{kept.name}-master-0"}
    assert await kept.services() == pod_names(kept.name, 1, 1)
    assert not await cluster.events(kept.name, constants.REASON_CLEAN_UP)
    assert await running.services() == pod_names(running.name, 1, 1)


async def test_ttl_after_finished_deletes_the_job(
    kube_client: client.ApiClient, admitted_namespace: str, operator: Any, shown: Shown
) -> None:
    manifest = pytorchjob("ttl", run_policy={"ttlSecondsAfterFinished": 2})
    job = await running_job(kube_client, admitted_namespace, manifest, 1, 1)
    await job.kubelet.finish(f"{job.name}-master-0", 0)
    await shown.condition(job, "Succeeded")  # seen however soon the job goes

    async def gone() -> bool:
        return not await job.exists()

    await eventually(gone, "the job deleted after its TTL")
    await job.wait_pods(set())  # the garbage collector takes what it owned


async def test_suspend_deletes_the_pods_and_resume_brings_them_back(
    kube_client: client.ApiClient, admitted_namespace: str, operator: Any
) -> None:
    job = await running_job(kube_client, admitted_namespace, pytorchjob("pause"), 1, 1)
    await job.patch_spec({"runPolicy": {"suspend": True}})
    status = await job.wait_condition("Suspended")
    await job.wait_pods(set())
    status = await job.status()
    suspended = condition_of(status, "Suspended")
    assert suspended is not None
    assert suspended["reason"] == "PyTorchJobSuspended"
    assert suspended["message"] == f"PyTorchJob {job.name} is suspended."
    running_condition = condition_of(status, "Running")
    assert running_condition is not None, status
    assert (running_condition["status"], running_condition["reason"]) == (
        "False",
        "PyTorchJobSuspended",
    )
    active_while_suspended = [r.get("active") for r in status["replicaStatuses"].values()]

    await job.patch_spec({"runPolicy": {"suspend": False}})
    status = await job.wait_condition("Suspended", "False")
    resumed = condition_of(status, "Suspended")
    assert resumed is not None
    assert resumed["reason"] == "PyTorchJobResumed"
    assert resumed["message"] == f"PyTorchJob {job.name} is resumed."
    await job.wait_pods(pod_names(job.name, 1, 1))
    await job.run_all()
    await job.wait_condition("Running")
    # A suspended job has no replica active.
    assert active_while_suspended == [None, None], active_while_suspended


async def test_a_job_managed_by_multikueue_is_left_alone(
    kube_client: client.ApiClient, admitted_namespace: str, operator: Any
) -> None:
    manifest = pytorchjob("elsewhere", run_policy={"managedBy": "kueue.x-k8s.io/multikueue"})
    elsewhere = await KubeflowJob(kube_client, admitted_namespace, manifest).create()
    # A job of our own created after it: once it has pods and a status, the other was seen.
    ours = await KubeflowJob(kube_client, admitted_namespace, pytorchjob("ours")).create()
    await ours.wait_pods(pod_names(ours.name, 1, 1))
    await ours.wait_condition("Created")
    assert await elsewhere.pods() == {}
    assert await elsewhere.services() == set()
    assert "status" not in await elsewhere.get()


async def test_a_scheduling_policy_does_not_keep_the_job_from_running(
    kube_client: client.ApiClient, admitted_namespace: str, operator: Any
) -> None:
    """No PodGroup API is served here: the job runs (what its PodGroup would say is for the
    unit tests)."""
    policy = {"schedulingPolicy": {"minAvailable": 2, "queue": "research"}}
    manifest = pytorchjob("gang", workers=1, run_policy=policy)
    job = await running_job(kube_client, admitted_namespace, manifest, 1, 1)
    await job.kubelet.finish(f"{job.name}-master-0", 0)
    await job.wait_condition("Succeeded")


# -- 4. admission -----------------------------------------------------------------------------


def refused(control_plane: ControlPlane, namespace: str, manifest: dict[str, Any]) -> str:
    """What `kubectl create` says when the apiserver refuses the job."""
    result = control_plane.kubectl(
        "create", "-n", namespace, "-f", "-", input=json.dumps(manifest), check=False
    )
    assert result.returncode != 0, f"admitted: {result.stdout}"
    return result.stderr


async def test_a_master_of_two_replicas_is_refused(
    control_plane: ControlPlane, admitted_namespace: str
) -> None:
    manifest = pytorchjob("two-masters")
    manifest["spec"]["pytorchReplicaSpecs"]["Master"]["replicas"] = 2
    message = refused(control_plane, admitted_namespace, manifest)
    assert "spec.pytorchReplicaSpecs.Master.replicas" in message, message


async def test_an_unsupported_field_is_refused(
    control_plane: ControlPlane, admitted_namespace: str
) -> None:
    """Each field of `UNSUPPORTED` (none, while torchjob honours every field of the schema) and
    a replica type Kubeflow's PyTorchJob does not have."""
    cases = {**UNSUPPORTED_EXAMPLES, "spec.pytorchReplicaSpecs.Chief": replica_spec(1)}
    missing = set(UNSUPPORTED) - set(cases)
    assert not missing, f"give an example value of {sorted(missing)}"
    for path, value in cases.items():
        if path not in UNSUPPORTED and path in UNSUPPORTED_EXAMPLES:
            continue  # supported now
        manifest = pytorchjob("unsupported")
        set_path(manifest, path, value)
        message = refused(control_plane, admitted_namespace, manifest)
        assert "not supported" in message, (path, message)
        parent, _, key = path.rpartition(".")
        assert parent in message and key in message, (path, message)


# A value for each field that has been in `UNSUPPORTED`.
UNSUPPORTED_EXAMPLES: dict[str, Any] = {
    "spec.elasticPolicy.metrics": [
        {"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization"}}}
    ],
}


def set_path(manifest: dict[str, Any], path: str, value: Any) -> None:
    *parents, leaf = path.split(".")
    node = manifest
    for key in parents:
        node = node.setdefault(key, {})
    node[leaf] = value


async def test_changing_managed_by_is_refused(
    control_plane: ControlPlane, kube_client: client.ApiClient, admitted_namespace: str
) -> None:
    job = await KubeflowJob(kube_client, admitted_namespace, pytorchjob("manager")).create()
    patch = {"spec": {"runPolicy": {"managedBy": "kueue.x-k8s.io/multikueue"}}}
    result = control_plane.kubectl(
        *("patch", f"{RESOURCE}/{job.name}", "-n", admitted_namespace, "--type=merge"),
        *("-p", json.dumps(patch)),
        check=False,
    )
    assert result.returncode != 0, result.stdout
    assert "spec.runPolicy.managedBy" in result.stderr, result.stderr
    assert (await job.get())["spec"]["runPolicy"].get("managedBy") in (
        None,
        "kubeflow.org/training-operator",
    )


async def test_a_lower_case_key_and_a_master_without_replicas_are_defaulted(
    kube_client: client.ApiClient, admitted_namespace: str
) -> None:
    """Defaults come before validation (Kubeflow refuses both: docs/kubeflow.md)."""
    manifest = pytorchjob("spelling")
    specs = manifest["spec"]["pytorchReplicaSpecs"]
    specs["master"] = specs.pop("Master")
    del specs["master"]["replicas"]
    specs["worker"] = specs.pop("Worker")
    job = await KubeflowJob(kube_client, admitted_namespace, manifest).create()
    stored = (await job.get())["spec"]["pytorchReplicaSpecs"]
    assert sorted(stored) == ["Master", "Worker"], stored
    assert stored["Master"]["replicas"] == 1


# -- 5. elastic -------------------------------------------------------------------------------


async def test_an_elastic_job_scales_through_the_scale_subresource(
    control_plane: ControlPlane,
    kube_client: client.ApiClient,
    admitted_namespace: str,
    operator: Any,
) -> None:
    manifest = pytorchjob(
        "elastic", masters=0, workers=1, elasticPolicy={"minReplicas": 1, "maxReplicas": 3}
    )
    job = await KubeflowJob(kube_client, admitted_namespace, manifest).create()
    await job.wait_pods(pod_names(job.name, 0, 1))
    control_plane.kubectl(
        "scale", f"{RESOURCE}/{job.name}", "-n", admitted_namespace, "--replicas=3"
    )
    assert (await job.get())["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] == 3
    pods = await job.wait_pods(pod_names(job.name, 0, 3))
    for name, pod in pods.items():
        for container in pod.spec.containers:
            env = env_of(container)
            assert {
                k: env.get(k) for k in ("PET_NNODES", "PET_RDZV_ENDPOINT", "PET_RDZV_BACKEND")
            } == {
                "PET_NNODES": "1:3",
                "PET_RDZV_ENDPOINT": f"{job.name}-worker-0:23456",
                "PET_RDZV_BACKEND": "c10d",
            }, (name, env)

    # What an autoscaler reads through the scale subresource.
    await job.run_all()

    def scale_status() -> dict[str, Any]:
        out = control_plane.kubectl(
            *("get", f"{RESOURCE}/{job.name}", "-n", admitted_namespace),
            *("--subresource=scale", "-o", "json"),
        ).stdout
        status: dict[str, Any] = json.loads(out).get("status") or {}
        return status if status.get("replicas") == 3 else {}

    scale = await eventually(scale_status, "the scale subresource to count 3 active Workers")
    assert scale["selector"] == selector(job.name, "worker"), scale


async def test_the_scale_subresource_keeps_to_the_bounds_and_to_a_fixed_job(
    control_plane: ControlPlane,
    kube_client: client.ApiClient,
    admitted_namespace: str,
    operator: Any,
) -> None:
    """`kubectl scale` (and an autoscaler) write Worker.replicas through the scale subresource,
    which no webhook sees: the CRD's own rules hold it."""
    manifest = pytorchjob(
        "bounded", masters=0, workers=1, elasticPolicy={"minReplicas": 1, "maxReplicas": 2}
    )
    bounded = await KubeflowJob(kube_client, admitted_namespace, manifest).create()
    fixed = await KubeflowJob(kube_client, admitted_namespace, pytorchjob("fixed")).create()

    def scale(job: KubeflowJob, replicas: int) -> str:
        scaled = control_plane.kubectl(
            *("scale", f"{RESOURCE}/{job.name}", "-n", admitted_namespace),
            f"--replicas={replicas}",
            check=False,
        )
        assert scaled.returncode != 0, scaled.stdout
        return scaled.stderr

    said = scale(bounded, 3)
    assert "must lie between spec.elasticPolicy.minReplicas and maxReplicas" in said, said
    said = scale(fixed, 2)
    assert "is immutable without spec.elasticPolicy" in said, said
    assert (await bounded.get())["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] == 1
    assert (await fixed.get())["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] == 1


async def test_metrics_make_the_jobs_autoscaler(
    kube_client: client.ApiClient, admitted_namespace: str, operator: Any
) -> None:
    """An elasticPolicy with metrics gets a HorizontalPodAutoscaler of its Workers, as Kubeflow
    makes it; the reconciles that follow leave it as it is (its generation stays 1)."""
    metric = {
        "type": "Resource",
        "resource": {"name": "cpu", "target": {"type": "AverageValue", "averageValue": "1000m"}},
    }
    elastic = {"minReplicas": 1, "maxReplicas": 3, "metrics": [metric]}
    manifest = pytorchjob("scaled", masters=0, workers=1, elasticPolicy=elastic)
    job = await KubeflowJob(kube_client, admitted_namespace, manifest).create()
    autoscaling = client.AutoscalingV2Api(kube_client)

    async def made() -> Any:
        found = await autoscaling.list_namespaced_horizontal_pod_autoscaler(admitted_namespace)
        return next((h for h in found.items if h.metadata.name == job.name), None)

    hpa = await eventually(made, "the job's HorizontalPodAutoscaler")
    assert (hpa.spec.min_replicas, hpa.spec.max_replicas) == (1, 3)
    target = hpa.spec.scale_target_ref
    assert (target.api_version, target.kind, target.name) == (
        "kubeflow.org/v1",
        "PyTorchJob",
        job.name,
    )
    assert hpa.metadata.owner_references[0].uid == (await job.get())["metadata"]["uid"]
    # More reconciles: the pod runs and the job's status moves on.
    await job.wait_pods(pod_names(job.name, 0, 1))
    await job.run_all()
    await job.wait_condition("Running")
    hpa = await made()
    assert hpa.metadata.generation == 1, hpa.spec
