"""A node the job's replicas failed on in two charged gang restarts in a row is avoided
(lifecycle/failing_nodes.py): named in an Event and the status, the job's new pods prefer the
other nodes, and in a gang restart in place the pods on it are recreated."""

from __future__ import annotations

from typing import Any

from support.planning import META, observe, replica_pod, settle, spec

from torchjob.api import constants
from torchjob.lifecycle.observe import PodView
from torchjob.render.replica_objects import render_pod
from torchjob.render.topology import Replica

KEYS = (("master", 0), ("worker", 0), ("worker", 1))
NODES = {"master": "n0", "worker": "n1"}


def gang(gen: int, failed_on: str | None = "n1", **fields: Any) -> list[PodView]:
    """The pods of gang `gen`, the master on n0 and the workers on n1; worker-0 failed on
    `failed_on` (None: none failed)."""
    pods = [replica_pod(k, i, gang_restarts=gen, node=NODES[k], **fields) for k, i in KEYS]
    if failed_on is not None:
        pods[1] = replica_pod(
            "worker", 0, "Failed", exit_code=1, gang_restarts=gen, node=failed_on, **fields
        )
    return pods


def restart_twice(
    meta: dict[str, Any] = META, second_on: str = "n1", **fields: Any
) -> tuple[Any, Any]:
    """Two gang restarts, the first for a failure on n1, the second on `second_on`."""
    job = spec()
    first = observe(job, gang(0, **fields), settle(job, gang(0, None), meta), meta=meta)
    second = observe(job, gang(1, second_on, **fields), first.status, meta=meta)
    return first, second


def test_a_node_failed_on_twice_in_a_row_is_avoided() -> None:
    first, second = restart_twice()
    assert first.status["gangRestartNodes"] == ["n1"]
    assert "avoidedNodes" not in first.status, "once is not a pattern"
    assert second.status["avoidedNodes"] == ["n1"]
    [avoided] = [e for e in second.status_events if e.reason == constants.REASON_NODE_AVOIDED]
    assert avoided.type == "Warning"
    assert avoided.message.startswith("node n1: replicas of this job failed on it in two gang")
    assert "j-worker-0 failed with exit code 1" in avoided.message


def test_the_new_pods_prefer_the_other_nodes() -> None:
    job = spec()
    _, second = restart_twice()
    created = observe(job, [], second.status).create_pods
    assert created and all(p.avoid == ("n1",) for p in created)
    meta = {**META, "uid": "u"}
    pod = render_pod(meta, job, Replica("worker", 0, 1), {}, avoid=("n1",))
    [term] = pod["spec"]["affinity"]["nodeAffinity"][
        "preferredDuringSchedulingIgnoredDuringExecution"
    ]
    assert term["weight"] == 100
    assert term["preference"]["matchFields"] == [
        {"key": "metadata.name", "operator": "NotIn", "values": ["n1"]}
    ]


def test_failures_on_different_nodes_avoid_none() -> None:
    _, second = restart_twice(second_on="n0")
    assert second.status["gangRestartNodes"] == ["n0"]
    assert "avoidedNodes" not in second.status


def test_a_job_may_avoid_none() -> None:
    meta = {**META, "annotations": {constants.ANNOTATION_AVOID_FAILING_NODES: "false"}}
    _, second = restart_twice(meta)
    assert "avoidedNodes" not in second.status
    assert second.status["gangRestartNodes"] == ["n1"], "still recorded"
    assert not [e for e in second.status_events if e.reason == constants.REASON_NODE_AVOIDED]


def test_in_place_the_pods_on_an_avoided_node_are_recreated() -> None:
    _, second = restart_twice(in_place=True)
    assert sorted(name for name, _ in second.delete_pods) == ["j-worker-0", "j-worker-1"]
    assert [a.name for a in second.restart_in_place] == ["j-master-0"]
