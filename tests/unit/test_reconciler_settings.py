"""Reconciler settings: each flag's default comes from its environment variable, else from the
documented default; a flag wins over both."""

from __future__ import annotations

import pytest

from torchjob.reconciler.settings import parse
from torchjob.runtime.settings import DEFAULT_BURST, DEFAULT_QPS


def test_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("KUBE_QPS", "KUBE_BURST", "LEADER_ELECT_LEASE_DURATION"):
        monkeypatch.delenv(f"TORCHJOB_{name}", raising=False)
    settings = parse([])
    assert (settings.qps, settings.burst) == (DEFAULT_QPS, DEFAULT_BURST)
    assert (settings.lease_duration, settings.renew_deadline, settings.retry_period) == (15, 10, 2)


def test_environment_then_flags(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TORCHJOB_KUBE_QPS", "7.5")
    monkeypatch.setenv("TORCHJOB_KUBE_BURST", "9")
    monkeypatch.setenv("TORCHJOB_LEADER_ELECT_RENEW_DEADLINE", "60")
    settings = parse([])
    assert (settings.qps, settings.burst, settings.renew_deadline) == (7.5, 9, 60)
    assert isinstance(settings.burst, int)
    settings = parse(["--qps", "0", "--burst", "1", "--leader-elect-renew-deadline", "3"])
    assert (settings.qps, settings.burst, settings.renew_deadline) == (0, 1, 3)


def test_restart_backoff_from_environment_then_flag_within_bounds(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("TORCHJOB_RESTART_BACKOFF", raising=False)
    assert parse([]).restart_backoff == 10
    monkeypatch.setenv("TORCHJOB_RESTART_BACKOFF", "2.5")
    assert parse([]).restart_backoff == 2.5
    assert parse(["--restart-backoff", "0"]).restart_backoff == 0
    for wrong in ("-1", "361"):
        with pytest.raises(SystemExit):
            parse(["--restart-backoff", wrong])
