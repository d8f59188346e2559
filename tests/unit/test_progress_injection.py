"""The pod rewrite gives each training container of every replica, of a PyTorchTrainingJob and of
a Kubeflow PyTorchJob alike, what reporting progress needs: the projected token and CA volume,
its mount, Kubeflow Trainer's three variables (the user's own win) and the CA annotation, unless
the job or the chart turned reporting off; it never clashes with the user's own volume or mount,
and rewriting a rewritten pod adds nothing."""

from __future__ import annotations

import base64
import copy
import json
from typing import Any

import pytest
from support.webhook import JOB, KUBEFLOW_JOB, RECONCILER, kubeflow_replica_pod, replica_pod, review

from torchjob.api.admission import handle
from torchjob.api.job_api import api_of
from torchjob.api.pod_fields import problems
from torchjob.api.progress import ANNOTATION_PROGRESS, ProgressEndpoint
from torchjob.render.job_kinds import kind_of
from torchjob.render.pod_admission_handler import decode_job, mutate_pod
from torchjob.render.progress import progress_parts

PEM = "-----BEGIN CERTIFICATE-----\nMIIBfake\n-----END CERTIFICATE-----\n"
ENDPOINT = ProgressEndpoint("https://torchjob-progress.torchjob.svc:8443/", PEM)
CA_KEY = "batch.tensorstack.dev/progress-ca"
# The downward API's path to that annotation, in the form the kubelet accepts for a key with a '/'.
FIELD_PATH = "metadata.annotations['batch.tensorstack.dev/progress-ca']"
MOUNT = {
    "name": "torchjob-progress",
    "mountPath": "/var/run/secrets/torchjob/progress",
    "readOnly": True,
}
PROGRESS_ENV = (
    "KUBEFLOW_TRAINER_SERVER_URL",
    "KUBEFLOW_TRAINER_SERVER_CA_CERT",
    "KUBEFLOW_TRAINER_SERVER_TOKEN",
)
TRAINING_URL = (
    "https://torchjob-progress.torchjob.svc:8443"
    "/apis/batch.tensorstack.dev/v1beta1/namespaces/ns/pytorchtrainingjobs/j/status"
)
KUBEFLOW_URL = "https://torchjob-progress.torchjob.svc:8443/apis/kubeflow.org/v1/namespaces/ns/pytorchjobs/j/status"


def volume(audience: str) -> dict[str, Any]:
    """The projected volume, written out as the kubelet reads it."""
    return {
        "name": "torchjob-progress",
        "projected": {
            "sources": [
                {
                    "serviceAccountToken": {
                        "audience": audience,
                        "expirationSeconds": 3600,
                        "path": "token",
                    }
                },
                {
                    "downwardAPI": {
                        "items": [
                            {
                                "path": "ca.crt",
                                "fieldRef": {"fieldPath": FIELD_PATH},
                            }
                        ]
                    }
                },
            ]
        },
    }


def apply_patch(doc: Any, patch: list[dict[str, Any]]) -> Any:
    """RFC 6902 `add`, `replace` and `remove` (RFC 6901 pointers), on a copy of `doc`."""
    doc = copy.deepcopy(doc)
    for op in patch:
        *parents, last = [
            p.replace("~1", "/").replace("~0", "~") for p in op["path"].split("/")[1:]
        ]
        target = doc
        for key in parents:
            target = target[int(key)] if isinstance(target, list) else target[key]
        if op["op"] == "remove":
            del target[last]
        elif op["op"] == "replace":
            assert last in target, op
            target[last] = copy.deepcopy(op["value"])
        else:
            assert op["op"] == "add", op
            target[last] = copy.deepcopy(op["value"])
    return doc


