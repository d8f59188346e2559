"""The generated API model decodes every documented manifest, names the field of every bad value,
and encodes back exactly what it was given."""

from __future__ import annotations

import importlib
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from torchjob.api import kubeflow_types, types
from torchjob.api.model import (
    FieldInfo,
    Model,
    ModelError,
    child,
    decode_boolean,
    decode_enum,
    decode_int32,
    decode_int64,
    decode_int_or_string,
    decode_object,
    decode_string,
    expect_object,
    json_type,
    model_of,
)
from torchjob.api.types import PyTorchTrainingJob

ROOT = Path(__file__).parents[2]
T9K_MANIFESTS = sorted((ROOT / "tests" / "data" / "t9k").glob("*.yaml"))


def load(path: Path) -> dict[str, Any]:
    data = yaml.safe_load(path.read_text())
    assert isinstance(data, dict)
    return data


@pytest.mark.parametrize("path", T9K_MANIFESTS, ids=lambda p: p.stem)
def test_t9k_manifest_round_trips_unchanged(path: Path) -> None:
    manifest = load(path)
    job = PyTorchTrainingJob.from_dict(manifest)
    assert job.to_dict() == manifest


def test_all_t9k_manifests_are_present() -> None:
    assert {p.stem for p in T9K_MANIFESTS} == {
        "basic",
        "best-practice",
        "debug-custom",
        "debug-default",
        "newer-spelling-elastic",
        "python-module",
        "scheduler-tensorboard",
        "torchrun",
    }


def test_typed_access_to_both_spellings() -> None:
    older = PyTorchTrainingJob.from_dict(load(T9K_MANIFESTS[-1]))
    assert older.spec and older.spec.torchrun_config
    assert older.spec.torchrun_config.enable is True
    assert older.spec.torchrun_config.enabled is None
    newer = PyTorchTrainingJob.from_dict(
        load(next(p for p in T9K_MANIFESTS if p.stem == "newer-spelling-elastic"))
    )
    assert newer.spec and newer.spec.elastic and newer.spec.torchrun_config
    assert newer.spec.torchrun_config.enabled is True
    assert (newer.spec.elastic.min_replicas, newer.spec.elastic.max_replicas) == (2, 4)


def spec_with(replica: dict[str, Any], **spec: Any) -> dict[str, Any]:
    template = {"spec": {"containers": [{"name": "python", "image": "i"}]}}
    return {"spec": {"replicaSpecs": [{"type": "worker", "template": template, **replica}], **spec}}


@pytest.mark.parametrize(
    ("manifest", "path", "message"),
    [
        (spec_with({"replicas": "four"}), "spec.replicaSpecs[0].replicas", "must be an integer"),
        (spec_with({"replicas": True}), "spec.replicaSpecs[0].replicas", "not boolean"),
        (spec_with({"replicas": 2**40}), "spec.replicaSpecs[0].replicas", "must fit in int32"),
        (
            spec_with({"restartPolicy": "Sometimes"}),
            "spec.replicaSpecs[0].restartPolicy",
            "must be one of Never, OnFailure, Always, ExitCode",
        ),
        (
            spec_with({}, torchrunConfig={"rdzvBackend": "zk"}),
            "spec.torchrunConfig.rdzvBackend",
            "must be one of c10d, etcd, etcd-v2",
        ),
        (
            spec_with({}, torchrunConfig={"extraOptions": "--x"}),
            "spec.torchrunConfig.extraOptions",
            "must be an array",
        ),
        (
            spec_with({}, torchrunConfig={"extraOptions": ["--x", 3]}),
            "spec.torchrunConfig.extraOptions[1]",
            "must be a string",
        ),
        (spec_with({"template": []}), "spec.replicaSpecs[0].template", "must be an object"),
        ({"spec": "x"}, "spec", "must be an object, not string"),
        (
            spec_with({}, scheduler={"t9kScheduler": {"priority": "high"}}),
            "spec.scheduler.t9kScheduler.priority",
            "must be an integer, not string",
        ),
    ],
)
def test_bad_value_names_its_field(manifest: dict[str, Any], path: str, message: str) -> None:
    with pytest.raises(ModelError) as caught:
        PyTorchTrainingJob.from_dict(manifest)
    assert caught.value.path == path
    assert message in caught.value.message
    assert str(caught.value).startswith(path + ": ")


