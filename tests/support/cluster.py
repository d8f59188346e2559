"""Jobs and what they own on the test control plane, as e2e tests read and drive them; the test
plays the kubelet (`support.kubelet`)."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

from kubernetes_asyncio import client

from support.eventually import TIMEOUT, eventually
from support.kubelet import TestKubelet
from torchjob.api import constants, types


class Job:
    """One job under test: create it, read it, wait for it, and its pods."""

    # The job's API (a subclass names another one) and the label its pods and Services carry.
    group, version, plural = types.GROUP, types.VERSION, types.PLURAL
    job_name_label = constants.LABEL_JOB_NAME

    def __init__(self, api: client.ApiClient, namespace: str, manifest: dict[str, Any]) -> None:
        self.objects = client.CustomObjectsApi(api)
        self.core = client.CoreV1Api(api)
        self.kubelet = TestKubelet(api, namespace)
        self.namespace = namespace
        self.manifest = manifest
        self.name = manifest["metadata"]["name"]

    async def create(self) -> Job:
        await self.objects.create_namespaced_custom_object(
            self.group, self.version, self.namespace, self.plural, self.manifest
        )
        return self

    async def delete(self, propagation: str = "Background") -> None:
        """Delete the job as `kubectl delete` does: at once, its pods and Services after it, by
        the garbage collector; `propagation="Foreground"` (`--cascade=foreground`): them first."""
        await self.objects.delete_namespaced_custom_object(
            self.group,
            self.version,
            self.namespace,
            self.plural,
            self.name,
            propagation_policy=propagation,
        )

    async def delete_foreground(self) -> None:
        await self.delete("Foreground")

    async def get(self) -> dict[str, Any]:
        job = await self.objects.get_namespaced_custom_object(
            self.group, self.version, self.namespace, self.plural, self.name
        )
        assert isinstance(job, dict)
        return job

    async def status(self) -> dict[str, Any]:
        return dict((await self.get()).get("status") or {})

    async def patch_spec(self, spec: dict[str, Any]) -> None:
        await self._merge_patch(self.objects.patch_namespaced_custom_object, {"spec": spec})

    async def patch_annotations(self, annotations: dict[str, str | None]) -> None:
        await self._merge_patch(
            self.objects.patch_namespaced_custom_object,
            {"metadata": {"annotations": annotations}},
        )

    async def patch_status(self, status: dict[str, Any]) -> None:
        """A merge patch of the status subresource, as another writer of it would send."""
        patch = self.objects.patch_namespaced_custom_object_status
        await self._merge_patch(patch, {"status": status})

    async def _merge_patch(self, patch: Any, body: dict[str, Any]) -> None:
        # (`patch` is Any: the client's stubs omit _content_type.)
        await patch(
            self.group,
            self.version,
            self.namespace,
            self.plural,
            self.name,
            body,
            _content_type="application/merge-patch+json",
        )

    async def pods(self) -> dict[str, Any]:
        selector = f"{self.job_name_label}={self.name}"
        listed = await self.core.list_namespaced_pod(self.namespace, label_selector=selector)
        return {p.metadata.name: p for p in listed.items if not p.metadata.deletion_timestamp}

    async def services(self) -> set[str]:
        selector = f"{self.job_name_label}={self.name}"
        listed = await self.core.list_namespaced_service(self.namespace, label_selector=selector)
        return {s.metadata.name for s in listed.items}

    async def wait(
        self, what: str, check: Callable[[], Awaitable[bool]], timeout: float = TIMEOUT
    ) -> None:
        """Until `check()` holds; on timeout the failure shows the job's status."""

        async def status() -> str:
            return f"{self.name}: status: {json.dumps(await self.status())}"

        await eventually(check, what, timeout=timeout, explain=status)

    async def wait_pods(self, names: set[str], timeout: float = TIMEOUT) -> dict[str, Any]:
        async def present() -> bool:
            return set(await self.pods()) == names

        await self.wait(f"pods {sorted(names)}", present, timeout)
        return await self.pods()

    async def wait_phase(self, phase: str, timeout: float = TIMEOUT) -> dict[str, Any]:
        async def reached() -> bool:
            return (await self.status()).get("phase") == phase

        await self.wait(f"phase {phase}", reached, timeout)
        return await self.status()

    async def wait_new_pod(self, name: str, old_uid: str, timeout: float = TIMEOUT) -> Any:
        async def replaced() -> bool:
            pod = (await self.pods()).get(name)
            return pod is not None and pod.metadata.uid != old_uid

        await self.wait(f"a new {name}", replaced, timeout)
        return (await self.pods())[name]

    async def wait_all_replaced(
        self, before: dict[str, Any], what: str, timeout: float = TIMEOUT
    ) -> dict[str, Any]:
        """Until every pod of `before` (by name) exists again with a new uid, and no other pod
        does; the pods then."""

        async def replaced() -> bool:
            pods = await self.pods()
            return set(pods) == set(before) and all(
                pods[n].metadata.uid != before[n].metadata.uid for n in before
            )

        await self.wait(what, replaced, timeout)
        return await self.pods()

    async def wait_services(self, names: set[str], timeout: float = TIMEOUT) -> None:
        async def present() -> bool:
            return await self.services() == names

        await self.wait(f"services {sorted(names)}", present, timeout)

    async def run_all(self) -> None:
        for name in await self.pods():
            await self.kubelet.run(name)


def condition(status: dict[str, Any], kind: str) -> dict[str, Any]:
    """The job status's condition of type `kind`."""
    return next(c for c in status.get("conditions", []) if c["type"] == kind)


class Cluster:
    """What a test reads besides the job: TensorBoards, events, what is left in the namespace."""

    def __init__(self, api: client.ApiClient, namespace: str) -> None:
        self.apps = client.AppsV1Api(api)
        self.core = client.CoreV1Api(api)
        self.namespace = namespace

    async def deployment(self, name: str) -> Any:
        listed = await self.apps.list_namespaced_deployment(
            self.namespace, field_selector=f"metadata.name={name}"
        )
        return listed.items[0] if listed.items else None

    async def tensorboard_pods(self, job: str) -> list[Any]:
        listed = await self.core.list_namespaced_pod(
            self.namespace, label_selector=f"{constants.LABEL_TENSORBOARD}={job}"
        )
        return [p for p in listed.items if not p.metadata.deletion_timestamp]

    async def service_names(self) -> set[str]:
        listed = await self.core.list_namespaced_service(self.namespace)
        return {s.metadata.name for s in listed.items}

    async def events(self, job: str, reason: str) -> list[Any]:
        """The job's events with `reason` (read as core/v1 Events: the controller-manager's
        own have no eventTime, which the client's events.k8s.io model insists on)."""
        listed = await self.core.list_namespaced_event(
            self.namespace, field_selector=f"involvedObject.name={job},reason={reason}"
        )
        return list(listed.items)
