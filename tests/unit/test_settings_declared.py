"""Each service's settings are declared once (runtime/settings.py): flags and variables unique per
service, every variable ours or the conventional KUBECONFIG, a misspelled variable reported with
the name it was meant to be, and the parsed settings filling exactly the service's fields."""

from __future__ import annotations

import dataclasses
import io
from collections.abc import Callable

import pytest

from torchjob.housekeeper import settings as housekeeper
from torchjob.reconciler import settings as reconciler
from torchjob.runtime.settings import PREFIX, Setting, undeclared_variables, warn_of_undeclared
from torchjob.webhook import settings as webhook

DECLARED: dict[str, Callable[[], tuple[Setting, ...]]] = {
    "webhook": lambda: webhook.declared({}),
    "reconciler": reconciler.declared,
    "housekeeper": housekeeper.declared,
}


@pytest.mark.parametrize("service", DECLARED)
def test_each_flag_and_variable_once(service: str) -> None:
    declared = DECLARED[service]()
    flags = [s.flag for s in declared]
    variables = [s.variable for s in declared]
    assert len(set(flags)) == len(flags)
    assert len(set(variables)) == len(variables)
    assert all(v.startswith(PREFIX) or v == "KUBECONFIG" for v in variables)


@pytest.mark.parametrize(
    ("service", "parse"),
    [
        ("webhook", webhook.parse),
        ("reconciler", reconciler.parse),
        ("housekeeper", housekeeper.parse),
    ],
)
def test_every_declared_setting_reaches_the_settings(
    service: str, parse: Callable[[list[str]], object], monkeypatch: pytest.MonkeyPatch
) -> None:
    for setting in DECLARED[service]():
        monkeypatch.delenv(setting.variable, raising=False)
    parsed = parse([])
    fields = {f.name for f in dataclasses.fields(parsed)}  # type: ignore[arg-type]
    declared = {s.field for s in DECLARED[service]()}
    # The reconciler gathers its scheduling settings, the webhook its limits, into one field.
    gathered = (
        {"scheduling"} if service == "reconciler" else {"limits"} if service == "webhook" else set()
    )
    assert fields - gathered <= declared


def test_a_misspelled_variable_is_reported_with_the_name_it_meant() -> None:
    environ = {"TORCHJOB_KUBE_QSP": "3", "TORCHJOB_POD_NAME": "p", "HOME": "/root"}
    assert undeclared_variables(environ, reconciler.declared()) == ["TORCHJOB_KUBE_QSP"]
    said = io.StringIO()
    warn_of_undeclared(environ, reconciler.declared(), said)
    assert said.getvalue() == (
        "warning: TORCHJOB_KUBE_QSP is set, but no setting of this service reads it; "
        "did you mean TORCHJOB_KUBE_QPS?\n"
    )


def test_a_variable_sets_the_default_and_a_flag_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TORCHJOB_HOUSEKEEPER_WORKERS", "7")
    monkeypatch.setenv("TORCHJOB_KUBEFLOW", "true")
    assert (housekeeper.parse([]).workers, housekeeper.parse([]).kubeflow) == (7, True)
    flagged = housekeeper.parse(["--workers", "3", "--no-kubeflow"])
    assert (flagged.workers, flagged.kubeflow) == (3, False)


def test_a_malformed_variable_is_refused_naming_its_flag_unless_the_flag_is_given(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("TORCHJOB_WEBHOOK_PORT", "tcp://10.0.0.1:443")
    assert webhook.parse(["--port", "9443"]).port == 9443
    with pytest.raises(SystemExit) as exited:
        webhook.parse([])
    assert exited.value.code == 2
    assert "--port: invalid int value: 'tcp://10.0.0.1:443'" in capsys.readouterr().err


def test_a_variable_a_flag_overrides_is_reported(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("TORCHJOB_KUBE_QPS", "5")
    assert reconciler.parse(["--qps=20"]).qps == 20
    assert "TORCHJOB_KUBE_QPS is set, but --qps is given and wins" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("text", "on"), [("true", True), ("1", True), ("Yes", True), ("no", False)]
)
def test_a_switch_reads_the_usual_words(
    text: str, on: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TORCHJOB_KUBEFLOW", text)
    assert housekeeper.parse([]).kubeflow is on
