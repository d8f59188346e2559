"""`torchjob submit`'s flags become a job (views/cli/submission.py) that admission takes as it is:
the printed job round-trips through `torchjob run --dry-run` and the webhook's mutation
unchanged; flags that cannot become a job are refused naming the flag."""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml

from torchjob.api.admission import handle, mutate_job, validate_job
from torchjob.cli.main import main
from torchjob.cli.manifest import admit
from torchjob.views.cli.submission import Submission, SubmissionError, build_job

EVERYTHING = [
    *("--name", "demo", "--image", "img:1", "--workers", "3", "--gpus", "1"),
    *("--cpu", "2", "--memory", "4Gi", "--env", "A=1", "--env", "B=x=y"),
    *("--data", "logs:/mnt/logs", "--data", "datasets:/data/"),
    *("--tensorboard", "--tensorboard-image", "tb:1", "--logdir", "/mnt/logs/runs/demo"),
    *("--sync-mode", "git", "--sync-source", "https://git.example/r.git", "--sync-branch", "v2"),
    *("--selector", "gpu=a100", "--toleration", "dedicated=ml:NoSchedule", "--toleration", "spot"),
    *("--priority", "high", "--queue", "team-a", "--queue-priority", "7"),
    *("--nproc-per-node", "gpu", "--max-restarts", "2", "--elastic-min", "2"),
    *("--elastic-max", "4", "--restart-policy", "ExitCode", "--backoff-limit", "5"),
    *("--deadline", "2h", "--cleanup-policy", "Unfinished", "--ttl", "30m"),
    *("--label", "team=a", "--image-pull-policy", "IfNotPresent"),
    *("--", "python", "train.py", "--epochs", "3"),
]


