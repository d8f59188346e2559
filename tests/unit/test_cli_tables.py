"""What the cluster commands print (views/cli/: tables.py, description.py; views/quantities.py): the
list, the description of a job, top by job and by node, ages, quantities and name suggestions;
and the completion script."""

from __future__ import annotations

import shutil
import subprocess
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest
from support.jobs import JobBuilder

from torchjob.api import constants
from torchjob.cli.completion import bash_script, zsh_script
from torchjob.cli.main import parser
from torchjob.views import quantities, summary
from torchjob.views.cli import description, tables

NOW = datetime(2026, 1, 2, 12, 0, 0, tzinfo=UTC)


def ago(seconds: float) -> str:
    return (NOW - timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%SZ")


def job(name: str = "train", namespace: str = "ns", **status: Any) -> dict[str, Any]:
    built = (
        JobBuilder(name, namespace)
        .replicas("worker", 2)
        .container(resources={"limits": {"nvidia.com/gpu": "2", "cpu": "1", "memory": "1Gi"}})
        .build()
    )
    built["metadata"]["creationTimestamp"] = ago(200)
    built["status"] = status
    return built


def pod(
    name: str,
    job_name: str = "train",
    node: str | None = None,
    phase: str = "Running",
    requests: dict[str, str] | None = None,
    **status: Any,
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "containers": [{"name": "python", "resources": {"requests": requests or {}}}]
    }
    if node:
        spec["nodeName"] = node
    return {
        "metadata": {
            "name": name,
            "namespace": "ns",
            "uid": f"uid-{name}",
            "labels": {constants.LABEL_JOB_NAME: job_name},
        },
        "spec": spec,
        "status": {"phase": phase, **status},
    }


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (0, "0s"),
        (59, "59s"),
        (60, "1m"),
        (200, "3m20s"),
        (700, "11m"),
        (3600 * 3 + 120, "3h2m"),
        (3600 * 20, "20h"),
        (86400 * 3 + 3600, "3d1h"),
        (86400 * 30, "30d"),
    ],
)
def test_ages_read_as_kubectl_writes_them(seconds: int, text: str) -> None:
    assert tables.age(ago(seconds), NOW) == text
    assert tables.age(None, NOW) == "<unknown>"


@pytest.mark.parametrize(
    ("value", "number"),
    [
        ("500m", Decimal("0.5")),
        ("2", Decimal(2)),
        (3, Decimal(3)),
        ("1Gi", Decimal(2**30)),
        ("1G", Decimal(10**9)),
        ("128974848", Decimal(128974848)),
        ("100Ki", Decimal(102400)),
        ("1.5Gi", Decimal(3 * 2**29)),
        ("1e3", Decimal(1000)),
        ("2E", Decimal(2 * 10**18)),
        ("nonsense", Decimal(0)),
        (None, Decimal(0)),
    ],
)
def test_quantities(value: Any, number: Decimal) -> None:
    assert quantities.quantity(value) == number


def test_the_list_shows_running_over_total_restarts_gpus_and_age() -> None:
    jobs = [
        job("b-job", phase="Running", aggregate={"running": 2}, backoffCount=1),
        job("a-job"),
    ]
    text = tables.list_table(jobs, NOW)
    assert text.splitlines() == [
        "NAME    PHASE     REPLICAS   RESTARTS   PROGRESS   ETA   GPUS   AGE",
        "a-job   Pending   0/2        0          -          -     4      3m20s",
        "b-job   Running   2/2        1          -          -     4      3m20s",
    ]
    everywhere = tables.list_table(jobs, NOW, all_namespaces=True)
    assert everywhere.splitlines()[0].split()[:2] == ["NAMESPACE", "NAME"]
    assert everywhere.splitlines()[1].split()[:2] == ["ns", "a-job"]


def test_the_wide_list_adds_queue_nodes_and_the_latest_reason() -> None:
    queued = job(
        phase="Running",
        conditions=[
            {
                "type": "Initialized",
                "status": "True",
                "reason": "ReplicasCreated",
                "lastTransitionTime": ago(100),
            },
            {
                "type": "Running",
                "status": "True",
                "reason": "AllReplicasRunning",
                "lastTransitionTime": ago(50),
            },
        ],
    )
    queued["spec"]["scheduler"] = {"t9kScheduler": {"queue": "q"}}
    pods = [
        pod("train-worker-0", node="n1"),
        pod("train-worker-1", node="n2"),
        pod("x", "other", "n3"),
    ]
    row = tables.list_table([queued], NOW, wide=True, pods=pods).splitlines()[1].split()
    assert row[-3:] == ["q", "n1,n2", "AllReplicasRunning"]


