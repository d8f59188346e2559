"""A hang says where, on real pods: a Hugging Face Trainer job of two replicas, one asked for a
diagnosis while it trains, then one rank's processes frozen (SIGSTOP). The job's silence passes
its progress deadline; before its restart the diagnosis names the frozen rank and the collective
the other waits in, readable in the status, through `torchjob` and in the agents' logs; then the
gang restarts in place and the job succeeds."""

from __future__ import annotations

import re
from typing import Any

from support.jobs import JobBuilder
from support.node import Node, container_id, ok, small_resources, torchjob, wait_until

from torchjob.api import constants

NAME = "hf-hang"


def hf_job(image: str) -> dict[str, Any]:
    container = {
        "name": "python",
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        "args": ["hf_trainer.py", "--max_steps", "400"],
        "env": [{"name": "HF_HUB_OFFLINE", "value": "1"}],
        "resources": small_resources({"cpu": "1", "memory": "1Gi"}),
    }
    annotations = {
        constants.ANNOTATION_PROGRESS_DEADLINE: "20",
        constants.ANNOTATION_RESTART_BACKOFF: "0",
    }
    return (
        JobBuilder(NAME)
        .metadata(annotations=annotations)
        .torchrun(procPerNode="1", maxRestarts=0)
        .replicas("worker", 2, container=container, restartPolicy="OnFailure")
        .run_policy(backoffLimit=3, activeDeadlineSeconds=1200)
        .build()
    )


def pod_of(node: Node, namespace: str, replica: str) -> dict[str, Any]:
    pod = node.get("pod", f"{NAME}-{replica}", namespace)
    assert pod is not None, replica
    return pod


def diagnosis(node: Node, namespace: str, number: int) -> dict[str, Any] | None:
    found = (node.job(namespace, NAME).get("status") or {}).get("diagnosis") or {}
    return found if found.get("number") == number and found.get("collectedTime") else None


def test_a_frozen_rank_is_named_before_the_restart_in_place(
    node: Node, node_namespace: str
) -> None:
    node.apply(node_namespace, hf_job(node.example_image))
    wait_until(
        f"{NAME}'s first progress report",
        lambda: (node.job(node_namespace, NAME).get("status") or {}).get("trainerStatus"),
        timeout=300,
    )

    # An agent that answers after the diagnosis's 10 s (a loaded node) is said not to have
    # answered, and the user asks again: the verdict is on a diagnosis both agents answered.
    for asks in range(1, 4):
        asked = ok(torchjob(node, node_namespace, "diagnose", NAME, "--summary", timeout=120))
        assert asked.startswith(f"Diagnosis {asks} (Requested)"), asked
        if "did not answer" not in asked:
            break
    assert "rank 0 (worker-0 on " in asked and "rank 1 (worker-1 on " in asked, asked
    silence = asks + 1  # the number of the diagnosis the silence asks for

    before = {p: pod_of(node, node_namespace, p) for p in ("worker-0", "worker-1")}
    frozen = container_id(before["worker-1"], "python")
    node.ctr("tasks", "kill", "--all", "--signal", "SIGSTOP", frozen)

    found = wait_until(
        "the silence's diagnosis", lambda: diagnosis(node, node_namespace, silence), 180
    )
    assert found["reason"] == "NoProgress", found
    message = found["message"]
    assert re.search(r"rank 1 \(worker-1 on \S+\) did not answer", message), message
    assert re.search(r"rank 0 \(worker-0 on \S+\) waits in \w+", message), message
    assert message.index("rank 1") < message.index("rank 0"), "the one the other waits for first"
    events = node.events(node_namespace, NAME)
    said = [e["message"] for e in events if e.get("reason") == constants.REASON_DIAGNOSED]
    assert any(m.startswith(f"diagnosis {silence} (NoProgress): rank 1") for m in said), said

    job = node.wait_for_phase(node_namespace, NAME, ["Succeeded", "Failed"], 600)
    assert job["status"]["phase"] == "Succeeded", job["status"]
    assert job["status"]["gangRestarts"] == 1, job["status"]
    restarted = [e["message"] for e in events + node.events(node_namespace, NAME)]
    assert any(f"where each rank was: diagnosis {silence}" in m for m in restarted), restarted
    for replica, pod in before.items():
        now = pod_of(node, node_namespace, replica)
        same = (now["metadata"]["uid"], now["spec"]["nodeName"])
        assert same == (pod["metadata"]["uid"], pod["spec"]["nodeName"]), "restarted in place"
    # The stacks stay in the agent's log (printed again after its restart): pods/log readers
    # read them.
    stacks = node.kubectl(
        "logs", "-n", node_namespace, f"{NAME}-worker-0", "-c", "restart-agent"
    ).stdout
    head = f"=== torchjob diagnosis {silence}: pid"
    assert head in stacks and "[MainThread]" in stacks, stacks[-2000:]
    described = ok(torchjob(node, node_namespace, "get", NAME))
    assert f"Diagnosis:   {silence} (NoProgress" in described, described
