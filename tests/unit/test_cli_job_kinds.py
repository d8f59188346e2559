"""The cluster commands on a job of any API (views/cli/job_reference.py, cli/connection.py): a job
argument is `NAME` or `KIND/NAME` by any of a kind's names; `list` lists every API the cluster
serves (one whose list answers 404 is not installed: skipped) and names each job as the commands
take it; a TrainJob's row and description are read as its kind reads it; and `get`, `pause` and
`logs` of a TrainJob call its own resource, patch and container, against a stand-in apiserver."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml
from aiohttp import web
from support.jobs import JobBuilder
from support.trainer import TRAIN_JOB as TRAIN_JOB_MANIFEST
from support.trainer import started

from torchjob.api.constants import LABEL_JOB_NAME
from torchjob.api.job_api import JOB_APIS, KUBEFLOW_JOB, TRAIN_JOB, TRAINING_JOB, JobApi
from torchjob.api.kubeflow import STATUS_RECORD
from torchjob.cli import commands
from torchjob.cli.connection import CliError, connect
from torchjob.cli.logs import logs
from torchjob.cli.main import main, parser
from torchjob.kube.resources import PODS, job_resource
from torchjob.views.cli import description, tables
from torchjob.views.cli.job_reference import JobRef, UnknownJobKind, job_reference, shown

NOW = datetime(2026, 1, 2, 12, 0, 0, tzinfo=UTC)
JOB_VERBS = (["get"], ["logs"], ["wait"], ["pause"], ["resume"], ["tensorboard"], ["diagnose"])


def trainjob(name: str = "j") -> dict[str, Any]:
    """A TrainJob of two nodes, its runtime copied in, the lifecycle running it."""
    job = started(TRAIN_JOB_MANIFEST)
    job["metadata"].update(name=name, creationTimestamp="2026-01-02T11:00:00Z")
    job["status"][STATUS_RECORD].update(phase="Running", aggregate={"running": 2}, backoffCount=1)
    return job


def training_job(name: str = "train") -> dict[str, Any]:
    job = JobBuilder(name, "ns").replicas("worker", 1).build()
    job["metadata"]["creationTimestamp"] = "2026-01-02T11:59:00Z"
    job["status"] = {"phase": "Running", "aggregate": {"running": 1}}
    return job


# -- the job argument --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "api", "name"),
    [
        ("mnist", TRAINING_JOB, "mnist"),
        ("ptj/mnist", TRAINING_JOB, "mnist"),
        ("PyTorchTrainingJobs/mnist", TRAINING_JOB, "mnist"),
        ("pytorchjob/x", KUBEFLOW_JOB, "x"),
        ("PyTorchJobs/x", KUBEFLOW_JOB, "x"),
        ("trainjob/mnist", TRAIN_JOB, "mnist"),
        ("trainjobs/mnist", TRAIN_JOB, "mnist"),
        ("TrainJob/mnist", TRAIN_JOB, "mnist"),
        ("trainjob.trainer.kubeflow.org/mnist", TRAIN_JOB, "mnist"),
    ],
)
def test_a_job_is_named_by_any_name_of_its_kind(text: str, api: JobApi, name: str) -> None:
    assert job_reference(text) == JobRef(api, name)


@pytest.mark.parametrize(
    "text", ["tfjob/x", "trainjob.kubeflow.org/x", "trainjob/", "trainjob/a/b", "/x"]
)
def test_an_unknown_kind_or_no_name_is_refused(text: str) -> None:
    with pytest.raises(UnknownJobKind, match=text):
        job_reference(text)


def test_the_refusal_names_the_kinds_known_and_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["get", "tfjob/x"])
    assert exited.value.code == 2
    said = capsys.readouterr().err
    assert "unknown kind 'tfjob'" in said
    assert all(api.kind.lower() in said for api in JOB_APIS) and "(ptj)" in said


@pytest.mark.parametrize("verb", [*JOB_VERBS, ["top", "job"]])
def test_every_verb_on_a_job_takes_kind_slash_name(verb: list[str]) -> None:
    assert parser().parse_args([*verb, "trainjob/x"]).job == JobRef(TRAIN_JOB, "x")
    deleted = parser().parse_args(["delete", "x", "pytorchjob/y"]).jobs
    assert deleted == [JobRef(TRAINING_JOB, "x"), JobRef(KUBEFLOW_JOB, "y")]


def test_a_job_is_shown_as_it_is_named_back() -> None:
    for api in JOB_APIS:
        assert job_reference(shown(api, "n")) == JobRef(api, "n")
    assert shown(TRAINING_JOB, "n") == "n" and shown(TRAIN_JOB, "n") == "trainjob/n"
    assert JobRef(TRAIN_JOB, "n").resource == "trainjob.trainer.kubeflow.org/n"


# -- a TrainJob's rows -------------------------------------------------------------------------


def test_the_list_shows_a_trainjob_as_its_kind_reads_it() -> None:
    text = tables.list_table([trainjob(), training_job()], NOW, all_namespaces=True)
    assert [line.split() for line in text.splitlines()[1:]] == [
        ["ns", "train", "Running", "1/1", "0", "-", "-", "0", "1m"],
        # Trainer's state (its last condition; Created before any), two nodes, one restart.
        ["ns", "trainjob/j", "Created", "2/2", "1", "-", "-", "0", "1h"],
    ]
    top = tables.top_job_table([trainjob()], [])
    assert top.splitlines()[1].split()[:5] == ["trainjob/j", "Created", "0", "0", "4000m"]


def test_a_trainjob_is_described_by_its_kind_and_its_nodes() -> None:
    job = trainjob()
    job["spec"]["suspend"] = True
    text = description.describe(job, [], [], NOW)
    assert "Kind:        TrainJob (trainer.kubeflow.org/v1alpha1)" in text
    assert "Phase:       Created" in text and "Restarts:    1 (backoffLimit" in text
    assert "torchjob resume trainjob/j" in text
    replicas = text.split("Replicas:")[1].split("Events:")[0]
    assert "node-0" in replicas and "node-1" in replicas
    assert "Kind:" not in description.describe(training_job(), [], [], NOW)


# -- against a stand-in apiserver --------------------------------------------------------------


@dataclass
class StandIn:
    """What the apiserver answers, by path (`{"items": []}` for any other), and what it was
    asked."""

    url: str = ""
    answers: dict[str, tuple[int, Any]] = field(default_factory=dict)
    asked: list[dict[str, Any]] = field(default_factory=list)

    def serve(self, path: str, body: Any, status: int = 200) -> None:
        self.answers[path] = (status, body)


STAND_IN = web.AppKey("stand_in", StandIn)


async def _answer(request: web.Request) -> web.StreamResponse:
    stand_in = request.app[STAND_IN]
    body = await request.read()
    stand_in.asked.append(
        {
            "method": request.method,
            "path": request.raw_path.split("?")[0],
            "query": dict(request.query),
            "body": orjson.loads(body) if body else None,
        }
    )
    status, answer = stand_in.answers.get(request.path, (200, {"items": []}))
    if isinstance(answer, str):
        return web.Response(text=answer, status=status)
    return web.json_response(answer, status=status)


@pytest.fixture
async def apiserver() -> AsyncIterator[StandIn]:
    app = web.Application()
    app[STAND_IN] = stand_in = StandIn()
    app.router.add_route("*", "/{tail:.*}", _answer)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    stand_in.url = f"http://127.0.0.1:{runner.addresses[0][1]}"
    try:
        yield stand_in
    finally:
        await runner.cleanup()


def cluster_args(apiserver: StandIn, tmp_path: Path, *argv: str) -> Any:
    """The parsed arguments of `torchjob ARGV` in namespace ns of the stand-in."""
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": apiserver.url}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "x",
    }
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(config))
    return parser().parse_args([*argv, f"--kubeconfig={path}", "-n", "ns"])


def listed(*items: dict[str, Any]) -> dict[str, Any]:
    """A list answer, its items without apiVersion and kind (they are the list's)."""
    return {
        "items": [{k: v for k, v in i.items() if k not in ("apiVersion", "kind")} for i in items]
    }


# The apiserver's answer to a list of a resource it does not serve (its CRD is not installed).
NOT_SERVED = {"kind": "Status", "reason": "NotFound", "message": "the server could not find it"}


async def test_list_lists_every_api_served_and_skips_the_absent(
    apiserver: StandIn, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    apiserver.serve(job_resource(TRAINING_JOB).path("ns"), listed(training_job()))
    apiserver.serve(job_resource(KUBEFLOW_JOB).path("ns"), NOT_SERVED, 404)
    apiserver.serve(job_resource(TRAIN_JOB).path("ns"), listed(trainjob()))
    assert await commands.list_jobs(cluster_args(apiserver, tmp_path, "list")) == 0
    out, err = capsys.readouterr()
    assert [line.split()[:2] for line in out.splitlines()] == [
        ["NAME", "PHASE"],
        ["train", "Running"],
        ["trainjob/j", "Created"],
    ]
    assert err == ""
    await commands.list_jobs(cluster_args(apiserver, tmp_path, "list", "-o", "name"))
    assert capsys.readouterr().out == "train\ntrainjob/j\n"
    await commands.list_jobs(cluster_args(apiserver, tmp_path, "list", "-o", "json"))
    items = orjson.loads(capsys.readouterr().out)["items"]
    assert [(i["apiVersion"], i["kind"]) for i in items] == [
        (TRAINING_JOB.api_version, TRAINING_JOB.kind),
        (TRAIN_JOB.api_version, TRAIN_JOB.kind),
    ]


async def test_a_refused_opt_in_api_is_left_out_with_a_warning(
    apiserver: StandIn, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    refused = {"kind": "Status", "reason": "Forbidden", "message": "cannot list trainjobs"}
    apiserver.serve(job_resource(TRAIN_JOB).path("ns"), refused, 403)
    apiserver.serve(job_resource(KUBEFLOW_JOB).path("ns"), NOT_SERVED, 404)
    await commands.list_jobs(cluster_args(apiserver, tmp_path, "list"))
    out, err = capsys.readouterr()
    assert out == ""
    assert "Warning: TrainJobs left out: the cluster refused: cannot list trainjobs" in err
    assert "No PyTorchTrainingJobs found in ns." in err


async def test_get_pause_and_logs_of_a_trainjob_use_its_own_api(
    apiserver: StandIn, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    job_path = job_resource(TRAIN_JOB).object_path("ns", "j")
    apiserver.serve(job_path, trainjob())
    node = {"name": "node", "state": {"running": {}}}
    pod = {
        "metadata": {"name": "j-node-0", "labels": {LABEL_JOB_NAME: "j"}},
        "spec": {"containers": [{"name": "restart-agent"}, {"name": "node"}]},
        "status": {"phase": "Running", "containerStatuses": [node]},
    }
    apiserver.serve(PODS.object_path("ns", "j-node-0"), pod)
    apiserver.serve(PODS.object_path("ns", "j-node-0", "log"), "training\n")

    await commands.get(cluster_args(apiserver, tmp_path, "get", "trainjob/j"))
    assert "Kind:        TrainJob" in capsys.readouterr().out
    await commands.pause(cluster_args(apiserver, tmp_path, "pause", "TrainJobs/j"))
    assert capsys.readouterr().out == "trainjob.trainer.kubeflow.org/j paused\n"
    patch = next(a for a in apiserver.asked if a["method"] == "PATCH")
    assert (patch["path"], patch["body"]) == (job_path, {"spec": {"suspend": True}})
    await logs(cluster_args(apiserver, tmp_path, "logs", "trainjob/j"))
    assert capsys.readouterr().out == "training\n"
    log = next(a for a in apiserver.asked if a["path"].endswith("/log"))
    assert log["query"] == {"container": "node"}


async def test_a_job_not_found_suggests_the_same_name_of_another_kind(
    apiserver: StandIn, tmp_path: Path
) -> None:
    details = {"name": "j", "kind": TRAINING_JOB.plural}
    absent = {"kind": "Status", "reason": "NotFound", "message": "not found", "details": details}
    apiserver.serve(job_resource(TRAINING_JOB).object_path("ns", "j"), absent, 404)
    apiserver.serve(job_resource(TRAIN_JOB).path("ns"), listed(trainjob()))
    with pytest.raises(
        CliError, match=r'job "j" not found in namespace ns; did you mean trainjob/j\?'
    ):
        await commands.get(cluster_args(apiserver, tmp_path, "get", "j"))


async def test_a_jobs_pods_are_its_own_not_those_of_a_namesake_of_another_kind(
    apiserver: StandIn, tmp_path: Path
) -> None:
    def pod(name: str, owner: JobApi) -> dict[str, Any]:
        reference = {"apiVersion": owner.api_version, "kind": owner.kind, "controller": True}
        return {"metadata": {"name": name, "ownerReferences": [{**reference, "name": "j"}]}}

    apiserver.serve(
        PODS.path("ns"), listed(pod("j-node-0", TRAIN_JOB), pod("j-worker-0", KUBEFLOW_JOB))
    )
    args = cluster_args(apiserver, tmp_path, "get", "j")
    async with connect(commands.target_of(args)) as cluster:
        pods = await cluster.job_pods("j", TRAIN_JOB, all_namespaces=False)
    assert [p["metadata"]["name"] for p in pods] == ["j-node-0"]
    assert apiserver.asked[-1]["query"] == {"labelSelector": f"{LABEL_JOB_NAME}=j"}
