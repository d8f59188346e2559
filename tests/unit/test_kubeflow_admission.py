"""Admission of Kubeflow's PyTorchJob: Kubeflow's defaults as a patch, its webhook's rules with
their field paths, torchjob's own rules mapped back to the PyTorchJob's fields, the update rules,
and every field of Kubeflow v1.9's schema either honoured or refused as not supported."""

from __future__ import annotations

import base64
import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from support.webhook import KUBEFLOW_JOB, RECONCILER, kubeflow_replica_pod, review

from torchjob.api import constants
from torchjob.api.admission import handle
from torchjob.api.field_errors import Cause, Result
from torchjob.api.kubeflow import as_run, scheduling_policy
from torchjob.api.kubeflow_admission import (
    UNSUPPORTED,
    default_pytorchjob,
    mutate_pytorchjob,
    validate_pytorchjob,
    validate_pytorchjob_request,
)
from torchjob.api.types import PyTorchTrainingJobSpec
from torchjob.render.kubeflow import kubeflow_env, render_autoscaler
from torchjob.render.pod_admission_handler import mutate_pod
from torchjob.render.scheduling import Gang, render_pod_group, with_scheduling_policy
from torchjob.render.topology import DEFAULT_MASTER_PORT as MASTER_PORT
from torchjob.render.topology import replicas_of

DATA = Path(__file__).parent.parent / "data" / "kubeflow"
# Every field path of the PyTorchJob CRD of Kubeflow's training-operator v1.9
# (manifests/base/crds/kubeflow.org_pytorchjobs.yaml), with its type and notes; what lies below a
# replica's `template` (a core/v1 PodTemplateSpec) and the items of `elasticPolicy.metrics`
# (autoscaling/v2 MetricSpecs) are left out.
FIELDS = DATA / "pytorchjob-v1.9-fields.txt"
# The seed manifests: Kubeflow's simple example, as written, as applied to a namespace, and as
# `kubectl get -o yaml` shows it once it has run.
SEEDS = ("pytorch-simple.yaml", "pytorch-simple-namespaced.yaml", "pytorch-simple-stored.yaml")


def container(name: str = "pytorch", image: str = "i") -> dict[str, Any]:
    return {"name": name, "image": image, "command": ["python3", "t.py"]}


def replica(replicas: int | None = 1, **extra: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"template": {"spec": {"containers": [container()]}}, **extra}
    if replicas is not None:
        out["replicas"] = replicas
    return out


def pytorchjob(**spec: Any) -> dict[str, Any]:
    """A PyTorchJob with a Master and two Workers, `spec` merged over its spec."""
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": "j", "namespace": "ns"},
        "spec": {"pytorchReplicaSpecs": {"Master": replica(), "Worker": replica(2)}, **spec},
    }


def admitted(job: dict[str, Any], old: dict[str, Any] | None = None) -> Result:
    new, _ = default_pytorchjob(job)
    previous = default_pytorchjob(old)[0] if old is not None else None
    return validate_pytorchjob(new, previous)


def paths(result: Result) -> set[str]:
    return {e.path for e in result.errors}


def apply_patch(doc: Any, patch: list[dict[str, Any]]) -> Any:
    """RFC 6902 `add` and `remove` on objects (what defaulting writes), on a copy of `doc`."""
    doc = copy.deepcopy(doc)
    for op in patch:
        parts = [p.replace("~1", "/").replace("~0", "~") for p in op["path"].split("/")[1:]]
        parent = doc
        for part in parts[:-1]:
            parent = parent[part]
        if op["op"] == "add":
            parent[parts[-1]] = copy.deepcopy(op["value"])
        elif op["op"] == "remove":
            del parent[parts[-1]]
        else:
            raise AssertionError(f"unexpected op {op}")
    return doc


# --- defaults ------------------------------------------------------------------------------------


def test_defaults_fill_kubeflows_values() -> None:
    job = pytorchjob()
    job["spec"]["pytorchReplicaSpecs"] = {"Master": replica(None), "Worker": replica(None)}
    out, patch = default_pytorchjob(job)
    spec = out["spec"]
    assert spec["runPolicy"] == {"cleanPodPolicy": "None", "suspend": False}
    assert spec["nprocPerNode"] == "auto"
    for kind in ("Master", "Worker"):
        assert spec["pytorchReplicaSpecs"][kind]["replicas"] == 1
        assert spec["pytorchReplicaSpecs"][kind]["restartPolicy"] == "OnFailure"
    assert apply_patch(job, patch) == out
    assert {op["op"] for op in patch} == {"add"}
    assert job["spec"].get("runPolicy") is None  # not in place: the input is left as it was


