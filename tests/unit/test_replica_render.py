"""The Pod and the headless Service the reconciler creates for a replica: identity labels, an
owner reference that makes the job their controller, t9k scheduler settings, and restarts left
to the reconciler."""

from __future__ import annotations

from typing import Any

from support.jobs import JobBuilder

from torchjob.api import constants
from torchjob.render.replica_objects import render_pod, render_service
from torchjob.render.topology import replicas_of

META = {"name": "j", "namespace": "ns", "uid": "job-uid"}
TEMPLATE: dict[str, Any] = {
    "metadata": {"labels": {"team": "a"}, "annotations": {"note": "kept"}},
    "spec": {"containers": [{"name": "python", "image": "i"}], "restartPolicy": "OnFailure"},
}


MASTER_AND_WORKERS = (
    JobBuilder().replicas("master", 1, template=TEMPLATE).replicas("worker", 2, template=TEMPLATE)
)


def test_pod_of_a_replica() -> None:
    spec = MASTER_AND_WORKERS.decoded_spec()
    master, worker = replicas_of(spec)[0], replicas_of(spec)[2]
    pod = render_pod(META, spec, worker, {constants.ANNOTATION_BACKOFF_COUNT: "2"})
    assert pod["metadata"]["name"] == "j-worker-1"
    assert pod["metadata"]["namespace"] == "ns"
    assert pod["metadata"]["labels"] == {
        "team": "a",
        constants.LABEL_JOB_NAME: "j",
        constants.LABEL_REPLICA_TYPE: "worker",
        constants.LABEL_REPLICA_INDEX: "1",
        constants.LABEL_T9K_OWNER: "j",
    }
    assert pod["metadata"]["annotations"] == {
        "note": "kept",
        constants.ANNOTATION_BACKOFF_COUNT: "2",
    }
    [owner] = pod["metadata"]["ownerReferences"]
    assert owner["uid"] == "job-uid"
    assert owner["controller"] is True and owner["blockOwnerDeletion"] is True
    assert pod["spec"]["restartPolicy"] == "Never", "restarts are the reconciler's"
    assert "schedulerName" not in pod["spec"]
    master_pod = render_pod(META, spec, master, {})
    assert master_pod["metadata"]["labels"][constants.LABEL_JOB_ROLE] == constants.JOB_ROLE_MASTER
    assert TEMPLATE["spec"]["restartPolicy"] == "OnFailure", "the job's template is not changed"


def test_t9k_scheduler_sets_scheduler_queue_and_priority() -> None:
    spec = (
        MASTER_AND_WORKERS.clone()
        .spec(scheduler={"t9kScheduler": {"queue": "gpu", "priority": 50}})
        .decoded_spec()
    )
    pod = render_pod(META, spec, replicas_of(spec)[0], {}, "custom-t9k")
    assert pod["spec"]["schedulerName"] == "custom-t9k"
    assert pod["metadata"]["labels"][constants.LABEL_T9K_QUEUE] == "gpu"
    assert pod["metadata"]["labels"][constants.LABEL_T9K_PRIORITY] == "50"


def test_headless_service_publishing_not_ready_addresses() -> None:
    spec = MASTER_AND_WORKERS.decoded_spec()
    service = render_service(META, replicas_of(spec)[1])
    assert service["metadata"]["name"] == "j-worker-0"
    assert service["metadata"]["ownerReferences"][0]["uid"] == "job-uid"
    assert service["spec"]["clusterIP"] == "None"
    assert service["spec"]["publishNotReadyAddresses"] is True
    assert service["spec"]["selector"] == {
        constants.LABEL_JOB_NAME: "j",
        constants.LABEL_REPLICA_TYPE: "worker",
        constants.LABEL_REPLICA_INDEX: "0",
    }
