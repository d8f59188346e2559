"""The webhook's flags: Kubeflow's PyTorchJobs are admitted and cached with --kubeflow, whose
default comes from TORCHJOB_KUBEFLOW, as for the reconciler and the housekeeper."""

from __future__ import annotations

import pytest

from torchjob.webhook import settings


def test_kubeflow_is_off_unless_asked_for(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TORCHJOB_KUBEFLOW", raising=False)
    assert settings.parse([]).kubeflow is False
    assert settings.parse(["--kubeflow"]).kubeflow is True


def test_kubeflow_defaults_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TORCHJOB_KUBEFLOW", "true")
    assert settings.parse([]).kubeflow is True
    assert settings.parse(["--no-kubeflow"]).kubeflow is False
