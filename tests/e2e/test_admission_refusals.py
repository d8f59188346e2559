"""What was admitted and then went wrong is refused at `kubectl apply`, with the field path: a typo
in a pod template, a job name that cannot name its Services, an elastic job's replicas outside its
bounds (at create and on update). `torchjob run --dry-run` refuses the same manifests naming the
same fields, and the Pod schema admission checks templates by is the live apiserver's."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from support import ControlPlane
from support.cli import TORCHJOB
from support.jobs import JobBuilder

from torchjob.api import pod_schema

GENERATOR = Path(__file__).parents[2] / "tools" / "gen-pod-schema"


def elastic_job(name: str, replicas: int, **bounds: Any) -> JobBuilder:
    return (
        JobBuilder(name)
        .replicas("worker", replicas)
        .torchrun()
        .elastic(**({"minReplicas": 1, "maxReplicas": 4} | bounds))
    )


REFUSED: dict[str, tuple[dict[str, Any], str, str]] = {
    "template typo": (
        JobBuilder("typo")
        .replicas("worker", 1)
        .container(resouces={"limits": {"nvidia.com/gpu": 8}})
        .build(),
        "spec.replicaSpecs[0].template.spec.containers[0].resouces",
        "unknown field",
    ),
    "typo deep in a template": (
        JobBuilder("deep")
        .replicas("worker", 1)
        .pod_spec(volumes=[{"name": "data", "emptyDir": {"sizeLimt": "1Gi"}}])
        .build(),
        "spec.replicaSpecs[0].template.spec.volumes[0].emptyDir.sizeLimt",
        "unknown field",
    ),
    "name that cannot name a Service": (
        JobBuilder("resnet.v2").replicas("worker", 1).build(),
        "metadata.name",
        "'resnet.v2-worker-0'",
    ),
    "replicas above maxReplicas": (
        elastic_job("too-many", 9).build(),
        "spec.replicaSpecs[0].replicas",
        "9 replicas are more than spec.elastic.maxReplicas 4",
    ),
}


def apply(control_plane: ControlPlane, namespace: str, manifest: dict[str, Any]) -> str:
    """kubectl apply's error output; the apply must fail."""
    result = control_plane.kubectl(
        "apply", "-n", namespace, "-f", "-", input=json.dumps(manifest), check=False
    )
    assert result.returncode != 0, f"admitted:\n{result.stdout}"
    return result.stderr


def dry_run(namespace: str, manifest: dict[str, Any]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(TORCHJOB), "run", "--dry-run", "-n", namespace, "-"],
        input=json.dumps(manifest),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.mark.parametrize("case", list(REFUSED))
def test_refused_at_apply_and_by_dry_run_with_the_field_path(
    control_plane: ControlPlane, admitted_namespace: str, case: str
) -> None:
    manifest, path, message = REFUSED[case]
    stderr = apply(control_plane, admitted_namespace, manifest)
    assert f"{path}: " in stderr and message in stderr, stderr
    name = manifest["metadata"]["name"]
    gone = control_plane.kubectl("get", "ptj", name, "-n", admitted_namespace, check=False)
    assert gone.returncode != 0  # nothing was stored
    local = dry_run(admitted_namespace, manifest)
    assert local.returncode == 2, local.stdout
    assert f"{path}: " in local.stderr and message in local.stderr, local.stderr


def test_top_level_typo_refused_by_the_apiserver_and_by_dry_run(
    control_plane: ControlPlane, admitted_namespace: str
) -> None:
    manifest = JobBuilder("top").replicas("worker", 1).build()
    manifest["replica"] = 2
    manifest["spec"]["replicaSpecs"][0]["replica"] = 2
    stderr = apply(control_plane, admitted_namespace, manifest)
    assert 'unknown field "replica"' in stderr, stderr
    assert 'unknown field "spec.replicaSpecs[0].replica"' in stderr, stderr
    local = dry_run(admitted_namespace, manifest)
    assert local.returncode == 2
    assert "error: replica: unknown field" in local.stderr, local.stderr
    assert "error: spec.replicaSpecs[0].replica: unknown field" in local.stderr, local.stderr


def test_replicas_above_max_refused_on_update(
    control_plane: ControlPlane, admitted_namespace: str
) -> None:
    builder = elastic_job("scaled", 2)
    control_plane.kubectl(
        "apply", "-n", admitted_namespace, "-f", "-", input=json.dumps(builder.build())
    )
    stderr = apply(control_plane, admitted_namespace, builder.replica_count(9).build())
    assert "spec.replicaSpecs[0].replicas: 9 replicas are more than" in stderr, stderr
    patch = json.dumps({"spec": {"elastic": {"expectedReplicas": 5}}})
    result = control_plane.kubectl(
        "patch",
        "ptj",
        "scaled",
        "-n",
        admitted_namespace,
        "--type=merge",
        "-p",
        patch,
        check=False,
    )
    assert result.returncode != 0
    # The CRD's own CEL rule refuses it before the webhook would, naming the same field.
    assert "spec.elastic.expectedReplicas: " in result.stderr, result.stderr
    within = builder.replica_count(4).build()
    control_plane.kubectl("apply", "-n", admitted_namespace, "-f", "-", input=json.dumps(within))


def test_the_pod_schema_is_the_live_apiservers(control_plane: ControlPlane) -> None:
    """api/pod_schema.py, generated from the OpenAPI of the version `make cluster` builds, is what
    the apiserver under test publishes; a new Kubernetes version shows here as a difference."""
    loader = importlib.machinery.SourceFileLoader("gen_pod_schema", str(GENERATOR))
    spec = importlib.util.spec_from_loader("gen_pod_schema", loader)
    assert spec is not None
    generator = importlib.util.module_from_spec(spec)
    loader.exec_module(generator)
    live = json.loads(control_plane.kubectl("get", "--raw", "/openapi/v3/api/v1").stdout)
    assert generator.reduce_document(live) == pod_schema.DEFINITIONS
    version = json.loads(control_plane.kubectl("version", "-o", "json").stdout)
    assert version["serverVersion"]["gitVersion"].startswith(pod_schema.KUBERNETES_VERSION)
