"""The reconciler caches slim pods and Services (kube/slim.py), each kept as its JSON
(informer.ObjectStore): the lifecycle must see exactly the facts the full objects gave. Replays pod
events recorded from a real kube-apiserver (tests/data/recorded/pod_events.json, made by
record_pod_events.py beside it) through two caches, one of full objects and the informer's store
of slim ones, and plans every round from each."""

from __future__ import annotations

import copy
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from torchjob.api import constants
from torchjob.api.admission import Request
from torchjob.api.types import PyTorchTrainingJobSpec
from torchjob.kube.informer import ObjectStore, controller_uid, object_key
from torchjob.kube.resources import owner_job_key
from torchjob.kube.slim import job_without_status, slim_pod, slim_service
from torchjob.lifecycle.backoff import RestartBackoff, RestartRules
from torchjob.lifecycle.observe import view_pod
from torchjob.lifecycle.plan import Plan, plan
from torchjob.lifecycle.round import Observed
from torchjob.render.pod_admission_handler import mutate_pod
from torchjob.render.replica_objects import render_service
from torchjob.render.topology import replicas_of

RECORDED = json.loads(
    (Path(__file__).parents[1] / "data" / "recorded" / "pod_events.json").read_text()
)
JOB: dict[str, Any] = RECORDED["job"]
EVENTS: list[dict[str, Any]] = RECORDED["events"]
SPEC = PyTorchTrainingJobSpec.from_dict(JOB["spec"], "spec")
NOW = datetime(2026, 1, 1, 12, 10, tzinfo=UTC)
Cache = dict[tuple[str, str], dict[str, Any]]


def apply(cache: Cache, event: dict[str, Any], transform: Any) -> None:
    """What the informer does with a watch event, with `transform` before caching."""
    obj = transform(copy.deepcopy(event["object"]))
    if event["type"] == "DELETED":
        cache.pop(object_key(obj), None)
    else:
        cache[object_key(obj)] = obj


def round_plan(cache: Cache, status: dict[str, Any], services: frozenset[str]) -> Plan:
    pods = [v for pod in cache.values() if (v := view_pod(pod)) is not None]
    observed = Observed.of_json(JOB["metadata"], SPEC, status, pods, services, NOW)
    return plan(observed, RestartRules(RestartBackoff(base=10)))


def test_the_recording_covers_what_the_lifecycle_reads() -> None:
    """A failed replica, an eviction, a refused container, a success, a sidecar, a deletion."""
    pods = [e["object"] for e in EVENTS]
    phases = {p["status"].get("phase") for p in pods}
    assert {"Pending", "Running", "Failed", "Succeeded"} <= phases
    assert any(p["status"].get("reason") == "Evicted" for p in pods)
    assert any(p["metadata"].get("deletionTimestamp") for p in pods)
    assert any(len(p["spec"]["containers"]) > 1 for p in pods)
    assert all(p["metadata"].get("managedFields") for p in pods)
    assert {e["type"] for e in EVENTS} == {"ADDED", "MODIFIED", "DELETED"}


def stored(store: ObjectStore, event: dict[str, Any]) -> Cache:
    """What the informer does with a watch event: the slim pod put into (or removed from) its
    store; the store's contents as it hands them out, by owner as the reconciler reads them."""
    pod = slim_pod(copy.deepcopy(event["object"]))
    if event["type"] == "DELETED":
        store.remove(object_key(pod))
    else:
        store.put(pod)
    owner = controller_uid(event["object"])[0]
    keys = store.indices["owner"].get(owner, set())
    return {key: cached for key in sorted(keys) if (cached := store.get(key)) is not None}


def test_slim_pods_plan_as_full_ones_after_every_recorded_event() -> None:
    full: Cache = {}
    store = ObjectStore({"owner": controller_uid})
    services = frozenset(s["metadata"]["name"] for s in rendered_services())
    status: dict[str, Any] = {}
    for event in EVENTS:
        apply(full, event, lambda pod: pod)
        slim = stored(store, event)
        assert [view_pod(p) for p in slim.values()] == [view_pod(full[k]) for k in slim]
        assert slim.keys() == full.keys()
        from_full = round_plan(full, status, services)
        assert round_plan(slim, status, services) == from_full, event["object"]["metadata"]
        status = from_full.status  # the next round sees the status this one wrote


