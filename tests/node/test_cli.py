"""The `torchjob` cluster commands on the real node, where pods run: a job submitted from flags
trains across two real pods; `logs -f` follows the master to its end, `logs --all` prefixes every
replica's lines, `top` shows what the running job holds on the node, `wait` exits by the outcome,
and `tensorboard` forwards a local port to the job's TensorBoard, which answers over it."""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
import urllib.request
from typing import IO, Any

from support.cli import TORCHJOB
from support.node import Node, host_path_claim, ok, torchjob, wait_until

JOB = "cli-mnist"
CLAIM = "logs"


def submit_argv(node: Node, namespace: str) -> list[str]:
    return [
        *("submit", "--name", JOB, "--image", node.example_image, "--workers", "2"),
        *("--torchrun", "--nproc-per-node", "1", "--working-dir", "/workspace"),
        # Small requests so that both replicas fit beside the chart's services on two cores.
        *("--cpu", "100m", "--cpu-limit", "1", "--memory", "256Mi", "--memory-limit", "2Gi"),
        *("--env", "TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1", "--data", f"{CLAIM}:/logs"),
        *("--tensorboard", "--tensorboard-image", node.example_image, "--logdir", f"/logs/{JOB}"),
        *("--restart-policy", "ExitCode", "--deadline", "30m"),
        *(f"--kubeconfig={node.kubeconfig}", f"--namespace={namespace}"),
        *("--", "python", "train.py", "--epochs", "2", "--log_dir", f"/logs/{JOB}"),
    ]


def test_submit_logs_top_wait_and_tensorboard_on_real_pods(node: Node, node_namespace: str) -> None:
    host_path_claim(node, node_namespace, CLAIM)
    submitted = subprocess.run(
        [str(TORCHJOB), *submit_argv(node, node_namespace)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "created" in ok(submitted)

    # logs -f waits for the master's container to start, then follows it to its end.
    followed = ok(torchjob(node, node_namespace, "logs", JOB, "-f"))
    assert "training on 2 process(es)" in followed, followed[-3000:]
    assert re.search(r"test accuracy [0-9.]+", followed), followed[-3000:]

    assert ok(torchjob(node, node_namespace, "wait", JOB, "--timeout", "10m")).startswith(
        f"job {JOB} Succeeded"
    )
    # A replica restarts in a new pod, so its container never has a previous attempt in place.
    previous = torchjob(node, node_namespace, "logs", JOB, "--previous")
    assert previous.returncode == 2 and "no previous attempt" in previous.stderr, previous.stderr
    every = ok(torchjob(node, node_namespace, "logs", JOB, "--all", "--tail", "5"))
    assert {line.split(" | ")[0] for line in every.splitlines()} == {"worker-0", "worker-1"}

    described = ok(torchjob(node, node_namespace, "get", JOB))
    assert "Phase:       Succeeded" in described and "MasterSucceeded" in described
    assert f"worker-0   {JOB}-worker-0   {node.node_name}" in described

    nodes = ok(torchjob(node, node_namespace, "top", "node"))
    assert nodes.splitlines()[1].split()[0] == node.node_name
    jobs = ok(torchjob(node, node_namespace, "top", "job"))
    # 256Mi by each of two replicas; the pods have ended, so nothing is allocated any more.
    assert jobs.splitlines()[1].split()[:8] == [
        *(JOB, "Succeeded", "0", "0", "200m", "0m", "512Mi", "0Mi"),
    ]

    wait_until("the TensorBoard ready", lambda: _tensorboard_ready(node, node_namespace))
    forward = subprocess.Popen(
        [
            str(TORCHJOB),
            *("tensorboard", JOB, f"--kubectl={node.kubectl_path}"),
            *(f"--kubeconfig={node.kubeconfig}", f"--namespace={node_namespace}"),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ},
    )
    try:
        assert forward.stdout is not None
        first = _line(forward.stdout)
        match = re.match(
            rf"TensorBoard of {node_namespace}/{JOB}: (http://127\.0\.0\.1:\d+/)", first
        )
        assert match, first
        runs = wait_until("TensorBoard answering over the forwarded port", lambda: _runs(match[1]))
        assert runs, "TensorBoard lists no run"
        # SIGTERM stops the forwarding and kubectl with it: the port no longer answers.
        forward.terminate()
        out, _ = forward.communicate(timeout=60)
        assert forward.returncode == 0 and "Stopped forwarding." in out
        assert _runs(match[1]) is None
    finally:
        if forward.poll() is None:
            forward.kill()
            forward.wait(30)


def _line(stream: IO[str]) -> str:
    return stream.readline().strip()


def _tensorboard_ready(node: Node, namespace: str) -> bool:
    status = node.job(namespace, JOB).get("status") or {}
    return bool((status.get("tensorboard") or {}).get("ready"))


def _runs(url: str) -> Any:
    try:
        with urllib.request.urlopen(f"{url}data/runs", timeout=30) as answer:
            runs = json.loads(answer.read())
    except OSError:
        time.sleep(1)
        return None
    return runs or None