def test_root_that_is_not_an_object_is_named() -> None:
    with pytest.raises(ModelError, match=r"^<root>: must be an object, not array"):
        PyTorchTrainingJob.from_dict([])


def test_null_means_absent() -> None:
    job = PyTorchTrainingJob.from_dict(spec_with({"replicas": None}))
    assert job.spec and job.spec.replica_specs
    assert job.spec.replica_specs[0].replicas is None


def test_whole_float_is_an_integer() -> None:
    job = PyTorchTrainingJob.from_dict(spec_with({"replicas": 3.0}))
    assert job.spec and job.spec.replica_specs
    assert job.spec.replica_specs[0].replicas == 3


def test_unknown_fields_are_kept_everywhere() -> None:
    manifest = spec_with({"futureField": {"a": 1}}, futureSpec=[1, 2])
    manifest["spec"]["replicaSpecs"][0]["template"]["spec"]["nodeSelector"] = {"gpu": "a100"}
    assert PyTorchTrainingJob.from_dict(manifest).to_dict() == manifest


def test_pod_template_is_kept_as_written_not_copied_field_by_field() -> None:
    manifest = spec_with({})
    job = PyTorchTrainingJob.from_dict(manifest)
    assert job.spec and job.spec.replica_specs
    template = job.spec.replica_specs[0].template
    assert template is not None
    assert template.spec == manifest["spec"]["replicaSpecs"][0]["template"]["spec"]


def test_defaults_are_declared_in_the_model() -> None:
    def default_of(model: type[Model], attr: str) -> Any:
        return next(f.default for f in model.FIELDS if f.attr == attr)

    assert default_of(types.ReplicaSpec, "replicas") == 1
    assert default_of(types.ReplicaSpec, "restart_policy") == "OnFailure"
    assert default_of(types.RunPolicy, "backoff_limit") == 3
    assert default_of(types.RunPolicy, "clean_up_policy") == "None"
    assert default_of(types.TorchrunConfig, "proc_per_node") == "1"
    assert default_of(types.TorchrunConfig, "rdzv_backend") == "c10d"
    assert default_of(types.TorchrunConfig, "max_restarts") == 0
    assert default_of(types.DebugReplicaSpec, "command") == ["sleep", "inf"]


# --- properties ---------------------------------------------------------------------------

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=30,
)


def valid_value(owner: type[Model], info: FieldInfo, depth: int) -> st.SearchStrategy[Any]:
    item: st.SearchStrategy[Any]
    if info.kind == "message":
        item = valid_object(model_of(owner, info.ref), depth + 1)
    elif info.kind == "object":
        item = st.dictionaries(st.text(max_size=6), JSON, max_size=3)
    elif info.kind == "enum":
        item = st.sampled_from(info.values)
    elif info.kind == "boolean":
        item = st.booleans()
    elif info.kind == "string":
        item = st.text(max_size=12)
    elif info.kind == "intOrString":
        item = st.text(max_size=6) | st.integers(min_value=0, max_value=2**40)
    else:
        item = st.integers(min_value=-(2**31), max_value=2**31 - 1)
    if info.map:
        return st.dictionaries(st.text(max_size=6), item, max_size=3)
    return st.lists(item, max_size=3) if info.repeated else item


def valid_object(model: type[Model], depth: int = 0) -> st.SearchStrategy[dict[str, Any]]:
    if depth > 6:
        return st.just({})
    optional = {f.key: valid_value(model, f, depth) for f in model.FIELDS}
    return st.fixed_dictionaries({}, optional=optional)


@settings(max_examples=200, deadline=None)
@given(valid_object(PyTorchTrainingJob))
def test_any_schema_conforming_object_round_trips(manifest: dict[str, Any]) -> None:
    assert PyTorchTrainingJob.from_dict(manifest).to_dict() == manifest


@settings(max_examples=200, deadline=None)
@given(valid_object(kubeflow_types.PyTorchJob))
def test_any_schema_conforming_kubeflow_object_round_trips(manifest: dict[str, Any]) -> None:
    assert kubeflow_types.PyTorchJob.from_dict(manifest).to_dict() == manifest


@settings(max_examples=300, deadline=None)
@given(JSON)
def test_arbitrary_json_decodes_or_fails_with_a_named_field(value: Any) -> None:
    for candidate in (value, {"spec": value}, {"spec": {"replicaSpecs": value}}):
        try:
            PyTorchTrainingJob.from_dict(candidate)
        except ModelError as error:
            assert error.message


