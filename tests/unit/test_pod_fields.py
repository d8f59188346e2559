"""A replica's pod template is checked against the Kubernetes Pod schema: every unknown field and
every value of the wrong JSON type is refused with its full path; everything the schema allows is
accepted."""

from __future__ import annotations

import copy
import importlib.machinery
import importlib.util
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from support.jobs import JobBuilder

from torchjob.api import pod_schema
from torchjob.api.defaults import default_job
from torchjob.api.field_errors import Cause, FieldError
from torchjob.api.pod_fields import problems
from torchjob.api.validation import validate

DATA = Path(__file__).parents[1] / "data" / "t9k"
ROOT = Path(__file__).parents[2]
DEFINITIONS = pod_schema.DEFINITIONS

# A template touching much of the schema: containers and init containers, probes, resources,
# volumes and their sources, affinity, security contexts, labels and annotations.
RICH_TEMPLATE: dict[str, Any] = {
    "metadata": {"labels": {"app": "train"}, "annotations": {"a/b": "c"}},
    "spec": {
        "initContainers": [
            {"name": "fetch", "image": "busybox", "command": ["sh", "-c", "true"]},
        ],
        "containers": [
            {
                "name": "python",
                "image": "pytorch",
                "args": ["train.py", "--epochs", "3"],
                "env": [
                    {"name": "A", "value": "1"},
                    {"name": "B", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                ],
                "ports": [{"name": "dist", "containerPort": 23456, "protocol": "TCP"}],
                "resources": {
                    "limits": {"nvidia.com/gpu": 8, "cpu": "4", "memory": "16Gi"},
                    "requests": {"cpu": 2.5},
                },
                "livenessProbe": {
                    "httpGet": {"path": "/healthz", "port": "http"},
                    "initialDelaySeconds": 5,
                },
                "readinessProbe": {"tcpSocket": {"port": 23456}, "periodSeconds": 10},
                "volumeMounts": [{"name": "data", "mountPath": "/data", "readOnly": True}],
                "securityContext": {
                    "runAsNonRoot": True,
                    "capabilities": {"drop": ["ALL"]},
                    "seccompProfile": {"type": "RuntimeDefault"},
                },
            }
        ],
        "volumes": [
            {"name": "data", "persistentVolumeClaim": {"claimName": "data"}},
            {"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": "1Gi"}},
            {"name": "cfg", "configMap": {"name": "cfg", "items": [{"key": "k", "path": "p"}]}},
        ],
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {"matchExpressions": [{"key": "gpu", "operator": "Exists"}]}
                    ]
                }
            }
        },
        "tolerations": [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}],
        "nodeSelector": {"pool": "gpu"},
        "restartPolicy": "OnFailure",
        "terminationGracePeriodSeconds": 30,
        "securityContext": {"fsGroup": 1000},
    },
}


def object_keys(value: Any, code: str, path: tuple[str | int, ...] = ()) -> Iterator[Any]:
    """(path of the object, key, definition) for every key of every schema object in `value`:
    the keys a misspelling makes unknown (a map's keys are free)."""
    if code.startswith("@") and isinstance(value, dict):
        fields = DEFINITIONS[code[1:]]
        for key, item in value.items():
            yield path, key, code[1:]
            yield from object_keys(item, fields[key], (*path, key))
    elif code.startswith("[") and isinstance(value, list):
        for index, item in enumerate(value):
            yield from object_keys(item, code[1:], (*path, index))
    elif code.startswith("{") and isinstance(value, dict):
        for key, item in value.items():
            yield from object_keys(item, code[1:], (*path, key))


def rendered(parts: tuple[str | int, ...], code: str) -> str:
    """The path as admission writes it: a map's keys in brackets."""
    out = "spec.replicaSpecs[0].template"
    for part in parts:
        if isinstance(part, int) or code.startswith("{"):
            out += f"[{part}]"
        else:
            out += f".{part}"
        code = _code_below(code, part)
    return out


def _code_below(code: str, part: str | int) -> str:
    if code.startswith("@"):
        return DEFINITIONS[code[1:]][str(part)]
    return code[1:]


def node_at(value: Any, parts: tuple[str | int, ...]) -> Any:
    for part in parts:
        value = value[part]
    return value


