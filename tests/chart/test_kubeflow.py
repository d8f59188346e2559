"""The chart's opt-in Kubeflow PyTorchJob (kubeflow.enabled), without a cluster: its CRD from the
generated file, kept on uninstall; the services' setting; the same RBAC and webhooks for
pytorchjobs as for pytorchtrainingjobs; nothing of it when off; and the refusal to take over a
PyTorchJob CRD that this release did not install."""

from __future__ import annotations

import copy
import json
import tarfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml
from support.controlplane import REPO_ROOT
from support.helm import (
    CHART,
    Manifest,
    component,
    container_command,
    find,
    grants,
    helm,
    notes,
    one,
    render_with,
    rules_of,
    template,
    values_args,
)

from torchjob.housekeeper import settings as housekeeper_settings
from torchjob.reconciler import settings as reconciler_settings
from torchjob.webhook import settings as webhook_settings

KUBEFLOW_CRD = REPO_ROOT / "crds" / "kubeflow.org_pytorchjobs.yaml"
CHART_COPY = CHART / "files" / KUBEFLOW_CRD.name
CRD_NAME = "pytorchjobs.kubeflow.org"
RELEASE, NAMESPACE = "torchjob", "ml-system"
COMPONENTS = ("webhook", "reconciler", "housekeeper")
# Each service's own command-line parser.
PARSERS: dict[str, Callable[[list[str]], Any]] = {
    "webhook": webhook_settings.parse,
    "reconciler": reconciler_settings.parse,
    "housekeeper": housekeeper_settings.parse,
}
ON: Mapping[str, object] = {"kubeflow.enabled": True}
OURS = ("batch.tensorstack.dev", "pytorchtrainingjobs")
KUBEFLOW = ("kubeflow.org", "pytorchjobs")


@pytest.fixture(scope="module")
def enabled() -> list[Manifest]:
    return template(release=RELEASE, namespace=NAMESPACE, settings=ON)


@pytest.fixture(scope="module")
def disabled() -> list[Manifest]:
    return template(release=RELEASE, namespace=NAMESPACE)


def kubeflow_crds(manifests: list[Manifest]) -> list[Manifest]:
    return [
        m for m in find(manifests, "CustomResourceDefinition") if m["metadata"]["name"] == CRD_NAME
    ]


def hooks_of(manifests: list[Manifest]) -> dict[str, dict[str, Any]]:
    return {
        hook["name"]: hook
        for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")
        for hook in one(manifests, kind)["webhooks"]
    }


# -- the CRD --------------------------------------------------------------------------------------


def test_the_chart_kubeflow_crd_is_the_generated_file(tmp_path: Path) -> None:
    assert CHART_COPY.read_bytes() == KUBEFLOW_CRD.read_bytes(), (
        f"{CHART_COPY.relative_to(REPO_ROOT)} differs from {KUBEFLOW_CRD.relative_to(REPO_ROOT)}"
    )
    # Not in crds/, which Helm installs whatever the values say.
    assert KUBEFLOW_CRD.name not in [p.name for p in (CHART / "crds").iterdir()]
    # The archive carries the file's content, byte for byte.
    helm("package", str(CHART), "--destination", str(tmp_path))
    (archive,) = tmp_path.glob("torchjob-*.tgz")
    with tarfile.open(archive) as tar:
        member = tar.extractfile(f"torchjob/files/{KUBEFLOW_CRD.name}")
        assert member is not None
        assert member.read() == KUBEFLOW_CRD.read_bytes()


def test_the_crd_is_rendered_when_enabled_and_kept(enabled: list[Manifest]) -> None:
    (crd,) = kubeflow_crds(enabled)
    metadata = crd["metadata"]
    assert metadata["annotations"] == {"helm.sh/resource-policy": "keep"}
    assert metadata["labels"]["app.kubernetes.io/instance"] == RELEASE
    # Otherwise exactly the generated CRD.
    generated = yaml.safe_load(KUBEFLOW_CRD.read_text())
    bare = copy.deepcopy(crd)
    del bare["metadata"]["annotations"], bare["metadata"]["labels"]
    assert bare == generated
    assert crd["spec"]["group"] == "kubeflow.org"
    assert crd["spec"]["names"]["plural"] == "pytorchjobs"
    # The chart's own CRD is still the only one in crds/.
    assert len(find(enabled, "CustomResourceDefinition")) == 2