def test_defaults_keep_what_is_written_and_add_no_port() -> None:
    job = pytorchjob(runPolicy={"cleanPodPolicy": "All", "suspend": True}, nprocPerNode="4")
    job["spec"]["pytorchReplicaSpecs"]["Worker"]["restartPolicy"] = "Never"
    out, patch = default_pytorchjob(job)
    assert out["spec"]["runPolicy"] == {"cleanPodPolicy": "All", "suspend": True}
    assert out["spec"]["nprocPerNode"] == "4"
    assert out["spec"]["pytorchReplicaSpecs"]["Worker"]["restartPolicy"] == "Never"
    assert patch == [
        {
            "op": "add",
            "path": "/spec/pytorchReplicaSpecs/Master/restartPolicy",
            "value": "OnFailure",
        }
    ]
    containers = out["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"]
    assert "ports" not in containers[0]  # the pod webhook gives the pod its port


@pytest.mark.parametrize(
    ("elastic", "bounds"),
    [
        ({}, (2, 2)),  # from the Worker replicas
        ({"minReplicas": 1}, (1, 1)),
        ({"maxReplicas": 4}, (4, 4)),
        ({"minReplicas": 1, "maxReplicas": 4}, (1, 4)),
    ],
)
def test_elastic_bounds_are_filled_from_each_other_or_the_workers(
    elastic: dict[str, Any], bounds: tuple[int, int]
) -> None:
    out, patch = default_pytorchjob(pytorchjob(elasticPolicy=elastic))
    policy = out["spec"]["elasticPolicy"]
    assert (policy["minReplicas"], policy["maxReplicas"]) == bounds
    assert apply_patch(pytorchjob(elasticPolicy=elastic), patch) == out


def test_nproc_per_node_is_not_defaulted_beside_the_deprecated_field() -> None:
    out, _ = default_pytorchjob(pytorchjob(elasticPolicy={"nProcPerNode": 2}))
    assert "nprocPerNode" not in out["spec"]
    out, _ = default_pytorchjob(pytorchjob(elasticPolicy={}))
    assert out["spec"]["nprocPerNode"] == "auto"


def test_replica_types_are_renamed_case_insensitively() -> None:
    job = pytorchjob()
    specs = job["spec"]["pytorchReplicaSpecs"]
    job["spec"]["pytorchReplicaSpecs"] = {"master": specs["Master"], "WORKER": specs["Worker"]}
    out, patch = default_pytorchjob(job)
    assert set(out["spec"]["pytorchReplicaSpecs"]) == {"Master", "Worker"}
    assert {"op": "remove", "path": "/spec/pytorchReplicaSpecs/master"} in patch
    assert {"op": "remove", "path": "/spec/pytorchReplicaSpecs/WORKER"} in patch
    assert apply_patch(job, patch) == out
    assert admitted(job).allowed


def test_defaulting_twice_adds_nothing() -> None:
    job = pytorchjob(elasticPolicy={})
    job["spec"]["pytorchReplicaSpecs"] = {"worker": replica(None)}
    once, _ = default_pytorchjob(job)
    twice, patch = default_pytorchjob(once)
    assert patch == []
    assert twice == once


def test_mutate_returns_the_defaults_as_a_patch() -> None:
    response = handle(review(pytorchjob()), mutate_pytorchjob)["response"]
    assert response["allowed"] is True
    patch = json.loads(base64.b64decode(response["patch"]))
    assert {"op": "add", "path": "/spec/nprocPerNode", "value": "auto"} in patch


# --- Kubeflow's rules ----------------------------------------------------------------------------


def test_the_seed_manifests_are_accepted_after_defaulting() -> None:
    for name in SEEDS:
        job = yaml.safe_load((DATA / name).read_text())
        result = admitted(job)
        assert result.allowed, (name, result.errors)


def test_a_lower_case_master_without_replicas_is_accepted() -> None:
    job = pytorchjob()
    job["spec"]["pytorchReplicaSpecs"] = {"master": replica(None), "worker": replica(2)}
    assert admitted(job).allowed