@settings(max_examples=300, deadline=None)
@given(JSON)
def test_arbitrary_json_decodes_as_kubeflow_or_fails_with_a_named_field(value: Any) -> None:
    for candidate in (value, {"spec": value}, {"spec": {"pytorchReplicaSpecs": value}}):
        try:
            kubeflow_types.PyTorchJob.from_dict(candidate)
        except ModelError as error:
            assert error.message


def reference_decode(model: type[Model], data: object, path: str = "") -> Model:
    """The decoding each generated decoder must match: the FIELDS table walked for every key of
    the object, in the object's order, nulls taken as absent, unknown keys kept in `extra`."""
    obj = expect_object(data, path)
    by_key = {info.key: info for info in model.FIELDS}
    values: dict[str, Any] = {}
    extra: dict[str, Any] = {}
    for key, raw in obj.items():
        info = by_key.get(key)
        if info is None:
            extra[key] = raw
        elif raw is not None:
            values[info.attr] = reference_field(model, info, raw, child(path, key))
    return model(**values, extra=extra)


def reference_field(owner: type[Model], info: FieldInfo, raw: object, path: str) -> Any:
    if info.map:
        entries = expect_object(raw, path)
        return {k: reference_value(owner, info, v, child(path, k)) for k, v in entries.items()}
    if not info.repeated:
        return reference_value(owner, info, raw, path)
    if not isinstance(raw, list):
        raise ModelError(path, f"must be an array, not {json_type(raw)}")
    return [reference_value(owner, info, item, child(path, i)) for i, item in enumerate(raw)]


SCALAR_DECODERS = {
    "string": decode_string,
    "boolean": decode_boolean,
    "object": decode_object,
    "int32": decode_int32,
    "int64": decode_int64,
    "intOrString": decode_int_or_string,
}


def reference_value(owner: type[Model], info: FieldInfo, raw: object, path: str) -> Any:
    if info.kind == "message":
        return reference_decode(model_of(owner, info.ref), raw, path)
    if info.kind == "enum":
        return decode_enum(raw, info.values, path)
    return SCALAR_DECODERS[info.kind](raw, path)


def perturbed_object(model: type[Model], depth: int = 0) -> st.SearchStrategy[dict[str, Any]]:
    """An object of `model` whose fields may hold any JSON value, and keys the schema lacks."""
    if depth > 4:
        return st.just({})
    optional = {
        f.key: (
            perturbed_object(model_of(model, f.ref), depth + 1)
            if f.kind == "message" and not (f.repeated or f.map)
            else valid_value(model, f, depth + 2)
        )
        | JSON
        for f in model.FIELDS
    }
    unknown = st.dictionaries(st.sampled_from(["x", "Spec", "replicas ", ""]), JSON, max_size=2)
    return st.tuples(st.fixed_dictionaries({}, optional=optional), unknown).map(
        lambda parts: {**parts[1], **parts[0]}
    )


def decoded_or_error(decode: Any, data: object) -> Any:
    try:
        return decode(data)
    except ModelError as error:
        return (error.path, error.message)


@settings(max_examples=400, deadline=None)
@given(st.data())
def test_generated_decoders_decode_as_the_fields_table_says(data: st.DataObject) -> None:
    for model in (PyTorchTrainingJob, kubeflow_types.PyTorchJob, types.ReplicaSpec):
        value = data.draw(perturbed_object(model) | JSON)
        generated = decoded_or_error(model.from_dict, value)
        reference = decoded_or_error(lambda v, m=model: reference_decode(m, v), value)
        assert generated == reference


# --- Kubeflow's PyTorchJob ----------------------------------------------------------------