def admitted(
    pod: dict[str, Any], job: dict[str, Any], endpoint: ProgressEndpoint | None = ENDPOINT
) -> dict[str, Any]:
    """`pod` as the pod route admits it: the handler's patch, applied."""
    response = handle(
        review(pod, user=RECONCILER), lambda r: mutate_pod(r, job, {RECONCILER}, progress=endpoint)
    )["response"]
    assert response["allowed"] is True, response
    patch = json.loads(base64.b64decode(response["patch"])) if "patch" in response else []
    rewritten: dict[str, Any] = apply_patch(pod, patch)
    assert list(problems(rewritten["spec"], "PodSpec", "spec")) == []
    return rewritten


def env_of(container: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e.get("value", "") for e in container.get("env") or []}


def with_annotation(job: dict[str, Any], value: str) -> dict[str, Any]:
    job = copy.deepcopy(job)
    job["metadata"]["annotations"] = {ANNOTATION_PROGRESS: value}
    return job


def training_job(*containers: dict[str, Any], **spec: Any) -> dict[str, Any]:
    """JOB with these containers in its workers' template, and `spec` merged over its spec."""
    job = copy.deepcopy(JOB)
    job["spec"].update(spec)
    if containers:
        job["spec"]["replicaSpecs"][0]["template"]["spec"]["containers"] = list(containers)
    return job


def pod_of(job: dict[str, Any]) -> dict[str, Any]:
    pod = replica_pod()
    pod["spec"] = copy.deepcopy(job["spec"]["replicaSpecs"][0]["template"]["spec"])
    return pod


def assert_reports(pod: dict[str, Any], container: dict[str, Any], url: str) -> None:
    env = env_of(container)
    assert env["KUBEFLOW_TRAINER_SERVER_URL"] == url
    assert env["KUBEFLOW_TRAINER_SERVER_CA_CERT"] == "/var/run/secrets/torchjob/progress/ca.crt"
    assert env["KUBEFLOW_TRAINER_SERVER_TOKEN"] == "/var/run/secrets/torchjob/progress/token"
    assert container["volumeMounts"].count(MOUNT) == 1
    assert pod["metadata"]["annotations"][CA_KEY] == PEM


def assert_reports_nothing(container: dict[str, Any]) -> None:
    assert not set(PROGRESS_ENV) & set(env_of(container))
    assert MOUNT not in (container.get("volumeMounts") or [])


def test_the_training_container_of_a_training_job_reports_to_its_jobs_url() -> None:
    sidecar = {"name": "sidecar", "image": "s"}
    trainer = {"name": "python", "image": "t", "args": ["t.py"]}
    pod = admitted(pod_of(training_job(sidecar, trainer)), training_job(sidecar, trainer))
    sidecar_out, trainer_out = pod["spec"]["containers"]
    assert_reports(pod, trainer_out, TRAINING_URL)
    assert env_of(trainer_out)["MASTER_ADDR"]  # the container that gets the job's variables
    assert_reports_nothing(sidecar_out)
    audience = "batch.tensorstack.dev/v1beta1/namespaces/ns/pytorchtrainingjobs/j/status"
    assert pod["spec"]["volumes"] == [volume(audience)]


@pytest.mark.parametrize(("kind", "index"), [("master", 0), ("worker", 1)])
def test_every_container_of_a_kubeflow_pod_reports_for_the_pytorchjob(
    kind: str, index: int
) -> None:
    pod = admitted(kubeflow_replica_pod(kind, index), KUBEFLOW_JOB)
    assert [c["name"] for c in pod["spec"]["containers"]] == ["pytorch", "sidecar"]
    for container in pod["spec"]["containers"]:
        assert env_of(container)["MASTER_ADDR"] == "j-master-0"
        assert_reports(pod, container, KUBEFLOW_URL)
    assert pod["spec"]["volumes"] == [volume("kubeflow.org/v1/namespaces/ns/pytorchjobs/j/status")]


