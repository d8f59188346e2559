"""Progress on real pods: Hugging Face's Trainer and the Kubeflow SDK, unmodified, report into
their job's status through the token, CA and URL the pod was given; and a tenant's pod cannot
write any progress but its own job's, whatever token it holds or sends."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from support.node import Node, training_job, wait_until
from support.tokens import expired_copy

PROBE = (Path(__file__).parent / "scripts" / "progress_probe.py").read_text()
# kube-apiserver's service-account signing key on the node (hack/node.sh).
SIGNING_KEY = Path("/var/lib/torchjob-node/pki/sa.key")
TOKEN_PATH = "/var/run/secrets/torchjob/progress/token"
CA_ANNOTATION = "batch.tensorstack.dev/progress-ca"
SLEEPER = ["-c", "import time; time.sleep(900)"]


def _reported(node: Node, namespace: str, name: str) -> dict[str, Any]:
    job = node.wait_for_phase(namespace, name, ["Succeeded", "Failed"])
    pod = f"{name}-worker-0"
    assert job["status"]["phase"] == "Succeeded", node.logs(namespace, pod)[-3000:]
    # A report accepted before the job ended is written when its slot comes.
    return wait_until(
        f"{name}'s last report in status.trainerStatus",
        lambda: _finished_report(node, namespace, name),
        timeout=60,
    )


def _finished_report(node: Node, namespace: str, name: str) -> dict[str, Any] | None:
    status = node.job(namespace, name)["status"].get("trainerStatus") or {}
    return status if status.get("progressPercentage") == 100 else None


def test_hugging_face_trainer_and_kubeflow_sdk_report_unmodified(
    node: Node, node_namespace: str
) -> None:
    image = node.example_image
    limits = {"cpu": "1", "memory": "1Gi"}
    trainer_job = training_job("hf-trainer", image, ["hf_trainer.py"], limits=limits)
    # Nothing is downloaded: the model is built from a config in the script.
    container = trainer_job["spec"]["replicaSpecs"][0]["template"]["spec"]["containers"][0]
    container["env"] = [{"name": "HF_HUB_OFFLINE", "value": "1"}]
    node.apply(
        node_namespace,
        trainer_job,
        training_job("kubeflow-sdk", image, ["sdk_loop.py"], limits=limits),
    )

    trainer = _reported(node, node_namespace, "hf-trainer")
    metrics = {m["name"]: m["value"] for m in trainer.get("metrics") or []}
    assert "train_loss" in metrics or "loss" in metrics, trainer
    assert trainer["estimatedRemainingSeconds"] == 0

    sdk = _reported(node, node_namespace, "kubeflow-sdk")
    assert sdk.get("metrics"), sdk


def _running_pod(node: Node, namespace: str, job: str) -> dict[str, Any]:
    return node.wait_for_pod_phase(namespace, f"{job}-worker-0", ["Running"])


def _stray_pod(node: Node, namespace: str, like: dict[str, Any]) -> str:
    """A pod of no job that asks for a token of `like`'s job's audience and copies its CA and
    variables: everything a tenant can write into a pod of its own."""
    container = next(c for c in like["spec"]["containers"] if c["name"] == "python")
    volume = next(v for v in like["spec"]["volumes"] if v["name"] == "torchjob-progress")
    stray = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "stray",
            "annotations": {CA_ANNOTATION: like["metadata"]["annotations"][CA_ANNOTATION]},
        },
        "spec": {
            "restartPolicy": "Never",
            "volumes": [volume],
            "containers": [
                {
                    "name": "python",
                    "image": node.example_image,
                    "command": ["python", *SLEEPER],
                    "env": [e for e in container["env"] if e["name"].startswith("KUBEFLOW_")],
                    "volumeMounts": [
                        m for m in container["volumeMounts"] if m["name"] == "torchjob-progress"
                    ],
                }
            ],
        },
    }
    node.apply(namespace, stray)
    node.wait_for_pod_phase(namespace, "stray", ["Running"])
    return "stray"


def _probe(node: Node, namespace: str, pod: str, forged: str) -> dict[str, Any]:
    """What the endpoint answered the probe script run inside `pod`."""
    own_url = node.kubectl(
        "exec", "-n", namespace, pod, "--", "printenv", "KUBEFLOW_TRAINER_SERVER_URL"
    ).stdout.strip()
    other_url = own_url.replace(
        "/pytorchtrainingjobs/progress-a/", "/pytorchtrainingjobs/progress-b/"
    )
    output = node.kubectl(
        "exec", "-n", namespace, pod, "--",
        "env", f"OTHER_JOB_URL={other_url}", f"FORGED_TOKEN={forged}",
        "python", "-c", PROBE,
        timeout=300,
    ).stdout  # fmt: skip
    line = next(line for line in output.splitlines() if line.startswith("PROBE "))
    answers: dict[str, Any] = json.loads(line.removeprefix("PROBE "))
    return answers


def test_a_pod_writes_only_its_own_jobs_progress(node: Node, node_namespace: str) -> None:
    image = node.example_image
    node.apply(
        node_namespace,
        training_job("progress-a", image, SLEEPER),
        training_job("progress-b", image, SLEEPER),
    )
    pod_a = _running_pod(node, node_namespace, "progress-a")
    _running_pod(node, node_namespace, "progress-b")
    token = node.kubectl("exec", "-n", node_namespace, pod_a["metadata"]["name"], "--",
                         "cat", TOKEN_PATH).stdout.strip()  # fmt: skip
    forged = expired_copy(token, SIGNING_KEY.read_bytes())

    answers = _probe(node, node_namespace, pod_a["metadata"]["name"], forged)

    flood, seconds = answers.pop("flood"), answers.pop("flood_seconds")
    codes = {name: answer[0] for name, answer in answers.items()}
    assert codes == {
        "own": 200,
        "other_job": 401,  # its token's audience names job A only
        "no_token": 401,
        "forged_expired": 401,
        "api_audience": 401,
        "oversized": 413,
        "malformed": 400,
        "out_of_range": 422,
        "last": 200,
    }, answers
    assert all(answers[name][1].get("kind") == "Status" for name in codes if codes[name] != 200)
    # Each webhook replica keeps its own allowance per job (1 a second, 10 at once, the chart's
    # defaults): however long the flood took, no more got through (and when it took less than
    # its 60 reports' worth, the rest were refused).
    webhook = node.get("deployment", "torchjob-webhook", node.chart_namespace)
    assert webhook is not None
    replicas = webhook["spec"]["replicas"]
    assert set(flood) <= {"200", "429"}, flood
    assert flood.get("200", 0) <= replicas * (10 + seconds) + 1, (flood, seconds)
    shown = wait_until(
        "job A's last report", lambda: _finished_report(node, node_namespace, "progress-a"), 60
    )
    assert shown["metrics"] == [{"name": "loss", "value": "0.5"}]
    assert not node.job(node_namespace, "progress-b")["status"].get("trainerStatus")

    stray = _probe(node, node_namespace, _stray_pod(node, node_namespace, pod_a), forged)
    assert stray["own"][0] == 403, stray  # a token of job A's audience, from a pod of no job
    assert "does not belong" in stray["own"][1]["message"], stray
