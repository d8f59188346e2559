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
    "TORCHJOB_KUBE_QPS": "20",
    "TORCHJOB_KUBE_BURST": "30",
    "TORCHJOB_LEADER_ELECT_LEASE_DURATION": "30",
    "TORCHJOB_LEADER_ELECT_RENEW_DEADLINE": "20",
    "TORCHJOB_LEADER_ELECT_RETRY_PERIOD": "4",
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
        lease_duration=15.0,
        renew_deadline=10.0,
        retry_period=2.0,
        workers=2,
        max_connections=100,
        qps=50.0,
        burst=100,
        probe_host="0.0.0.0",
        probe_port=8080,
        kubeconfig=None,
        log_level="INFO",
    )


def test_environment_then_flags(clean_env: pytest.MonkeyPatch) -> None:
    for name, value in ENV.items():
        clean_env.setenv(name, value)
    from_env = Settings(
        "ops", "hk-lease", "hk-0", 30.0, 20.0, 4.0, 5, 7, 20.0, 30, "127.0.0.1", 9090, "/k", "DEBUG"
    )
    assert parse([]) == from_env
    flags = [
        *("--namespace", "a", "--lease-name", "b", "--identity", "c", "--workers", "1"),
        *("--max-connections", "3", "--probe-host", "::", "--probe-port", "1"),
        *("--kubeconfig", "/x", "--log-level", "WARNING", "--qps", "0", "--burst", "1"),
        *("--leader-elect-lease-duration", "6", "--leader-elect-renew-deadline", "5"),
        *("--leader-elect-retry-period", "1"),
    ]
    expected = Settings("a", "b", "c", 6.0, 5.0, 1.0, 1, 3, 0.0, 1, "::", 1, "/x", "WARNING")
    assert parse(flags) == expected
