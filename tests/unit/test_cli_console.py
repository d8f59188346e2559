"""`torchjob console`: the kubectl port-forward it runs, the error when the chart has no console,
the in-cluster URL, and the browser opened (or not) once the port is forwarded."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from torchjob.cli.connection import CliError
from torchjob.cli.main import parser
from torchjob.cli.web_console import (
    SERVICE,
    announcer,
    console_port,
    forward_argv,
    in_cluster,
    in_cluster_url,
    target_of,
)


@pytest.fixture
def kubectl(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "kubectl"
    path.write_text("#!/bin/sh\n")
    path.chmod(0o755)
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.delenv("KUBECTL", raising=False)
    return path


def test_the_defaults_forward_any_free_port_to_the_operator_namespace(kubectl: Path) -> None:
    args = parser().parse_args(["console", f"--kubectl={kubectl}"])
    assert forward_argv(args, 80) == [
        str(kubectl),
        "port-forward",
        "--namespace=torchjob-system",
        "--address=127.0.0.1",
        f"service/{SERVICE}",
        ":80",
    ]
    assert args.no_browser is False


def test_every_flag_reaches_kubectl(kubectl: Path) -> None:
    args = parser().parse_args(
        [
            "--context=prod",  # before the verb, as kubectl takes it
            "console",
            "--kubeconfig=/etc/kc",
            "--namespace-of-operator=ml-system",
            "--port=8081",
            "--address=0.0.0.0",
            "--no-browser",
            f"--kubectl={kubectl}",
        ]
    )
    assert forward_argv(args, 8000) == [
        str(kubectl),
        "port-forward",
        "--kubeconfig=/etc/kc",
        "--context=prod",
        "--namespace=ml-system",
        "--address=0.0.0.0",
        f"service/{SERVICE}",
        "8081:8000",
    ]
    assert args.no_browser is True


def test_the_kubeconfig_of_the_environment_is_passed_on(
    kubectl: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KUBECONFIG", "/home/me/kc")
    args = parser().parse_args(["console", f"--kubectl={kubectl}"])
    assert "--kubeconfig=/home/me/kc" in forward_argv(args, 80)


def test_no_kubectl_is_said_plainly(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KUBECTL", raising=False)
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(CliError, match="give --kubectl PATH"):
        forward_argv(parser().parse_args(["console"]), 80)


def test_the_console_takes_no_job_namespace(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        parser().parse_args(["console", "-n", "team-a"])
    assert "unrecognized arguments: -n team-a" in capsys.readouterr().err


class Services:
    """A stand-in for the CLI's Cluster: the Services of one namespace."""

    def __init__(self, namespace: str, services: dict[str, dict[str, Any]]) -> None:
        self.namespace = namespace
        self.services = services
        self.asked: list[str] = []

    async def service(self, name: str) -> dict[str, Any] | None:
        self.asked.append(name)
        return self.services.get(name)


async def test_a_missing_service_names_the_chart_value() -> None:
    cluster = Services("ml-system", {"torchjob-webhook": {}})
    with pytest.raises(CliError) as raised:
        await console_port(cluster)
    message = raised.value.message
    assert "console.enabled=true" in message
    assert f"the Service {SERVICE} does not exist" in message
    assert "namespace ml-system" in message and "--namespace-of-operator" in message
    assert cluster.asked == [SERVICE]


@pytest.mark.parametrize(
    ("ports", "port"),
    [
        ([{"name": "http", "port": 80}], 80),
        ([{"name": "metrics", "port": 8080}, {"name": "http", "port": 8888}], 8888),
        ([{"port": 9000}], 9000),
        ([], 80),
    ],
)
async def test_the_service_port_is_its_http_port(ports: list[dict[str, Any]], port: int) -> None:
    cluster = Services("ops", {SERVICE: {"spec": {"ports": ports}}})
    assert await console_port(cluster) == port


def test_in_a_pod_without_a_kubeconfig(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.kube/config
    monkeypatch.delenv("KUBECONFIG", raising=False)
    args = parser().parse_args(["console", "--namespace-of-operator=ops"])
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    assert not in_cluster(target_of(args))
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1")
    assert in_cluster(target_of(args))
    given = parser().parse_args(["console", "--kubeconfig=/etc/kc"])
    assert not in_cluster(target_of(given))
    (tmp_path / ".kube").mkdir()
    (tmp_path / ".kube" / "config").write_text("{}")
    assert not in_cluster(target_of(args))
    assert in_cluster_url("ops", 80) == f"http://{SERVICE}.ops.svc/"
    assert in_cluster_url("ops", 8080) == f"http://{SERVICE}.ops.svc:8080/"


@pytest.mark.parametrize("open_browser", [True, False])
def test_the_url_is_printed_and_opened_unless_told_not_to(
    open_browser: bool, capsys: pytest.CaptureFixture[str]
) -> None:
    opened: list[str] = []
    done = threading.Event()

    def open_url(url: str) -> bool:
        opened.append(url)
        done.set()
        return True

    announcer(open_browser, open_url)("http://127.0.0.1:41234/")
    assert capsys.readouterr().out == "Console: http://127.0.0.1:41234/\n"
    if open_browser:
        assert done.wait(30), "the browser was not opened"
        assert opened == ["http://127.0.0.1:41234/"]
    else:
        assert opened == []