def progressing(name: str, job_phase: str, **report: Any) -> dict[str, Any]:
    return job(name, phase=job_phase, trainerStatus=report)


def test_the_list_shows_the_progress_the_training_process_reports() -> None:
    jobs = [
        progressing("a", "Running", progressPercentage=45, estimatedRemainingSeconds=130),
        progressing("b", "Running", progressPercentage=7, estimatedRemainingSeconds=3900),
        progressing("c", "Running", estimatedRemainingSeconds=59),
        progressing("d", "Running", progressPercentage=0),
        progressing("e", "Succeeded", progressPercentage=100, estimatedRemainingSeconds=0),
        progressing("f", "Failed", progressPercentage=60, estimatedRemainingSeconds=400),
        job("g", phase="Running"),
    ]
    rows = [line.split() for line in tables.list_table(jobs, NOW).splitlines()]
    assert rows[0][4:6] == ["PROGRESS", "ETA"]
    assert {row[0]: row[4:6] for row in rows[1:]} == {
        "a": ["45%", "2m10s"],
        "b": ["7%", "1h5m"],
        "c": ["-", "59s"],
        "d": ["0%", "-"],
        # A finished job shows where it got to, and no time left.
        "e": ["100%", "-"],
        "f": ["60%", "-"],
        "g": ["-", "-"],
    }


def test_a_progress_report_out_of_shape_shows_nothing() -> None:
    """The schema bounds what the apiserver stores; a view still never fails on a status."""
    odd = job("odd", phase="Running", trainerStatus={"progressPercentage": True})
    odd["status"]["trainerStatus"]["estimatedRemainingSeconds"] = "soon"
    assert summary.progress_text(odd) == "-" and summary.eta_text(odd) == "-"
    listed = job("listed", phase="Running", trainerStatus=["45"])
    assert summary.progress_text(listed) == "-" and summary.eta_text(listed) == "-"


def test_a_job_is_described_with_the_progress_its_training_process_reports() -> None:
    reporting = progressing(
        "train",
        "Running",
        progressPercentage=45,
        estimatedRemainingSeconds=130,
        metrics=[{"name": "loss", "value": "0.25"}, {"name": "epoch", "value": "1.5"}],
        lastUpdatedTime=ago(12),
    )
    text = description.describe(reporting, [], [], NOW)
    section = text.split("Progress:\n")[1].split("\n\n")[0].splitlines()
    assert section == [
        "  Done:         45%",
        "  ETA:          2m10s",
        "  Metrics:      loss=0.25, epoch=1.5",
        "  Last report:  12s ago",
    ]
    assert text.index("Progress:") < text.index("Conditions:")


def test_a_finished_job_is_described_with_its_last_progress_and_no_eta() -> None:
    finished = progressing(
        "train", "Succeeded", progressPercentage=100, lastUpdatedTime=ago(3 * 3600 + 120)
    )
    section = description.describe(finished, [], [], NOW).split("Progress:\n")[1]
    assert section.split("\n\n")[0].splitlines() == [
        "  Done:         100%",
        "  ETA:          -",
        "  Metrics:      -",
        "  Last report:  3h2m ago",
    ]


def test_a_job_without_a_report_says_so() -> None:
    text = description.describe(job(phase="Running"), [], [], NOW)
    assert "Progress:\n  none reported\n" in text


def test_a_job_is_described_with_conditions_replicas_events_and_its_tensorboard() -> None:
    described = job(
        phase="Failed",
        backoffCount=1,
        conditions=[
            {
                "type": "Failed",
                "status": "True",
                "reason": "MasterFailed",
                "message": "train-worker-0 exited with code 3",
                "lastTransitionTime": ago(5),
            },
        ],
    )
    described["spec"]["runPolicy"] = {"backoffLimit": 1}
    described["spec"]["tensorboardSpec"] = {"image": "tb", "trainingLogFilesets": ["t9k://pvc/l"]}
    described["status"]["tensorboard"] = {
        "ready": True,
        "url": "http://train-tensorboard.ns.svc:6006/",
    }
    ended = {"terminated": {"exitCode": 3, "reason": "Error"}}
    pods = [
        pod(
            "train-worker-0",
            node="n1",
            phase="Failed",
            containerStatuses=[{"name": "python", "restartCount": 0, "state": ended}],
        ),
    ]
    events = [
        {
            "type": "Warning",
            "reason": "MasterFailed",
            "message": "master   failed",
            "involvedObject": {"kind": "PyTorchTrainingJob", "name": "train"},
            "lastTimestamp": ago(5),
        },
        {
            "type": "Normal",
            "reason": "ReplicasCreated",
            "message": "created",
            "involvedObject": {"kind": "PyTorchTrainingJob", "name": "train"},
            "lastTimestamp": ago(100),
        },
    ]
    text = description.describe(described, pods, events, NOW, tensorboard_pods=[])
    assert "Phase:       Failed" in text
    assert "Restarts:    1 (backoffLimit 1)" in text
    assert "Requests:    4 GPU(s), 2000m CPU, 2048Mi memory in all" in text
    assert "Failed   True     MasterFailed   5s    train-worker-0 exited with code 3" in text
    assert "worker-0   train-worker-0   n1     Failed   0          Error (exit code 3)" in text
    assert "worker-1   <none>                  Absent   0" in text
    assert "In-cluster URL: http://train-tensorboard.ns.svc:6006/" in text
    assert "torchjob tensorboard train -n ns" in text
    assert "No TensorBoard pod is running yet." in text
    # Events oldest first, whitespace in messages folded.
    lines = text.split("Events:")[1].splitlines()
    assert "ReplicasCreated" in lines[2] and "master failed" in lines[3]


