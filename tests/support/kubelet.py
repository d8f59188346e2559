"""Plays the kubelet in e2e tests: there is no node, so a test moves a pod through its phases by
patching its status, as a kubelet would report them."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from kubernetes_asyncio import client


def _format(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _now() -> str:
    return _format(datetime.now(UTC))


def _container_names(pod: Any) -> list[str]:
    return [c.name for c in pod.spec.containers]


class TestKubelet:
    """Status patches for the pods of one namespace."""

    __test__ = False  # not a test class, whatever its name says

    def __init__(self, api_client: client.ApiClient, namespace: str) -> None:
        self.core = client.CoreV1Api(api_client)
        self.namespace = namespace

    async def _patch(self, name: str, status: dict[str, Any]) -> None:
        await self.core.patch_namespaced_pod_status(name, self.namespace, {"status": status})

    async def run(self, name: str, ready: bool = False) -> None:
        """Every container runs; with `ready`, the pod also passes its readiness probe (the
        Ready condition, which ReplicaSets and Deployments count)."""
        pod = await self.core.read_namespaced_pod(name, self.namespace)
        await self.run_containers(name, _container_names(pod), ready=ready)

    async def run_containers(self, name: str, containers: list[str], ready: bool = False) -> None:
        """The pod is Running with these containers running (no read of the pod first)."""
        running = [
            {
                "name": n,
                "ready": True,
                "restartCount": 0,
                "image": "i",
                "imageID": "",
                "state": {"running": {"startedAt": _now()}},
            }
            for n in containers
        ]
        status: dict[str, Any] = {
            "phase": "Running",
            "podIP": "10.1.0.1",
            "startTime": _now(),
            "containerStatuses": running,
        }
        if ready:
            status["conditions"] = [
                {"type": kind, "status": "True", "lastTransitionTime": _now()}
                for kind in ("PodScheduled", "Initialized", "ContainersReady", "Ready")
            ]
        await self._patch(name, status)

    async def finish(
        self,
        name: str,
        exit_code: int,
        *,
        reason: str | None = None,
        started: datetime | None = None,
    ) -> None:
        """Every container terminates with `exit_code` (and `reason`, else Completed or Error,
        as the kubelet says; OOMKilled for a container the kernel killed for memory), having
        started at `started` (else now); the phase follows from the exit code."""
        pod = await self.core.read_namespaced_pod(name, self.namespace)
        since = _format(started) if started else _now()
        terminated = [
            {
                "name": n,
                "ready": False,
                "restartCount": 0,
                "image": "i",
                "imageID": "",
                "state": {
                    "terminated": {
                        "exitCode": exit_code,
                        "reason": reason or ("Completed" if exit_code == 0 else "Error"),
                        "startedAt": since,
                        "finishedAt": _now(),
                    }
                },
            }
            for n in _container_names(pod)
        ]
        status: dict[str, Any] = {
            "phase": "Succeeded" if exit_code == 0 else "Failed",
            "containerStatuses": terminated,
        }
        if started:
            status["startTime"] = since  # the pod started no later than its containers
        await self._patch(name, status)

    async def cannot_start(self, name: str, reason: str, message: str) -> None:
        """The pod stays Pending, every container waiting with `reason` (ImagePullBackOff,
        CreateContainerConfigError) and `message`, as the kubelet reports a container it cannot
        start."""
        pod = await self.core.read_namespaced_pod(name, self.namespace)
        waiting = [
            {
                "name": n,
                "ready": False,
                "restartCount": 0,
                "image": "i",
                "imageID": "",
                "state": {"waiting": {"reason": reason, "message": message}},
            }
            for n in _container_names(pod)
        ]
        await self._patch(name, {"phase": "Pending", "containerStatuses": waiting})

    async def confirm_deletion(self, name: str) -> None:
        """A pod bound to a node and being deleted is gone: its kubelet has stopped its
        containers and removes it (a deletion with no grace period, as the kubelet's own)."""
        await self.core.delete_namespaced_pod(name, self.namespace, grace_period_seconds=0)
