"""Progress under `torchjob run`, through the installed command with small Python replicas (no
torch): every replica gets the run's endpoint (URL and token file, no CA), reports with the
standard library as Kubeflow's clients do, and the run prints them and keeps the last in
status.yaml; a container's own variables win, and the job's annotation turns it all off."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
from support.cli import process, run_to_end
from support.jobs import JobBuilder
from support.kubeflow import pytorchjob

from torchjob.api.progress import ANNOTATION_PROGRESS, ENV_CA_CERT, ENV_NAMES

PYTHON = ["python", "-c"]
# A replica that prints what it was given, then reports twice, as Kubeflow's clients do.
REPORTER = textwrap.dedent(
    """
    import json, os, stat, sys, urllib.request
    names = ("KUBEFLOW_TRAINER_SERVER_URL", "KUBEFLOW_TRAINER_SERVER_TOKEN",
             "KUBEFLOW_TRAINER_SERVER_CA_CERT")
    print("ENV " + json.dumps({n: os.environ.get(n) for n in names}))
    if "KUBEFLOW_TRAINER_SERVER_URL" not in os.environ:
        sys.exit(0)
    token_file = os.environ["KUBEFLOW_TRAINER_SERVER_TOKEN"]
    print("MODE " + oct(stat.S_IMODE(os.stat(token_file).st_mode)))

    def report(status):
        request = urllib.request.Request(
            os.environ["KUBEFLOW_TRAINER_SERVER_URL"],
            data=json.dumps({"trainerStatus": status}).encode(),
            headers={"Authorization": "Bearer " + open(token_file).read(),
                     "Content-Type": "application/json"},
            method="POST",
        )
        with urllib.request.urlopen(request, timeout=10) as answer:
            print("ANSWER", answer.status, answer.read().decode())

    report({"progressPercentage": 40, "estimatedRemainingSeconds": 70,
            "metrics": [{"name": "loss", "value": "0.5"}]})
    report({"progressPercentage": 100, "estimatedRemainingSeconds": 0,
            "metrics": [{"name": "loss", "value": "0.25"}, {"name": "accuracy", "value": "0.9"}]})
    """
)


def reporting_job(name: str = "prog") -> JobBuilder:
    return JobBuilder(name).replicas(
        "worker", 1, container=process([REPORTER], PYTHON), restartPolicy="Never"
    )


def replica_env(lines: list[str]) -> dict[str, str | None]:
    found = [json.loads(line.removeprefix("ENV ")) for line in lines if line.startswith("ENV ")]
    assert len(found) == 1, lines
    env: dict[str, str | None] = found[0]
    return env


def test_replicas_report_to_the_run_which_prints_and_keeps_the_last(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A CA of some other endpoint in this shell is not passed on: the run's endpoint is http.
    monkeypatch.setenv(ENV_CA_CERT, "/elsewhere/ca.crt")
    finished = run_to_end(reporting_job().build(), tmp_path)
    assert finished.returncode == 0, finished.stdout + finished.stderr
    lines = finished.replica_lines("prog-worker-0")
    env = replica_env(lines)
    url = env["KUBEFLOW_TRAINER_SERVER_URL"]
    assert url is not None and url.startswith("http://127.0.0.1:")
    assert url.endswith(
        "/apis/batch.tensorstack.dev/v1beta1/namespaces/default/pytorchtrainingjobs/prog/status"
    )
    assert env["KUBEFLOW_TRAINER_SERVER_TOKEN"] == str(tmp_path / "logs" / "progress-token")
    assert env["KUBEFLOW_TRAINER_SERVER_CA_CERT"] is None
    assert "MODE 0o600" in lines
    assert [line.split()[1] for line in lines if line.startswith("ANSWER")] == ["200", "200"]

    progress = [line for line in finished.stderr if line.startswith("torchjob: progress")]
    assert progress[0] == "torchjob: progress 40% · eta 1m10s · loss=0.5"
    assert progress[-1] == "torchjob: progress 100% · eta 0s · loss=0.25 · accuracy=0.9"
    trainer = finished.status["trainerStatus"]
    assert trainer["progressPercentage"] == 100
    assert trainer["estimatedRemainingSeconds"] == 0
    assert trainer["metrics"] == [
        {"name": "loss", "value": "0.25"},
        {"name": "accuracy", "value": "0.9"},
    ]
    assert trainer["lastUpdatedTime"]
    assert finished.status["phase"] == "Succeeded"
    assert not (tmp_path / "logs" / "progress-token").exists()  # the secret ends with the run


def test_a_container_s_own_variables_win(tmp_path: Path) -> None:
    own = [{"name": "KUBEFLOW_TRAINER_SERVER_URL", "value": "http://127.0.0.1:9/elsewhere"}]
    container = process(["import json, os; print('ENV ' + json.dumps(dict(os.environ)))"], PYTHON)
    container["env"] = own
    manifest = JobBuilder("own").replicas("worker", 1, container=container).build()
    finished = run_to_end(manifest, tmp_path)
    assert finished.returncode == 0, finished.stdout + finished.stderr
    env = replica_env(finished.replica_lines("own-worker-0"))
    assert env["KUBEFLOW_TRAINER_SERVER_URL"] == "http://127.0.0.1:9/elsewhere"
    assert env["KUBEFLOW_TRAINER_SERVER_TOKEN"] == str(tmp_path / "logs" / "progress-token")


def test_the_job_s_annotation_turns_reporting_off(tmp_path: Path) -> None:
    manifest = reporting_job("off").metadata(annotations={ANNOTATION_PROGRESS: "false"}).build()
    finished = run_to_end(manifest, tmp_path)
    assert finished.returncode == 0, finished.stdout + finished.stderr
    env = replica_env(finished.replica_lines("off-worker-0"))
    assert all(env[name] is None for name in ENV_NAMES)
    assert "trainerStatus" not in finished.status
    assert not any(line.startswith("torchjob: progress") for line in finished.stderr)
    assert sorted(p.name for p in (tmp_path / "logs").iterdir()) == [
        "off-worker-0.log",
        "status.yaml",
    ]


def test_a_pytorchjob_reports_to_its_own_path_and_shows_it_in_kubeflow_s_status(
    tmp_path: Path,
) -> None:
    manifest = pytorchjob("kf", masters=1, workers=0)
    master = manifest["spec"]["pytorchReplicaSpecs"]["Master"]
    master["restartPolicy"] = "Never"
    master["template"]["spec"]["containers"][0]["command"] = [*PYTHON, REPORTER]
    finished = run_to_end(manifest, tmp_path)
    assert finished.returncode == 0, finished.stdout + finished.stderr
    env = replica_env(finished.replica_lines("kf-master-0"))
    url = env["KUBEFLOW_TRAINER_SERVER_URL"]
    assert url is not None and url.endswith(
        "/apis/kubeflow.org/v1/namespaces/default/pytorchjobs/kf/status"
    )
    assert finished.status["trainerStatus"]["progressPercentage"] == 100
    assert finished.status["conditions"][-1]["type"] == "Succeeded"  # Kubeflow's status