def printed(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    assert main(list(argv)) == 0, capsys.readouterr().err
    return capsys.readouterr().out


def review(job: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {"uid": "u", "operation": "CREATE", "namespace": "ns", "object": job},
    }


def test_every_flag_lands_where_the_api_has_it(capsys: pytest.CaptureFixture[str]) -> None:
    job = yaml.safe_load(printed(capsys, "submit", "--dry-run", "-n", "ns", *EVERYTHING))
    assert job["metadata"] == {"name": "demo", "namespace": "ns", "labels": {"team": "a"}}
    spec = job["spec"]
    (replica,) = spec["replicaSpecs"]
    assert (replica["type"], replica["replicas"], replica["restartPolicy"]) == (
        "worker",
        3,
        "ExitCode",
    )
    pod = replica["template"]["spec"]
    (container,) = pod["containers"]
    assert container["name"] == "python" and container["image"] == "img:1"
    assert container["imagePullPolicy"] == "IfNotPresent"
    # torchrun replaces the command: the script and its arguments are the container's args.
    assert "command" not in container and container["args"] == ["train.py", "--epochs", "3"]
    assert container["workingDir"] == "/workspace"
    assert container["env"] == [{"name": "A", "value": "1"}, {"name": "B", "value": "x=y"}]
    amounts = {"cpu": "2", "memory": "4Gi", "nvidia.com/gpu": "1"}
    assert container["resources"] == {"requests": amounts, "limits": amounts}
    assert container["volumeMounts"] == [
        {"name": "data-0", "mountPath": "/mnt/logs"},
        {"name": "data-1", "mountPath": "/data"},
        {"name": "code", "mountPath": "/workspace"},
    ]
    assert pod["volumes"] == [
        {"name": "data-0", "persistentVolumeClaim": {"claimName": "logs"}},
        {"name": "data-1", "persistentVolumeClaim": {"claimName": "datasets"}},
        {"name": "code", "emptyDir": {}},
    ]
    (sync,) = pod["initContainers"]
    assert sync["name"] == "git-sync"
    assert sync["command"] == [
        *("git", "clone", "--depth", "1", "--branch", "v2"),
        *("https://git.example/r.git", "/workspace"),
    ]
    assert sync["volumeMounts"] == [{"name": "code", "mountPath": "/workspace"}]
    assert pod["nodeSelector"] == {"gpu": "a100"}
    assert pod["tolerations"] == [
        {"key": "dedicated", "operator": "Equal", "value": "ml", "effect": "NoSchedule"},
        {"key": "spot", "operator": "Exists"},
    ]
    assert pod["priorityClassName"] == "high"
    assert spec["torchrunConfig"] == {
        "enabled": True,
        "procPerNode": "gpu",
        "maxRestarts": 2,
        "rdzvBackend": "c10d",
    }
    assert spec["elastic"] == {"enabled": True, "minReplicas": 2, "maxReplicas": 4}
    assert spec["runPolicy"] == {
        "backoffLimit": 5,
        "activeDeadlineSeconds": 7200,
        "cleanUpPolicy": "Unfinished",
        "ttlSecondsAfterFinished": 1800,
    }
    assert spec["scheduler"] == {"t9kScheduler": {"queue": "team-a", "priority": 7}}
    assert spec["tensorboardSpec"] == {
        "image": "tb:1",
        "trainingLogFilesets": ["t9k://pvc/logs/runs/demo"],
    }


@pytest.mark.parametrize(
    "flags",
    [
        EVERYTHING,
        ["--name", "plain", "--image", "i", "--", "python", "t.py"],
        ["--name", "two", "--image", "i", "--workers", "2", "--torchrun", "--", "t.py"],
    ],
    ids=["everything", "plain", "torchrun"],
)
def test_the_printed_job_round_trips_through_run_and_admission(
    capsys: pytest.CaptureFixture[str], tmp_path: Any, flags: list[str]
) -> None:
    as_yaml = printed(capsys, "submit", "--dry-run", "-o", "yaml", *flags)
    job = yaml.safe_load(as_yaml)
    as_json = printed(capsys, "submit", "--dry-run", "-o", "json", *flags)
    assert json.loads(as_json) == job
    # torchjob run --dry-run admits it and prints it back unchanged.
    path = tmp_path / "job.yaml"
    path.write_text(as_yaml)
    dry = printed(capsys, "run", "--dry-run", str(path))
    assert next(yaml.safe_load_all(dry)) == job
    # The webhook's mutation adds nothing; its validation allows it.
    assert "patch" not in handle(review(json.loads(as_json)), mutate_job)["response"]
    assert handle(review(json.loads(as_json)), validate_job)["response"]["allowed"] is True
    # submit -f of the printed job prints the same job.
    assert yaml.safe_load(printed(capsys, "submit", "--dry-run", "-f", str(path))) == job


def test_without_torchrun_the_command_is_the_containers() -> None:
    job = build_job(Submission(name="j", image="i", command=("python", "t.py", "--x")))
    container = job["spec"]["replicaSpecs"][0]["template"]["spec"]["containers"][0]
    assert container["command"] == ["python", "t.py", "--x"] and "args" not in container
    assert "torchrunConfig" not in job["spec"]
    assert admit(job).spec.replica_specs is not None


def test_the_namespace_defaults_as_run_does(
    capsys: pytest.CaptureFixture[str], tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "absent"))
    job = yaml.safe_load(
        printed(capsys, "submit", "--dry-run", "--name", "j", "--image", "i", "--", "x")
    )
    assert job["metadata"]["namespace"] == "default"