def test_the_store_hands_out_a_fresh_copy_of_what_was_put() -> None:
    store = ObjectStore({})
    pod = slim_pod(EVENTS[-2]["object"])
    store.put(pod)
    first, second = store.get(object_key(pod)), store.get(object_key(pod))
    assert first == second == pod
    assert first is not second and first is not pod


def test_slim_pods_and_services_keep_their_owner_and_key() -> None:
    for obj, slimmed in [
        *((e["object"], slim_pod(e["object"])) for e in EVENTS),
        *((s, slim_service(s)) for s in rendered_services()),
    ]:
        assert controller_uid(slimmed) == controller_uid(obj) != []
        assert owner_job_key(slimmed) == owner_job_key(obj)
        assert object_key(slimmed) == object_key(obj)
        assert slimmed["metadata"]["resourceVersion"] == obj["metadata"]["resourceVersion"]
        assert "managedFields" not in slimmed["metadata"]


def test_a_slim_pod_is_a_fraction_of_the_full_one() -> None:
    pod = EVENTS[-2]["object"]
    assert len(json.dumps(slim_pod(pod))) * 3 < len(json.dumps(pod))


def rendered_services() -> list[dict[str, Any]]:
    """The job's Services as the apiserver would show them: rendered, with the fields it adds."""
    services = []
    for index, replica in enumerate(replicas_of(SPEC)):
        service = render_service(JOB["metadata"], replica)
        service["metadata"] |= {
            "uid": f"service-uid-{index}",
            "resourceVersion": str(100 + index),
            "managedFields": [{"manager": "torchjob", "operation": "Update"}],
        }
        service["spec"] |= {"clusterIP": "None", "clusterIPs": ["None"], "type": "ClusterIP"}
        services.append(service)
    return services


# -- any pod status, label or annotation: the view is the same ----------------------------------

TEXT = st.text(max_size=12)
STATE: st.SearchStrategy[dict[str, Any]] = st.one_of(
    st.fixed_dictionaries(
        {
            "waiting": st.fixed_dictionaries(
                {},
                optional={
                    "reason": st.one_of(
                        TEXT, st.sampled_from(["ImagePullBackOff", "CreateContainerConfigError"])
                    ),
                    "message": TEXT,
                },
            )
        }
    ),
    st.fixed_dictionaries(
        {"running": st.fixed_dictionaries({"startedAt": st.just("2026-01-01T12:00:00Z")})}
    ),
    st.fixed_dictionaries(
        {
            "terminated": st.fixed_dictionaries(
                {"exitCode": st.integers(0, 255)},
                optional={
                    "reason": st.sampled_from(["Error", "Completed", "OOMKilled", "Other", ""]),
                    "message": TEXT,
                    "startedAt": st.sampled_from(["1970-01-01T00:00:00Z", "2026-01-01T12:01:00Z"]),
                    "finishedAt": st.just("2026-01-01T12:02:00Z"),
                },
            )
        }
    ),
    st.just({}),
)
CONTAINER_STATUS = st.fixed_dictionaries(
    {"name": st.sampled_from(["python", "log-shipper", "other"]), "state": STATE},
    optional={"restartCount": st.integers(0, 3), "lastState": STATE, "ready": st.booleans()},
)
POD_STATUS = st.fixed_dictionaries(
    {},
    optional={
        "phase": st.sampled_from(["Pending", "Running", "Succeeded", "Failed", "Unknown"]),
        "reason": st.sampled_from(["Evicted", "UnexpectedAdmissionError", ""]),
        "message": TEXT,
        "startTime": st.just("2026-01-01T12:00:30Z"),
        "containerStatuses": st.lists(CONTAINER_STATUS, max_size=3),
        "initContainerStatuses": st.lists(CONTAINER_STATUS, max_size=2),
        "podIP": st.just("10.0.0.1"),
    },
)
ANNOTATIONS = st.dictionaries(
    st.sampled_from(
        [
            constants.ANNOTATION_BACKOFF_COUNT,
            constants.ANNOTATION_CONSECUTIVE_RESTARTS,
            constants.ANNOTATION_DEBUG,
            "example.com/other",
        ]
    ),
    st.sampled_from(["0", "2", "true", "x", ""]),
)


