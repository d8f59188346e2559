"""`torchjob diagnose` as users run it, against the real control plane. No reconciler runs: the
test plays it, waiting for the job's diagnose annotation and answering in status.diagnosis through
the status subresource. The apiserver asks a stand-in kubelet (support.kubelet_logs) for the
restart agents' logs: one replica's pod runs on it and has printed its stacks; the other's is
bound to a node that is gone, so its log cannot be read, which the command says and goes on."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
from datetime import UTC, datetime
from typing import Any

from support import ControlPlane
from support.cli import TORCHJOB
from support.eventually import eventually
from support.kubelet_logs import log_kubelet
from support.pods import bare_pod

from torchjob.api.constants import (
    ANNOTATION_DIAGNOSE,
    DIAGNOSIS_REQUESTED,
    LABEL_JOB_NAME,
    LABEL_REPLICA_INDEX,
    LABEL_REPLICA_TYPE,
)
from torchjob.api.queries import TRAINING_CONTAINER_NAME
from torchjob.render.agent.restart_agent import REPORT_PREFIX
from torchjob.render.in_place import AGENT

TIMEOUT = 120.0
SUBMIT = ("submit", "--name", "train", "--image", "img", "--workers", "2", "--", "python", "t.py")
MESSAGE = "rank 1 (worker-1) did not answer; rank 0 (worker-0 on node) waits in all_reduce (gloo)"
STACKS = [
    "=== torchjob diagnosis 1: pid 7 rank 0 (python t.py) ===",
    "Current thread 0x00007f01 (most recent call first): [MainThread]",
    '  File "/usr/lib/python3/site-packages/torch/distributed/c10d.py", line 9 in all_reduce',
    '  File "/workspace/t.py", line 3 in <module>',
]


def cluster_flags(control_plane: ControlPlane, namespace: str) -> list[str]:
    return [f"--kubeconfig={control_plane.kubeconfig}", f"--namespace={namespace}"]


def create_job(control_plane: ControlPlane, namespace: str, node: str) -> None:
    """The job `train` as `submit` writes it, and its workers' pods with their restart agents:
    worker-0's on `node`, worker-1's on a node that does not exist (`<node>-gone`)."""
    flags = cluster_flags(control_plane, namespace)
    job = subprocess.run(
        [str(TORCHJOB), SUBMIT[0], *flags, "--dry-run", "-o", "json", *SUBMIT[1:]],
        capture_output=True,
        text=True,
        check=True,
        timeout=TIMEOUT,
        env={**os.environ, "KUBECONFIG": ""},
    ).stdout
    control_plane.kubectl("create", "-n", namespace, "-f", "-", input=job)
    for index, bound in ((0, node), (1, f"{node}-gone")):
        labels = {LABEL_JOB_NAME: "train", LABEL_REPLICA_TYPE: "worker"}
        labels[LABEL_REPLICA_INDEX] = str(index)
        pod = bare_pod(
            f"train-worker-{index}", labels=labels, node=bound, container=TRAINING_CONTAINER_NAME
        )
        agent = {"name": AGENT, "image": "img", "restartPolicy": "Always"}
        pod["spec"]["initContainers"] = [agent]
        control_plane.kubectl("create", "-n", namespace, "-f", "-", input=json.dumps(pod))


def job_of(control_plane: ControlPlane, namespace: str) -> dict[str, Any]:
    got = control_plane.kubectl("get", "ptj", "train", "-n", namespace, "-o", "json")
    job: dict[str, Any] = json.loads(got.stdout)
    return job


def answer(control_plane: ControlPlane, namespace: str, request: str) -> None:
    """What the reconciler writes once the pods' agents have answered."""
    record = {
        "number": 1,
        "reason": DIAGNOSIS_REQUESTED,
        "request": request,
        "askedTime": "2026-12-06T20:40:57Z",
        "collectedTime": "2026-12-06T20:41:07Z",
        "pods": 1,
        "message": MESSAGE,
    }
    control_plane.kubectl(
        *("patch", "ptj", "train", "-n", namespace, "--subresource=status", "--type=merge"),
        *("-p", json.dumps({"status": {"diagnosis": record}})),
    )


async def diagnose(
    control_plane: ControlPlane, namespace: str, *args: str
) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        *(str(TORCHJOB), "diagnose", "train", *cluster_flags(control_plane, namespace), *args),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "KUBECONFIG": ""},
    )


async def test_diagnose_asks_waits_and_prints_the_summary_and_each_pods_stacks(
    control_plane: ControlPlane, namespace: str, crd: None
) -> None:
    node = f"cli-diagnose-{namespace[-6:]}"
    async with log_kubelet(control_plane, node) as kubelet:
        await asyncio.to_thread(create_job, control_plane, namespace, node)
        log = kubelet.log(namespace, "train-worker-0", AGENT)
        await log.write("restart agent: waiting")
        for line in STACKS:
            await log.write(line)
        await log.write(REPORT_PREFIX + '{"number":1,"processes":[]}')

        running = await diagnose(control_plane, namespace)

        def asked() -> str:
            annotations = job_of(control_plane, namespace)["metadata"].get("annotations") or {}
            return str(annotations.get(ANNOTATION_DIAGNOSE) or "")

        request = await eventually(lambda: asyncio.to_thread(asked), "the diagnose annotation")
        when = datetime.strptime(request, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC)
        assert abs((datetime.now(UTC) - when).total_seconds()) < TIMEOUT
        await asyncio.to_thread(answer, control_plane, namespace, request)

        out, err = await asyncio.wait_for(running.communicate(), TIMEOUT)
        assert running.returncode == 0, f"{out.decode()}\n{err.decode()}"
        lines = out.decode().splitlines()
        assert lines[0] == f"Diagnosis 1 (Requested) at 2026-12-06T20:41:07Z: {MESSAGE}"
        first = lines.index(f"--- pod train-worker-0 on {node} ---")
        assert lines[first + 1 : first + 1 + len(STACKS)] == STACKS
        second = lines.index(f"--- pod train-worker-1 on {node}-gone ---")
        assert lines[second + 1].startswith(f"cannot read its {AGENT} log: ")
        assert len(lines) == second + 2
        assert not any(line.startswith(REPORT_PREFIX) for line in lines)

    described = await asyncio.to_thread(
        subprocess.run,
        [str(TORCHJOB), "get", "train", *cluster_flags(control_plane, namespace)],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        env={**os.environ, "KUBECONFIG": ""},
    )
    assert described.returncode == 0, described.stderr
    assert "Diagnosis:   1 (Requested, 2026-12-06T20:41:07Z): rank 1 (worker-1)" in described.stdout


async def test_diagnose_says_what_did_not_answer_in_time(
    control_plane: ControlPlane, namespace: str, crd: None
) -> None:
    node = f"cli-diagnose-late-{namespace[-6:]}"
    await asyncio.to_thread(create_job, control_plane, namespace, node)
    running = await diagnose(control_plane, namespace, "--timeout", "2", "--summary")
    out, err = await asyncio.wait_for(running.communicate(), TIMEOUT)
    assert running.returncode == 124, f"{out.decode()}\n{err.decode()}"
    assert out == b""
    said = err.decode()
    assert "the reconciler did not take up the request" in said
    assert "it has answered none" in said and "Is the job running" in said
