"""Events recorded on a real apiserver: listed by `kubectl get events` and shown by `kubectl
describe` with the right involved object, repeats counted on one Event, failures only logged."""

from __future__ import annotations

import json
from typing import Any

from kubernetes_asyncio import client
from structlog.testing import capture_logs
from support import ControlPlane

from torchjob.kube.client import KubeClient
from torchjob.kube.events import EventRecorder

COMPONENT = "torchjob-test"
HOST = "test-host"


async def subject(kube_client: client.ApiClient, namespace: str, name: str) -> dict[str, Any]:
    """A ConfigMap to report about, as the informer caches objects: a plain dict."""
    body = client.V1ConfigMap(metadata=client.V1ObjectMeta(name=name))
    created = await client.CoreV1Api(kube_client).create_namespaced_config_map(namespace, body)
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": namespace, "uid": created.metadata.uid},
    }


def kubectl_events(control_plane: ControlPlane, namespace: str) -> list[dict[str, Any]]:
    listed = control_plane.kubectl("get", "events", "-n", namespace, "-o", "json").stdout
    items: list[dict[str, Any]] = json.loads(listed)["items"]
    return items


async def test_an_event_is_listed_with_its_involved_object(
    control_plane: ControlPlane,
    kube_client: client.ApiClient,
    service_client: KubeClient,
    namespace: str,
) -> None:
    obj = await subject(kube_client, namespace, "subject")
    recorder = EventRecorder(service_client, COMPONENT, HOST)
    await recorder.record(obj, "Warning", "SomethingFailed", "the thing failed")

    [event] = kubectl_events(control_plane, namespace)
    assert event["involvedObject"] == {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "name": "subject",
        "namespace": namespace,
        "uid": obj["metadata"]["uid"],
    }
    assert (event["type"], event["reason"], event["message"]) == (
        "Warning",
        "SomethingFailed",
        "the thing failed",
    )
    assert (event["reportingComponent"], event["reportingInstance"]) == (COMPONENT, HOST)

    table = control_plane.kubectl("get", "events", "-n", namespace).stdout
    assert "SomethingFailed" in table
    assert "configmap/subject" in table
    described = control_plane.kubectl("describe", "configmap", "subject", "-n", namespace).stdout
    assert "SomethingFailed" in described
    assert "the thing failed" in described


async def test_repeats_are_counted_on_one_event(
    control_plane: ControlPlane,
    kube_client: client.ApiClient,
    service_client: KubeClient,
    namespace: str,
) -> None:
    obj = await subject(kube_client, namespace, "subject")
    recorder = EventRecorder(service_client, COMPONENT, HOST)
    for _ in range(3):
        await recorder.record(obj, "Normal", "Restarted", "replica restarted")
    await recorder.record(obj, "Normal", "Restarted", "a different message")

    events = kubectl_events(control_plane, namespace)
    by_message = {event["message"]: event for event in events}
    assert len(events) == 2
    assert by_message["replica restarted"]["series"]["count"] == 3
    assert "series" not in by_message["a different message"]
    described = control_plane.kubectl("describe", "configmap", "subject", "-n", namespace).stdout
    assert "(x3 over" in described


async def test_a_repeat_after_the_window_starts_a_new_event(
    control_plane: ControlPlane,
    kube_client: client.ApiClient,
    service_client: KubeClient,
    namespace: str,
) -> None:
    obj = await subject(kube_client, namespace, "subject")
    now = [0.0]
    recorder = EventRecorder(
        service_client, COMPONENT, HOST, series_window=60, clock=lambda: now[0]
    )
    await recorder.record(obj, "Normal", "Restarted", "replica restarted")
    now[0] = 61
    await recorder.record(obj, "Normal", "Restarted", "replica restarted")

    events = kubectl_events(control_plane, namespace)
    assert len(events) == 2
    assert all("series" not in event for event in events)


async def test_a_failure_to_record_is_logged_not_raised(service_client: KubeClient) -> None:
    nowhere = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "ghost", "namespace": "no-such-namespace", "uid": "0"},
    }
    with capture_logs() as logs:
        await EventRecorder(service_client, COMPONENT, HOST).record(
            nowhere, "Warning", "Lost", "nobody will read this"
        )
    [entry] = [entry for entry in logs if entry["event"] == "could not record an event"]
    assert entry["reason"] == "Lost"


async def test_an_action_is_reported_once_whoever_records_it_again(
    control_plane: ControlPlane,
    kube_client: client.ApiClient,
    service_client: KubeClient,
    namespace: str,
) -> None:
    obj = await subject(kube_client, namespace, "subject")
    first, restarted = (EventRecorder(service_client, COMPONENT, HOST) for _ in range(2))
    assert await first.record_once(obj, "Normal", "CleanUp", "deleting 2 pods", "clean-up")
    assert not await restarted.record_once(obj, "Normal", "CleanUp", "deleting 1 pod", "clean-up")
    assert await restarted.record_once(obj, "Normal", "TTLExpired", "deleting the job", "ttl")

    events = kubectl_events(control_plane, namespace)
    assert sorted(event["message"] for event in events) == ["deleting 2 pods", "deleting the job"]
    assert all("series" not in event for event in events)
