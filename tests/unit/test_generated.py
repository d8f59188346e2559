"""The committed CRDs, Python models and API references are exactly what `make generate` makes
from proto/ (torchjob's own API and Kubeflow's PyTorchJob), and each CRD is a structural schema
the apiserver can take."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from torchjob.api import constants

ROOT = Path(__file__).parents[2]
BIN = Path(sys.executable).parent
CRD = ROOT / "crds" / "batch.tensorstack.dev_pytorchtrainingjobs.yaml"
KUBEFLOW_CRD = ROOT / "crds" / "kubeflow.org_pytorchjobs.yaml"
PYTHON_MODELS = [
    "services/torchjob/api/types.py",
    "services/torchjob/api/kubeflow_types.py",
    "services/torchjob/api/trainer_types.py",
    "services/torchjob/api/trainingruntime_types.py",
    "services/torchjob/api/clustertrainingruntime_types.py",
]
GENERATED = [
    "crds/batch.tensorstack.dev_pytorchtrainingjobs.yaml",
    "services/torchjob/api/types.py",
    "docs/api.md",
    "crds/kubeflow.org_pytorchjobs.yaml",
    "services/torchjob/api/kubeflow_types.py",
    "docs/api-kubeflow.md",
    "crds/trainer.kubeflow.org_trainjobs.yaml",
    "crds/trainer.kubeflow.org_trainingruntimes.yaml",
    "crds/trainer.kubeflow.org_clustertrainingruntimes.yaml",
    "services/torchjob/api/trainer_types.py",
    "services/torchjob/api/trainingruntime_types.py",
    "services/torchjob/api/clustertrainingruntime_types.py",
    "docs/api-trainer.md",
    "docs/api-trainingruntime.md",
    "docs/api-clustertrainingruntime.md",
]


@pytest.fixture(scope="module")
def regenerated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("generated")
    protos = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "proto").rglob("*.proto"))
    targets = [p for p in protos if not p.endswith("schema_options.proto")]
    env_python = f"TORCHJOB_CODEGEN_PYTHON={sys.executable}"
    subprocess.run(
        [
            "env",
            env_python,
            sys.executable,
            "-m",
            "grpc_tools.protoc",
            "-Iproto",
            "--plugin=protoc-gen-torchjob=tools/protoc-gen-torchjob",
            f"--torchjob_out={out}",
            *targets,
        ],
        cwd=ROOT,
        check=True,
    )
    subprocess.run(
        [str(BIN / "ruff"), "format", "--quiet", *(str(out / p) for p in PYTHON_MODELS)],
        cwd=ROOT,
        check=True,
    )
    return out


@pytest.mark.parametrize("relative", GENERATED)
def test_committed_file_matches_make_generate(regenerated: Path, relative: str) -> None:
    committed = (ROOT / relative).read_text()
    assert (regenerated / relative).read_text() == committed, (
        f"{relative} is stale: run `make generate` and commit the result"
    )


def test_make_generate_writes_nothing_else(regenerated: Path) -> None:
    written = {str(p.relative_to(regenerated)) for p in regenerated.rglob("*") if p.is_file()}
    assert written == set(GENERATED)


def walk(schema: dict[str, Any], path: str = "") -> list[tuple[str, dict[str, Any]]]:
    """Every schema node with its path: `.a.b` for properties, `[]` for items, `{}` for the values
    of a map (additionalProperties)."""
    nodes = [(path, schema)]
    for key, child in schema.get("properties", {}).items():
        nodes += walk(child, f"{path}.{key}")
    if "items" in schema:
        nodes += walk(schema["items"], f"{path}[]")
    if isinstance(schema.get("additionalProperties"), dict):
        nodes += walk(schema["additionalProperties"], f"{path}{{}}")
    return nodes


def load_schema(path: Path) -> dict[str, Any]:
    crd = yaml.safe_load(path.read_text())
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    assert isinstance(schema, dict)
    return schema


@pytest.fixture(scope="module")
def openapi() -> dict[str, Any]:
    return load_schema(CRD)


@pytest.fixture(scope="module")
def kubeflow_openapi() -> dict[str, Any]:
    return load_schema(KUBEFLOW_CRD)


@pytest.mark.parametrize("crd", [CRD, KUBEFLOW_CRD], ids=lambda p: p.stem)
def test_every_node_has_a_type_and_every_field_a_description(crd: Path) -> None:
    for path, node in walk(load_schema(crd)):
        assert "type" in node or node.get("x-kubernetes-int-or-string") is True, path
        if path and path != ".metadata" and not path.endswith(("[]", "{}")):
            assert node.get("description"), f"{path} has no description"


@pytest.mark.parametrize("crd", [CRD, KUBEFLOW_CRD], ids=lambda p: p.stem)
def test_structural_schema(crd: Path) -> None:
    """What makes a schema structural: a map has properties or additionalProperties, never both,
    and only objects have either."""
    for path, node in walk(load_schema(crd)):
        assert not ("properties" in node and "additionalProperties" in node), path
        if "properties" in node or "additionalProperties" in node:
            assert node["type"] == "object", path
        if "items" in node:
            assert node["type"] == "array", path


def test_strings_and_lists_are_bounded_for_cel_cost(openapi: dict[str, Any]) -> None:
    spec = openapi["properties"]["spec"]
    for path, node in walk(spec, ".spec"):
        if node["type"] == "array":
            assert "maxItems" in node, path


def test_pod_template_is_opaque_and_small(openapi: dict[str, Any]) -> None:
    template = openapi["properties"]["spec"]["properties"]["replicaSpecs"]["items"]["properties"][
        "template"
    ]
    assert template["properties"]["spec"]["x-kubernetes-preserve-unknown-fields"] is True
    assert len(CRD.read_bytes()) < 64 * 1024, "the CRD must stay small enough for kubectl apply"


def test_replica_types_are_a_map_list(openapi: dict[str, Any]) -> None:
    replica_specs = openapi["properties"]["spec"]["properties"]["replicaSpecs"]
    assert replica_specs["x-kubernetes-list-type"] == "map"
    assert replica_specs["x-kubernetes-list-map-keys"] == ["type"]
    assert "type" in replica_specs["items"]["required"]


def test_every_reason_is_documented() -> None:
    """Condition and Event reasons are a closed set, each named in the API reference."""
    reasons = {v for k, v in vars(constants).items() if k.startswith("REASON_")}
    documented = (ROOT / "docs" / "api.md").read_text()
    assert {r for r in reasons if f"`{r}`" not in documented} == set()


def test_kubeflow_resource_is_kubeflows(kubeflow_openapi: dict[str, Any]) -> None:
    crd = yaml.safe_load(KUBEFLOW_CRD.read_text())
    assert crd["metadata"]["name"] == "pytorchjobs.kubeflow.org"
    names = crd["spec"]["names"]
    assert (names["kind"], names["plural"], names["singular"]) == (
        "PyTorchJob",
        "pytorchjobs",
        "pytorchjob",
    )
    version = crd["spec"]["versions"][0]
    assert version["name"] == "v1"
    assert version["subresources"]["scale"] == {
        "specReplicasPath": ".spec.pytorchReplicaSpecs.Worker.replicas",
        "statusReplicasPath": ".status.replicaStatuses.Worker.active",
        "labelSelectorPath": ".status.replicaStatuses.Worker.selector",
    }
    # Kubeflow's two columns, with why a replica cannot start and the progress a training
    # process reports between them.
    columns = [c["name"] for c in version["additionalPrinterColumns"]]
    assert columns == ["State", "Start", "Progress", "ETA", "Age"]


def test_kubeflow_replica_specs_are_a_map(kubeflow_openapi: dict[str, Any]) -> None:
    spec = kubeflow_openapi["properties"]["spec"]
    replica_specs = spec["properties"]["pytorchReplicaSpecs"]
    assert replica_specs["type"] == "object"
    assert "replicas" in replica_specs["additionalProperties"]["properties"]
    assert spec["required"] == ["pytorchReplicaSpecs"]
    statuses = kubeflow_openapi["properties"]["status"]["properties"]["replicaStatuses"]
    assert "active" in statuses["additionalProperties"]["properties"]


def test_kubeflow_schema_constrains_no_more_than_kubeflows(
    kubeflow_openapi: dict[str, Any],
) -> None:
    """Kubeflow's CRD has no enums, one default (runPolicy.suspend), one CEL rule (the queue is
    immutable), and requires only the replica specs and a condition's type and status; the
    values it leaves open are checked by the webhook. Ours adds the two rules that hold the
    Worker count the scale subresource writes, which no webhook sees, and status.trainerStatus
    with the bounds of Kubeflow Trainer's (written by the progress endpoint, never by a user)."""
    nodes = walk(kubeflow_openapi)
    assert [p for p, node in nodes if "enum" in node] == []
    assert [(p, node["default"]) for p, node in nodes if "default" in node] == [
        (".spec.runPolicy.suspend", False)
    ]
    assert [p for p, node in nodes if "x-kubernetes-validations" in node] == [
        ".spec",
        ".spec.runPolicy.schedulingPolicy.queue",
    ]
    spec_rules = kubeflow_openapi["properties"]["spec"]["x-kubernetes-validations"]
    assert all("Worker" in rule["rule"] for rule in spec_rules) and len(spec_rules) == 2
    required = {p: node["required"] for p, node in nodes if "required" in node}
    assert required == {
        ".spec": ["pytorchReplicaSpecs"],
        ".spec.pytorchReplicaSpecs{}.template.spec": ["containers"],
        ".status.conditions[]": ["type", "status"],
        ".status.replicaStatuses{}.labelSelector.matchExpressions[]": ["key", "operator"],
        ".status.trainerStatus.metrics[]": ["name", "value"],
    }