@given(status=POD_STATUS, annotations=ANNOTATIONS, event=st.sampled_from(EVENTS))
def test_a_slim_pod_has_the_view_of_the_full_one(
    status: dict[str, Any], annotations: dict[str, str], event: dict[str, Any]
) -> None:
    pod = copy.deepcopy(event["object"])
    pod["status"] = status
    pod["metadata"]["annotations"] = annotations
    assert view_pod(slim_pod(pod)) == view_pod(pod)


@pytest.mark.parametrize(
    "containers",
    [[], [{"name": "a"}, {"name": "python"}], [{"image": "unnamed"}], ["not a dict"], None],
)
def test_the_training_container_is_found_in_a_slim_pod(containers: Any) -> None:
    pod = copy.deepcopy(EVENTS[0]["object"])
    pod["spec"]["containers"] = containers
    assert view_pod(slim_pod(pod)) == view_pod(pod)


# -- the webhook's cache of jobs: without their status --------------------------------------------


def test_pod_admission_answers_alike_from_a_job_without_its_status() -> None:
    job = copy.deepcopy(JOB)
    job["status"] = {"phase": "Running", "backoffCount": 2, "tasks": [{"type": "worker"}]}
    cached = job_without_status(job)
    assert "status" not in cached and "managedFields" not in cached["metadata"]
    for event in EVENTS[:3]:  # the pods as created: the reconciler's, before admission
        pod = copy.deepcopy(event["object"])
        request = Request("uid", "CREATE", pod["metadata"]["namespace"], "", "r", pod, None)
        assert mutate_pod(request, cached, {"r"}) == mutate_pod(request, job, {"r"})
        assert mutate_pod(request, cached, {"r"}).patch


SCHEDULING_CONDITIONS = st.lists(
    st.fixed_dictionaries(
        {
            "type": st.sampled_from(
                ["PodScheduled", "TerminationTarget", "DisruptionTarget", "Ready"]
            ),
            "status": st.sampled_from(["True", "False"]),
            "reason": st.sampled_from(
                ["Unschedulable", "PreemptionByScheduler", "WorkloadEvictedDueToPreempted", ""]
            ),
            "message": st.sampled_from(["0/3 nodes are available", ""]),
        }
    ),
    max_size=3,
)


@given(
    conditions=SCHEDULING_CONDITIONS,
    node=st.sampled_from([None, "", "node-1"]),
    gates=st.sampled_from([None, [], [{"name": "kueue.x-k8s.io/admission"}]]),
    event=st.sampled_from(EVENTS),
)
def test_a_slim_pod_keeps_what_gang_scheduling_reads(
    conditions: list[dict[str, str]],
    node: str | None,
    gates: list[dict[str, str]] | None,
    event: dict[str, Any],
) -> None:
    """Placement (node, gates) and the conditions of an unschedulable or preempted pod."""
    pod = copy.deepcopy(event["object"])
    pod.setdefault("status", {})["conditions"] = conditions
    for field, value in (("nodeName", node), ("schedulingGates", gates)):
        if value is None:
            pod["spec"].pop(field, None)
        else:
            pod["spec"][field] = value
    assert view_pod(slim_pod(pod)) == view_pod(pod)


def test_a_slim_pod_keeps_an_init_container_the_kubelet_cannot_start() -> None:
    pod = copy.deepcopy(EVENTS[0]["object"])
    waiting = {"reason": "ImagePullBackOff", "message": 'Back-off pulling image "nope:1"'}
    pod["status"] = {
        "phase": "Pending",
        "initContainerStatuses": [
            {"name": "done", "state": {"terminated": {"exitCode": 0}}},
            {"name": "wait", "image": "nope:1", "state": {"waiting": waiting}},
        ],
    }
    slim = slim_pod(pod)
    assert view_pod(slim) == view_pod(pod)
    seen = view_pod(slim)
    assert seen is not None and seen.cannot_start is not None
    assert [s["name"] for s in slim["status"]["initContainerStatuses"]] == ["wait"]