KUBEFLOW_JOB: dict[str, Any] = {
    "apiVersion": "kubeflow.org/v1",
    "kind": "PyTorchJob",
    "metadata": {"name": "mnist", "namespace": "kubeflow"},
    "spec": {
        "runPolicy": {"cleanPodPolicy": "None", "suspend": False},
        "nprocPerNode": "auto",
        "elasticPolicy": {"rdzvConf": [{"key": "timeout", "value": "900"}], "metrics": [{}]},
        "pytorchReplicaSpecs": {
            "Master": {
                "replicas": 1,
                "restartPolicy": "OnFailure",
                "template": {
                    "spec": {"containers": [{"name": "pytorch", "image": "i", "args": ["x"]}]}
                },
            },
            "Worker": {
                "replicas": 2,
                "restartPolicy": "ExitCode",
                "template": {"spec": {"containers": [{"name": "pytorch", "image": "i"}]}},
            },
        },
    },
    "status": {
        "conditions": [{"type": "Created", "status": "True", "reason": "PyTorchJobCreated"}],
        "replicaStatuses": {"Master": {"active": 1}, "Worker": {"active": 2, "selector": "a=b"}},
        "startTime": "2024-01-01T00:00:00Z",
        "torchjob": {"phase": "Running", "tasks": [{"type": "worker"}]},
    },
}


def test_kubeflow_values_only_its_webhook_refuses_are_decoded() -> None:
    """Kubeflow's CRD has no enums: a value its webhook refuses is still an object of the API."""
    manifest = kubeflow_with({"restartPolicy": "Sometimes"})
    manifest["spec"]["runPolicy"] = {"cleanPodPolicy": "Unfinished"}
    manifest["spec"]["runPolicy"]["schedulingPolicy"] = {"minResources": {"cpu": 4, "mem": "1Gi"}}
    assert kubeflow_types.PyTorchJob.from_dict(manifest).to_dict() == manifest


def test_kubeflow_job_decodes_maps_into_typed_messages_and_round_trips() -> None:
    job = kubeflow_types.PyTorchJob.from_dict(KUBEFLOW_JOB)
    assert job.spec and job.spec.pytorch_replica_specs
    worker = job.spec.pytorch_replica_specs["Worker"]
    assert isinstance(worker, kubeflow_types.ReplicaSpec)
    assert (worker.replicas, worker.restart_policy) == (2, "ExitCode")
    assert list(job.spec.pytorch_replica_specs) == ["Master", "Worker"]
    assert job.status and job.status.replica_statuses
    assert job.status.replica_statuses["Worker"].selector == "a=b"
    assert job.status.torchjob == KUBEFLOW_JOB["status"]["torchjob"]
    assert job.to_dict() == KUBEFLOW_JOB


def test_same_class_names_in_two_apis_resolve_within_their_module() -> None:
    assert kubeflow_types.ReplicaSpec.__module__ != types.ReplicaSpec.__module__
    assert model_of(kubeflow_types.PyTorchJobSpec, "ReplicaSpec") is kubeflow_types.ReplicaSpec
    assert model_of(types.PyTorchTrainingJobSpec, "ReplicaSpec") is types.ReplicaSpec
    batch = PyTorchTrainingJob.from_dict(spec_with({"replicas": 2}))
    assert batch.spec and batch.spec.replica_specs
    assert isinstance(batch.spec.replica_specs[0], types.ReplicaSpec)
    assert isinstance(batch.spec.run_policy or types.RunPolicy(), types.RunPolicy)


def kubeflow_with(replica: Any) -> dict[str, Any]:
    return {"spec": {"pytorchReplicaSpecs": {"Master": replica}}}


@pytest.mark.parametrize(
    ("manifest", "path", "message"),
    [
        (kubeflow_with({"replicas": "one"}), "spec.pytorchReplicaSpecs.Master.replicas", "integer"),
        (
            kubeflow_with({"restartPolicy": 1}),
            "spec.pytorchReplicaSpecs.Master.restartPolicy",
            "must be a string, not integer",
        ),
        (kubeflow_with([]), "spec.pytorchReplicaSpecs.Master", "must be an object, not array"),
        (
            {"spec": {"pytorchReplicaSpecs": [{"replicas": 1}]}},
            "spec.pytorchReplicaSpecs",
            "must be an object, not array",
        ),
        (
            {"spec": {"runPolicy": {"schedulingPolicy": {"minResources": {"cpu": True}}}}},
            "spec.runPolicy.schedulingPolicy.minResources.cpu",
            "must be an integer or a string, not boolean",
        ),
        (
            {"status": {"replicaStatuses": {"Worker": {"active": "2"}}}},
            "status.replicaStatuses.Worker.active",
            "must be an integer, not string",
        ),
    ],
)
def test_bad_kubeflow_value_names_its_field(
    manifest: dict[str, Any], path: str, message: str
) -> None:
    with pytest.raises(ModelError) as caught:
        kubeflow_types.PyTorchJob.from_dict(manifest)
    assert caught.value.path == path
    assert message in caught.value.message