@pytest.mark.parametrize(
    ("change", "path", "cause", "words"),
    [
        (
            lambda j: j["metadata"].update(name="My_Job"),
            "metadata.name",
            Cause.INVALID,
            "DNS-1035",
        ),
        (
            lambda j: j["spec"].update(runPolicy={"managedBy": "someone/else"}),
            "spec.runPolicy.managedBy",
            Cause.NOT_SUPPORTED,
            "kueue.x-k8s.io/multikueue",
        ),
        (
            lambda j: j["spec"].update(
                elasticPolicy={"maxReplicas": 2},
                pytorchReplicaSpecs={"Master": replica()},
            ),
            "spec.pytorchReplicaSpecs.Worker",
            Cause.REQUIRED,
            "elastic policy",
        ),
        (
            lambda j: j["spec"].update(elasticPolicy={"nProcPerNode": 2}, nprocPerNode="4"),
            "spec.elasticPolicy.nProcPerNode",
            Cause.FORBIDDEN,
            "spec.nprocPerNode",
        ),
        (
            lambda j: j["spec"]["pytorchReplicaSpecs"].update(Launcher=replica()),
            "spec.pytorchReplicaSpecs.Launcher",
            Cause.NOT_SUPPORTED,
            "Master, Worker",
        ),
        (
            lambda j: j["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"].update(
                containers=[]
            ),
            "spec.pytorchReplicaSpecs.Worker.template.spec.containers",
            Cause.REQUIRED,
            "must be specified",
        ),
        (
            lambda j: j["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"].update(
                containers=[container(image="")]
            ),
            "spec.pytorchReplicaSpecs.Worker.template.spec.containers[0].image",
            Cause.REQUIRED,
            "required",
        ),
        (
            lambda j: j["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"].update(
                containers=[container(name="trainer")]
            ),
            "spec.pytorchReplicaSpecs.Worker.template.spec.containers",
            Cause.REQUIRED,
            "'pytorch'",
        ),
        (
            lambda j: j["spec"]["pytorchReplicaSpecs"]["Master"].update(replicas=2),
            "spec.pytorchReplicaSpecs.Master.replicas",
            Cause.FORBIDDEN,
            "must be 1",
        ),
        (
            lambda j: j["spec"]["pytorchReplicaSpecs"]["Worker"].update(replicas=0),
            "spec.pytorchReplicaSpecs.Worker.replicas",
            Cause.FORBIDDEN,
            "at least 1",
        ),
        (
            lambda j: j["spec"].update(pytorchReplicaSpecs={}),
            "spec.pytorchReplicaSpecs",
            Cause.REQUIRED,
            "required",
        ),
    ],
)
def test_kubeflow_rules_name_their_field(change: Any, path: str, cause: Cause, words: str) -> None:
    job = pytorchjob()
    change(job)
    result = admitted(job)
    errors = [e for e in result.errors if e.path == path]
    assert errors, result.errors
    assert errors[0].cause == cause
    assert words in errors[0].message
    assert paths(result) == {path}  # torchjob's own rules say nothing more of it


def test_both_managers_are_accepted() -> None:
    for manager in ("kubeflow.org/training-operator", "kueue.x-k8s.io/multikueue"):
        assert admitted(pytorchjob(runPolicy={"managedBy": manager})).allowed


def test_the_deprecated_nproc_per_node_is_a_warning() -> None:
    result = admitted(pytorchjob(elasticPolicy={"nProcPerNode": 2}))
    assert result.allowed
    assert result.warnings == [
        "spec.elasticPolicy.nProcPerNode is deprecated, use spec.nprocPerNode instead"
    ]