@pytest.mark.parametrize(
    ("submission", "message"),
    [
        (Submission(name="j", image="i"), "give the command to run after `--`"),
        (Submission(name="j", image="i", command=("x",), data=("nopath",)), "--data 'nopath'"),
        (Submission(name="j", image="i", command=("x",), data=("c:rel",)), "absolute path"),
        (Submission(name="j", image="i", command=("x",), env=("NOVALUE",)), "--env 'NOVALUE'"),
        (
            Submission(name="j", image="i", command=("x",), tensorboard=True),
            "--tensorboard needs --logdir",
        ),
        (
            Submission(name="j", image="i", command=("x",), logdir="/l", tensorboard_image="t"),
            "--logdir /l: not on any --data claim",
        ),
        (
            Submission(name="j", image="i", command=("x",), logdir="/l", data=("c:/l",)),
            "--tensorboard-image",
        ),
        (
            Submission(name="j", image="i", command=("x",), tolerations=("k:Sometimes",)),
            "the effect must be one of",
        ),
        (Submission(name="j", image="i", command=("x",), queue_priority=3), "needs --queue"),
        (Submission(name="j", image="i", command=("x",), sync_mode="git"), "--sync-source"),
    ],
)
def test_flags_that_cannot_make_a_job_are_refused_by_name(
    submission: Submission, message: str
) -> None:
    with pytest.raises(SubmissionError, match=message.replace("(", r"\(")):
        build_job(submission)


def test_a_logdir_that_is_a_whole_claim_reads_the_claim() -> None:
    job = build_job(
        Submission(
            name="j",
            image="i",
            command=("x",),
            data=("logs:/logs",),
            logdir="/logs/",
            tensorboard_image="t",
        )
    )
    assert job["spec"]["tensorboardSpec"]["trainingLogFilesets"] == ["t9k://pvc/logs"]


def test_refusals_by_admission_exit_2_with_the_field_path(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code = main(
        [
            *("submit", "--dry-run", "--name", "j", "--image", "i"),
            *("--elastic-min", "3", "--elastic-max", "2", "--", "t.py"),
        ]
    )
    assert code == 2
    assert "spec.elastic" in capsys.readouterr().err


def test_flags_and_a_file_do_not_mix(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["submit", "--dry-run", "-f", "job.yaml", "--name", "x"]) == 2
    assert "either -f FILE or the job's flags" in capsys.readouterr().err
    assert main(["submit", "--dry-run", "--name", "x", "--", "t.py"]) == 2
    assert "submit needs --image" in capsys.readouterr().err


def test_limits_above_the_requests() -> None:
    job = build_job(
        Submission(
            name="j", image="i", command=("x",), cpu="100m", cpu_limit="2", memory="1Gi", gpus=2
        )
    )
    resources = job["spec"]["replicaSpecs"][0]["template"]["spec"]["containers"][0]["resources"]
    assert resources == {
        "requests": {"cpu": "100m", "memory": "1Gi", "nvidia.com/gpu": "2"},
        "limits": {"cpu": "2", "memory": "1Gi", "nvidia.com/gpu": "2"},
    }
    limited = build_job(Submission(name="j", image="i", command=("x",), memory_limit="1Gi"))
    container = limited["spec"]["replicaSpecs"][0]["template"]["spec"]["containers"][0]
    assert container["resources"] == {"limits": {"memory": "1Gi"}}


def test_the_namespace_is_the_flag_the_manifest_the_context_then_default(
    capsys: pytest.CaptureFixture[str], tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    kubeconfig = tmp_path / "config"
    kubeconfig.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:1"}}],
                "users": [{"name": "u", "user": {}}],
                "contexts": [
                    {"name": "team", "context": {"cluster": "c", "user": "u", "namespace": "t"}},
                    {"name": "bare", "context": {"cluster": "c", "user": "u"}},
                ],
                "current-context": "team",
            }
        )
    )
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
    flags = ["--name", "j", "--image", "i", "--", "x"]

    def namespace(*extra: str) -> str:
        job = yaml.safe_load(printed(capsys, "submit", "--dry-run", *extra, *flags))
        return str(job["metadata"]["namespace"])

    assert namespace() == "t"
    assert namespace("-n", "other") == "other"
    assert namespace("--context", "bare") == "default"
    path = tmp_path / "job.yaml"
    document = yaml.safe_load(printed(capsys, "submit", "--dry-run", "-n", "mine", *flags))
    path.write_text(yaml.safe_dump(document))
    written = yaml.safe_load(printed(capsys, "submit", "--dry-run", "-f", str(path)))
    assert written["metadata"]["namespace"] == "mine"
