"""The reconciler losing its footing mid-job: killed with SIGKILL and started again, run as two
replicas of which only the leader acts and the other takes over, and the apiserver going away
with etcd's history compacted meanwhile. Each time the job finishes with no pod created twice
and no status lost. Its own module: it kills and restarts reconciler processes (and the
apiserver)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio import client
from support import ControlPlane
from support.cluster import Job, condition
from support.eventually import eventually
from support.informers import PodHistory
from support.jobs import JobBuilder, names
from support.operator import is_leading, reconciler_kubeconfig, start_reconciler
from support.processes import ServiceProcess

from torchjob.api import constants
from torchjob.kube.client import KubeClient
from torchjob.kube.resources import JOBS, NODES, PODS, SERVICES

RECOVERY_TIMEOUT = 90.0
INFORMED = {kind.path(None) for kind in (PODS, SERVICES, JOBS, NODES)}


class Scenario:
    """A four-replica ExitCode job (not run by torchrun: it restarts as a gang) brought to
    Running while a watch of the test's own records every pod; then its last worker is killed
    (exit 137), and every pod must come back exactly once, the restart counted once."""

    def __init__(self, api: client.ApiClient, service_client: KubeClient, namespace: str) -> None:
        self.api = api
        manifest = JobBuilder.example("basic").restart_policy("ExitCode").build()
        self.job = Job(api, namespace, manifest)
        self.history = PodHistory(service_client, namespace)
        self.worker = f"{self.job.name}-worker-3"
        self.first: dict[str, Any] = {}

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[Scenario]:
        async with self.history.watching():
            await self.job.create()
            self.first = await self.job.wait_pods(names(self.job.name, "worker", 4))
            await self.job.run_all()
            await self.job.wait_phase("Running")
            yield self

    async def kill_worker(self) -> None:
        await self.job.kubelet.finish(self.worker, 137)

    async def finishes_after_one_restart(self) -> None:
        """Every pod comes back once, the gang's restart counted once; the job then succeeds;
        no pod was ever created twice."""
        job = self.job
        gang = await job.wait_all_replaced(self.first, "the gang created again", RECOVERY_TIMEOUT)
        for pod in gang.values():
            assert pod.metadata.annotations[constants.ANNOTATION_BACKOFF_COUNT] == "1"
        await job.run_all()
        await job.kubelet.finish(f"{job.name}-worker-0", 0)
        status = await job.wait_phase("Succeeded")
        assert condition(status, "Completed")["reason"] == "MasterSucceeded"
        assert (status["backoffCount"], status["gangRestarts"]) == (1, 1)
        assert self.history.created() == dict.fromkeys(names(job.name, "worker", 4), 2)


@pytest.fixture
def scenario(
    kube_client: client.ApiClient, service_client: KubeClient, admitted_namespace: str
) -> Scenario:
    return Scenario(kube_client, service_client, admitted_namespace)


@pytest.fixture(scope="module")
def kubeconfig(control_plane: ControlPlane) -> Path:
    return reconciler_kubeconfig(control_plane)


def log_entries(process: ServiceProcess) -> list[dict[str, Any]]:
    """The process's JSON log lines (anything else it printed is skipped)."""
    entries = []
    for line in process.log_path.read_text().splitlines():
        with contextlib.suppress(json.JSONDecodeError):
            entry = json.loads(line)
            if isinstance(entry, dict):
                entries.append(entry)
    return entries


async def test_sigkill_mid_job_then_restart(
    control_plane: ControlPlane, kubeconfig: Path, scenario: Scenario
) -> None:
    lease = ("--lease-name", f"sigkill-{scenario.job.namespace}")
    first = start_reconciler(control_plane, kubeconfig, "r1", *lease)
    try:
        async with scenario.running():
            first.kill()
            # While no reconciler runs: a replica is killed and another pod runs on.
            await scenario.kill_worker()
            await asyncio.sleep(0.5)
            first.close()
            # The same identity: it takes its own Lease at once.
            second = start_reconciler(control_plane, kubeconfig, "r1", *lease)
            try:
                await scenario.finishes_after_one_restart()
            finally:
                second.close()
    finally:
        first.close()


