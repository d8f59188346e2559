"""A gang restart interrupted at each of its steps (lifecycle/gang.py: the status written, every
pod deleted, the new gang created) by a reconciler SIGKILLed and started again, by a leader
handover to a standby, and by an apiserver restart (etcd's history compacted meanwhile). Each
time the restart completes: every replica is created again exactly once, the restart charged
once (backoffCount, gangRestarts, the replica type's restartCount), announced at most once, and
the job succeeds once the test, playing the kubelet, finishes the new pods.

The reconciler is held at a step by the apiserver, not by timing: a ValidatingAdmissionPolicy
of the test's own refuses (403 Forbidden, a refusal that may pass, as a policy webhook's denial)
the reconciler's deletions of the job's pods, or its creation of one of them, until lifted. The
test waits for the step's state to show on the apiserver, disrupts the control plane, lifts the
refusal, and reads the outcome. "Some pods deleted" is made by the test deleting two of the old
gang's pods itself while the reconciler's deletions are refused: the apiserver then holds what a
reconciler killed between two deletions leaves. Its own module: it kills and restarts reconciler
processes (and the apiserver)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import pytest
from kubernetes_asyncio import client
from support import ControlPlane
from support.cluster import Cluster, Job
from support.eventually import eventually_sync
from support.informers import PodHistory
from support.jobs import JobBuilder, names
from support.operator import (
    is_leading,
    reconciler_kubeconfig,
    start_reconciler,
    user,
    wait_leading,
)
from support.processes import ServiceProcess

from torchjob.api import constants
from torchjob.kube.client import KubeClient

WORKERS = 4
HELD_MESSAGE = "held by the test mid gang restart"
# Creating a ConfigMap of this name is refused while a hold is in force: how the test knows the
# apiserver enforces (or no longer enforces) its policy, which it loads asynchronously.
PROBE = "hold-probe"
ADMISSION = "admissionregistration.k8s.io/v1"
Operation = Literal["CREATE", "DELETE"]
Check = Callable[[], Awaitable[bool]]


# -- holding the reconciler at a step ------------------------------------------------------------


@dataclass
class Hold:
    """A ValidatingAdmissionPolicy refusing the reconciler's `operation` on the pods of
    `namespace` named in `held`, in force from `apply()` until `lift()`."""

    control_plane: ControlPlane
    namespace: str
    operation: Operation
    held: set[str]

    @property
    def name(self) -> str:
        return f"hold-{self.namespace}"

    def policy(self) -> dict[str, Any]:
        refused = json.dumps(sorted({*self.held, PROBE}))
        matched = "request.resource.resource == 'configmaps' || "
        matched += f"request.userInfo.username == '{user('reconciler')}'"
        return {
            "apiVersion": ADMISSION,
            "kind": "ValidatingAdmissionPolicy",
            "metadata": {"name": self.name},
            "spec": {
                "failurePolicy": "Fail",
                "matchConstraints": {
                    "namespaceSelector": {
                        "matchLabels": {"kubernetes.io/metadata.name": self.namespace}
                    },
                    "resourceRules": [
                        _rule("pods", self.operation),
                        _rule("configmaps", "CREATE"),
                    ],
                },
                "matchConditions": [
                    {
                        "name": "the-reconciler-or-the-probe",
                        "expression": matched,
                    }
                ],
                # 403 Forbidden: the reconciler retries (a 422 would fail the job at once).
                "validations": [
                    {
                        "expression": f"!(request.name in {refused})",
                        "reason": "Forbidden",
                        "message": HELD_MESSAGE,
                    }
                ],
            },
        }

    def binding(self) -> dict[str, Any]:
        return {
            "apiVersion": ADMISSION,
            "kind": "ValidatingAdmissionPolicyBinding",
            "metadata": {"name": self.name},
            "spec": {"policyName": self.name, "validationActions": ["Deny"]},
        }

    def apply(self) -> None:
        objects = {"apiVersion": "v1", "kind": "List", "items": [self.policy(), self.binding()]}
        self.control_plane.kubectl("apply", "-f", "-", input=json.dumps(objects))
        eventually_sync(lambda: self._probe_refused(), f"{self.name} in force", interval=0.2)

    def lift(self) -> None:
        for kind in ("validatingadmissionpolicybinding", "validatingadmissionpolicy"):
            self.control_plane.kubectl("delete", kind, self.name, "--ignore-not-found")
        eventually_sync(lambda: not self._probe_refused(), f"{self.name} lifted", interval=0.2)

    def _probe_refused(self) -> bool:
        probe = ("create", "configmap", PROBE, "-n", self.namespace, "--dry-run=server")
        result = self.control_plane.kubectl(*probe, check=False)
        if result.returncode == 0:
            return False
        assert HELD_MESSAGE in result.stderr, result.stderr  # refused for another reason
        return True


def _rule(resource: str, operation: Operation) -> dict[str, Any]:
    return {
        "apiGroups": [""],
        "apiVersions": ["v1"],
        "operations": [operation],
        "resources": [resource],
    }


# -- the steps a gang restart is interrupted at --------------------------------------------------


@dataclass(frozen=True)
class Step:
    """Where the restart is held: the reconciler's `operation` refused on the pods `held`
    chooses among the job's, and how the test knows the restart stands there; `deleted`: how
    many of the old gang's pods the test deletes itself meanwhile (the first ones)."""

    name: str
    operation: Operation
    deleted: int = 0

    def held(self, job: Job) -> set[str]:
        if self.operation == "CREATE":
            # The reconciler sends the gang's four creations at once (as many as its workers):
            # the other three are created, this one not.
            return {f"{job.name}-worker-2"}
        return names(job.name, "worker", WORKERS)

    async def reach(self, job: Job) -> None:
        if self.operation == "CREATE":
            created = names(job.name, "worker", WORKERS) - self.held(job)
            await job.wait("the gang's pods created but the refused one", _new(job, created))
            return
        await job.wait("the gang restart's status written", _status_written(job))
        # What a reconciler killed after its first deletions leaves on the apiserver.
        gone = names(job.name, "worker", self.deleted)
        for pod in sorted(gone):
            await job.core.delete_namespaced_pod(pod, job.namespace)
        left = names(job.name, "worker", WORKERS) - gone
        await job.wait(f"{self.deleted} old pods gone", _pods_left(job, left))