def job_with(template: dict[str, Any]) -> dict[str, Any]:
    manifest = JobBuilder("j").replicas("worker", 1, template=template).build()
    defaulted, _ = default_job(manifest)
    return defaulted


def misspell(key: str, how: int, position: int) -> str:
    at = position % (len(key) + 1)
    if how == 0:  # a letter dropped (resouces)
        return key[:at] + key[at + 1 :] if len(key) > 1 else key + "s"
    if how == 1:  # a letter doubled
        return key[:at] + key[at - 1 : at] * 2 + key[at:] if at else key[0] + key
    if how == 2:  # two letters swapped
        return key[:at] + key[at + 1 : at + 2] + key[at : at + 1] + key[at + 2 :]
    return key[0].upper() + key[1:] if how == 3 else key + "s"  # capitalized, or a plural


TEMPLATES = [RICH_TEMPLATE] + [
    r["template"]
    for path in sorted(DATA.glob("*.yaml"))
    for r in yaml.safe_load(path.read_text())["spec"]["replicaSpecs"]
]
KEYS = [
    (index, parts, key, definition)
    for index, template in enumerate(TEMPLATES)
    for parts, key, definition in object_keys(template, "@PodTemplateSpec")
]


def test_every_example_and_the_rich_template_are_accepted() -> None:
    for template in TEMPLATES:
        result = validate(job_with(template))
        assert result.errors == [], template


def test_the_issues_typo_is_refused_with_its_full_path() -> None:
    template = copy.deepcopy(RICH_TEMPLATE)
    container = template["spec"]["containers"][0]
    container["resouces"] = container.pop("resources")
    errors = validate(job_with(template)).errors
    assert [str(e) for e in errors] == [
        "spec.replicaSpecs[0].template.spec.containers[0].resouces: unknown field"
    ]
    assert errors[0].cause == Cause.NOT_SUPPORTED


@settings(max_examples=300, deadline=None)
@given(
    choice=st.integers(min_value=0, max_value=len(KEYS) - 1),
    how=st.integers(min_value=0, max_value=4),
    position=st.integers(min_value=0, max_value=40),
)
def test_a_misspelled_field_anywhere_is_refused_with_its_path(
    choice: int, how: int, position: int
) -> None:
    index, parts, key, definition = KEYS[choice]
    wrong = misspell(key, how, position)
    assume(wrong not in DEFINITIONS[definition])
    template = copy.deepcopy(TEMPLATES[index])
    parent = node_at(template, parts)
    parent[wrong] = parent.pop(key)
    errors = validate(job_with(template)).errors
    path = rendered(parts, "@PodTemplateSpec") + f".{wrong}"
    assert [e for e in errors if e.cause != Cause.REQUIRED] == [
        FieldError(path, "unknown field", Cause.NOT_SUPPORTED)
    ]
    # Only a required field (the spec, the containers, a container's name) can go missing too.
    assert all(e.message == "is required" or "at least one" in e.message for e in errors[:-1])


def scalar(code: str) -> st.SearchStrategy[Any]:
    text = st.text(alphabet="abc-1", min_size=1, max_size=4)
    small = st.integers(min_value=0, max_value=100)
    return {
        "s": text,
        "i": small,
        "b": st.booleans(),
        "n": st.one_of(small, st.floats(min_value=0, max_value=10)),
        "q": st.one_of(text, small, st.floats(min_value=0, max_value=10)),
        "o": st.one_of(text, small),
        "*": st.dictionaries(text, text, max_size=2),
    }[code]


def from_schema(code: str, depth: int) -> st.SearchStrategy[Any]:
    """Any value the schema allows for `code`, some fields of each object, down to `depth`."""
    if code[0] == "[":
        return st.lists(from_schema(code[1:], depth), max_size=2)
    if code[0] == "{":
        return st.dictionaries(scalar("s"), from_schema(code[1:], depth), max_size=2)
    if code[0] != "@":
        return scalar(code)
    fields = DEFINITIONS[code[1:]]
    deep = depth > 0
    allowed = {k: c for k, c in fields.items() if deep or c[-1] in "sibnqo" or c.startswith("{")}
    return st.fixed_dictionaries(
        {}, optional={k: from_schema(c, depth - 1) for k, c in allowed.items()}
    )


