"""The frozen-rank run of tests/node/test_diagnosis.py: a Hugging Face Trainer job of two
replicas, asked for a diagnosis while it trains, then one rank's processes frozen (SIGSTOP) until
its silence is diagnosed and its gang restarted in place, and the job has succeeded. It is a few
minutes of waiting on one job, so it runs in a thread of its own from the start of the node
tier's session (the `frozen_rank` fixture of tests/node/conftest.py), beside the tests before
the one that reads what it saw."""

from __future__ import annotations

import threading
import uuid
from dataclasses import dataclass, field
from typing import Any

from support.jobs import JobBuilder
from support.node import Node, container_id, ok, small_resources, torchjob, wait_until
from torchjob.api import constants

NAME = "hf-hang"
RUN_SECONDS = 900


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


@dataclass
class FrozenRankRun:
    """The job's run, in a thread of its own: what it saw, or what went wrong."""

    node: Node
    namespace: str = field(default_factory=lambda: f"frozen-rank-{uuid.uuid4().hex[:6]}")
    seen: dict[str, Any] = field(default_factory=dict)
    error: BaseException | None = None
    thread: threading.Thread | None = None

    def start(self) -> None:
        self.node.kubectl("create", "namespace", self.namespace)
        self.thread = threading.Thread(target=self._run, name="frozen-rank", daemon=True)
        self.thread.start()

    def result(self) -> dict[str, Any]:
        assert self.thread is not None
        self.thread.join(RUN_SECONDS)
        assert not self.thread.is_alive(), f"the frozen-rank run took over {RUN_SECONDS}s"
        if self.error is not None:
            raise self.error
        return self.seen

    def stop(self) -> None:
        self.node.kubectl("delete", "namespace", self.namespace, "--wait=false")

    def _run(self) -> None:
        try:
            self._drive()
        except BaseException as error:  # handed to the test that reads the run
            self.error = error

    def _drive(self) -> None:
        node, namespace, seen = self.node, self.namespace, self.seen
        node.apply(namespace, hf_job(node.example_image))
        wait_until(
            f"{NAME}'s first progress report",
            lambda: (node.job(namespace, NAME).get("status") or {}).get("trainerStatus"),
            timeout=300,
        )
        seen["asked"] = ok(torchjob(node, namespace, "diagnose", NAME, "--summary", timeout=120))
        seen["before"] = {p: pod_of(node, namespace, p) for p in ("worker-0", "worker-1")}
        frozen = container_id(seen["before"]["worker-1"], "python")
        node.ctr("tasks", "kill", "--all", "--signal", "SIGSTOP", frozen)
        seen["found"] = wait_until(
            "the silence's diagnosis", lambda: diagnosis(node, namespace, 2), 180
        )
        seen["diagnosed_events"] = node.events(namespace, NAME)
        seen["job"] = node.wait_for_phase(namespace, NAME, ["Succeeded", "Failed"], 600)
        seen["events"] = node.events(namespace, NAME)
        seen["after"] = {p: pod_of(node, namespace, p) for p in ("worker-0", "worker-1")}
        seen["stacks"] = node.kubectl(
            "logs", "-n", namespace, f"{NAME}-worker-0", "-c", "restart-agent"
        ).stdout
        seen["described"] = ok(torchjob(node, namespace, "get", NAME))


def pod_of(node: Node, namespace: str, replica: str) -> dict[str, Any]:
    pod = node.get("pod", f"{NAME}-{replica}", namespace)
    assert pod is not None, replica
    return pod


def diagnosis(node: Node, namespace: str, number: int) -> dict[str, Any] | None:
    found = (node.job(namespace, NAME).get("status") or {}).get("diagnosis") or {}
    return found if found.get("number") == number and found.get("collectedTime") else None