# -- off by default -------------------------------------------------------------------------------


def test_disabled_renders_nothing_of_kubeflow(
    disabled: list[Manifest], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TORCHJOB_KUBEFLOW", raising=False)
    defaults = yaml.safe_load((CHART / "values.yaml").read_text())
    assert defaults["kubeflow"] == {"enabled": False}
    assert kubeflow_crds(disabled) == []
    for part in COMPONENTS:
        command = container_command(component(disabled, "Deployment", part), f"{part}-pod")
        assert "TORCHJOB_KUBEFLOW" not in command.env
        assert not any("kubeflow" in arg for arg in command.args)
        assert getattr(PARSERS[part](command.args), "kubeflow", False) is False
    for role in find(disabled, "ClusterRole") + find(disabled, "Role"):
        for rule in rules_of(role):
            assert "kubeflow.org" not in rule["apiGroups"], role["metadata"]["name"]
            assert not any("pytorchjobs" in r for r in rule["resources"])
    for name, hook in hooks_of(disabled).items():
        assert not name.startswith("kubeflow")
        assert all("kubeflow.org" not in rule["apiGroups"] for rule in hook["rules"])


# -- on -------------------------------------------------------------------------------------------


def test_every_service_is_told_to_run_pytorchjobs(
    enabled: list[Manifest], monkeypatch: pytest.MonkeyPatch
) -> None:
    for part in COMPONENTS:
        command = container_command(component(enabled, "Deployment", part), f"{part}-pod")
        assert "--kubeflow" in command.args
        with monkeypatch.context() as env:
            env.delenv("TORCHJOB_KUBEFLOW", raising=False)
            parsed = PARSERS[part](command.args)
        assert parsed.kubeflow is True, part


def as_kubeflow(rule: dict[str, Any]) -> dict[str, Any]:
    """A rule on pytorchtrainingjobs as the same rule on pytorchjobs."""
    return {
        **rule,
        "apiGroups": [KUBEFLOW[0]],
        "resources": [r.replace(OURS[1], KUBEFLOW[1]) for r in rule["resources"]],
    }


def job_rules(rules: list[dict[str, Any]], group: str) -> list[dict[str, Any]]:
    return [rule for rule in rules if group in rule["apiGroups"]]


@pytest.mark.parametrize("part", COMPONENTS)
def test_each_service_has_on_pytorchjobs_what_it_has_on_ours(
    enabled: list[Manifest], disabled: list[Manifest], part: str
) -> None:
    rules = rules_of(component(enabled, "ClusterRole", part))
    ours = job_rules(rules, OURS[0])
    assert ours, part
    assert job_rules(rules, KUBEFLOW[0]) == [as_kubeflow(rule) for rule in ours]
    # Nothing else changes, but for the reconciler's autoscalers of elastic PyTorchJobs.
    without = [
        rule
        for rule in rules
        if KUBEFLOW[0] not in rule["apiGroups"] and rule["apiGroups"] != ["autoscaling"]
    ]
    assert without == rules_of(component(disabled, "ClusterRole", part))
    # Kubeflow's pytorchjobs only in the cluster-wide role; the namespaced one is the leader's.
    role = find([m for m in enabled if m["kind"] == "Role"], "Role")
    assert not any(KUBEFLOW[0] in r["apiGroups"] for m in role for r in rules_of(m))


def test_what_each_service_may_do_with_pytorchjobs(enabled: list[Manifest]) -> None:
    group, plural = KUBEFLOW
    reconciler = rules_of(component(enabled, "ClusterRole", "reconciler"))
    assert all(grants(reconciler, group, plural, verb) for verb in ("list", "watch"))
    assert grants(reconciler, group, f"{plural}/status", "patch")
    assert grants(reconciler, group, f"{plural}/finalizers", "update")
    assert not grants(reconciler, group, plural, "delete")
    autoscalers = ("autoscaling", "horizontalpodautoscalers")
    assert all(grants(reconciler, *autoscalers, verb) for verb in ("list", "watch", "create"))
    assert grants(reconciler, *autoscalers, "patch")
    assert not grants(reconciler, *autoscalers, "delete")
    housekeeper = rules_of(component(enabled, "ClusterRole", "housekeeper"))
    assert all(
        grants(housekeeper, group, plural, verb) for verb in ("get", "list", "watch", "delete")
    )
    assert grants(housekeeper, group, f"{plural}/status", "patch")
    webhook = rules_of(component(enabled, "ClusterRole", "webhook"))
    assert all(grants(webhook, group, plural, verb) for verb in ("get", "list", "watch"))
    assert not any(
        grants(webhook, group, plural, verb) for verb in ("create", "update", "patch", "delete")
    )


def test_tenants_get_pytorchjobs_as_they_get_ours(enabled: list[Manifest]) -> None:
    aggregated = [
        role
        for role in find(enabled, "ClusterRole")
        if any(
            k.startswith("rbac.authorization.k8s.io/aggregate-to-")
            for k in role["metadata"]["labels"]
        )
    ]
    assert len(aggregated) == 2
    for role in aggregated:
        rules = rules_of(role)
        ours = job_rules(rules, OURS[0])
        assert job_rules(rules, KUBEFLOW[0]) == [as_kubeflow(rule) for rule in ours]
    edit = next(r for r in aggregated if r["metadata"]["name"].endswith("-edit"))
    assert grants(rules_of(edit), *KUBEFLOW, "create")
    assert grants(rules_of(edit), KUBEFLOW[0], "pytorchjobs/scale", "update")
    view = next(r for r in aggregated if r["metadata"]["name"].endswith("-view"))
    assert grants(rules_of(view), *KUBEFLOW, "list")
    assert not grants(rules_of(view), *KUBEFLOW, "create")


def test_pytorchjobs_are_mutated_and_validated_as_ours(enabled: list[Manifest]) -> None:
    hooks = hooks_of(enabled)
    for action in ("mutate", "validate"):
        ours = hooks[f"jobs.{action}.torchjob.dev"]
        theirs = hooks[f"kubeflowjobs.{action}.torchjob.dev"]
        assert theirs["rules"] == [
            {
                "apiGroups": ["kubeflow.org"],
                "apiVersions": ["v1"],
                "resources": ["pytorchjobs"],
                "operations": ["CREATE", "UPDATE"],
                "scope": "Namespaced",
            }
        ]
        assert theirs["clientConfig"]["service"]["path"] == f"/{action}/pytorchjobs"
        # Everything else as the hook of PyTorchTrainingJobs: the Service, failure policy,
        # timeout, side effects, namespaces.
        assert {**theirs["clientConfig"]["service"], "path": ""} == {
            **ours["clientConfig"]["service"],
            "path": "",
        }
        drop = ("name", "rules", "clientConfig")
        assert {k: v for k, v in theirs.items() if k not in drop} == {
            k: v for k, v in ours.items() if k not in drop
        }


def test_external_url_reaches_the_kubeflow_paths() -> None:
    url = "https://192.0.2.10:9443"
    hooks = hooks_of(template(settings={**ON, "webhook.externalURL": url}))
    assert hooks["kubeflowjobs.mutate.torchjob.dev"]["clientConfig"] == {
        "url": f"{url}/mutate/pytorchjobs"
    }
    assert hooks["kubeflowjobs.validate.torchjob.dev"]["clientConfig"] == {
        "url": f"{url}/validate/pytorchjobs"
    }


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("kubeflow.enabled", "yes", "at '/kubeflow/enabled': got string, want boolean"),
        ("kubeflow.crd", True, "at '/kubeflow': additional properties 'crd' not allowed"),
    ],
)
def test_schema_rejects_a_wrong_kubeflow_value(key: str, value: object, message: str) -> None:
    result = helm(
        "template", "torchjob", str(CHART), *values_args(settings={key: value}), check=False
    )
    assert result.returncode != 0
    assert message in result.stderr, result.stderr