def test_gang_restarts_and_avoided_nodes_are_described() -> None:
    job = {
        "metadata": {"name": "train", "namespace": "ns"},
        "spec": {"runPolicy": {"backoffLimit": 5}},
        "status": {"backoffCount": 2, "gangRestarts": 2, "avoidedNodes": ["n1"]},
    }
    text = description.describe(job, [], [], NOW, tensorboard_pods=[])
    assert "Restarts:    2 (backoffLimit 5), 2 of every replica" in text
    assert "Avoiding:    n1 (its replicas kept failing there)" in text


def test_a_replica_waiting_to_start_says_why() -> None:
    waiting = pod(
        "p",
        phase="Pending",
        containerStatuses=[{"name": "python", "state": {"waiting": {"reason": "ErrImagePull"}}}],
    )
    assert summary.pod_reason(waiting) == "ErrImagePull"
    initialising = pod(
        "p",
        phase="Pending",
        initContainerStatuses=[{"name": "wait-for-master", "state": {"running": {}}}],
    )
    assert summary.pod_reason(initialising) == "Init:wait-for-master Running"


def test_top_job_counts_what_the_spec_asks_and_what_pods_on_nodes_hold() -> None:
    jobs = [job()]
    pods = [
        pod(
            "train-worker-0",
            node="n1",
            requests={"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": "2"},
        ),
        pod("train-worker-1", requests={"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": "2"}),
        pod("train-worker-9", node="n1", phase="Succeeded", requests={"cpu": "5"}),
    ]
    lines = tables.top_job_table(jobs, pods).splitlines()
    assert lines[1].split() == ["train", "Pending", "4", "2", "2000m", "1000m", "2048Mi", "1024Mi"]
    usage = {("ns", "train-worker-0"): quantities.Resources(Decimal("0.25"), Decimal(2**29))}
    used = tables.top_job_table(jobs, pods, usage=usage).splitlines()
    assert used[0].split()[-2:] == ["CPU(USED)", "MEMORY(USED)"]
    assert used[1].split()[-2:] == ["250m", "512Mi"]


def test_top_node_compares_allocatable_with_what_pods_request() -> None:
    nodes = [
        {
            "metadata": {"name": "n1"},
            "status": {"allocatable": {"cpu": "4", "memory": "16Gi", "nvidia.com/gpu": "8"}},
        },
        {"metadata": {"name": "n0"}, "status": {"allocatable": {"cpu": "2", "memory": "4Gi"}}},
    ]
    pods = [
        pod(
            "train-worker-0",
            node="n1",
            requests={"cpu": "1", "memory": "4Gi", "nvidia.com/gpu": "2"},
        ),
        {
            "metadata": {"name": "dns", "namespace": "kube-system"},
            "spec": {"nodeName": "n1", "containers": [{"resources": {"requests": {"cpu": "1"}}}]},
            "status": {"phase": "Running"},
        },
    ]
    lines = tables.top_node_table(nodes, pods).splitlines()
    assert lines[1].split() == ["n0", "0", "0", "2000m", "0m", "(0%)", "4096Mi", "0Mi", "(0%)", "0"]
    assert lines[2].split() == [
        "n1",
        "8",
        "2",
        "4000m",
        "2000m",
        "(50%)",
        "16Gi",
        "4096Mi",
        "(25%)",
        "1",
    ]


def test_an_init_container_larger_than_the_containers_sets_the_pod_request() -> None:
    spec = {
        "containers": [{"resources": {"requests": {"cpu": "1"}}}],
        "initContainers": [{"resources": {"requests": {"cpu": "3"}}}],
    }
    assert quantities.pod_spec_requests(spec).cpu == Decimal(3)