def test_kubeflow_defaults_are_only_those_of_kubeflows_crd() -> None:
    defaults = {
        (model.__name__, info.attr): info.default
        for model in vars(kubeflow_types).values()
        if isinstance(model, type) and issubclass(model, Model) and model is not Model
        for info in model.FIELDS
        if info.default is not None
    }
    assert defaults == {("RunPolicy", "suspend"): False}


# --- shapes proto/ does not use yet, through the code generator -----------------------------


def generated_module(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, messages: dict[str, list[Any]]
) -> Any:
    """The Python model tools/codegen writes for `messages` (message name -> its fields, each
    (name, json_name, kind, ref, repeated, map); the first message is the resource), imported
    from a file. Enum `Phase` (values A and B) is declared for any field to use."""
    monkeypatch.syspath_prepend(str(ROOT / "tools"))
    schema_module = importlib.import_module("codegen.schema")
    options = importlib.import_module("codegen.schema_options_pb2")
    python_model = importlib.import_module("codegen.python_model")
    resource = options.Resource(group="example.dev", version="v1", kind="Tree", plural="trees")
    schema = schema_module.Schema(source="example/tree.proto", doc="")
    schema.enums["Phase"] = schema_module.EnumType("Phase", "", [("A", ""), ("B", "")])
    for index, (message, fields) in enumerate(messages.items()):
        schema.messages[message] = schema_module.Message(
            message,
            "",
            [
                schema_module.Field(
                    name, json_name, "", kind, ref, repeated, options.FieldSchema(), map=is_map
                )
                for name, json_name, kind, ref, repeated, is_map in fields
            ],
            options.MessageSchema(),
            resource if index == 0 else None,
        )
    (tmp_path / f"{name}.py").write_text(python_model.render(schema))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, name, raising=False)
    return importlib.import_module(name)


def test_map_of_strings_decodes_names_bad_values_and_round_trips(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    labels = ("labels", "labels", "string", None, False, True)
    module = generated_module(tmp_path, monkeypatch, "labelled_types", {"Labelled": [labels]})
    labelled = module.Labelled
    manifest = {"labels": {"a": "1", "b.c/d": "2"}, "other": 3}
    assert labelled.from_dict(manifest).labels == {"a": "1", "b.c/d": "2"}
    assert labelled.from_dict(manifest).to_dict() == manifest
    with pytest.raises(ModelError) as caught:
        labelled.from_dict({"labels": {"a": 1}})
    assert caught.value.path == "labels.a"


def test_a_message_that_holds_its_own_kind_decodes_at_any_depth(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fields = [
        ("name", "name", "string", None, False, False),
        ("children", "children", "message", "Tree", True, False),
    ]
    tree = generated_module(tmp_path, monkeypatch, "tree_types", {"Tree": fields}).Tree
    data = {"name": "a", "children": [{"name": "b", "children": [{"name": "c", "x": 1}]}]}
    assert tree.from_dict(data).to_dict() == data
    with pytest.raises(ModelError) as error:
        tree.from_dict({"children": [{"children": [{"name": 3}]}]})
    assert error.value.path == "children[0].children[0].name"


def test_arrays_and_maps_of_an_enum_name_the_bad_item(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fields = [
        ("phases", "phases", "enum", "Phase", True, False),
        ("by_name", "byName", "enum", "Phase", False, True),
    ]
    module = generated_module(tmp_path, monkeypatch, "phases_types", {"Phases": fields})
    manifest = {"phases": ["A", "B"], "byName": {"x": "B"}}
    assert module.Phases.from_dict(manifest).to_dict() == manifest
    with pytest.raises(ModelError, match=r"^phases\[1\]: must be one of A, B, not 'C'$"):
        module.Phases.from_dict({"phases": ["A", "C"]})
    with pytest.raises(ModelError, match=r"^byName\.x: must be a string, not integer$"):
        module.Phases.from_dict({"byName": {"x": 1}})


def test_a_class_without_a_generated_decoder_says_so() -> None:
    @dataclass(slots=True)
    class Handwritten(Model):
        name: str | None = None
        extra: dict[str, Any] = field(default_factory=dict)

    with pytest.raises(NotImplementedError, match="Handwritten has no generated decoder"):
        Handwritten.from_dict({"name": "a"})
