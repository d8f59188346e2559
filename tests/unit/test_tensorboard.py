"""The TensorBoard's Deployment and Service for each form of log source, and its status."""

from __future__ import annotations

from typing import Any

import pytest

from torchjob.api import constants
from torchjob.api.types import TensorBoardSpec
from torchjob.lifecycle.tensorboard import stored_form, tensorboard_status
from torchjob.render.tensorboard import (
    LogSource,
    log_sources,
    render_deployment,
    render_service,
    spec_hash,
    tensorboard_name,
)

META = {"name": "mnist", "namespace": "team", "uid": "job-uid"}


def deployment_of(**spec: Any) -> dict[str, Any]:
    return render_deployment(META, TensorBoardSpec.from_dict({"image": "tb:2", **spec}))


def container(deployment: dict[str, Any]) -> dict[str, Any]:
    containers = deployment["spec"]["template"]["spec"]["containers"]
    assert len(containers) == 1
    result: dict[str, Any] = containers[0]
    return result


def claims(deployment: dict[str, Any]) -> dict[str, str]:
    """volume name -> claim, read-only claims only."""
    out = {}
    for volume in deployment["spec"]["template"]["spec"]["volumes"]:
        pvc = volume.get("persistentVolumeClaim")
        if pvc:
            assert pvc["readOnly"] is True
            out[volume["name"]] = pvc["claimName"]
    return out


def mounts(deployment: dict[str, Any]) -> dict[str, str]:
    return {m["name"]: m["mountPath"] for m in container(deployment)["volumeMounts"]}


def test_one_fileset_is_a_logdir_on_its_claim_mounted_read_only() -> None:
    deployment = deployment_of(trainingLogFilesets=["t9k://pvc/torch-tensorboard-pvc/log"])
    args = container(deployment)["args"]
    assert args[:2] == ["--logdir", "/logs/torch-tensorboard-pvc/log"]
    assert claims(deployment) == {"logs-0": "torch-tensorboard-pvc"}
    assert mounts(deployment)["logs-0"] == "/logs/torch-tensorboard-pvc"
    readonly = [m for m in container(deployment)["volumeMounts"] if m["name"] == "logs-0"]
    assert readonly[0]["readOnly"] is True


def test_fileset_without_subpath_reads_the_whole_claim() -> None:
    args = container(deployment_of(trainingLogFilesets=["t9k://pvc/logs"]))["args"]
    assert args[:2] == ["--logdir", "/logs/logs"]


def test_logdir_pvc_subpaths_and_filesets_share_one_volume_per_claim() -> None:
    deployment = deployment_of(
        trainingLogFilesets=["t9k://pvc/a/run1", "t9k://pvc/b/x/y/"],
        logDir={"pvc": [{"name": "a", "subPath": ["run2", "run1"]}, {"name": "c"}]},
    )
    args = container(deployment)["args"]
    assert args[0] == "--logdir_spec"
    assert args[1].split(",") == [
        "a/run1:/logs/a/run1",
        "b/x/y:/logs/b/x/y",
        "a/run2:/logs/a/run2",
        "c:/logs/c",
    ], "each directory once, in the order written"
    assert claims(deployment) == {"logs-0": "a", "logs-1": "b", "logs-2": "c"}
    assert mounts(deployment) == {
        "tmp": "/tmp",
        "logs-0": "/logs/a",
        "logs-1": "/logs/b",
        "logs-2": "/logs/c",
    }


def test_subpaths_never_leave_their_claim() -> None:
    spec = TensorBoardSpec.from_dict(
        {"image": "i", "logDir": {"pvc": [{"name": "a", "subPath": ["../../etc", "/abs/./p"]}]}}
    )
    assert log_sources(spec) == [LogSource("a", "etc"), LogSource("a", "abs/p")]


def test_run_names_cannot_break_logdir_spec() -> None:
    assert LogSource("a", "x:y,z").run_name == "a/x_y_z"


def test_no_source_still_starts() -> None:
    assert container(deployment_of())["args"][:2] == ["--logdir", "/logs"]


def test_image_resources_ownership_and_labels() -> None:
    resources = {"limits": {"cpu": "1", "memory": "1Gi"}}
    deployment = deployment_of(resources=resources)
    assert container(deployment)["image"] == "tb:2"
    assert container(deployment)["resources"] == resources
    meta = deployment["metadata"]
    assert meta["name"] == "mnist-tensorboard"
    owner = meta["ownerReferences"][0]
    assert (owner["uid"], owner["controller"], owner["blockOwnerDeletion"]) == (
        "job-uid",
        True,
        True,
    )
    labels = {constants.LABEL_TENSORBOARD: "mnist"}
    assert meta["labels"] == labels
    assert deployment["spec"]["selector"] == {"matchLabels": labels}
    assert deployment["spec"]["template"]["metadata"]["labels"] == labels
    # Replica objects are selected by the job-name label; the TensorBoard must never match.
    assert constants.LABEL_JOB_NAME not in deployment["spec"]["template"]["metadata"]["labels"]
    assert deployment["spec"]["strategy"] == {"type": "Recreate"}