@pytest.mark.parametrize("value", ["false", "off", "FALSE", " no "])
def test_a_job_that_turns_reporting_off_gets_none_of_it(value: str) -> None:
    pod = admitted(pod_of(JOB), with_annotation(JOB, value))
    assert_reports_nothing(pod["spec"]["containers"][0])
    assert "volumes" not in pod["spec"]
    assert CA_KEY not in (pod["metadata"].get("annotations") or {})
    kubeflow = admitted(kubeflow_replica_pod(), with_annotation(KUBEFLOW_JOB, value))
    for container in kubeflow["spec"]["containers"]:
        assert_reports_nothing(container)
    assert "volumes" not in kubeflow["spec"]


def test_a_job_annotated_true_reports() -> None:
    pod = admitted(pod_of(JOB), with_annotation(JOB, "true"))
    assert_reports(pod, pod["spec"]["containers"][0], TRAINING_URL)


def test_without_an_endpoint_the_patch_is_as_before() -> None:
    job = decode_job(JOB)
    pod = pod_of(JOB)
    kind = kind_of(api_of(JOB))
    without = kind.rewrite_pod(job, JOB["spec"], pod)
    assert kind.rewrite_pod(job, JOB["spec"], pod, None).patch == without.patch
    assert not any(op["path"].startswith("/metadata") for op in without.patch)
    assert "volumes" not in without.pod["spec"]


def test_the_users_own_variables_win() -> None:
    trainer = {
        "name": "python",
        "image": "t",
        "env": [{"name": "KUBEFLOW_TRAINER_SERVER_URL", "value": "http://127.0.0.1:9000/mine"}],
    }
    pod = admitted(pod_of(training_job(trainer)), training_job(trainer))
    env = pod["spec"]["containers"][0]["env"]
    assert [e["name"] for e in env].count("KUBEFLOW_TRAINER_SERVER_URL") == 1
    assert env_of(pod["spec"]["containers"][0])["KUBEFLOW_TRAINER_SERVER_URL"].endswith("/mine")
    assert env_of(pod["spec"]["containers"][0])["KUBEFLOW_TRAINER_SERVER_TOKEN"]
    kubeflow_pod = kubeflow_replica_pod()
    kubeflow_pod["spec"]["containers"][0]["env"] = [
        {"name": "KUBEFLOW_TRAINER_SERVER_URL", "value": "http://127.0.0.1:9000/mine"}
    ]
    pytorch = admitted(kubeflow_pod, KUBEFLOW_JOB)["spec"]["containers"][0]
    assert env_of(pytorch)["KUBEFLOW_TRAINER_SERVER_URL"].endswith("/mine")


def test_a_volume_of_the_users_named_like_ours_turns_reporting_off_for_the_pod() -> None:
    own = {"name": "torchjob-progress", "emptyDir": {}}
    trainer = {
        "name": "python",
        "image": "t",
        "volumeMounts": [{"name": "torchjob-progress", "mountPath": "/scratch"}],
    }
    job = training_job(trainer)
    job["spec"]["replicaSpecs"][0]["template"]["spec"]["volumes"] = [own]
    pod = admitted(pod_of(job), job)
    assert pod["spec"]["volumes"] == [own]
    assert_reports_nothing(pod["spec"]["containers"][0])
    assert pod["spec"]["containers"][0]["volumeMounts"] == trainer["volumeMounts"]
    assert CA_KEY not in (pod["metadata"].get("annotations") or {})


def test_a_container_with_its_own_mount_at_our_path_reports_nothing() -> None:
    pod = kubeflow_replica_pod()
    own_mount = {"name": "certs", "mountPath": "/var/run/secrets/torchjob/progress/"}
    pod["spec"]["containers"][1]["volumeMounts"] = [own_mount]
    pod["spec"]["volumes"] = [{"name": "certs", "emptyDir": {}}]
    out = admitted(pod, KUBEFLOW_JOB)
    pytorch, sidecar = out["spec"]["containers"]
    assert_reports(out, pytorch, KUBEFLOW_URL)
    assert_reports_nothing(sidecar)
    assert sidecar["volumeMounts"] == [own_mount]
    assert [v["name"] for v in out["spec"]["volumes"]] == ["certs", "torchjob-progress"]
    # A training job's only training container with such a mount: no volume either.
    trainer = {"name": "python", "image": "t", "volumeMounts": [dict(own_mount)]}
    job = training_job(trainer)
    job["spec"]["replicaSpecs"][0]["template"]["spec"]["volumes"] = [
        {"name": "certs", "emptyDir": {}}
    ]
    alone = admitted(pod_of(job), job)
    assert_reports_nothing(alone["spec"]["containers"][0])
    assert [v["name"] for v in alone["spec"]["volumes"]] == ["certs"]


