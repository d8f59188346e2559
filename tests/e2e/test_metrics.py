"""Job metrics as a platform team scrapes them: after a scripted set of jobs (one succeeds, one
fails, one is restarted, one is paused) the leader's /metrics shows exactly those counts and
phases; after a failover the new leader counts only what it wrote itself, so that the two
leaders' counters add up to each job's transitions once (what `increase()` over a leader change
gives). Each service exports only its own families and no `_created` series. Its own module: it
kills a reconciler."""

from __future__ import annotations

from pathlib import Path

import pytest
from kubernetes_asyncio import client
from support import ControlPlane
from support.cluster import Job, condition
from support.eventually import eventually
from support.jobs import JobBuilder
from support.metrics import exported_in_process, series_names
from support.operator import (
    housekeeper_kubeconfig,
    is_leading,
    reconciler_kubeconfig,
    start_housekeeper,
    start_reconciler,
)
from support.processes import ServiceProcess

from torchjob.api import constants

TIMEOUT = 90.0


@pytest.fixture(scope="module")
def kubeconfig(control_plane: ControlPlane) -> Path:
    return reconciler_kubeconfig(control_plane)


def counts(process: ServiceProcess, metric: str, namespace: str) -> dict[str, float]:
    """The samples of `metric` in `namespace`, by their other labels as written."""
    found = {}
    for labels, value in process.samples(metric).items():
        if f'namespace="{namespace}"' in labels:
            rest = labels.replace(f'namespace="{namespace}"', "").strip("{},")
            found[rest] = value
    return found


def phases(process: ServiceProcess, namespace: str) -> dict[str, float]:
    return {
        labels.removeprefix('phase="').removesuffix('"'): value
        for labels, value in counts(process, "torchjob_jobs", namespace).items()
        if value
    }


def one_replica(name: str, policy: str = "OnFailure") -> JobBuilder:
    return JobBuilder(name).replicas("worker", 1, restartPolicy=policy)


