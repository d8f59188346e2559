"""The housekeeper's command line, the contract the Helm chart is written against: each flag,
and the environment variable that is its default."""

from __future__ import annotations

import socket

import pytest

from torchjob.housekeeper.settings import parse
from torchjob.runtime.service import Settings

ENV = {
    "TORCHJOB_NAMESPACE": "ops",
    "TORCHJOB_HOUSEKEEPER_LEASE": "hk-lease",
    "TORCHJOB_POD_NAME": "hk-0",
    "TORCHJOB_HOUSEKEEPER_WORKERS": "5",
    "TORCHJOB_MAX_CONNECTIONS": "7",
    "TORCHJOB_PROBE_HOST": "127.0.0.1",
    "TORCHJOB_PROBE_PORT": "9090",
    "KUBECONFIG": "/k",
    "TORCHJOB_LOG_LEVEL": "DEBUG",
}


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for name in ENV:
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def test_defaults(clean_env: pytest.MonkeyPatch) -> None:
    assert parse([]) == Settings(
        namespace="torchjob-system",
        lease_name="torchjob-housekeeper",
        identity=socket.gethostname(),
        workers=2,
        max_connections=100,
        probe_host="0.0.0.0",
        probe_port=8080,
        kubeconfig=None,
        log_level="INFO",
    )


def test_environment_then_flags(clean_env: pytest.MonkeyPatch) -> None:
    for name, value in ENV.items():
        clean_env.setenv(name, value)
    from_env = Settings("ops", "hk-lease", "hk-0", 5, 7, "127.0.0.1", 9090, "/k", "DEBUG")
    assert parse([]) == from_env
    flags = [
        *("--namespace", "a", "--lease-name", "b", "--identity", "c", "--workers", "1"),
        *("--max-connections", "3", "--probe-host", "::", "--probe-port", "1"),
        *("--kubeconfig", "/x", "--log-level", "WARNING"),
    ]
    assert parse(flags) == Settings("a", "b", "c", 1, 3, "::", 1, "/x", "WARNING")