DEBUG = {"runMode": {"debug": {"enabled": True}}}


@pytest.mark.parametrize(
    ("job", "pod"),
    [
        (JOB, pod_of(JOB)),
        (training_job(**DEBUG), pod_of(JOB)),
        (training_job(**{"torchrunConfig": {"enabled": True}}), pod_of(JOB)),
        (KUBEFLOW_JOB, kubeflow_replica_pod("master", 0)),
        (KUBEFLOW_JOB, kubeflow_replica_pod("worker", 1)),
    ],
    ids=["plain", "debug", "torchrun", "kubeflow-master", "kubeflow-worker"],
)
def test_rewriting_a_rewritten_pod_adds_nothing(job: dict[str, Any], pod: dict[str, Any]) -> None:
    prepared = decode_job(job)
    kind = kind_of(api_of(job))
    as_admitted = copy.deepcopy(pod)
    first = kind.rewrite_pod(prepared, job["spec"], pod, ENDPOINT)
    assert pod == as_admitted  # the rewrite shares parts of it, but changes none
    assert apply_patch(pod, first.patch) == first.pod
    assert first.pod["metadata"]["annotations"][CA_KEY] == PEM
    assert "annotations" not in pod["metadata"]
    second = kind.rewrite_pod(prepared, job["spec"], first.pod, ENDPOINT)
    assert second.patch == []
    assert second.pod == first.pod
    assert [v["name"] for v in second.pod["spec"]["volumes"]] == ["torchjob-progress"]
    for container in second.pod["spec"]["containers"]:
        assert (container.get("volumeMounts") or []).count(MOUNT) <= 1
        names = [e["name"] for e in container.get("env") or []]
        assert all(names.count(name) <= 1 for name in PROGRESS_ENV)


@pytest.mark.parametrize("annotations", [None, {}, {"a/b": "c"}, {CA_KEY: "an older CA"}])
def test_the_ca_annotation_patch_applies_whatever_the_pod_has(
    annotations: dict[str, str] | None,
) -> None:
    pod = pod_of(JOB)
    if annotations is not None:
        pod["metadata"]["annotations"] = dict(annotations)
    rewritten = admitted(pod, JOB)
    expected = {**(annotations or {}), CA_KEY: PEM}
    assert rewritten["metadata"]["annotations"] == expected


def test_the_parts_are_made_once_per_job_and_follow_the_endpoint() -> None:
    prepared = decode_job(JOB)
    assert prepared.progress(ENDPOINT) is prepared.progress(ENDPOINT)
    assert decode_job(JOB).progress(ENDPOINT) is prepared.progress(ENDPOINT)
    assert prepared.progress(None) is None
    moved = ProgressEndpoint("https://progress.other.svc:9443", "another CA")
    parts = prepared.progress(moved)
    assert parts is not None
    assert parts.ca_pem == "another CA"
    assert env_of({"env": parts.env})["KUBEFLOW_TRAINER_SERVER_URL"].startswith(
        "https://progress.other.svc:9443/apis/"
    )
    assert prepared.progress_job is not None
    assert progress_parts(prepared.progress_job, moved) is parts
    pod = admitted(pod_of(JOB), JOB, moved)
    assert pod["metadata"]["annotations"][CA_KEY] == "another CA"