async def test_two_replicas_only_the_leader_acts_and_the_standby_takes_over(
    control_plane: ControlPlane, kubeconfig: Path, scenario: Scenario
) -> None:
    election = (
        *("--lease-name", f"two-{scenario.job.namespace}", "--leader-elect-lease-duration", "4"),
        *("--leader-elect-renew-deadline", "3", "--leader-elect-retry-period", "0.5"),
    )
    leader = start_reconciler(control_plane, kubeconfig, "r1", *election)
    standby = start_reconciler(control_plane, kubeconfig, "r2", *election, leading=False)
    try:
        async with scenario.running():
            assert not is_leading(standby)
            assert standby.probe("/readyz") == 200, "a standby must be ready"
            standby_log = log_entries(standby)
            standing_by = [e for e in standby_log if e["event"].startswith("standing by")]
            assert standing_by[0]["event"] == "standing by; another candidate holds the lease"
            assert standing_by[0]["holder"] == "r1"
            assert not [e for e in standby_log if "reconcile_id" in e], "the standby reconciled"
            # It has only read the Lease: not one write of any kind.
            requests = standby.samples("torchjob_kube_client_requests_total")
            assert requests.keys() == {'{method="GET"}'}, requests
            assert await reporting_instances(scenario) == {"r1"}

            leader.kill()
            await scenario.kill_worker()
            await scenario.finishes_after_one_restart()
            assert is_leading(standby)
            assert any(e["event"] == "became leader" for e in log_entries(standby))
            assert await reporting_instances(scenario) == {"r1", "r2"}
    finally:
        leader.close()
        standby.close()


async def reporting_instances(scenario: Scenario) -> set[str]:
    """Which reconciler processes recorded Events about the job."""
    job = scenario.job
    events = await client.EventsV1Api(scenario.api).list_namespaced_event(job.namespace)
    return {
        event.reporting_instance
        for event in events.items
        if event.regarding and event.regarding.name == job.name
    }


async def test_apiserver_restart_mid_job_recovers_the_watches_by_listing_again(
    control_plane: ControlPlane, kubeconfig: Path, scenario: Scenario
) -> None:
    # Renewal outlasts the outage, so this process keeps leading and its own watches must
    # recover (with the defaults it would exit after 10 s and be started afresh).
    election = (
        *(
            "--lease-name",
            f"restart-{scenario.job.namespace}",
            "--leader-elect-lease-duration",
            "180",
        ),
        *("--leader-elect-renew-deadline", "150"),
    )
    reconciler = start_reconciler(control_plane, kubeconfig, "r1", *election)
    try:
        async with scenario.running():
            expired_before = expired_lists(reconciler)
            await asyncio.to_thread(control_plane.stop_apiserver)
            try:
                # Every resourceVersion the reconciler holds is now too old to watch from.
                await asyncio.to_thread(control_plane.compact_etcd)
            finally:
                await asyncio.to_thread(control_plane.start_apiserver)
            await scenario.kill_worker()
            await scenario.finishes_after_one_restart()

        # Each informer lists again after its 410 Gone. One the restarted apiserver refused for a
        # moment (its RBAC caches still empty) retries with backoff and may get there only after
        # the job has finished.
        def relisted() -> set[str]:
            after = expired_lists(reconciler)
            return {r for r, count in after.items() if count > expired_before.get(r, 0)}

        await eventually(
            lambda: relisted() == INFORMED,
            "every informer listing again",
            timeout=RECOVERY_TIMEOUT,
            interval=0.2,
            explain=lambda: [e for e in log_entries(reconciler) if "resource" in e],
        )
        events = [e["event"] for e in log_entries(reconciler)]
        assert "resource version expired; listing again" in events
        assert reconciler.process is not None and reconciler.process.poll() is None
    finally:
        reconciler.close()


def expired_lists(reconciler: ServiceProcess) -> dict[str, float]:
    """Lists each informer made after a 410 Gone, by resource."""
    found = {}
    for labels, value in reconciler.samples("torchjob_informer_lists_total").items():
        if 'reason="expired"' in labels:
            resource = re.search(r'resource="([^"]+)"', labels)
            assert resource is not None
            found[resource.group(1)] = value
    return found
