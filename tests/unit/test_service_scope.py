"""Service scope `Job` (api/constants.py): one headless Service names every replica of a job,
each pod a hostname under it; `Replica`, the default, keeps one Service per replica. The names,
the objects rendered, the planner's creations and deletions, and admission."""

from __future__ import annotations

import copy
from typing import Any

from support.jobs import JobBuilder
from support.planning import META, conditions, observe, replica_pod

from torchjob.api import constants
from torchjob.api.defaults import default_job
from torchjob.api.validation import validate
from torchjob.render.environment import replica_env
from torchjob.render.replica_objects import render_pod, render_service
from torchjob.render.topology import Replica, replicas_of, service_host, service_name

SCOPE = constants.ANNOTATION_SERVICE_SCOPE
JOB_META: dict[str, Any] = {**META, "annotations": {SCOPE: constants.SERVICE_SCOPE_JOB}}
TRAINER = {"name": "python", "image": "i", "args": ["t.py"]}
JOB = JobBuilder().replicas("master", 1, container=TRAINER).replicas("worker", 2, container=TRAINER)


def test_names_under_the_jobs_service() -> None:
    worker = Replica("worker", 1, 2)
    assert service_name("j", worker, constants.SERVICE_SCOPE_JOB) == "j"
    assert service_name("j", worker, constants.SERVICE_SCOPE_REPLICA) == "j-worker-1"
    assert service_host("j", "ns", "master", 0, constants.SERVICE_SCOPE_JOB) == (
        "j-master-0.j.ns.svc"
    )
    assert service_host("j", "ns", "master", 0) == "j-master-0.ns.svc"


def test_the_master_address_is_the_masters_hostname_under_the_jobs_service() -> None:
    spec = JOB.clone().torchrun().decoded_spec()
    env = {
        e["name"]: e["value"]
        for e in replica_env(
            spec,
            Replica("worker", 0, 1),
            job_name="j",
            namespace="ns",
            job_uid="u",
            container={},
            service_scope=constants.SERVICE_SCOPE_JOB,
        )
    }
    assert env["MASTER_ADDR"] == env["PET_MASTER_ADDR"] == "j-master-0.j.ns.svc"
    assert env["PET_RDZV_ENDPOINT"] == "j-master-0.j.ns.svc:23456"


def test_each_pod_is_a_hostname_under_the_one_service_that_selects_them_all() -> None:
    spec = JOB.decoded_spec()
    worker = replicas_of(spec)[2]
    pod = render_pod(JOB_META, spec, worker, {})
    assert (pod["spec"]["hostname"], pod["spec"]["subdomain"]) == ("j-worker-1", "j")
    service = render_service(JOB_META, worker)
    assert service["metadata"]["name"] == "j"
    assert service["spec"]["selector"] == {constants.LABEL_JOB_NAME: "j"}
    assert service["metadata"]["labels"] == {constants.LABEL_JOB_NAME: "j"}
    assert service["spec"]["clusterIP"] == "None"
    assert service["spec"]["publishNotReadyAddresses"] is True
    assert service["metadata"]["ownerReferences"][0]["uid"] == "job-uid"
    # The default keeps what Kubeflow's and T9k's users know: no hostname, one Service each.
    assert "hostname" not in render_pod(META, spec, worker, {})["spec"]
    assert render_service(META, worker)["metadata"]["name"] == "j-worker-1"


def test_a_new_job_creates_one_service_and_is_initialized_with_it() -> None:
    spec = JOB.clone().run_policy(backoffLimit=3).decoded_spec()
    first = observe(spec, [], svcs=frozenset(), meta=JOB_META)
    assert [(r.type, r.index) for r in first.create_services] == [("master", 0)]
    assert len(first.create_pods) == 3
    pods = [replica_pod("master", 0), replica_pod("worker", 0), replica_pod("worker", 1)]
    running = observe(spec, pods, svcs=frozenset({"j"}), meta=JOB_META)
    assert running.create_services == [] and running.delete_services == []
    assert conditions(running.status)["Initialized"] == ("True", constants.REASON_CREATED)
    # Every replica's own Service is not what this job waits for.
    lacking = observe(spec, pods, svcs=frozenset({"j-master-0"}), meta=JOB_META)
    assert [(r.type, r.index) for r in lacking.create_services] == [("master", 0)]


def test_scaling_an_elastic_job_down_keeps_the_jobs_service() -> None:
    elastic = {"enabled": True, "minReplicas": 1, "maxReplicas": 4, "expectedReplicas": 2}
    spec = JOB.clone().torchrun().spec(elastic=elastic).decoded_spec()
    pods = [replica_pod("master", 0), replica_pod("worker", 0), replica_pod("worker", 1)]
    result = observe(spec, pods, svcs=frozenset({"j"}), meta=JOB_META)
    assert [name for name, _ in result.delete_pods] == ["j-worker-1"]
    assert result.delete_services == []


def test_admission_refuses_other_words_and_any_change() -> None:
    manifest = JOB.build()
    manifest["metadata"]["annotations"] = {SCOPE: "Pod"}
    errors = [str(e) for e in validate(default_job(manifest)[0]).errors]
    assert errors == [f"metadata.annotations[{SCOPE}]: 'Pod' is not one of Replica, Job"]
    manifest["metadata"]["annotations"] = {SCOPE: constants.SERVICE_SCOPE_JOB}
    chosen = default_job(manifest)[0]
    assert validate(chosen).errors == []
    dropped = copy.deepcopy(chosen)
    dropped["metadata"]["annotations"] = {}
    [error] = validate(dropped, chosen).errors
    assert error.path == f"metadata.annotations[{SCOPE}]"
    assert error.cause == "FieldValueForbidden"
    assert validate(chosen, chosen).errors == []