def _new(job: Job, wanted: set[str]) -> Check:
    async def check() -> bool:
        pods = await job.pods()
        return set(pods) == wanted and all(_gang_of(p) == "1" for p in pods.values())

    return check


def _status_written(job: Job) -> Check:
    async def check() -> bool:
        status = await job.status()
        shown = (status.get("backoffCount"), status.get("gangRestarts"))
        return shown == (1, 1) and len(await job.pods()) == WORKERS

    return check


def _pods_left(job: Job, left: set[str]) -> Check:
    async def check() -> bool:
        return set(await job.pods()) == left

    return check


def _gang_of(pod: Any) -> str | None:
    return (pod.metadata.annotations or {}).get(constants.ANNOTATION_GANG_RESTARTS)


STEPS = (
    Step("status written", "DELETE"),
    Step("some pods deleted", "DELETE", deleted=2),
    Step("some pods created", "CREATE"),
)


# -- what interrupts it --------------------------------------------------------------------------


@dataclass
class Reconcilers:
    """The test's reconciler processes, under a Lease of the test's own."""

    control_plane: ControlPlane
    kubeconfig: Path
    lease: str
    processes: list[ServiceProcess] = field(default_factory=list)

    def start(self, identity: str, *election: str, leading: bool = True) -> ServiceProcess:
        lease = ("--lease-name", self.lease)
        process = start_reconciler(
            self.control_plane, self.kubeconfig, identity, *lease, *election, leading=leading
        )
        self.processes.append(process)
        return process

    def close(self) -> None:
        for process in self.processes:
            process.close()


# A standby takes over within seconds of the leader's death.
SHORT_LEASE = (
    *("--leader-elect-lease-duration", "4", "--leader-elect-renew-deadline", "3"),
    *("--leader-elect-retry-period", "0.5"),
)
# Renewal outlasts the apiserver's restart: the same process leads on and its watches recover.
LONG_LEASE = ("--leader-elect-lease-duration", "180", "--leader-elect-renew-deadline", "150")


async def sigkill(reconcilers: Reconcilers, control_plane: ControlPlane) -> None:
    """The reconciler SIGKILLed and started again (the same identity takes its Lease at once)."""
    [running] = reconcilers.processes
    running.kill()
    await asyncio.to_thread(reconcilers.start, "r1")


async def handover(reconcilers: Reconcilers, control_plane: ControlPlane) -> None:
    """The leader SIGKILLed; the standby takes the Lease over."""
    leader, standby = reconcilers.processes
    assert not is_leading(standby)
    leader.kill()
    await asyncio.to_thread(wait_leading, standby)