# -- the CRD of someone else ----------------------------------------------------------------------


def owner_check(tmp_path: Path, existing: dict[str, Any] | None) -> Any:
    """The chart's check fed the CRD `existing` as `lookup` would return it from a cluster (which
    `helm template` cannot reach: its own lookup finds nothing)."""
    found = json.dumps(existing or {})
    text = (
        '{{- include "torchjob.kubeflowCRDOwnerCheck" '
        f'(dict "root" $ "existing" (fromJson `{found}`)) }}}}\n'
    )
    return render_with(tmp_path, "owner-check.yaml", text, ON, release=RELEASE, namespace=NAMESPACE)


def existing_crd(annotations: dict[str, str] | None) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": CRD_NAME}
    if annotations is not None:
        metadata["annotations"] = annotations
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": metadata,
    }


def helm_owner(release: str, namespace: str) -> dict[str, str]:
    return {"meta.helm.sh/release-name": release, "meta.helm.sh/release-namespace": namespace}


@pytest.mark.parametrize(
    ("existing", "owner"),
    [
        (existing_crd(None), "it carries no Helm release annotations"),
        (
            existing_crd({"controller-gen.kubebuilder.io/version": "v0.14.0"}),
            "it carries no Helm release annotations",
        ),
        (
            existing_crd(helm_owner("training-operator", "kubeflow")),
            'it belongs to Helm release "training-operator" in namespace "kubeflow"',
        ),
        (
            existing_crd(helm_owner(RELEASE, "other-system")),
            f'it belongs to Helm release "{RELEASE}" in namespace "other-system"',
        ),
    ],
    ids=["no-annotations", "kubeflow-manifests", "another-release", "same-name-elsewhere"],
)
def test_a_crd_someone_else_installed_is_refused(
    tmp_path: Path, existing: dict[str, Any], owner: str
) -> None:
    result = owner_check(tmp_path, existing)
    assert result.returncode != 0
    message = result.stderr
    assert (
        f"the cluster already has the CRD {CRD_NAME}, which this release ({RELEASE} in namespace "
        f"{NAMESPACE}) did not install: {owner}"
    ) in message, message
    assert "uninstall Kubeflow's training-operator" in message
    assert "leave kubeflow.enabled false" in message