@pytest.mark.parametrize(
    ("name", "names", "expected"),
    [
        ("trian", ["train", "eval", "other"], ["train"]),
        ("Train", ["train"], ["train"]),
        ("mnist", ["mnist-ddp", "resnet"], ["mnist-ddp"]),
        ("zzz", ["train"], []),
    ],
)
def test_similar_names(name: str, names: list[str], expected: list[str]) -> None:
    assert tables.similar_names(name, names) == expected


def test_the_bash_completion_knows_every_command_and_flag() -> None:
    script = bash_script(parser())
    for command in (
        "run",
        "submit",
        "list",
        "get",
        "logs",
        "top",
        "delete",
        "pause",
        "resume",
        "wait",
        "tensorboard",
        "completion",
        "convert",
    ):
        assert f'"{command}' in script or f" {command} " in script, command
    assert "--nproc-per-node" in script and "--all-namespaces" in script
    assert '--restart-policy) choices="Never OnFailure Always ExitCode"' in script
    assert "torchjob list -o name" in script
    bash = shutil.which("bash")
    assert bash is not None, "bash checks the completion scripts (and runs `make` itself)"
    assert subprocess.run([bash, "-n"], input=script, text=True).returncode == 0
    assert subprocess.run([bash, "-n"], input=zsh_script(parser()), text=True).returncode == 0


def test_completion_completes_job_names_from_the_cluster(tmp_path: Any) -> None:
    """In bash, with a stand-in `torchjob` answering `list -o name`."""
    bash = shutil.which("bash")
    assert bash is not None, "bash runs the completion script (and `make` itself)"
    fake = tmp_path / "torchjob"
    fake.write_text('#!/bin/sh\necho "$@" > "$(dirname "$0")/asked"\necho train\necho trial\n')
    fake.chmod(0o755)
    script = bash_script(parser())
    probe = (
        f'PATH="{tmp_path}:$PATH"\n{script}\n'
        'COMP_WORDS=(torchjob logs -n team tr); COMP_CWORD=4; _torchjob; echo "${COMPREPLY[@]}"\n'
        'COMP_WORDS=(torchjob top ""); COMP_CWORD=2; _torchjob; echo "${COMPREPLY[@]}"\n'
        'COMP_WORDS=(torchjob submit --restart-policy ""); COMP_CWORD=3; _torchjob; '
        'echo "${COMPREPLY[@]}"\n'
    )
    out = subprocess.run([bash, "-c", probe], capture_output=True, text=True).stdout.splitlines()
    assert out == ["train trial", "job node", "Never OnFailure Always ExitCode"]
    assert (tmp_path / "asked").read_text().split() == ["list", "-o", "name", "-n", "team"]


@pytest.mark.parametrize(
    ("words", "expected"),
    [
        (
            [""],
            [
                "completion",
                "console",
                "convert",
                "delete",
                "diagnose",
                "get",
                "list",
                "logs",
                "pause",
            ],
        ),
        (["convert", "job.yaml", "--to", ""], ["kubeflow", "torchjob"]),
        (["top", ""], ["job", "node"]),
        (["submit", "--cleanup-policy", ""], ["None", "All", "Unfinished"]),
        (["logs", "-n", "team", "tr"], ["train", "trial"]),
        (["top", "job", ""], ["train", "trial", "eval"]),
        (["list", "--all-n"], ["--all-namespaces"]),
        (["run", ""], []),
    ],
)
def test_what_the_kubectl_plugin_completes(words: list[str], expected: list[str]) -> None:
    from torchjob.cli.completion import candidates

    asked: list[list[str]] = []

    def jobs(flags: list[str]) -> list[str]:
        asked.append(flags)
        return ["train", "trial", "eval"]

    found = candidates(parser("kubectl torchjob"), words, jobs)
    assert found[: len(expected)] == expected
    if words[0] == "logs":
        assert asked == [["-n", "team"]]


def test_a_replicas_restarts_are_carried_by_its_pod() -> None:
    restarted = pod("p", containerStatuses=[{"name": "python", "restartCount": 1}])
    restarted["metadata"]["annotations"] = {constants.ANNOTATION_CONSECUTIVE_RESTARTS: "2"}
    assert summary.pod_restarts(restarted) == 3
    assert summary.pod_restarts(pod("q")) == 0


def test_events_are_ordered_by_time_whatever_its_precision() -> None:
    micro = (NOW - timedelta(seconds=1.5)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    events = [
        {"reason": "Late", "eventTime": micro, "involvedObject": {"kind": "Pod", "name": "p"}},
        {
            "reason": "Early",
            "lastTimestamp": ago(2),
            "involvedObject": {"kind": "Pod", "name": "p"},
        },
    ]
    text = description.describe(job(), [], events, NOW)
    lines = text.split("Events:")[1].splitlines()
    assert "Early" in lines[2] and "Late" in lines[3]