def test_a_malformed_field_is_refused_by_its_path() -> None:
    job = pytorchjob()
    job["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] = "two"
    assert paths(admitted(job)) == {"spec.pytorchReplicaSpecs.Worker.replicas"}


def test_unknown_fields_are_refused() -> None:
    job = pytorchjob(elasticPolicy={"rdzvConf": [{"key": "k", "value": "v", "x": 1}]}, typo=1)
    job["spec"]["pytorchReplicaSpecs"]["Worker"]["replica"] = 3
    job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["imag"] = "i"
    job["extra"] = True
    result = admitted(job)
    assert paths(result) == {
        "extra",
        "spec.typo",
        "spec.elasticPolicy.rdzvConf[0].x",
        "spec.pytorchReplicaSpecs.Worker.replica",
        "spec.pytorchReplicaSpecs.Worker.template.spec.containers[0].imag",
    }
    assert {e.message for e in result.errors} == {"unknown field"}


# --- torchjob's own rules, mapped back -----------------------------------------------------------


def test_a_name_too_long_for_its_labels_is_refused() -> None:
    job = pytorchjob()
    job["metadata"]["name"] = "j" * 60  # a DNS-1035 label, but j...j-worker-1 is not
    result = admitted(job)
    assert paths(result) == {"spec.pytorchReplicaSpecs.Master", "spec.pytorchReplicaSpecs.Worker"}
    assert "must fit in 63" in result.errors[0].message


def test_a_template_problem_is_refused_at_the_pytorchjobs_path() -> None:
    job = pytorchjob()
    containers = job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"]
    containers[0]["ports"] = [{"containerPort": "http"}]
    result = admitted(job)
    assert result.errors
    assert all(
        e.path.startswith("spec.pytorchReplicaSpecs.Worker.template.spec.containers[0].ports")
        for e in result.errors
    )


def test_elastic_bounds_out_of_order_are_refused() -> None:
    result = admitted(pytorchjob(elasticPolicy={"minReplicas": 3, "maxReplicas": 2}))
    assert paths(result) == {"spec.elasticPolicy.minReplicas"}


def test_an_elastic_job_needs_no_torchrun_config() -> None:
    assert admitted(pytorchjob(elasticPolicy={"minReplicas": 1, "maxReplicas": 3})).allowed


def test_validate_answers_with_kubeflows_kind_and_every_cause() -> None:
    job = pytorchjob()
    job["spec"]["pytorchReplicaSpecs"]["Master"]["replicas"] = 3
    job["spec"]["runPolicy"] = {"managedBy": "me"}
    response = handle(review(job), validate_pytorchjob_request)["response"]
    assert response["allowed"] is False
    status = response["status"]
    assert status["code"] == 422
    assert status["message"].startswith("PyTorchJob ns/j is invalid: ")
    assert {c["field"] for c in status["details"]["causes"]} == {
        "spec.pytorchReplicaSpecs.Master.replicas",
        "spec.runPolicy.managedBy",
    }
    allowed = handle(review(pytorchjob()), validate_pytorchjob_request)["response"]
    assert allowed["allowed"] is True


# --- updates -------------------------------------------------------------------------------------


def test_managed_by_is_immutable() -> None:
    old = pytorchjob(runPolicy={"managedBy": "kubeflow.org/training-operator"})
    new = pytorchjob(runPolicy={"managedBy": "kueue.x-k8s.io/multikueue"})
    assert paths(admitted(new, old)) == {"spec.runPolicy.managedBy"}
    assert paths(admitted(pytorchjob(), old)) == {"spec.runPolicy.managedBy"}
    assert admitted(old, old).allowed


def test_the_queue_is_immutable() -> None:
    old = pytorchjob(runPolicy={"schedulingPolicy": {"queue": "a"}})
    new = pytorchjob(runPolicy={"schedulingPolicy": {"queue": "b"}})
    result = admitted(new, old)
    assert paths(result) == {"spec.runPolicy.schedulingPolicy.queue"}
    assert "immutable" in result.errors[0].message
    assert admitted(old, old).allowed


def test_a_replica_template_change_is_refused() -> None:
    old = pytorchjob()
    new = pytorchjob()
    new["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["image"] = (
        "other"
    )
    result = admitted(new, old)
    assert paths(result) == {"spec.pytorchReplicaSpecs"}
    assert "is immutable" in result.errors[0].message


def test_the_workers_of_an_elastic_job_may_be_scaled() -> None:
    old = pytorchjob(elasticPolicy={"minReplicas": 1, "maxReplicas": 4})
    new = copy.deepcopy(old)
    new["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] = 4
    assert admitted(new, old).allowed
    fixed = pytorchjob()
    scaled = copy.deepcopy(fixed)
    scaled["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] = 4
    assert paths(admitted(scaled, fixed)) == {"spec.pytorchReplicaSpecs"}


def test_elastic_bounds_are_immutable() -> None:
    old = pytorchjob(elasticPolicy={"minReplicas": 1, "maxReplicas": 4})
    new = pytorchjob(elasticPolicy={"minReplicas": 1, "maxReplicas": 5})
    assert paths(admitted(new, old)) == {"spec.elasticPolicy"}


def test_an_update_through_the_handler_compares_old_with_new() -> None:
    old = pytorchjob(runPolicy={"schedulingPolicy": {"queue": "a"}})
    new = pytorchjob(runPolicy={"schedulingPolicy": {"queue": "b"}})
    response = handle(review(new, "UPDATE", old=old), validate_pytorchjob_request)["response"]
    assert response["allowed"] is False
    assert "spec.runPolicy.schedulingPolicy.queue" in response["status"]["message"]


# --- every field of Kubeflow v1.9's schema ------------------------------------------------------

ELASTIC = {"minReplicas": 1, "maxReplicas": 3}
# Per field path, what a job that sets it adds to its spec.
EXAMPLES: dict[str, dict[str, Any]] = {
    "apiVersion": {},
    "kind": {},
    "metadata": {},
    "spec": {},
    "spec.elasticPolicy": {"elasticPolicy": {}},
    "spec.elasticPolicy.maxReplicas": {"elasticPolicy": {"minReplicas": 1, "maxReplicas": 3}},
    "spec.elasticPolicy.maxRestarts": {"elasticPolicy": {"maxRestarts": 3}},
    "spec.elasticPolicy.metrics": {
        "elasticPolicy": {
            **ELASTIC,
            "metrics": [
                {
                    "type": "Resource",
                    "resource": {
                        "name": "cpu",
                        "target": {"type": "Utilization", "averageUtilization": 80},
                    },
                }
            ],
        }
    },
    "spec.elasticPolicy.minReplicas": {"elasticPolicy": {"minReplicas": 2, "maxReplicas": 3}},
    "spec.elasticPolicy.nProcPerNode": {"elasticPolicy": {"nProcPerNode": 2}},
    "spec.elasticPolicy.rdzvBackend": {"elasticPolicy": {**ELASTIC, "rdzvBackend": "etcd-v2"}},
    "spec.elasticPolicy.rdzvConf": {"elasticPolicy": {**ELASTIC, "rdzvConf": []}},
    "spec.elasticPolicy.rdzvConf[].key": {"elasticPolicy": {"rdzvConf": [{"key": "timeout"}]}},
    "spec.elasticPolicy.rdzvConf[].value": {
        "elasticPolicy": {"rdzvConf": [{"key": "timeout", "value": "900"}]}
    },
    "spec.elasticPolicy.rdzvHost": {"elasticPolicy": {"rdzvHost": "etcd.ns"}},
    "spec.elasticPolicy.rdzvId": {"elasticPolicy": {"rdzvId": "run-1"}},
    "spec.elasticPolicy.rdzvPort": {"elasticPolicy": {"rdzvPort": 2379}},
    "spec.elasticPolicy.standalone": {"elasticPolicy": {"standalone": True}},
    "spec.nprocPerNode": {"nprocPerNode": "gpu"},
    "spec.pytorchReplicaSpecs": {},
    "spec.pytorchReplicaSpecs.*.replicas": {"pytorchReplicaSpecs": {"Worker": replica(3)}},
    "spec.pytorchReplicaSpecs.*.restartPolicy": {
        "pytorchReplicaSpecs": {"Worker": replica(2, restartPolicy="ExitCode")}
    },
    "spec.pytorchReplicaSpecs.*.template": {},
    "spec.runPolicy": {"runPolicy": {}},
    "spec.runPolicy.activeDeadlineSeconds": {"runPolicy": {"activeDeadlineSeconds": 3600}},
    "spec.runPolicy.backoffLimit": {"runPolicy": {"backoffLimit": 2}},
    "spec.runPolicy.cleanPodPolicy": {"runPolicy": {"cleanPodPolicy": "Running"}},
    "spec.runPolicy.managedBy": {"runPolicy": {"managedBy": "kueue.x-k8s.io/multikueue"}},
    "spec.runPolicy.schedulingPolicy": {"runPolicy": {"schedulingPolicy": {}}},
    "spec.runPolicy.schedulingPolicy.minAvailable": {
        "runPolicy": {"schedulingPolicy": {"minAvailable": 2}}
    },
    "spec.runPolicy.schedulingPolicy.minResources": {
        "runPolicy": {"schedulingPolicy": {"minResources": {"cpu": 2, "memory": "4Gi"}}}
    },
    "spec.runPolicy.schedulingPolicy.priorityClass": {
        "runPolicy": {"schedulingPolicy": {"priorityClass": "high"}}
    },
    "spec.runPolicy.schedulingPolicy.queue": {"runPolicy": {"schedulingPolicy": {"queue": "q"}}},
    "spec.runPolicy.schedulingPolicy.scheduleTimeoutSeconds": {
        "runPolicy": {"schedulingPolicy": {"scheduleTimeoutSeconds": 60}}
    },
    "spec.runPolicy.suspend": {"runPolicy": {"suspend": True}},
    "spec.runPolicy.ttlSecondsAfterFinished": {"runPolicy": {"ttlSecondsAfterFinished": 60}},
}
SELECTOR = (
    "training.kubeflow.org/job-name=j,training.kubeflow.org/operator-name=pytorchjob-controller,"
    "training.kubeflow.org/replica-type=worker"
)
TIME = "2024-06-21T04:41:27Z"
# A status carrying every status field, as the operator writes it.
STATUS: dict[str, Any] = {
    "completionTime": TIME,
    "startTime": TIME,
    "lastReconcileTime": TIME,
    "conditions": [
        {
            "type": "Created",
            "status": "True",
            "reason": "PyTorchJobCreated",
            "message": "PyTorchJob j is created.",
            "lastUpdateTime": TIME,
            "lastTransitionTime": TIME,
        }
    ],
    "replicaStatuses": {
        "Worker": {
            "active": 1,
            "succeeded": 1,
            "failed": 1,
            "selector": SELECTOR,
            "labelSelector": {
                "matchLabels": {"training.kubeflow.org/job-name": "j"},
                "matchExpressions": [
                    {
                        "key": "training.kubeflow.org/replica-type",
                        "operator": "In",
                        "values": ["worker"],
                    }
                ],
            },
        }
    },
}


def field_paths() -> list[str]:
    lines = FIELDS.read_text().splitlines()
    return [line.split("\t")[0] for line in lines if line.strip()]


def merged(base: Any, over: Any) -> Any:
    if isinstance(base, dict) and isinstance(over, dict):
        return {**base, **{k: merged(base.get(k), v) for k, v in over.items()}}
    return copy.deepcopy(over)


def is_set(obj: Any, path: str) -> bool:
    """Whether `obj` has a value at `path` (`*` any key of a map, `[]` any item of a list)."""
    values = [obj]
    for part in path.split("."):
        key, items = part.removesuffix("[]"), part.endswith("[]")
        found = []
        for value in values:
            if not isinstance(value, dict):
                continue
            found += list(value.values()) if key == "*" else [value[key]] if key in value else []
        values = [i for v in found for i in v] if items else found
    return bool(values)


def test_the_field_table_covers_the_schema() -> None:
    spec_paths = {p for p in field_paths() if not p.startswith("status")}
    assert spec_paths == set(EXAMPLES)
    assert set(UNSUPPORTED) <= spec_paths


@pytest.mark.parametrize("path", [p for p in field_paths() if not p.startswith("status")])
def test_every_field_is_honoured_or_refused_as_not_supported(path: str) -> None:
    job = pytorchjob()
    job["spec"] = merged(job["spec"], EXAMPLES[path])
    assert is_set(job, path)
    result = admitted(job)
    if result.allowed:
        assert path not in UNSUPPORTED
        return
    assert path in UNSUPPORTED, result.errors
    assert [(e.path, e.cause) for e in result.errors] == [(path, Cause.NOT_SUPPORTED)]
    assert "not supported" in result.errors[0].message


def test_the_status_the_operator_writes_is_accepted() -> None:
    status_paths = [p for p in field_paths() if p.startswith("status")]
    job = {**pytorchjob(), "status": copy.deepcopy(STATUS)}
    for path in status_paths:
        assert is_set(job, path), path
    assert admitted(job).allowed
    assert admitted(job, old={**pytorchjob(), "status": copy.deepcopy(STATUS)}).allowed


@pytest.mark.parametrize(
    "path", ["spec.elasticPolicy.metrics", "spec.pytorchReplicaSpecs.*.restartPolicy"]
)
def test_a_field_in_the_unsupported_table_is_refused_by_its_path(
    monkeypatch: pytest.MonkeyPatch, path: str
) -> None:
    job = pytorchjob()
    job["spec"] = merged(job["spec"], EXAMPLES[path])
    assert admitted(job).allowed
    reason = "is not supported yet: torchjob does not honour it"
    monkeypatch.setattr("torchjob.api.kubeflow_admission.UNSUPPORTED", {path: reason})
    result = admitted(job)
    # Defaulting sets restartPolicy on every replica type: each is refused by its own path.
    expected = {path.replace("*", kind) for kind in ("Master", "Worker")}
    assert paths(result) == expected
    assert {(e.message, e.cause) for e in result.errors} == {(reason, Cause.NOT_SUPPORTED)}


# --- the pods of a PyTorchJob ----------------------------------------------------------------


def pod_patch(pod: dict[str, Any], job: dict[str, Any] | None = KUBEFLOW_JOB) -> dict[str, Any]:
    response = handle(review(pod, user=RECONCILER), lambda r: mutate_pod(r, job, {RECONCILER}))
    body = response["response"]
    assert body["allowed"] is True, body
    ops = json.loads(base64.b64decode(body["patch"]))
    return {op["path"]: op["value"] for op in ops}


def env_of(container: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e.get("value", "") for e in container.get("env") or []}


def test_a_kubeflow_pod_gets_kubeflows_environment_in_every_container() -> None:
    ops = pod_patch(kubeflow_replica_pod("worker", 1))
    containers = ops["/spec/containers"]
    assert [c["name"] for c in containers] == ["pytorch", "sidecar"]
    for container in containers:
        env = env_of(container)
        assert env["MASTER_ADDR"] == "j-master-0"
        assert env["RANK"] == env["PET_NODE_RANK"] == "2"
        assert env["WORLD_SIZE"] == env["PET_NNODES"] == "3"
    assert [p["containerPort"] for p in containers[0]["ports"]] == [MASTER_PORT]
    assert not containers[1].get("ports")
    assert ops["/spec/restartPolicy"] == "Never"
    assert ops["/spec/initContainers"][0]["name"] == "wait-for-master"


def test_the_users_own_variables_win() -> None:
    pod = kubeflow_replica_pod("worker", 0)
    pod["spec"]["containers"][0]["env"] = [{"name": "RANK", "value": "7"}]
    env = env_of(pod_patch(pod)["/spec/containers"][0])
    assert env["RANK"] == "7"
    assert env["PET_NODE_RANK"] == "1"


def test_without_a_master_no_pod_waits() -> None:
    job = copy.deepcopy(KUBEFLOW_JOB)
    del job["spec"]["pytorchReplicaSpecs"]["Master"]
    ops = pod_patch(kubeflow_replica_pod("worker", 0), job)
    assert "/spec/initContainers" not in ops
    assert "MASTER_ADDR" not in env_of(ops["/spec/containers"][0])


def test_a_kubeflow_pod_of_another_job_is_refused() -> None:
    pod = kubeflow_replica_pod(owner_uid="other")
    response = handle(
        review(pod, user=RECONCILER), lambda r: mutate_pod(r, KUBEFLOW_JOB, {RECONCILER})
    )["response"]
    assert response["allowed"] is False
    assert "not controlled by its job" in response["status"]["message"]


def test_a_kubeflow_pod_from_a_tenant_or_of_a_missing_job_is_refused() -> None:
    pod = kubeflow_replica_pod()
    tenant = handle(review(pod, user="alice"), lambda r: mutate_pod(r, KUBEFLOW_JOB, {RECONCILER}))
    assert tenant["response"]["status"]["code"] == 403
    missing = handle(review(pod, user=RECONCILER), lambda r: mutate_pod(r, None, {RECONCILER}))
    assert missing["response"]["status"]["code"] == 404
    assert "PyTorchJob ns/j not found" in missing["response"]["status"]["message"]
    assert constants.LABEL_JOB_NAME in pod["metadata"]["labels"]


@pytest.mark.parametrize(
    ("elastic", "workers", "path", "says"),
    [
        ({"minReplicas": 3, "maxReplicas": 2}, 2, "spec.elasticPolicy.minReplicas", "exceeds"),
        (
            {"minReplicas": 2, "maxReplicas": 4},
            1,
            "spec.pytorchReplicaSpecs.Worker.replicas",
            "fewer",
        ),
        (
            {"minReplicas": 1, "maxReplicas": 2},
            3,
            "spec.pytorchReplicaSpecs.Worker.replicas",
            "more",
        ),
    ],
)
def test_the_workers_lie_between_the_elastic_bounds_as_written(
    elastic: dict[str, int], workers: int, path: str, says: str
) -> None:
    job = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": "elastic", "namespace": "ns"},
        "spec": {
            "elasticPolicy": elastic,
            "pytorchReplicaSpecs": {
                "Master": {
                    "template": {"spec": {"containers": [{"name": "pytorch", "image": "i"}]}}
                },
                "Worker": {
                    "replicas": workers,
                    "template": {"spec": {"containers": [{"name": "pytorch", "image": "i"}]}},
                },
            },
        },
    }
    defaulted, _ = default_pytorchjob(job)
    result = validate_pytorchjob(defaulted)
    assert [(e.path, says in e.message) for e in result.errors] == [(path, True)], result.errors


@pytest.mark.parametrize(
    ("field", "path"),
    [
        ({"runPolicy": {"cleanPodPolicy": "Runing"}}, "spec.runPolicy.cleanPodPolicy"),
        ({"restartPolicy": "Sometimes"}, "spec.pytorchReplicaSpecs.Worker.restartPolicy"),
    ],
)
def test_a_value_kubeflow_does_not_know_is_refused(field: dict[str, Any], path: str) -> None:
    """Kubeflow's schema has no enums: the values its descriptions list are checked here."""
    worker: dict[str, Any] = {
        "template": {"spec": {"containers": [{"name": "pytorch", "image": "i"}]}}
    }
    spec: dict[str, Any] = {"pytorchReplicaSpecs": {"Worker": worker}}
    if "restartPolicy" in field:
        worker.update(field)
    else:
        spec.update(field)
    job = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": "values", "namespace": "ns"},
        "spec": spec,
    }
    defaulted, _ = default_pytorchjob(job)
    errors = validate_pytorchjob(defaulted).errors
    assert [(e.path, "is not supported: supported values" in e.message) for e in errors] == [
        (path, True)
    ], errors


@pytest.mark.parametrize(
    ("metric", "path"),
    [
        ({"type": "Resourse", "resource": {}}, "spec.elasticPolicy.metrics[0].type"),
        ({"type": "Pods"}, "spec.elasticPolicy.metrics[0].pods"),
    ],
)
def test_a_metric_the_autoscaler_would_refuse_is_refused_now(
    metric: dict[str, Any], path: str
) -> None:
    container = {"name": "pytorch", "image": "i"}
    job = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": "scaled", "namespace": "ns"},
        "spec": {
            "elasticPolicy": {"minReplicas": 1, "maxReplicas": 3, "metrics": [metric]},
            "pytorchReplicaSpecs": {"Worker": {"template": {"spec": {"containers": [container]}}}},
        },
    }
    defaulted, _ = default_pytorchjob(job)
    assert [e.path for e in validate_pytorchjob(defaulted).errors] == [path]