@pytest.mark.parametrize(
    "existing",
    [None, existing_crd(helm_owner(RELEASE, NAMESPACE))],
    ids=["none", "this-release"],
)
def test_no_crd_or_our_own_is_installed_over(
    tmp_path: Path, existing: dict[str, Any] | None
) -> None:
    result = owner_check(tmp_path, existing)
    assert result.returncode == 0, result.stderr


def test_the_crd_template_checks_what_the_cluster_has() -> None:
    """The check above runs on what `lookup` finds of the CRD the template renders."""
    text = (CHART / "templates" / "kubeflow" / "crd.yaml").read_text()
    assert (
        '"torchjob.kubeflowCRDOwnerCheck" (dict "root" $ "existing" (lookup '
        '"apiextensions.k8s.io/v1" "CustomResourceDefinition" "" $name))'
    ) in text
    # Without a cluster lookup finds nothing, and the CRD is rendered.
    assert kubeflow_crds(template(settings=ON))


# -- NOTES ----------------------------------------------------------------------------------------


def test_notes_say_how_to_submit_a_pytorchjob(tmp_path: Path) -> None:
    on = notes(tmp_path / "on", ON, release=RELEASE, namespace=NAMESPACE)
    assert "kubectl -n demo get pytorchjobs" in on
    assert "apiVersion: kubeflow.org/v1" in on and "kind: PyTorchJob" in on
    assert "docs/kubeflow.md" in on
    off = notes(tmp_path / "off", {}, release=RELEASE, namespace=NAMESPACE)
    assert "pytorchjobs" not in off and "Kubeflow" not in off