async def test_job_metrics_before_and_after_a_failover(
    control_plane: ControlPlane,
    kubeconfig: Path,
    kube_client: client.ApiClient,
    admitted_namespace: str,
    webhook_server: ServiceProcess,
) -> None:
    ns = admitted_namespace
    election = (
        *("--lease-name", f"metrics-{ns}", "--leader-elect-lease-duration", "4"),
        *("--leader-elect-renew-deadline", "3", "--leader-elect-retry-period", "0.5"),
    )
    leader = start_reconciler(control_plane, kubeconfig, "r1", *election)
    standby = start_reconciler(control_plane, kubeconfig, "r2", *election, leading=False)
    try:
        ok = Job(kube_client, ns, one_replica("ok").build())
        bad = Job(kube_client, ns, one_replica("bad", "Never").build())
        # Restarted alone: with no restart delay (the e2e reconciler's), a gang restart drops
        # the ended pod from the status in the round that sees it end, so its ending is not
        # among the replica endings counted from status writes.
        alone = {constants.ANNOTATION_RESTART_SCOPE: constants.RESTART_SCOPE_REPLICA}
        flaky_job = one_replica("flaky", "ExitCode").metadata(annotations=alone).build()
        flaky = Job(kube_client, ns, flaky_job)
        pause = {"pause": {"enabled": True}}
        paused = Job(kube_client, ns, one_replica("paused").spec(runMode=pause).build())
        for job in (ok, bad, flaky, paused):
            await job.create()
        for job in (ok, bad, flaky):
            await job.wait_pods({f"{job.name}-worker-0"})
            await job.run_all()
            await job.wait_phase("Running")
        await paused.wait_phase("Paused")
        await ok.kubelet.finish("ok-worker-0", 0)
        await bad.kubelet.finish("bad-worker-0", 1)
        await ok.wait_phase("Succeeded")
        failed = await bad.wait_phase("Failed")
        reason = condition(failed, "Failed")["reason"]
        old = (await flaky.pods())["flaky-worker-0"].metadata.uid
        await flaky.kubelet.finish("flaky-worker-0", 137)
        await flaky.wait_new_pod("flaky-worker-0", old, TIMEOUT)
        await flaky.kubelet.run("flaky-worker-0")
        await flaky.wait_phase("Running")

        expected = {
            "torchjob_jobs_created_total": {"": 4.0},
            "torchjob_jobs_succeeded_total": {"": 1.0},
            "torchjob_jobs_failed_total": {f'reason="{reason}"': 1.0},
            "torchjob_jobs_restarted_total": {"": 1.0},
            "torchjob_job_restarts_total": {"": 1.0},
            "torchjob_replica_restarts_total": {'reason="Error"': 1.0},
        }

        def leader_counted() -> bool:
            return all(counts(leader, m, ns) == v for m, v in expected.items())

        await eventually(
            leader_counted,
            "the leader's counters to show the scripted jobs",
            timeout=TIMEOUT,
            explain=lambda: str({m: counts(leader, m, ns) for m in expected}),
        )
        assert phases(leader, ns) == {"Succeeded": 1, "Failed": 1, "Running": 1, "Paused": 1}
        assert leader.samples("torchjob_job_startup_seconds_count")[""] == 3
        assert leader.samples("torchjob_job_duration_seconds_count")['{outcome="Succeeded"}'] == 1
        # The standby exports the job families without a sample: nothing counted, no cache.
        assert not is_leading(standby)
        assert not [m for m in expected if counts(standby, m, ns)]
        assert not standby.samples("torchjob_jobs")

        # Each service exports its own families only (as the chart's alerts and dashboard are
        # checked against), and none has a _created series.
        scraped = {
            "webhook": webhook_server.metrics(),
            "reconciler": leader.metrics(),
        }
        in_process = exported_in_process()
        for service, body in scraped.items():
            assert "_created" not in body.replace("torchjob_jobs_created", "")
            names = {n for n in series_names(body) if n.startswith("torchjob_")}
            own = {n for n in in_process[service] if n.startswith("torchjob_")}
            assert names == own, (service, names ^ own)
        assert "torchjob_reconcile_total" not in scraped["webhook"]

        leader.kill()
        await eventually(lambda: is_leading(standby), "the standby to take over", timeout=TIMEOUT)
        await flaky.kubelet.finish("flaky-worker-0", 0)
        await flaky.wait_phase("Succeeded")
        late = Job(kube_client, ns, one_replica("late").build())
        await late.create()
        await late.wait_pods({"late-worker-0"})

        # The new leader counts what it wrote: the flaky job's success and the late job, none
        # of what its predecessor had already written.
        after = {
            "torchjob_jobs_created_total": {"": 1.0},
            "torchjob_jobs_succeeded_total": {"": 1.0},
            "torchjob_jobs_failed_total": {},
            "torchjob_jobs_restarted_total": {},
            "torchjob_job_restarts_total": {},
            "torchjob_replica_restarts_total": {},
        }

        def successor_counted() -> bool:
            return all(counts(standby, m, ns) == v for m, v in after.items()) and phases(
                standby, ns
            ) == {"Succeeded": 2, "Failed": 1, "Paused": 1, "Pending": 1}

        await eventually(
            successor_counted,
            "the new leader's counters and gauges",
            timeout=TIMEOUT,
            explain=lambda: str(({m: counts(standby, m, ns) for m in after}, phases(standby, ns))),
        )
    finally:
        leader.close()
        standby.close()


def test_the_housekeeper_exports_its_own_families_only(control_plane: ControlPlane) -> None:
    housekeeper = start_housekeeper(housekeeper_kubeconfig(control_plane))
    try:
        body = housekeeper.metrics()
    finally:
        housekeeper.close()
    assert "_created" not in body
    names = {n for n in series_names(body) if n.startswith("torchjob_")}
    own = {n for n in exported_in_process()["housekeeper"] if n.startswith("torchjob_")}
    assert names == own, names ^ own
    assert "torchjob_housekeeper_actions_total" in names
    assert not {n for n in names if n.startswith(("torchjob_job", "torchjob_admission"))}
