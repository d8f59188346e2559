"""Admission handlers answer every body with a well-formed review: defaults as a patch, every
violation in the message, refusals for pods from anyone but the reconciler."""

from __future__ import annotations

import base64
import copy
import json
from typing import Any

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st
from support.webhook import JOB, KUBEFLOW_JOB, RECONCILER, replica_pod, review

from torchjob.api import constants
from torchjob.api.admission import handle, mutate_job, validate_job
from torchjob.api.kubeflow_admission import mutate_pytorchjob, validate_pytorchjob_request
from torchjob.render.pod_admission_handler import mutate_pod


def decoded_patch(response: dict[str, Any]) -> list[dict[str, Any]]:
    body = response["response"]
    assert body["patchType"] == "JSONPatch"
    patch = json.loads(base64.b64decode(body["patch"]))
    assert isinstance(patch, list)
    return patch


def test_mutate_job_returns_defaults_as_patch() -> None:
    response = handle(review(JOB), mutate_job)
    assert response["response"]["allowed"] is True
    paths = {op["path"] for op in decoded_patch(response)}
    assert {
        "/spec/replicaSpecs/0/restartPolicy",
        "/spec/runPolicy",
        "/spec/runPolicy/backoffLimit",
    } <= paths


def test_validate_job_lists_every_violation_with_its_field() -> None:
    bad = copy.deepcopy(JOB)
    bad["spec"]["runPolicy"] = {"activeDeadlineSeconds": 0}
    bad["spec"]["replicaSpecs"].append(copy.deepcopy(bad["spec"]["replicaSpecs"][0]))
    response = handle(review(bad), validate_job)["response"]
    assert response["allowed"] is False
    status = response["status"]
    assert status["code"] == 422
    assert "spec.runPolicy.activeDeadlineSeconds: must be greater than 0" in status["message"]
    assert "spec.replicaSpecs[1].type" in status["message"]
    assert {c["field"] for c in status["details"]["causes"]} == {
        "spec.runPolicy.activeDeadlineSeconds",
        "spec.replicaSpecs[1].type",
    }


def test_validate_update_compares_old_with_new() -> None:
    changed = copy.deepcopy(JOB)
    changed["spec"]["replicaSpecs"][0]["replicas"] = 3
    response = handle(review(changed, "UPDATE", old=JOB), validate_job)["response"]
    assert response["allowed"] is False
    assert "spec.replicaSpecs: is immutable" in response["status"]["message"]
    assert handle(review(JOB, "UPDATE", old=JOB), validate_job)["response"]["allowed"] is True


def test_warnings_come_back_on_an_allowed_job() -> None:
    job = copy.deepcopy(JOB)
    job["spec"]["replicaSpecs"][0]["template"]["spec"]["containers"][0]["env"] = [
        {"name": "RANK", "value": "0"}
    ]
    response = handle(review(job), validate_job)["response"]
    assert response["allowed"] is True
    assert any("RANK is set by you" in w for w in response["warnings"])


def pod_handler(job: dict[str, Any] | None) -> Any:
    return lambda request: mutate_pod(request, job, {RECONCILER})


def test_reconciler_pod_is_rewritten() -> None:
    response = handle(review(replica_pod(), user=RECONCILER), pod_handler(JOB))
    assert response["response"]["allowed"] is True
    ops = {op["path"]: op for op in decoded_patch(response)}
    assert ops["/spec/restartPolicy"]["value"] == "Never"
    env = ops["/spec/containers"]["value"][0]["env"]
    assert {"name": "RANK", "value": "1"} in env


def test_tenant_pod_with_job_label_is_refused() -> None:
    response = handle(review(replica_pod(), user="alice"), pod_handler(JOB))["response"]
    assert response["allowed"] is False
    assert response["status"]["code"] == 403
    assert "alice may not create them" in response["status"]["message"]


def test_pod_not_controlled_by_its_job_is_refused() -> None:
    response = handle(review(replica_pod("someone-else"), user=RECONCILER), pod_handler(JOB))[
        "response"
    ]
    assert response["allowed"] is False
    assert "not controlled by its job" in response["status"]["message"]


def test_pod_of_missing_job_is_refused() -> None:
    response = handle(review(replica_pod(), user=RECONCILER), pod_handler(None))["response"]
    assert response["status"]["code"] == 404


def test_unlabelled_pod_is_left_alone() -> None:
    response = handle(
        review({"metadata": {"name": "p"}, "spec": {}}, user="alice"), pod_handler(None)
    )
    assert response["response"] == {"uid": "r1", "allowed": True}


# --- whatever arrives, the answer is a well-formed review --------------------------------------

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=20) | st.floats(allow_nan=False),
    lambda inner: (
        st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=12), inner, max_size=5)
    ),
    max_leaves=40,
)
KEYS = st.sampled_from(
    [
        "spec",
        "replicaSpecs",
        "template",
        "containers",
        "metadata",
        "labels",
        "torchrunConfig",
        "elastic",
        "runPolicy",
        "runMode",
        "debug",
        "type",
        "replicas",
        "args",
        "env",
        "resources",
        "pytorchReplicaSpecs",
        "Master",
        "Worker",
        "elasticPolicy",
        "nprocPerNode",
        "schedulingPolicy",
        "ownerReferences",
    ]
)
SHAPED = st.recursive(
    JSON,
    lambda inner: st.dictionaries(KEYS, inner, max_size=4) | st.lists(inner, max_size=3),
    max_leaves=60,
)
HANDLERS = [
    mutate_job,
    validate_job,
    mutate_pytorchjob,
    validate_pytorchjob_request,
    lambda r: mutate_pod(r, JOB, {RECONCILER}),
    lambda r: mutate_pod(r, KUBEFLOW_JOB, {RECONCILER}),
    lambda r: mutate_pod(r, None, {RECONCILER}),
]


def assert_well_formed(response: dict[str, Any]) -> None:
    orjson.dumps(response)
    assert response["apiVersion"] == "admission.k8s.io/v1"
    assert response["kind"] == "AdmissionReview"
    body = response["response"]
    assert isinstance(body["allowed"], bool)
    if not body["allowed"]:
        assert body["status"]["message"]


@settings(max_examples=150, deadline=None)
@given(body=JSON)
def test_any_body_gets_a_refusal_not_an_exception(body: Any) -> None:
    for handler in HANDLERS:
        response = handle(body, handler)
        assert_well_formed(response)


@settings(max_examples=300, deadline=None)
@given(
    obj=SHAPED,
    old=SHAPED,
    operation=st.sampled_from(["CREATE", "UPDATE", "DELETE", "CONNECT"]),
    labelled=st.booleans(),
)
def test_any_object_gets_a_well_formed_answer(
    obj: Any, old: Any, operation: str, labelled: bool
) -> None:
    if labelled and isinstance(obj, dict):
        obj = {
            **obj,
            "metadata": {
                "labels": {constants.LABEL_JOB_NAME: "j"},
                "ownerReferences": [{"uid": "job-uid", "controller": True}],
            },
        }
    for handler in HANDLERS:
        assert_well_formed(handle(review(obj, operation, old, user=RECONCILER), handler))


def test_huge_and_deep_input_is_answered() -> None:
    deep: Any = {}
    node = deep
    for _ in range(500):
        node["spec"] = {}
        node = node["spec"]
    huge = copy.deepcopy(JOB)
    huge["spec"]["replicaSpecs"][0]["type"] = "x" * 1_000_000
    for obj in (deep, huge):
        for handler in HANDLERS:
            assert_well_formed(handle(review(obj, user=RECONCILER), handler))
