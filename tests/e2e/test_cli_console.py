"""`torchjob console` as users run it, against the real control plane: the error when the chart
deployed no console, and, with a Service torchjob-console that points nowhere, the kubectl
port-forward it runs (a stand-in kubectl: the real forwarding needs a kubelet), the URL it prints,
and kubectl stopped with it."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from support import ControlPlane
from support.cli import TORCHJOB, stand_in_kubectl, stop_forwarding

TIMEOUT = 120.0


def console_command(control_plane: ControlPlane, namespace: str, kubectl: Path) -> list[str]:
    return [
        str(TORCHJOB),
        "console",
        f"--kubeconfig={control_plane.kubeconfig}",
        f"--namespace-of-operator={namespace}",
        "--no-browser",
        f"--kubectl={kubectl}",
    ]


def clean_environment() -> dict[str, str]:
    """No kubeconfig but the one given, and not in a pod (the in-cluster URL is not asked for)."""
    env = {**os.environ, "KUBECONFIG": ""}
    env.pop("KUBERNETES_SERVICE_HOST", None)
    return env


def test_without_the_console_it_names_the_chart_value(
    control_plane: ControlPlane, namespace: str, tmp_path: Path
) -> None:
    kubectl = stand_in_kubectl(tmp_path, 8000)
    result = subprocess.run(
        console_command(control_plane, namespace, kubectl),
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        env=clean_environment(),
    )
    assert result.returncode == 2, result.stderr
    assert "console.enabled=true" in result.stderr
    assert f"there is no console in namespace {namespace}" in result.stderr
    assert not (tmp_path / "argv").exists(), "kubectl was run"


def test_it_forwards_to_the_console_service_and_stops_kubectl(
    control_plane: ControlPlane, namespace: str, tmp_path: Path
) -> None:
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "torchjob-console", "namespace": namespace},
        "spec": {"ports": [{"name": "http", "port": 80, "targetPort": "http"}]},
    }
    control_plane.kubectl("create", "-f", "-", input=json.dumps(service))
    kubectl = stand_in_kubectl(tmp_path, 8000)
    forward = subprocess.Popen(
        console_command(control_plane, namespace, kubectl),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=clean_environment(),
    )
    argv = stop_forwarding(forward, "Console: http://127.0.0.1:41234/\n", tmp_path, TIMEOUT)
    assert argv == [
        "port-forward",
        f"--kubeconfig={control_plane.kubeconfig}",
        f"--namespace={namespace}",
        "--address=127.0.0.1",
        "service/torchjob-console",
        ":80",
    ]