@settings(max_examples=150, deadline=None)
@given(pod=from_schema("@PodSpec", 3))
def test_anything_the_pod_schema_allows_is_accepted(pod: dict[str, Any]) -> None:
    assert list(problems(pod, "PodSpec", "spec")) == []


@pytest.mark.parametrize(
    ("field", "value", "path", "message"),
    [
        ("containers", {"name": "x"}, "spec.containers", "must be an array, not object"),
        ("hostNetwork", "yes", "spec.hostNetwork", "must be a boolean, not string"),
        ("priority", 1.5, "spec.priority", "must be an integer, not number"),
        ("nodeSelector", ["a"], "spec.nodeSelector", "must be an object, not array"),
        ("nodeSelector", {"a": 1}, "spec.nodeSelector[a]", "must be a string, not integer"),
        (
            "containers",
            [{"name": "c", "env": [{"name": "A", "value": 1}]}],
            "spec.containers[0].env[0].value",
            "must be a string, not integer",
        ),
        (
            "containers",
            [{"name": "c", "resources": {"limits": {"cpu": True}}}],
            "spec.containers[0].resources.limits[cpu]",
            "must be a quantity (a string or a number), not boolean",
        ),
        (
            "containers",
            [{"name": "c", "args": ["a", 3]}],
            "spec.containers[0].args[1]",
            "must be a string, not integer",
        ),
    ],
)
def test_a_value_of_the_wrong_type_is_refused(
    field: str, value: Any, path: str, message: str
) -> None:
    found = [(p.path, p.message, p.unknown) for p in problems({field: value}, "PodSpec", "spec")]
    assert found == [(path, message, False)]


def test_null_and_free_form_values_are_not_checked() -> None:
    pod = {
        "containers": [{"name": "c", "resources": None, "args": None}],
        "priority": 3.0,  # a JSON decoder's 3
        "overhead": {"cpu": "1"},
    }
    meta: dict[str, Any] = {
        "creationTimestamp": None,
        "managedFields": [{"fieldsV1": {"f:anything": {}}}],
    }
    assert list(problems(pod, "PodSpec", "spec")) == []
    assert list(problems(meta, "ObjectMeta", "metadata")) == []


def test_template_metadata_and_tensorboard_resources_are_checked() -> None:
    template = {"metadata": {"lables": {"a": "b"}}, "spec": RICH_TEMPLATE["spec"]}
    manifest = job_with(template)
    manifest["metadata"]["annotation"] = {}
    manifest["spec"]["tensorboardSpec"] = {
        "image": "tb",
        "trainingLogFilesets": ["t9k://pvc/logs/run"],
        "resources": {"limit": {"cpu": "1"}},
    }
    assert sorted(str(e) for e in validate(manifest).errors) == [
        "metadata.annotation: unknown field",
        "spec.replicaSpecs[0].template.metadata.lables: unknown field",
        "spec.tensorboardSpec.resources.limit: unknown field",
    ]


def test_the_committed_tree_is_what_make_pod_schema_writes() -> None:
    """api/pod_schema.py is the generator's output for the OpenAPI document of the Kubernetes
    version `make cluster` builds (read from the Go module cache that build filled; tests/e2e
    compares the tree with the live apiserver's too)."""
    loader = importlib.machinery.SourceFileLoader(
        "gen_pod_schema", str(ROOT / "tools/gen-pod-schema")
    )
    spec = importlib.util.spec_from_loader("gen_pod_schema", loader)
    assert spec is not None
    generator = importlib.util.module_from_spec(spec)
    loader.exec_module(generator)
    version = generator.kubernetes_version()
    assert version == pod_schema.KUBERNETES_VERSION
    cache = Path(os.environ.get("GOMODCACHE") or Path.home() / "go" / "pkg" / "mod")
    document = cache / f"k8s.io/kubernetes@{version}/api/openapi-spec/v3/api__v1_openapi.json"
    assert document.exists(), f"{document} is absent: `make cluster` downloads it"
    tree = generator.reduce_document(json.loads(document.read_text()))
    committed = (ROOT / "services/torchjob/api/pod_schema.py").read_text()
    assert generator.render(version, tree) == committed
