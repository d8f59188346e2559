"""`torchjob logs` as users run it, against the real control plane, whose apiserver asks a stand-in
kubelet for the containers' logs (support.kubelet_logs): the master's log, every replica's with
its prefix, and a followed log printed line by line as it is written, until its container stops.
No reconciler runs: the test creates the replicas' pods itself, bound to the stand-in's node."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess

from support import ControlPlane
from support.cli import TORCHJOB
from support.kubelet_logs import log_kubelet
from support.pods import bare_pod

from torchjob.api.constants import LABEL_JOB_NAME, LABEL_REPLICA_INDEX, LABEL_REPLICA_TYPE
from torchjob.api.queries import TRAINING_CONTAINER_NAME

TIMEOUT = 120.0
SUBMIT = ("submit", "--name", "train", "--image", "img", "--workers", "2", "--", "python", "t.py")
RUNNING = {"state": {"running": {"startedAt": "2026-01-01T00:00:00Z"}}}


def cluster_flags(control_plane: ControlPlane, namespace: str) -> list[str]:
    return [f"--kubeconfig={control_plane.kubeconfig}", f"--namespace={namespace}"]


def torchjob(control_plane: ControlPlane, namespace: str, *args: str) -> str:
    """`torchjob ARGS` with the test cluster's flags (after the command's name: before any `--`);
    its output, once it exited 0."""
    command, *rest = args
    done = subprocess.run(
        [str(TORCHJOB), command, *cluster_flags(control_plane, namespace), *rest],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        env={**os.environ, "KUBECONFIG": ""},
    )
    assert done.returncode == 0, f"exit {done.returncode}\n{done.stdout}\n{done.stderr}"
    return done.stdout


def start_replicas(control_plane: ControlPlane, namespace: str, node: str) -> None:
    """The job `train` as `submit` writes it, and its two workers' pods running on `node`."""
    job = torchjob(control_plane, namespace, *SUBMIT[:1], "--dry-run", "-o", "json", *SUBMIT[1:])
    control_plane.kubectl("create", "-n", namespace, "-f", "-", input=job)
    for index in (0, 1):
        labels = {LABEL_JOB_NAME: "train", LABEL_REPLICA_TYPE: "worker"}
        labels[LABEL_REPLICA_INDEX] = str(index)
        name = f"train-worker-{index}"
        pod = bare_pod(name, labels=labels, node=node, container=TRAINING_CONTAINER_NAME)
        control_plane.kubectl("create", "-n", namespace, "-f", "-", input=json.dumps(pod))
        container = {"name": TRAINING_CONTAINER_NAME, "ready": True, **RUNNING}
        status = {"status": {"phase": "Running", "containerStatuses": [container]}}
        control_plane.kubectl(
            *("patch", "pod", name, "-n", namespace, "--subresource=status", "--type=merge"),
            *("-p", json.dumps(status)),
        )


async def test_logs_of_the_master_of_every_replica_and_followed(
    control_plane: ControlPlane, namespace: str, crd: None
) -> None:
    node = f"cli-logs-{namespace[-6:]}"
    async with log_kubelet(control_plane, node) as kubelet:
        await asyncio.to_thread(start_replicas, control_plane, namespace, node)
        logs = [
            kubelet.log(namespace, f"train-worker-{i}", TRAINING_CONTAINER_NAME) for i in (0, 1)
        ]
        for index, log in enumerate(logs):
            await log.write(f"hello from {index}")

        master = await asyncio.to_thread(torchjob, control_plane, namespace, "logs", "train")
        assert master == "hello from 0\n"
        every = await asyncio.to_thread(
            torchjob, control_plane, namespace, "logs", "train", "--all"
        )
        assert sorted(every.splitlines()) == ["worker-0 | hello from 0", "worker-1 | hello from 1"]

        following = await asyncio.create_subprocess_exec(
            *(str(TORCHJOB), "logs", "train", "-f", *cluster_flags(control_plane, namespace)),
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env={**os.environ, "KUBECONFIG": ""},
        )
        assert following.stdout is not None
        first = await asyncio.wait_for(following.stdout.readline(), TIMEOUT)
        assert first == b"hello from 0\n"
        # Written only now, it is printed by the command that is still following.
        await logs[0].write("epoch 1 done")
        later = await asyncio.wait_for(following.stdout.readline(), TIMEOUT)
        assert later == b"epoch 1 done\n"
        await logs[0].stop()
        assert await asyncio.wait_for(following.wait(), TIMEOUT) == 0
        assert await following.stdout.read() == b""
