"""The chart's optional monitoring and GitOps objects: the Grafana dashboard, the PrometheusRule
alerts and the Argo CD health check. Every PromQL expression they hold names only metrics the
services export (tests/e2e/test_metrics.py checks that list against what the running services
serve), and none is rendered unless asked for."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from support.controlplane import REPO_ROOT
from support.helm import CHART, Manifest, find, one, template
from support.metrics import exported_in_process, label_names_in_process

ALL_FEATURES = CHART / "ci" / "all-features-values.yaml"
METRIC = re.compile(r"\btorchjob_[a-z0-9_]+\b")
GROUPING = re.compile(r"\b(?:by|without)\s*\(([^)]*)\)")
SELECTOR = re.compile(r"\btorchjob_[a-z0-9_]+\{([^}]*)\}")
MATCHER = re.compile(r"([a-zA-Z_][a-zA-Z0-9_]*)\s*(?:=~|!~|!=|=)")
ALERTS = {
    "TorchjobJobsFailing",
    "TorchjobWebhookErrors",
    "TorchjobWebhookSlow",
    "TorchjobNoLeader",
    "TorchjobReconcileErrors",
}


@pytest.fixture(scope="module")
def manifests() -> list[Manifest]:
    return template(values_files=[ALL_FEATURES], include_crds=False)


@pytest.fixture(scope="module")
def exported() -> set[str]:
    return set().union(*exported_in_process().values())


@pytest.fixture(scope="module")
def label_names() -> dict[str, set[str]]:
    return label_names_in_process()


def assert_labels_exist(expression: str, label_names: dict[str, set[str]]) -> None:
    """Every label the expression groups by or matches on is one its metrics carry."""
    carried = set().union(*(label_names[m] for m in METRIC.findall(expression)))
    used = {
        label.strip()
        for grouping in GROUPING.findall(expression)
        for label in grouping.split(",")
        if label.strip()
    }
    used |= {m for selector in SELECTOR.findall(expression) for m in MATCHER.findall(selector)}
    assert used <= carried, f"{expression!r}: no metric of it carries {sorted(used - carried)}"


def component(manifests: list[Manifest], name: str) -> list[Manifest]:
    return [
        m
        for m in manifests
        if (m["metadata"].get("labels") or {}).get("app.kubernetes.io/component") == name
    ]


def assert_names_exported(expression: str, exported: set[str]) -> None:
    named = set(METRIC.findall(expression))
    assert named, f"{expression!r} names no torchjob metric"
    assert named <= exported, f"{expression!r}: {sorted(named - exported)} are not exported"


def dashboard_expressions(dashboard: dict[str, Any]) -> list[str]:
    expressions = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    for variable in dashboard["templating"]["list"]:
        query = variable.get("query")
        if isinstance(query, dict):
            expressions.append(query["query"])
    return expressions


def test_nothing_is_rendered_unless_asked_for() -> None:
    manifests = template(include_crds=False)
    assert not find(manifests, "PrometheusRule")
    assert not [m for m in manifests if m["kind"] == "ConfigMap"]


def test_the_dashboard_is_a_sidecar_configmap_of_exported_metrics(
    manifests: list[Manifest], exported: set[str], label_names: dict[str, set[str]]
) -> None:
    (configmap,) = component(manifests, "dashboard")
    assert configmap["kind"] == "ConfigMap"
    assert configmap["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert configmap["metadata"]["annotations"] == {"grafana_folder": "ML platform"}
    dashboard = json.loads(configmap["data"]["torchjob.json"])
    assert dashboard["uid"] == "torchjob-jobs"
    expressions = dashboard_expressions(dashboard)
    assert len(expressions) >= 12
    for expression in expressions:
        assert_names_exported(expression, exported)
        assert_labels_exist(expression, label_names)
    # Every job metric the reconciler exports has a panel.
    shown = set().union(*(METRIC.findall(e) for e in expressions))
    for family in (
        "torchjob_jobs",
        "torchjob_jobs_created_total",
        "torchjob_jobs_succeeded_total",
        "torchjob_jobs_failed_total",
        "torchjob_job_restarts_total",
        "torchjob_replica_restarts_total",
        "torchjob_job_startup_seconds_bucket",
        "torchjob_job_duration_seconds_bucket",
        "torchjob_running_job_gpus",
    ):
        assert family in shown, family


def test_the_alerts_name_exported_metrics(
    manifests: list[Manifest], exported: set[str], label_names: dict[str, set[str]]
) -> None:
    rule = one(manifests, "PrometheusRule")
    assert rule["apiVersion"] == "monitoring.coreos.com/v1"
    assert rule["metadata"]["labels"]["release"] == "prometheus"
    rules = [r for group in rule["spec"]["groups"] for r in group["rules"]]
    assert {r["alert"] for r in rules} == ALERTS
    for r in rules:
        assert_names_exported(r["expr"], exported)
        assert_labels_exist(r["expr"], label_names)
        assert r["labels"]["severity"] in ("warning", "critical")
        assert r["annotations"]["summary"]
    by_name = {r["alert"]: r for r in rules}
    # The thresholds are the values given.
    assert by_name["TorchjobJobsFailing"]["expr"].endswith(">= 3")
    assert by_name["TorchjobWebhookSlow"]["expr"].endswith("> 0.5")
    assert by_name["TorchjobReconcileErrors"]["for"] == "5m"


def test_a_wrong_metric_or_label_name_would_be_caught(
    exported: set[str], label_names: dict[str, set[str]]
) -> None:
    with pytest.raises(AssertionError, match="torchjob_jobs_failed_count"):
        assert_names_exported("sum(torchjob_jobs_failed_count)", exported)
    with pytest.raises(AssertionError, match="job_name"):
        assert_labels_exist("sum by (job_name) (torchjob_jobs)", label_names)
    with pytest.raises(AssertionError, match="phase"):
        assert_labels_exist('sum(torchjob_jobs_failed_total{phase="Failed"})', label_names)


def test_the_argocd_health_check_is_the_documented_script(manifests: list[Manifest]) -> None:
    (configmap,) = component(manifests, "argocd-health")
    key = "resource.customizations.health.batch.tensorstack.dev_PyTorchTrainingJob"
    script = Path(REPO_ROOT / "docs" / "argocd-health.lua").read_text()
    assert configmap["data"][key] == script.rstrip("\n")