# Fields that only hold others (their children have the effects) or that every job has.
CONTAINERS = {
    "apiVersion",
    "kind",
    "metadata",
    "spec",
    "spec.pytorchReplicaSpecs",
    "spec.pytorchReplicaSpecs.*.template",
    "spec.runPolicy",
    "spec.runPolicy.schedulingPolicy",
    "spec.elasticPolicy.rdzvConf",
}
OWNER = {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "name": "j", "uid": "u"}


def effects(job: dict[str, Any]) -> Any:
    """What a (defaulted) PyTorchJob makes: the PyTorchTrainingJob it runs as, each replica's
    environment, its group object in each gang mode, its autoscaler; or that it is left alone."""
    defaulted, _ = default_pytorchjob(job)
    run = as_run(defaulted)
    if run is None:
        return "managed elsewhere"
    spec = PyTorchTrainingJobSpec.from_dict(run["spec"], "spec")
    replicas = replicas_of(spec)
    envs = {
        f"{r.type}-{r.index}": kubeflow_env(
            defaulted["spec"], "j", r, constants.SERVICE_SCOPE_REPLICA
        )
        for r in replicas
    }
    meta = {"name": "j", "namespace": "ns"}
    groups = {}
    for mode in ("native", "volcano", "coscheduling"):
        gang = Gang(mode, "j", len(replicas), len(replicas))
        policy = scheduling_policy(run)
        groups[mode] = render_pod_group(
            meta, with_scheduling_policy(gang, policy) if policy else gang, OWNER
        )
    autoscaler = render_autoscaler(meta, defaulted["spec"], OWNER)
    return {"spec": run["spec"], "env": envs, "groups": groups, "autoscaler": autoscaler}


@pytest.mark.parametrize(
    "path", [p for p in field_paths() if not p.startswith("status") and p not in CONTAINERS]
)
def test_every_field_honoured_changes_what_the_job_makes(path: str) -> None:
    """None silently ignored: a job that sets the field makes something else than one that
    does not (its spec as it runs, a replica's environment, its group, its autoscaler)."""
    if path in UNSUPPORTED:
        return  # refused instead: test_every_field_is_honoured_or_refused_as_not_supported
    job = pytorchjob()
    job["spec"] = merged(job["spec"], EXAMPLES[path])
    assert admitted(job).allowed
    assert effects(job) != effects(pytorchjob()), f"{path} changes nothing"
