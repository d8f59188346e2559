"""Real exit codes from real containers: a container killed with SIGKILL is restarted (in place)
under the ExitCode policy and counted; one that exits 1 is not restarted; one over its memory
limit is killed by the kernel, and the job's condition and Events say OOMKilled, not only "exit
code 137"."""

from __future__ import annotations

from typing import Any

from support.node import Node, container_id, restarts, running, training_job, wait_until

SLEEP_FOREVER = ["-c", "import time; time.sleep(86400)"]


def conditions(job: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in job.get("status", {}).get("conditions") or []}


def event_messages(node: Node, namespace: str, job: str) -> str:
    return "\n".join(
        f"{event.get('reason')}: {event.get('message')}" for event in node.events(namespace, job)
    )


def test_a_container_killed_with_sigkill_is_restarted_and_counted(
    node: Node, node_namespace: str
) -> None:
    node.apply(node_namespace, training_job("killed", node.base_image, SLEEP_FOREVER))
    pod_name = "killed-worker-0"
    first = node.pod_when(
        node_namespace, pod_name, "its container running", lambda pod: running(pod, "python")
    )

    # Killed from outside the container, as the OOM killer or an operator would: exit code 137.
    node.ctr("tasks", "kill", "--signal", "SIGKILL", container_id(first, "python"))

    # Restarted where it stands (render/in_place.py): the same pod, its container again.
    node.pod_when(
        node_namespace,
        pod_name,
        "restarted in place",
        lambda pod: pod["metadata"]["uid"] == first["metadata"]["uid"] and restarts(pod) > 0,
    )
    job = node.job_when(
        node_namespace,
        "killed",
        "the restart counted",
        lambda job: job.get("status", {}).get("backoffCount") == 1,
    )
    assert [task["restartCount"] for task in job["status"]["tasks"]] == [1]
    assert job["status"]["phase"] in ("Pending", "Running")
    assert "137" in event_messages(node, node_namespace, "killed")


def test_a_container_that_exits_1_fails_the_job_without_a_restart(
    node: Node, node_namespace: str
) -> None:
    node.apply(
        node_namespace,
        training_job("exits-1", node.base_image, ["-c", "raise SystemExit(1)"]),
    )

    job = node.wait_for_phase(node_namespace, "exits-1", ["Succeeded", "Failed"])

    assert job["status"]["phase"] == "Failed"
    assert job["status"].get("backoffCount", 0) == 0
    failed = conditions(job)["Failed"]
    assert failed["status"] == "True"
    assert "exit code 1" in failed["message"]
    pods = node.job_pods(node_namespace, "exits-1")
    assert [pod["metadata"]["name"] for pod in pods] == ["exits-1-worker-0"]
    terminated = pods[0]["status"]["containerStatuses"][0]["state"]["terminated"]
    assert terminated["exitCode"] == 1


def test_a_master_over_its_memory_limit_ends_oomkilled(node: Node, node_namespace: str) -> None:
    # bytearray() writes every page it allocates: well past the limit, the kernel kills it.
    grow = ["-c", "blocks = [bytearray(16 << 20) for _ in range(64)]"]
    node.apply(
        node_namespace,
        training_job(
            "greedy",
            node.base_image,
            grow,
            replica_type="master",
            restart_policy="Never",
            limits={"cpu": "500m", "memory": "64Mi"},
        ),
    )

    job = node.wait_for_phase(node_namespace, "greedy", ["Succeeded", "Failed"])

    assert job["status"]["phase"] == "Failed"
    (pod,) = node.job_pods(node_namespace, "greedy")
    terminated = pod["status"]["containerStatuses"][0]["state"]["terminated"]
    assert (terminated["reason"], terminated["exitCode"]) == ("OOMKilled", 137)
    assert "OOMKilled" in conditions(job)["Failed"]["message"]
    wait_until(
        "an Event naming OOMKilled",
        lambda: "OOMKilled" in event_messages(node, node_namespace, "greedy"),
    )