def test_pod_meets_the_restricted_pod_security_standard() -> None:
    pod = deployment_of(trainingLogFilesets=["t9k://pvc/a/b"])["spec"]["template"]["spec"]
    security = pod["securityContext"]
    assert security["runAsNonRoot"] is True
    assert security["runAsUser"] != 0
    assert security["seccompProfile"] == {"type": "RuntimeDefault"}
    for c in pod["containers"]:
        assert c["securityContext"]["allowPrivilegeEscalation"] is False
        assert c["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    allowed = {"persistentVolumeClaim", "emptyDir"}
    assert all(set(v) - {"name"} <= allowed for v in pod["volumes"])
    assert pod["automountServiceAccountToken"] is False


def test_service_is_cluster_ip_on_the_tensorboard_port() -> None:
    service = render_service(META)
    assert service["metadata"]["name"] == "mnist-tensorboard"
    assert service["spec"]["type"] == "ClusterIP"
    assert service["spec"]["selector"] == {constants.LABEL_TENSORBOARD: "mnist"}
    assert service["spec"]["ports"][0]["port"] == 6006
    assert service["metadata"]["ownerReferences"][0]["uid"] == "job-uid"


def test_hash_changes_with_image_and_log_sources_only() -> None:
    base = spec_hash(deployment_of(trainingLogFilesets=["t9k://pvc/a/b"]))
    assert base == spec_hash(deployment_of(trainingLogFilesets=["t9k://pvc/a/b"]))
    assert base != spec_hash(deployment_of(trainingLogFilesets=["t9k://pvc/a/c"]))
    assert base != spec_hash(
        render_deployment(
            META,
            TensorBoardSpec.from_dict({"image": "tb:3", "trainingLogFilesets": ["t9k://pvc/a/b"]}),
        )
    )


def test_long_job_names_get_a_short_unique_name() -> None:
    long_a, long_b = "a" * 58 + "-x", "a" * 58 + "-y"
    assert len(tensorboard_name(long_a)) <= 63
    assert tensorboard_name(long_a) != tensorboard_name(long_b)
    assert tensorboard_name(long_a).endswith("-tensorboard")


# -- status.tensorboard ---------------------------------------------------------------------------

SPEC = TensorBoardSpec.from_dict({"image": "tb:2"})
DESIRED = render_deployment(META, SPEC)
HASH = spec_hash(DESIRED)
SERVICE = render_service(META)


def observed_deployment(
    ready: int = 0, generation: int = 1, seen: int = 1, hash_: str | None = HASH, **status: Any
) -> dict[str, Any]:
    meta = {**DESIRED["metadata"], "generation": generation}
    meta["annotations"] = {constants.ANNOTATION_SPEC_HASH: hash_}
    return {
        "metadata": meta,
        "status": {
            "observedGeneration": seen,
            "readyReplicas": ready,
            "updatedReplicas": 1,
            **status,
        },
    }


def tb_pod(status: dict[str, Any], created: str = "2026-01-01T00:00:00Z") -> dict[str, Any]:
    return {"metadata": {"creationTimestamp": created}, "status": status}


URL = "http://mnist-tensorboard.team.svc:6006/"


def test_ready_with_its_url() -> None:
    status = tensorboard_status(META, HASH, observed_deployment(ready=1), SERVICE, [])
    assert status == {"ready": True, "url": URL, "reason": None, "message": None}
    assert stored_form(status) == {"ready": True, "url": URL}


@pytest.mark.parametrize(
    ("deployment", "service", "pods", "reason"),
    [
        (None, None, [], "Creating"),
        (observed_deployment(), None, [], "Creating"),
        (observed_deployment(ready=1, hash_="old"), SERVICE, [], "Updating"),
        (observed_deployment(ready=1, generation=2, seen=1), SERVICE, [], "Updating"),
        (observed_deployment(), SERVICE, [], "Starting"),
        (
            observed_deployment(
                conditions=[
                    {
                        "type": "ReplicaFailure",
                        "status": "True",
                        "reason": "FailedCreate",
                        "message": "pods forbidden: violates PodSecurity",
                    }
                ]
            ),
            SERVICE,
            [],
            "FailedCreate",
        ),
        (observed_deployment(), SERVICE, [tb_pod({"phase": "Pending"})], "PodPending"),
        (
            observed_deployment(),
            SERVICE,
            [
                tb_pod({"phase": "Pending"}, "2026-01-01T00:00:00Z"),
                tb_pod(
                    {
                        "phase": "Pending",
                        "containerStatuses": [
                            {
                                "name": "tensorboard",
                                "state": {"waiting": {"reason": "ErrImagePull"}},
                            }
                        ],
                    },
                    "2026-01-01T00:01:00Z",
                ),
            ],
            "ErrImagePull",
        ),
        (
            observed_deployment(),
            SERVICE,
            [
                tb_pod(
                    {
                        "phase": "Pending",
                        "conditions": [
                            {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}
                        ],
                    }
                )
            ],
            "Unschedulable",
        ),
        (observed_deployment(), SERVICE, [tb_pod({"phase": "Running"})], "NotReady"),
    ],
    ids=[
        "nothing yet",
        "no service",
        "hash differs",
        "generation not observed",
        "no pod yet",
        "pod refused",
        "pod pending",
        "newest pod's image",
        "unschedulable",
        "running not ready",
    ],
)
def test_not_ready_says_why(
    deployment: dict[str, Any] | None,
    service: dict[str, Any] | None,
    pods: list[dict[str, Any]],
    reason: str,
) -> None:
    status = tensorboard_status(META, HASH, deployment, service, pods)
    assert status["ready"] is False
    assert status["reason"] == reason
    assert status["message"]
    assert status["url"] == (URL if service else None)
