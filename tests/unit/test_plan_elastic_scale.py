"""Elastic jobs scale the Kubernetes way: spec.elastic.expectedReplicas (the scale
subresource's spec.replicas) is the number of replicas across replica types; the difference from
the replica specs' counts goes to the scaling type; the status carries the scale's replicas and
the pods' selector."""

from __future__ import annotations

from typing import Any

from support.jobs import JobBuilder
from support.planning import observe, replica_pod, services

from torchjob.api.types import PyTorchTrainingJobSpec
from torchjob.lifecycle.observe import PodView
from torchjob.render.topology import replica_counts, replicas_of, scaling_type, world_size

TRAINER = {"name": "python", "image": "i", "args": ["t.py"]}


def elastic(expected: int | None) -> PyTorchTrainingJobSpec:
    job = JobBuilder()
    for kind, count in (("master", 1), ("worker", 2)):
        job.replicas(kind, count, container=TRAINER, restartPolicy="OnFailure")
    bounds: dict[str, Any] = {"enabled": True, "minReplicas": 1, "maxReplicas": 8}
    if expected is not None:
        bounds["expectedReplicas"] = expected
    return job.spec(torchrunConfig={"enabled": True}, elastic=bounds).decoded_spec()


def test_without_expected_replicas_the_specs_counts_hold() -> None:
    assert replica_counts(elastic(None)) == [("master", 1), ("worker", 2)]


def test_expected_replicas_count_across_types_and_the_worker_type_takes_the_difference() -> None:
    assert replica_counts(elastic(5)) == [("master", 1), ("worker", 4)]
    assert replica_counts(elastic(2)) == [("master", 1), ("worker", 1)]
    assert world_size(elastic(5)) == 5
    assert [(r.type, r.index, r.rank) for r in replicas_of(elastic(4))] == [
        ("master", 0, 0),
        ("worker", 0, 1),
        ("worker", 1, 2),
        ("worker", 2, 3),
    ]


def test_the_scaling_type_keeps_one_replica() -> None:
    assert replica_counts(elastic(1)) == [("master", 1), ("worker", 1)]


def test_a_weighted_type_scales() -> None:
    job = JobBuilder()
    job.replicas("master", 1, container=TRAINER, restartPolicy="OnFailure")
    job.replicas("worker", 2, container=TRAINER, restartPolicy="OnFailure", scalingWeight=1)
    job.replicas("evaluator", 1, container=TRAINER, restartPolicy="OnFailure", scalingWeight=3)
    spec = job.spec(
        torchrunConfig={"enabled": True},
        elastic={"enabled": True, "minReplicas": 1, "maxReplicas": 8, "expectedReplicas": 6},
    ).decoded_spec()
    assert scaling_type(spec) == "evaluator"
    assert replica_counts(spec) == [("master", 1), ("worker", 2), ("evaluator", 3)]


def test_a_disabled_elastic_ignores_expected_replicas() -> None:
    job = JobBuilder().replicas("worker", 2, container=TRAINER)
    spec = job.spec(elastic={"enabled": False, "expectedReplicas": 5}).decoded_spec()
    assert replica_counts(spec) == [("worker", 2)]


def running(spec: PyTorchTrainingJobSpec, count: int) -> list[PodView]:
    return [replica_pod(r.type, r.index, uid=f"u{r.rank}") for r in replicas_of(spec)[:count]]


def test_scaled_up_the_planner_creates_the_new_replicas_and_the_status_counts_them() -> None:
    before = elastic(3)
    status = observe(before, running(before, 3)).status
    assert (status["replicas"], status["selector"]) == (3, "batch.tensorstack.dev/job-name=j")
    after = elastic(5)
    up = observe(after, running(before, 3), status, svcs=services(before))
    assert [(p.replica.type, p.replica.index) for p in up.create_pods] == [
        ("worker", 2),
        ("worker", 3),
    ]
    assert up.status["replicas"] == 3
    assert [(e.reason, e.message) for e in up.status_events] == [
        ("ReplicasScaled", "worker: from 2 to 4 replicas")
    ]
    assert observe(after, running(after, 5), up.status).status["replicas"] == 5


def test_scaled_down_the_highest_indices_go() -> None:
    before = elastic(5)
    status = observe(before, running(before, 5)).status
    down = observe(elastic(2), running(before, 5), status)
    assert down.delete_pods == [("j-worker-3", "u4"), ("j-worker-2", "u3"), ("j-worker-1", "u2")]
    assert down.status["replicas"] == 2
