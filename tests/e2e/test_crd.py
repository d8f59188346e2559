"""The generated CRD on the real apiserver: it installs, documents itself through `kubectl
explain`, takes every T9k manifest as written, and refuses wrong values naming the field."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from support import ControlPlane
from support.jobs import job_manifest

from torchjob.api.types import PyTorchTrainingJob

DATA = Path(__file__).parents[1] / "data"
T9K_MANIFESTS = sorted((DATA / "t9k").glob("*.yaml"))


def apply(control_plane: ControlPlane, namespace: str, obj: dict[str, Any]) -> Any:
    return control_plane.kubectl(
        "apply", "-n", namespace, "-f", "-", input=json.dumps(obj), check=False
    )


def get_job(control_plane: ControlPlane, namespace: str, name: str) -> dict[str, Any]:
    out = control_plane.kubectl("get", "ptj", name, "-n", namespace, "-o", "json").stdout
    data = json.loads(out)
    assert isinstance(data, dict)
    return data


def test_crd_is_established(control_plane: ControlPlane, crd: None) -> None:
    out = control_plane.kubectl(
        "get", "crd", "pytorchtrainingjobs.batch.tensorstack.dev", "-o", "json"
    ).stdout
    conditions = {c["type"]: c["status"] for c in json.loads(out)["status"]["conditions"]}
    assert conditions["Established"] == "True"
    assert conditions["NamesAccepted"] == "True"


def test_kubectl_explain_shows_our_descriptions(control_plane: ControlPlane, crd: None) -> None:
    out = " ".join(control_plane.kubectl("explain", "ptj.spec.torchrunConfig").stdout.split())
    assert "Start the training with `torchrun`" in out
    assert "procPerNode" in out
    assert "rdzvBackend" in out
    raw = control_plane.kubectl("explain", "ptj.spec.torchrunConfig.procPerNode").stdout
    field = " ".join(raw.split())  # kubectl wraps long descriptions
    assert "`gpu` for one process per GPU" in field
    assert "Defaults to `1` when absent." in field


@pytest.mark.parametrize("path", T9K_MANIFESTS, ids=lambda p: p.stem)
def test_t9k_manifest_is_accepted_and_stored_as_written(
    control_plane: ControlPlane, crd: None, namespace: str, path: Path
) -> None:
    written = yaml.safe_load(path.read_text())
    result = apply(control_plane, namespace, written)
    assert result.returncode == 0, result.stderr
    stored = get_job(control_plane, namespace, written["metadata"]["name"])
    assert stored["spec"] == written["spec"], "the apiserver pruned or changed a field"
    assert PyTorchTrainingJob.from_dict(stored).to_dict() == stored


def set_in(obj: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    """A copy of obj with the dotted path (list indexes as numbers) set to value."""
    out = copy.deepcopy(obj)
    node: Any = out
    keys = [int(k) if k.isdigit() else k for k in path.split(".")]
    for key in keys[:-1]:
        node = node.setdefault(key, {}) if isinstance(key, str) else node[key]
    node[keys[-1]] = value
    return out


TORCHRUN = job_manifest("torchrun")
INVALID = [
    ("spec.replicaSpecs.0.replicas", "four", "spec.replicaSpecs[0].replicas", "integer"),
    (
        "spec.replicaSpecs.0.restartPolicy",
        "Sometimes",
        "spec.replicaSpecs[0].restartPolicy",
        "Sometimes",
    ),
    ("spec.torchrunConfig.procPerNode", "x", "spec.torchrunConfig.procPerNode", "should match"),
    ("spec.torchrunConfig.rdzvBackend", "zk", "spec.torchrunConfig.rdzvBackend", "zk"),
    (
        "spec.scheduler.t9kScheduler",
        {"queue": "q", "priority": 101},
        "spec.scheduler.t9kScheduler.priority",
        "less than or equal to 100",
    ),
    (
        "spec.elastic",
        {"enabled": True, "minReplicas": 4, "maxReplicas": 2},
        "spec.elastic.minReplicas",
        "must not exceed",
    ),
    (
        "spec.torchrunConfig.enabled",
        False,
        "spec.torchrunConfig.enabled",
        "spec.torchrunConfig.enable and spec.torchrunConfig.enabled",
    ),
    (
        "spec.replicaSpecs.0.template.spec.containers",
        [],
        "spec.replicaSpecs[0].template.spec.containers",
        "should have at least 1 items",
    ),
    ("spec.replicaSpecs.0.type", "Worker_1", "spec.replicaSpecs[0].type", "should match"),
    (
        "spec.runPolicy",
        {"backoffLimit": -1},
        "spec.runPolicy.backoffLimit",
        "greater than or equal to 0",
    ),
]


@pytest.mark.parametrize(
    ("path", "value", "field", "reason"),
    INVALID,
    ids=[case[0] + "=" + json.dumps(case[1]) for case in INVALID],
)
def test_apiserver_refuses_wrong_value_naming_the_field(
    control_plane: ControlPlane,
    crd: None,
    namespace: str,
    path: str,
    value: Any,
    field: str,
    reason: str,
) -> None:
    result = apply(control_plane, namespace, set_in(TORCHRUN, path, value))
    assert result.returncode != 0, f"{path}={value!r} was accepted"
    assert field in result.stderr
    assert reason in result.stderr


def test_printer_columns_show_phase_restarts_and_progress(
    control_plane: ControlPlane, crd: None, namespace: str
) -> None:
    job = job_manifest("basic")
    assert apply(control_plane, namespace, job).returncode == 0
    status = {
        "status": {
            "phase": "Running",
            "backoffCount": 2,
            "aggregate": {"running": 4, "succeeded": 0, "failed": 0},
            "trainerStatus": {"progressPercentage": 45, "estimatedRemainingSeconds": 130},
            "conditions": [
                {
                    "type": "StartFailure",
                    "status": "True",
                    "reason": "ImagePullFailed",
                    "message": "replica pytorch-example-worker-1 cannot start",
                    "lastTransitionTime": "2026-01-01T00:00:00Z",
                }
            ],
        }
    }
    control_plane.kubectl(
        "patch",
        "ptj",
        job["metadata"]["name"],
        "-n",
        namespace,
        "--subresource=status",
        "--type=merge",
        "-p",
        json.dumps(status),
    )
    table = control_plane.kubectl("get", "ptj", "-n", namespace).stdout.splitlines()
    header, row = table[0].split(), table[1].split()
    assert header[:9] == [
        "NAME",
        "PHASE",
        "START",
        "RUNNING",
        "SUCCEEDED",
        "FAILED",
        "RESTARTS",
        "PROGRESS",
        "ETA",
    ]
    assert row[:9] == [
        "pytorch-example",
        "Running",
        "ImagePullFailed",
        "4",
        "0",
        "0",
        "2",
        "45",
        "130",
    ]


def test_expected_replicas_below_min_nodes_is_refused_by_the_schema(
    control_plane: ControlPlane, crd: None, namespace: str
) -> None:
    """The scale subresource writes spec.elastic.expectedReplicas past the webhook: the CRD's
    own rule keeps it at or above the older spelling of the lower bound too."""
    elastic = {"enabled": True, "maxReplicas": 4, "expectedReplicas": 2}
    job = set_in(set_in(TORCHRUN, "spec.elastic", elastic), "spec.torchrunConfig.minNodes", 3)
    result = apply(control_plane, namespace, job)
    assert result.returncode != 0, "expectedReplicas below minNodes was accepted"
    assert "spec.elastic.expectedReplicas" in result.stderr
    assert "spec.torchrunConfig.minNodes" in result.stderr
    accepted = set_in(job, "spec.elastic.expectedReplicas", 3)
    assert apply(control_plane, namespace, accepted).returncode == 0
