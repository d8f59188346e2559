"""The node's metrics pipeline, end to end: metrics-server scrapes the kubelet and serves
metrics.k8s.io through the API server's aggregation layer, and what reads it sees real figures:
`kubectl top pods` and `torchjob top job` for a running job's replicas, and a
HorizontalPodAutoscaler (kube-controller-manager's) on CPU utilization."""

from __future__ import annotations

import json
import subprocess
from decimal import Decimal
from typing import Any

from support.cli import TORCHJOB
from support.node import Manifest, Node, training_job, wait_until

from torchjob.views.quantities import quantity

MIB = 2**20
# Each replica holds this much, written so that it is resident, and spins on one core.
BALLAST_MIB = 48
BURN = ["-c", f"ballast = b'x' * ({BALLAST_MIB} * 2**20)\nwhile True:\n    pass"]
JOB = "burner"
HPA = "spinner"
# A tiny request against a limit twenty times larger: the spinning pod's utilization is far above
# the target on any machine that gives it a twentieth of its limit, so the verdict does not
# depend on the machine's speed.
HPA_REQUEST_CPU = "10m"
HPA_LIMIT_CPU = "200m"
HPA_TARGET_UTILIZATION = 50


def pod_metrics(node: Node, namespace: str) -> dict[str, Manifest]:
    """metrics.k8s.io's PodMetrics of `namespace`, by pod name, as the API server answers."""
    raw = node.kubectl("get", "--raw", f"/apis/metrics.k8s.io/v1beta1/namespaces/{namespace}/pods")
    return {item["metadata"]["name"]: item for item in json.loads(raw.stdout)["items"]}


def usage(metric: Manifest) -> tuple[Decimal, Decimal]:
    """A PodMetrics' CPU (cores) and memory (bytes), its containers summed."""
    containers = metric.get("containers") or []
    cpu = sum((quantity(c["usage"].get("cpu")) for c in containers), Decimal(0))
    memory = sum((quantity(c["usage"].get("memory")) for c in containers), Decimal(0))
    return cpu, memory


def top_rows(output: str) -> list[dict[str, str]]:
    header, *lines = output.splitlines()
    columns = header.split()
    return [dict(zip(columns, line.split(), strict=True)) for line in lines]


def test_top_shows_what_a_running_jobs_replicas_use(node: Node, node_namespace: str) -> None:
    limits = {"cpu": "250m", "memory": "128Mi"}
    node.apply(node_namespace, training_job(JOB, node.base_image, BURN, replicas=2, limits=limits))
    replicas = {f"{JOB}-worker-0", f"{JOB}-worker-1"}

    def both_measured() -> dict[str, Manifest] | None:
        # The first figures of a pod follow its start by a scrape or two (--metric-resolution).
        measured = {
            name: metric
            for name, metric in pod_metrics(node, node_namespace).items()
            if usage(metric)[0] > 0 and usage(metric)[1] >= BALLAST_MIB * MIB
        }
        return measured if replicas <= measured.keys() else None

    measured = wait_until("metrics.k8s.io measures both replicas", both_measured)
    assert {name for name in measured if name.startswith(JOB)} == replicas

    top_pods = node.kubectl("top", "pods", "-n", node_namespace, "--no-headers").stdout
    assert {line.split()[0] for line in top_pods.splitlines()} >= replicas, top_pods

    target = [f"--kubeconfig={node.kubeconfig}", f"--namespace={node_namespace}"]
    result = subprocess.run(
        [str(TORCHJOB), "top", "job", JOB, *target],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    (row,) = top_rows(result.stdout)
    assert row["NAME"] == JOB and row["PHASE"] == "Running", result.stdout
    # What the replicas hold (100m each) and what they use, both from the cluster.
    assert row["CPU(ALLOC)"] == "200m", result.stdout
    assert quantity(row["CPU(USED)"]) > 0, result.stdout
    assert quantity(row["MEMORY(USED)"]) >= 2 * BALLAST_MIB * MIB, result.stdout


def spinning_deployment(image: str) -> Manifest:
    container = {
        "name": "spin",
        "image": image,
        "command": ["python", "-c", "while True:\n    pass"],
        "resources": {
            "requests": {"cpu": HPA_REQUEST_CPU, "memory": "32Mi"},
            "limits": {"cpu": HPA_LIMIT_CPU, "memory": "64Mi"},
        },
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": HPA},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": HPA}},
            "template": {
                "metadata": {"labels": {"app": HPA}},
                "spec": {"terminationGracePeriodSeconds": 1, "containers": [container]},
            },
        },
    }


def cpu_autoscaler() -> Manifest:
    target = {"type": "Utilization", "averageUtilization": HPA_TARGET_UTILIZATION}
    return {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": HPA},
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": HPA},
            "minReplicas": 1,
            "maxReplicas": 2,
            "metrics": [{"type": "Resource", "resource": {"name": "cpu", "target": target}}],
        },
    }


def cpu_reading(hpa: Manifest) -> dict[str, Any] | None:
    """The CPU figure the autoscaler last read, when it has read one."""
    for metric in (hpa.get("status") or {}).get("currentMetrics") or []:
        if metric.get("type") == "Resource" and metric["resource"]["name"] == "cpu":
            current: dict[str, Any] = metric["resource"]["current"]
            return current
    return None


def test_an_autoscaler_reads_cpu_from_metrics_server(node: Node, node_namespace: str) -> None:
    node.apply(node_namespace, spinning_deployment(node.base_image), cpu_autoscaler())

    def read() -> dict[str, Any] | None:
        hpa = node.get("horizontalpodautoscalers.autoscaling", HPA, node_namespace)
        reading = cpu_reading(hpa) if hpa else None
        return reading if reading and quantity(reading.get("averageValue")) > 0 else None

    reading = wait_until("the autoscaler reads the pods' CPU", read)
    assert reading["averageUtilization"] > 0, reading
    hpa = node.get("horizontalpodautoscalers.autoscaling", HPA, node_namespace)
    assert hpa is not None
    conditions = {c["type"]: c for c in hpa["status"]["conditions"]}
    assert conditions["ScalingActive"]["status"] == "True", conditions
    assert conditions["ScalingActive"]["reason"] == "ValidMetricFound", conditions

    # Far above its target, the Deployment is scaled to the autoscaler's maximum.
    def scaled() -> Manifest | None:
        found = node.get("deployment", HPA, node_namespace)
        return found if found and found["spec"]["replicas"] == 2 else None

    wait_until("the autoscaler scales the Deployment up", scaled)
    events = node.events(node_namespace, HPA)
    assert any(event.get("reason") == "SuccessfulRescale" for event in events), events