async def apiserver_restart(reconcilers: Reconcilers, control_plane: ControlPlane) -> None:
    """The apiserver stopped, etcd compacted (every watch must list again), and started."""
    await asyncio.to_thread(control_plane.stop_apiserver)
    try:
        await asyncio.to_thread(control_plane.compact_etcd)
    finally:
        await asyncio.to_thread(control_plane.start_apiserver)


DISRUPTIONS = {
    "sigkill": (sigkill, ()),
    "handover": (handover, SHORT_LEASE),
    "apiserver-restart": (apiserver_restart, LONG_LEASE),
}


@asynccontextmanager
async def reconciling(
    control_plane: ControlPlane, namespace: str, disruption: str
) -> AsyncIterator[Reconcilers]:
    """The reconcilers the disruption acts on: a leader, and for a handover a standby."""
    reconcilers = Reconcilers(
        control_plane, reconciler_kubeconfig(control_plane), f"chaos-{namespace}"
    )
    _, election = DISRUPTIONS[disruption]
    try:
        await asyncio.to_thread(reconcilers.start, "r1", *election)
        if disruption == "handover":
            await asyncio.to_thread(reconcilers.start, "r2", *election, leading=False)
        yield reconcilers
    finally:
        reconcilers.close()


# -- the test ------------------------------------------------------------------------------------


@pytest.mark.parametrize("disruption", list(DISRUPTIONS))
@pytest.mark.parametrize("step", STEPS, ids=[step.name.replace(" ", "-") for step in STEPS])
async def test_an_interrupted_gang_restart_completes_once(
    control_plane: ControlPlane,
    kube_client: client.ApiClient,
    service_client: KubeClient,
    admitted_namespace: str,
    step: Step,
    disruption: str,
) -> None:
    manifest = (
        JobBuilder("gang")
        .replicas("worker", WORKERS)
        .restart_policy("OnFailure")
        .run_policy(backoffLimit=4)
        .build()
    )
    job = Job(kube_client, admitted_namespace, manifest)
    history = PodHistory(service_client, admitted_namespace)
    hold = Hold(control_plane, admitted_namespace, step.operation, step.held(job))
    interrupt, _ = DISRUPTIONS[disruption]
    async with (
        reconciling(control_plane, admitted_namespace, disruption) as reconcilers,
        history.watching(),
    ):
        first = await _running(job)
        await asyncio.to_thread(hold.apply)
        try:
            await job.kubelet.finish(f"{job.name}-worker-1", 1)
            await step.reach(job)
            await interrupt(reconcilers, control_plane)
        finally:
            await asyncio.to_thread(hold.lift)
        await _restarted_once_then_succeeds(job, first)
    assert history.created() == dict.fromkeys(sorted(first), 2), "each pod created again once"
    await _announced_at_most_once(kube_client, job)


async def _running(job: Job) -> dict[str, Any]:
    """The job created and Running, its first gang's pods running; those pods."""
    await job.create()
    first = await job.wait_pods(names(job.name, "worker", WORKERS))
    await job.run_all()
    await job.wait_phase("Running")
    return first


async def _restarted_once_then_succeeds(job: Job, first: dict[str, Any]) -> None:
    """Every pod of `first` replaced, by a pod of the job's first gang restart; the restart
    charged once; the job succeeds once the new pods run and end."""
    gang = await job.wait_all_replaced(first, "every pod created again")
    for pod in gang.values():
        assert _gang_of(pod) == "1"
        assert pod.metadata.annotations[constants.ANNOTATION_BACKOFF_COUNT] == "1"
    status = await job.status()
    assert (status["backoffCount"], status["gangRestarts"]) == (1, 1)
    assert [t["restartCount"] for t in status["tasks"]] == [1]
    await job.run_all()
    await job.wait_phase("Running")
    for name in sorted(gang, reverse=True):  # the first replica last: it ends the job
        await job.kubelet.finish(name, 0)
    done = await job.wait_phase("Succeeded")
    assert (done["backoffCount"], done["gangRestarts"]) == (1, 1)
    assert [t["restartCount"] for t in done["tasks"]] == [1]


async def _announced_at_most_once(api: client.ApiClient, job: Job) -> None:
    """The GangRestarting Event: once, or not at all where a reconciler died between the
    status write and the Event (docs/failures.md); a repeat joins the first one's series."""
    events = await Cluster(api, job.namespace).events(job.name, constants.REASON_GANG_RESTARTING)
    told = sum(event.series.count if event.series else (event.count or 1) for event in events)
    assert told <= 1, [event.message for event in events]
