"""The reconciler as a process, with the webhook, on the real control plane; the test plays the
kubelet by patching pod status."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Awaitable
from typing import Any

import pytest
from kubernetes_asyncio import client
from support import ControlPlane
from support.cluster import Cluster, Job, condition
from support.controlplane import free_port
from support.eventually import TIMEOUT, eventually
from support.jobs import CONTAINER, JobBuilder, job_manifest, names
from support.operator import pod_webhook
from support.processes import ServiceProcess
from support.scenarios import happy_path, master_failure

from torchjob.api import constants, types
from torchjob.api.job_api import TRAIN_JOB
from torchjob.kube.resources import JOBS, job_resource


async def test_happy_path(
    control_plane: ControlPlane,
    kube_client: client.ApiClient,
    admitted_namespace: str,
    reconciler: ServiceProcess,
) -> None:
    await happy_path(control_plane, kube_client, admitted_namespace)
    assert_probes_and_metrics(reconciler)


def assert_probes_and_metrics(reconciler: ServiceProcess) -> None:
    assert reconciler.probe("/healthz") == 200
    assert reconciler.probe("/readyz") == 200
    controller = 'controller="pytorchtrainingjob"'
    success = "{" + controller + ',result="success"}'
    assert reconciler.samples("torchjob_reconcile_total")[success] > 0
    assert reconciler.samples("torchjob_reconcile_duration_seconds_count")["{" + controller + "}"]
    assert "{" + controller + "}" in reconciler.samples("torchjob_workqueue_depth")
    assert reconciler.samples("torchjob_kube_client_requests_total")['{method="POST"}'] > 0
    assert list(reconciler.samples("torchjob_leader_election_is_leader").values()) == [1.0]
    lists = reconciler.samples("torchjob_informer_lists_total")
    # The e2e reconciler serves TrainJobs too (tests/e2e/conftest.py): one list of each kind.
    trainjobs = job_resource(TRAIN_JOB).path(None)
    assert {k for k in lists if 'reason="initial"' in k} == {
        f'{{reason="initial",resource="{resource}"}}'
        for resource in ("/api/v1/pods", "/api/v1/services", "/api/v1/nodes", JOBS.path(None))
    } | {f'{{reason="initial",resource="{trainjobs}"}}'}


async def _eq(value: Awaitable[Any], expected: Any) -> bool:
    return bool(await value == expected)


async def test_each_action_is_an_event_and_an_info_log_with_the_job_key(
    kube_client: client.ApiClient, admitted_namespace: str, reconciler: ServiceProcess
) -> None:
    """Pods and Services created (SuccessfulCreate), a failed replica's pod deleted
    (SuccessfulDelete) and recreated with a restart Event saying which, why and the count, the
    phase changes: each an Event on the job and an INFO line naming the job."""
    job = await Job(
        kube_client,
        admitted_namespace,
        # Restarted alone (a job not run by torchrun restarts as a gang by default: its Events are
        # tests/e2e/test_gang_restart.py's).
        JobBuilder("acts")
        .metadata(annotations={constants.ANNOTATION_RESTART_SCOPE: constants.RESTART_SCOPE_REPLICA})
        .replicas("worker", 2)
        .restart_policy("OnFailure")
        .build(),
    ).create()
    workers = names(job.name, "worker", 2)
    pods = await job.wait_pods(workers)
    await job.run_all()
    await job.wait_phase("Running")
    worker = f"{job.name}-worker-1"
    await job.kubelet.finish(worker, 137)
    await job.wait_new_pod(worker, pods[worker].metadata.uid)
    cluster = Cluster(kube_client, admitted_namespace)

    async def notes(reason: str) -> set[str]:
        return {e.message for e in await cluster.events(job.name, reason)}

    async def all_recorded() -> bool:
        created = await notes("SuccessfulCreate")
        wanted = {f"Created {kind}: {name}" for kind in ("pod", "service") for name in workers}
        return wanted <= created and f"Deleted pod: {worker}" in await notes("SuccessfulDelete")

    await eventually(all_recorded, "the creations and the deletion as Events", timeout=TIMEOUT)
    [restart] = await notes("RestartBackoff")
    assert restart.startswith(f"restarting {worker} (restart 1 in a row, 1 of backoffLimit ")
    assert restart.endswith("after exit code 137 (SIGKILL)"), restart
    assert await notes("JobRunning")
    logged = [
        json.loads(line)
        for line in reconciler.log_tail(2000).splitlines()
        if line.startswith("{") and job.name in line and admitted_namespace in line
    ]
    actions = {
        (e["event"], e.get("level"))
        for e in logged
        if e.get("job") == f"{admitted_namespace}/{job.name}"
    }
    assert (f"Created pod: {worker}", "info") in actions, actions
    assert (f"Deleted pod: {worker}", "info") in actions, actions


async def test_master_failure_fails_the_job(
    control_plane: ControlPlane,
    kube_client: client.ApiClient,
    admitted_namespace: str,
    reconciler: ServiceProcess,
) -> None:
    await master_failure(control_plane, kube_client, admitted_namespace)


async def test_exit_code_137_restarts_and_exit_1_fails(
    kube_client: client.ApiClient, admitted_namespace: str, reconciler: ServiceProcess
) -> None:
    job = await Job(
        kube_client,
        admitted_namespace,
        JobBuilder.example("basic").restart_policy("ExitCode").replica_count(2).build(),
    ).create()
    pods = await job.wait_pods(names(job.name, "worker", 2))
    await job.run_all()
    worker = f"{job.name}-worker-1"
    await job.kubelet.finish(worker, 137)
    replacement = await job.wait_new_pod(worker, pods[worker].metadata.uid)
    assert replacement.metadata.annotations[constants.ANNOTATION_BACKOFF_COUNT] == "1"
    await job.wait("backoffCount 1", lambda: _eq(_field(job, "backoffCount"), 1))
    await job.kubelet.run(worker)
    await job.kubelet.finish(worker, 1)
    status = await job.wait_phase("Failed")
    assert condition(status, "Failed")["reason"] == "ReplicaFailed"
    assert status["backoffCount"] == 1


async def test_an_oom_killed_master_fails_the_job_naming_it(
    control_plane: ControlPlane,
    kube_client: client.ApiClient,
    admitted_namespace: str,
    reconciler: ServiceProcess,
) -> None:
    """The kubelet says OOMKilled: the Failed condition, its Event and the replica's container
    status name it, not only exit code 137."""
    job = await Job(
        kube_client,
        admitted_namespace,
        JobBuilder.example("basic").restart_policy("Never").replica_count(2).build(),
    ).create()
    await job.wait_pods(names(job.name, "worker", 2))
    await job.run_all()
    master = f"{job.name}-worker-0"
    await job.kubelet.finish(master, 137, reason="OOMKilled")
    status = await job.wait_phase("Failed")
    failed = condition(status, "Failed")
    assert (failed["reason"], failed["message"]) == (
        "MasterFailed",
        f"replica {master} container pytorch was OOMKilled (exit code 137) and is not restarted",
    )
    [entry] = [r for t in status["tasks"] for r in t["replicas"] if r["name"] == master]
    assert entry["containers"] == [
        {"name": "pytorch", "state": "terminated", "exitCode": 137, "reason": "OOMKilled"}
    ]

    async def event_names_it() -> bool:
        events = await client.EventsV1Api(kube_client).list_namespaced_event(admitted_namespace)
        return any(e.reason == "MasterFailed" and e.note == failed["message"] for e in events.items)

    await job.wait("the MasterFailed Event", event_names_it)


async def _field(job: Job, key: str) -> Any:
    return (await job.status()).get(key)


async def test_backoff_exhaustion(
    kube_client: client.ApiClient, admitted_namespace: str, reconciler: ServiceProcess
) -> None:
    job = await Job(
        kube_client,
        admitted_namespace,
        JobBuilder.example("basic")
        .restart_policy("OnFailure")
        .replica_count(2)
        .run_policy(backoffLimit=1)
        .build(),
    ).create()
    pods = await job.wait_pods(names(job.name, "worker", 2))
    worker = f"{job.name}-worker-1"
    await job.kubelet.finish(worker, 2)
    await job.wait_new_pod(worker, pods[worker].metadata.uid)
    await job.kubelet.finish(worker, 2)
    status = await job.wait_phase("Failed")
    assert condition(status, "Failed")["reason"] == "BackoffLimitExceeded"
    assert status["backoffCount"] == 1


async def test_deadline_fires_on_time_and_stops_pods(
    kube_client: client.ApiClient, admitted_namespace: str, reconciler: ServiceProcess
) -> None:
    manifest = (
        JobBuilder.example("basic")
        .restart_policy("OnFailure")
        .replica_count(2)
        .run_policy(activeDeadlineSeconds=3)
        .build()
    )
    job = await Job(kube_client, admitted_namespace, manifest).create()
    await job.wait_pods(names(job.name, "worker", 2))
    await job.run_all()
    # Nothing else changes from here on and the reconciler has no periodic resync: only the
    # requeue it asked for at the deadline can fail the job.
    status = await job.wait_phase("Failed")
    assert condition(status, "Failed")["reason"] == "DeadlineExceeded"
    await job.wait_pods(set())


async def test_pod_deleted_by_hand_comes_back_and_is_counted(
    kube_client: client.ApiClient, admitted_namespace: str, reconciler: ServiceProcess
) -> None:
    job = await Job(
        kube_client,
        admitted_namespace,
        JobBuilder.example("basic").restart_policy("OnFailure").replica_count(2).build(),
    ).create()
    pods = await job.wait_pods(names(job.name, "worker", 2))
    await job.run_all()
    await job.wait_phase("Running")
    worker = f"{job.name}-worker-1"
    await job.core.delete_namespaced_pod(worker, admitted_namespace, grace_period_seconds=0)
    await job.wait_new_pod(worker, pods[worker].metadata.uid)
    await job.wait("backoffCount 1", lambda: _eq(_field(job, "backoffCount"), 1))


async def test_debug_mode(
    kube_client: client.ApiClient, admitted_namespace: str, reconciler: ServiceProcess
) -> None:
    manifest = (
        JobBuilder.example("debug-custom").restart_policy("OnFailure").replica_count(2).build()
    )
    job = await Job(kube_client, admitted_namespace, manifest).create()
    pods = await job.wait_pods(names(job.name, "worker", 2))
    assert pods[f"{job.name}-worker-0"].spec.containers[0].command == ["/usr/bin/sshd"]
    assert not pods[f"{job.name}-worker-0"].spec.init_containers
    await job.run_all()
    status = await job.wait_phase("Running")
    assert condition(status, "Running")["reason"] == "Debug"
    await job.kubelet.finish(f"{job.name}-worker-1", 1)
    await asyncio.sleep(1.5)
    assert f"{job.name}-worker-1" in await job.pods(), "debug pods are never restarted"
    assert (await job.status())["phase"] == "Running"


async def test_debug_switched_off_is_not_running_until_the_new_pods_run(
    kube_client: client.ApiClient, admitted_namespace: str, reconciler: ServiceProcess
) -> None:
    """Debug mode on, then off: the debug pods are replaced, and while the new pods are Pending
    the job is Pending, not Running; the Debug condition and Events tell each switch."""
    manifest = JobBuilder.example("debug-custom").restart_policy("OnFailure").replica_count(2)
    job = await Job(kube_client, admitted_namespace, manifest.build()).create()
    workers = names(job.name, "worker", 2)
    debug_pods = await job.wait_pods(workers)
    await job.run_all()
    status = await job.wait_phase("Running")
    assert (condition(status, "Debug")["status"], condition(status, "Debug")["reason"]) == (
        "True",
        "DebugEnabled",
    )
    await job.patch_spec({"runMode": {"debug": {"enable": False, "enabled": False}}})
    old = {name: pod.metadata.uid for name, pod in debug_pods.items()}

    async def replaced() -> bool:
        pods = await job.pods()
        return set(pods) == workers and all(p.metadata.uid != old[n] for n, p in pods.items())

    await job.wait("new pods", replaced)
    await asyncio.sleep(1)  # the reconciler has seen the new pods, Pending
    status = await job.status()
    assert status["phase"] == "Pending", status
    assert condition(status, "Running")["status"] == "False"
    debug = condition(status, "Debug")
    assert (debug["status"], debug["reason"]) == ("False", "DebugDisabled")
    assert status["aggregate"]["pending"] == 2, status["aggregate"]
    await job.run_all()
    status = await job.wait_phase("Running")
    assert condition(status, "Running")["reason"] == "AllReplicasRunning"
    cluster = Cluster(kube_client, admitted_namespace)
    for reason in ("DebugEnabled", "DebugDisabled", "JobPending", "JobRunning"):
        assert await cluster.events(job.name, reason), reason


async def test_pause_and_resume(
    kube_client: client.ApiClient, admitted_namespace: str, reconciler: ServiceProcess
) -> None:
    manifest = JobBuilder.example("basic").restart_policy("OnFailure").replica_count(2).build()
    manifest["spec"]["runMode"] = {
        "pause": {
            "enabled": False,
            "resumeSpecs": [{"type": "worker", "args": ["dist_mnist.py", "--resume"]}],
        }
    }
    job = await Job(kube_client, admitted_namespace, manifest).create()
    await job.wait_pods(names(job.name, "worker", 2))
    await job.run_all()
    started = (await job.wait_phase("Running"))["startTime"]
    await job.patch_spec({"runMode": {"pause": {"enabled": True}}})
    status = await job.wait_phase("Paused")
    await job.wait_pods(set())
    assert status["startTime"] == started
    status = await job.status()
    assert condition(status, "Initialized")["reason"] == "Paused"
    await job.patch_spec({"runMode": {"pause": {"enabled": False}}})
    pods = await job.wait_pods(names(job.name, "worker", 2))
    assert pods[f"{job.name}-worker-0"].spec.containers[0].args == ["dist_mnist.py", "--resume"]
    status = await job.wait_phase("Resuming")
    assert condition(status, "Paused")["reason"] == "Resuming"
    assert condition(status, "Initialized")["reason"] != "Paused"
    await job.run_all()
    status = await job.wait_phase("Running")
    assert status["backoffCount"] == 0
    resumed = condition(status, "Paused")
    assert (resumed["status"], resumed["reason"]) == ("False", "Resumed")
    cluster = Cluster(kube_client, admitted_namespace)
    for reason in ("JobPaused", "JobResuming", "JobRunning"):
        assert await cluster.events(job.name, reason), reason


async def test_job_deletion_removes_pods_and_services(
    kube_client: client.ApiClient, admitted_namespace: str, reconciler: ServiceProcess
) -> None:
    job = await Job(
        kube_client,
        admitted_namespace,
        JobBuilder.example("basic").restart_policy("OnFailure").replica_count(2).build(),
    ).create()
    await job.wait_pods(names(job.name, "worker", 2))
    await job.delete_foreground()
    await job.wait_pods(set(), timeout=60)
    await job.wait("services gone", lambda: _eq(job.services(), set()), timeout=60)


async def test_pods_refused_for_a_while_come_once_admission_works_again(
    control_plane: ControlPlane,
    kube_client: client.ApiClient,
    admitted_namespace: str,
    reconciler: ServiceProcess,
) -> None:
    """A webhook nobody serves fails every pod creation in the namespace (500). The job shows
    its status meanwhile, and its pods come as soon as the webhook is gone: the creations that
    failed are not waited for."""
    name = f"broken-{admitted_namespace}"
    broken: dict[str, Any] = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": name},
        "webhooks": [
            {
                **pod_webhook(),
                "name": "pods.broken.torchjob.dev",
                "clientConfig": {"url": f"https://127.0.0.1:{free_port()}/nobody"},
                "namespaceSelector": {
                    "matchLabels": {"kubernetes.io/metadata.name": admitted_namespace}
                },
            }
        ],
    }
    await asyncio.to_thread(control_plane.kubectl, "apply", "-f", "-", input=json.dumps(broken))
    try:
        job = await Job(
            kube_client,
            admitted_namespace,
            JobBuilder.example("basic").restart_policy("OnFailure").replica_count(2).build(),
        ).create()
        expected = names(job.name, "worker", 2)
        await job.wait("services", lambda: _eq(job.services(), expected))
        status = await job.wait_phase("Pending")
        assert condition(status, "Initialized")["status"] == "False"

        async def shown() -> bool:
            conditions = (await job.status()).get("conditions") or []
            failure: dict[str, Any] = next(
                (c for c in conditions if c["type"] == "ReplicaFailure"), {}
            )
            return failure.get("reason") == "PodCreationFailed" and (
                "failed calling webhook" in failure.get("message", "")
            )

        await job.wait("the webhook's failure in ReplicaFailure", shown)
        await asyncio.sleep(2)  # several failed rounds, with growing backoff
        assert await job.pods() == {}
        assert (await job.status())["phase"] == "Pending", "a 5xx does not fail the job"
    finally:
        await asyncio.to_thread(
            control_plane.kubectl, "delete", "mutatingwebhookconfiguration", name
        )
    await job.wait_pods(expected)
    await job.run_all()
    status = await job.wait_phase("Running")
    cleared = condition(status, "ReplicaFailure")
    assert (cleared["status"], cleared["reason"]) == ("False", "NoReplicaFailure")


@pytest.mark.parametrize(
    ("resource", "reason"),
    [("pods", "PodCreationFailed"), ("services", "ServiceCreationFailed")],
)
async def test_a_quota_refusal_is_shown_and_retried_until_the_quota_allows_it(
    control_plane: ControlPlane,
    kube_client: client.ApiClient,
    admitted_namespace: str,
    reconciler: ServiceProcess,
    resource: str,
    reason: str,
) -> None:
    """A ResourceQuota that admits one of a job's two pods (or Services): the job reports the
    apiserver's refusal in a ReplicaFailure condition and a Warning Event, stays Pending, and
    gets its replicas once the quota is raised."""
    quota = {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {"name": "one", "namespace": admitted_namespace},
        "spec": {"hard": {resource: "1"}},
    }
    await asyncio.to_thread(control_plane.kubectl, "apply", "-f", "-", input=json.dumps(quota))
    await _quota_counted(control_plane, admitted_namespace, resource)
    job = await Job(
        kube_client,
        admitted_namespace,
        JobBuilder.example("basic").restart_policy("OnFailure").replica_count(2).build(),
    ).create()

    async def refused() -> bool:
        failures = [
            c for c in (await job.status()).get("conditions", []) if c["type"] == "ReplicaFailure"
        ]
        return bool(failures) and failures[0]["reason"] == reason

    await job.wait("the refusal in the status", refused)
    status = await job.status()
    failure = condition(status, "ReplicaFailure")
    assert "exceeded quota: one" in failure["message"], failure
    assert failure["message"].startswith(f"creating {resource[:-1]} {job.name}-worker-")
    assert status["phase"] == "Pending"
    events = json.loads(
        (
            await asyncio.to_thread(
                control_plane.kubectl,
                *("get", "events.events.k8s.io", "-n", admitted_namespace, "-o", "json"),
            )
        ).stdout
    )["items"]
    assert any(e["reason"] == reason and e["type"] == "Warning" for e in events)
    quota["spec"] = {"hard": {resource: "10"}}
    await asyncio.to_thread(control_plane.kubectl, "apply", "-f", "-", input=json.dumps(quota))
    expected = names(job.name, "worker", 2)
    await job.wait("services", lambda: _eq(job.services(), expected), timeout=60)
    await job.wait_pods(expected, timeout=60)
    await job.run_all()
    await job.wait_phase("Running")


async def test_an_invalid_pod_template_fails_the_job_at_once_naming_the_refusal(
    kube_client: client.ApiClient,
    admitted_namespace: str,
    reconciler: ServiceProcess,
) -> None:
    """The apiserver refuses the pod as invalid (422: a volumeMount of no volume): retrying the
    same pod cannot help, so the job fails at once with the apiserver's message in its Failed
    condition and a Warning Event, and the reconciler logs the refusal without a traceback."""
    broken = {**CONTAINER, "volumeMounts": [{"name": "missing", "mountPath": "/data"}]}
    job = await Job(
        kube_client,
        admitted_namespace,
        JobBuilder("invalid").replicas("worker", 2, container=broken).build(),
    ).create()
    status = await job.wait_phase("Failed")
    failed = condition(status, "Failed")
    assert failed["reason"] == "PodCreationFailed", failed
    # The pods are sent several at a time, in no promised order: the first refused is named.
    assert re.match(rf"creating pod {job.name}-worker-[01]: ", failed["message"]), failed
    assert "volumeMounts[0].name: Not found" in failed["message"], failed
    warnings = await Cluster(kube_client, admitted_namespace).events(job.name, "PodCreationFailed")
    assert [e.type for e in warnings] == ["Warning"]
    await asyncio.sleep(1)  # no retry comes
    assert await job.pods() == {}
    assert (await job.status())["phase"] == "Failed"
    log = reconciler.log_tail(400)
    assert "creation refused" in log
    ours = [line for line in log.splitlines() if admitted_namespace in line]
    assert [line for line in ours if "Traceback" in line] == []


async def _quota_counted(control_plane: ControlPlane, namespace: str, resource: str) -> None:
    """Until the quota controller has counted the namespace (before that the apiserver refuses
    with "status unknown for quota" instead of the message a user sees)."""

    async def used() -> str:
        counted = await asyncio.to_thread(
            control_plane.kubectl,
            *("get", "resourcequota", "one", "-n", namespace),
            "-o",
            f"jsonpath={{.status.used.{resource}}}",
        )
        return counted.stdout.strip()

    await eventually(used, "the quota counted", timeout=TIMEOUT)


async def test_elastic_scale_up_then_down_from_the_highest_index(
    control_plane: ControlPlane,
    kube_client: client.ApiClient,
    admitted_namespace: str,
    reconciler: ServiceProcess,
) -> None:
    """`kubectl scale ptj` sets spec.elastic.expectedReplicas through the scale subresource; the
    pods follow, and the scale reads back the replicas that exist and the pods' selector."""
    manifest = job_manifest("newer-spelling-elastic")  # elastic between 2 and 4, 3 expected
    job = await Job(kube_client, admitted_namespace, manifest).create()
    before = await job.wait_pods(names(job.name, "node", 3))
    await job.run_all()
    await job.wait_phase("Running")

    def read_scale() -> dict[str, Any]:
        got = control_plane.kubectl(
            *("get", "--raw"),
            f"/apis/{types.GROUP}/{types.VERSION}/namespaces/{admitted_namespace}/"
            f"{types.PLURAL}/{job.name}/scale",
        )
        return dict(json.loads(got.stdout))

    async def scale_reads(replicas: int) -> bool:
        got = await asyncio.to_thread(read_scale)
        return bool(got["spec"].get("replicas") == got["status"].get("replicas") == replicas)

    await job.wait("the scale's status", lambda: scale_reads(3))
    scale_now = await asyncio.to_thread(read_scale)
    assert scale_now["status"]["selector"] == f"{constants.LABEL_JOB_NAME}={job.name}"

    async def scale(replicas: int) -> None:
        await asyncio.to_thread(
            control_plane.kubectl,
            *("scale", f"{types.PLURAL}/{job.name}", "-n", admitted_namespace),
            f"--replicas={replicas}",
        )

    await scale(4)
    grown = await job.wait_pods(names(job.name, "node", 4))
    await job.wait("4 services", lambda: _eq(job.services(), names(job.name, "node", 4)))
    assert {n: p.metadata.uid for n, p in grown.items() if n in before} == {
        n: p.metadata.uid for n, p in before.items()
    }, "scaling up touched the running replicas"
    await job.kubelet.run(f"{job.name}-node-3")
    await job.wait_phase("Running")
    await job.wait("the scale's status", lambda: scale_reads(4))

    await scale(2)
    shrunk = await job.wait_pods(names(job.name, "node", 2))
    await job.wait("2 services", lambda: _eq(job.services(), names(job.name, "node", 2)))
    assert {n: p.metadata.uid for n, p in shrunk.items()} == {
        n: p.metadata.uid for n, p in before.items() if n in shrunk
    }, "scaling down removes the highest indexes, and only them"
    status = await job.status()
    assert status["phase"] == "Running"
    assert status["backoffCount"] == 0, "replicas scaled away are not restarts"
    assert [len(t["replicas"]) for t in status["tasks"]] == [2]
    events = await client.EventsV1Api(kube_client).list_namespaced_event(admitted_namespace)
    scaled = sorted(e.note for e in events.items if e.reason == constants.REASON_SCALED)
    assert scaled == ["node: from 3 to 4 replicas", "node: from 4 to 2 replicas"]
    await job.wait("the scale's status", lambda: scale_reads(2))
    above = control_plane.kubectl(
        *("scale", f"{types.PLURAL}/{job.name}", "-n", admitted_namespace, "--replicas=9"),
        check=False,
    )
    assert above.returncode != 0 and "expectedReplicas" in above.stderr, above.stderr


async def test_t9k_scheduler_pods_name_the_scheduler_and_queue(
    kube_client: client.ApiClient, admitted_namespace: str, reconciler: ServiceProcess
) -> None:
    job = await Job(kube_client, admitted_namespace, job_manifest("scheduler-tensorboard")).create()
    pods = await job.wait_pods(names(job.name, "worker", 2))
    for pod in pods.values():
        assert pod.spec.scheduler_name == "t9k-scheduler"
        assert pod.metadata.labels[constants.LABEL_T9K_QUEUE] == "default"
        assert pod.metadata.labels[constants.LABEL_T9K_PRIORITY] == "50"
    services = await job.core.list_namespaced_service(
        admitted_namespace, label_selector=f"{constants.LABEL_JOB_NAME}={job.name}"
    )
    assert len(services.items) == 2, "each replica's Service is created before its pod"
    for service in services.items:
        assert service.spec.cluster_ip == "None"
        assert service.spec.publish_not_ready_addresses is True
