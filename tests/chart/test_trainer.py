"""The chart's opt-in Kubeflow Trainer TrainJob (trainer.enabled), as test_kubeflow.py checks
PyTorchJob's: the CRDs of TrainJob and both runtime kinds from the generated files, kept on
uninstall; the services' setting; the same RBAC and webhooks for trainjobs as for
pytorchtrainingjobs, and the runtimes' own; Trainer's torch-distributed runtime; nothing of it
when off; and the refusal to take over a CRD of Trainer's that this release did not install.
Last, on a control plane of its own, that `helm install` with it creates the runtime after its
CRD, without a webhook pod ready, and that an upgrade keeps that same runtime."""

from __future__ import annotations

import copy
import json
import tarfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml
from support.controlplane import REPO_ROOT, ControlPlane
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
from support.trainer import TORCH_IMAGE, TORCH_RUNTIME

from torchjob.api.trainer import FRAMEWORK_LABEL
from torchjob.api.trainer_admission import runtime_errors
from torchjob.console import settings as console_settings
from torchjob.housekeeper import settings as housekeeper_settings
from torchjob.reconciler import settings as reconciler_settings
from torchjob.webhook import settings as webhook_settings

GROUP = "trainer.kubeflow.org"
PLURALS = ("trainjobs", "trainingruntimes", "clustertrainingruntimes")
GENERATED = {plural: REPO_ROOT / "crds" / f"{GROUP}_{plural}.yaml" for plural in PLURALS}
CRD_NAMES = {plural: f"{plural}.{GROUP}" for plural in PLURALS}
RELEASE, NAMESPACE = "torchjob", "ml-system"
COMPONENTS = ("webhook", "reconciler", "housekeeper", "console")
# Each service's own command-line parser.
PARSERS: dict[str, Callable[[list[str]], Any]] = {
    "webhook": webhook_settings.parse,
    "reconciler": reconciler_settings.parse,
    "housekeeper": housekeeper_settings.parse,
    "console": console_settings.parse,
}
# The console is off by default; it takes the setting too.
ON: Mapping[str, object] = {"trainer.enabled": True, "console.enabled": True}
OFF: Mapping[str, object] = {"console.enabled": True}
OURS = ("batch.tensorstack.dev", "pytorchtrainingjobs")
TRAINJOBS = (GROUP, "trainjobs")
RUNTIMES = ("clustertrainingruntimes", "trainingruntimes")
EVERYONE = [
    {"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "system:authenticated"}
]
IMAGE = TORCH_IMAGE
# Trainer v2.3.0's torch-distributed, as the chart ships it.
TORCH_DISTRIBUTED_SPEC = TORCH_RUNTIME["spec"]


@pytest.fixture(scope="module")
def enabled() -> list[Manifest]:
    return template(release=RELEASE, namespace=NAMESPACE, settings=ON)


@pytest.fixture(scope="module")
def disabled() -> list[Manifest]:
    return template(release=RELEASE, namespace=NAMESPACE, settings=OFF)


def trainer_crds(manifests: list[Manifest]) -> dict[str, Manifest]:
    """The rendered CRDs of Trainer's API, by plural."""
    return {
        m["spec"]["names"]["plural"]: m
        for m in find(manifests, "CustomResourceDefinition")
        if m["spec"]["group"] == GROUP
    }


def hooks_of(manifests: list[Manifest]) -> dict[str, dict[str, Any]]:
    return {
        hook["name"]: hook
        for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")
        for hook in one(manifests, kind)["webhooks"]
    }


def mentions_trainer(rule: Mapping[str, Any]) -> bool:
    return GROUP in rule["apiGroups"]


# -- the CRDs -------------------------------------------------------------------------------------


@pytest.mark.parametrize("plural", PLURALS)
def test_the_chart_trainer_crds_are_the_generated_files(tmp_path: Path, plural: str) -> None:
    generated = GENERATED[plural]
    copy_in_chart = CHART / "files" / generated.name
    assert copy_in_chart.read_bytes() == generated.read_bytes(), (
        f"{copy_in_chart.relative_to(REPO_ROOT)} differs from {generated.relative_to(REPO_ROOT)}"
    )
    # Not in crds/, which Helm installs whatever the values say.
    assert generated.name not in [p.name for p in (CHART / "crds").iterdir()]
    # The archive carries the file's content, byte for byte.
    helm("package", str(CHART), "--destination", str(tmp_path))
    (archive,) = tmp_path.glob("torchjob-*.tgz")
    with tarfile.open(archive) as tar:
        member = tar.extractfile(f"torchjob/files/{generated.name}")
        assert member is not None
        assert member.read() == generated.read_bytes()


def test_the_crds_are_rendered_when_enabled_and_kept(enabled: list[Manifest]) -> None:
    crds = trainer_crds(enabled)
    assert set(crds) == set(PLURALS)
    for plural, crd in crds.items():
        metadata = crd["metadata"]
        assert metadata["name"] == CRD_NAMES[plural]
        assert metadata["annotations"] == {"helm.sh/resource-policy": "keep"}
        assert metadata["labels"]["app.kubernetes.io/instance"] == RELEASE
        # Otherwise exactly the generated CRD.
        bare = copy.deepcopy(crd)
        del bare["metadata"]["annotations"], bare["metadata"]["labels"]
        assert bare == yaml.safe_load(GENERATED[plural].read_text())
    assert crds["clustertrainingruntimes"]["spec"]["scope"] == "Cluster"
    # The chart's own CRD besides, from crds/.
    assert len(find(enabled, "CustomResourceDefinition")) == 1 + len(PLURALS)


# -- off by default -------------------------------------------------------------------------------


def test_disabled_renders_nothing_of_trainer(
    disabled: list[Manifest], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TORCHJOB_TRAINER", raising=False)
    defaults = yaml.safe_load((CHART / "values.yaml").read_text())
    assert defaults["trainer"] == {
        "enabled": False,
        "runtimesReadableByAll": True,
        "runtimes": {"enabled": True, "torchDistributed": {"image": IMAGE}},
    }
    assert trainer_crds(disabled) == {}
    assert find(disabled, "ClusterTrainingRuntime") == []
    for part in COMPONENTS:
        command = container_command(component(disabled, "Deployment", part), f"{part}-pod")
        assert "TORCHJOB_TRAINER" not in command.env
        assert "--trainer" not in command.args
        assert PARSERS[part](command.args).trainer is False
    for role in find(disabled, "ClusterRole") + find(disabled, "Role"):
        for rule in rules_of(role):
            assert not mentions_trainer(rule), role["metadata"]["name"]
    assert not [b for b in find(disabled, "ClusterRoleBinding") if b["subjects"] == EVERYONE]
    for name, hook in hooks_of(disabled).items():
        assert not name.startswith(("trainjobs", "trainingruntimes", "clustertrainingruntimes"))
        assert all(GROUP not in rule["apiGroups"] for rule in hook["rules"])


# -- on -------------------------------------------------------------------------------------------


def test_every_service_is_told_to_run_trainjobs(
    enabled: list[Manifest], monkeypatch: pytest.MonkeyPatch
) -> None:
    for part in COMPONENTS:
        command = container_command(component(enabled, "Deployment", part), f"{part}-pod")
        assert "--trainer" in command.args
        with monkeypatch.context() as env:
            env.delenv("TORCHJOB_TRAINER", raising=False)
            parsed = PARSERS[part](command.args)
        assert parsed.trainer is True, part
        # Beside PyTorchJobs, not instead of them: each has its own setting.
        assert parsed.kubeflow is False, part


def test_both_opt_in_apis_together() -> None:
    manifests = template(settings={**ON, "kubeflow.enabled": True})
    for part in COMPONENTS:
        args = container_command(component(manifests, "Deployment", part), f"{part}-pod").args
        assert "--kubeflow" in args and "--trainer" in args, part
    names = set(hooks_of(manifests))
    assert {"kubeflowjobs.validate.torchjob.dev", "trainjobs.validate.torchjob.dev"} <= names
    groups = {m["spec"]["group"] for m in find(manifests, "CustomResourceDefinition")}
    assert groups == {OURS[0], "kubeflow.org", GROUP}


def as_trainer(rule: dict[str, Any]) -> dict[str, Any]:
    """A rule on pytorchtrainingjobs as the same rule on trainjobs."""
    return {
        **rule,
        "apiGroups": [GROUP],
        "resources": [r.replace(OURS[1], TRAINJOBS[1]) for r in rule["resources"]],
    }


def job_rules(rules: list[dict[str, Any]], group: str) -> list[dict[str, Any]]:
    """The rules on `group`'s jobs (not on its runtimes)."""
    return [
        rule
        for rule in rules
        if group in rule["apiGroups"] and not set(rule["resources"]) & set(RUNTIMES)
    ]


def without_scale(rules: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A TrainJob has no scale subresource, so it is granted none."""
    return [
        {**rule, "resources": kept}
        for rule in rules
        if (kept := [r for r in rule["resources"] if not r.endswith("/scale")])
    ]


@pytest.mark.parametrize("part", ["webhook", "reconciler", "housekeeper"])
def test_each_service_has_on_trainjobs_what_it_has_on_ours(
    enabled: list[Manifest], disabled: list[Manifest], part: str
) -> None:
    rules = rules_of(component(enabled, "ClusterRole", part))
    ours = job_rules(rules, OURS[0])
    assert ours, part
    assert job_rules(rules, GROUP) == [as_trainer(rule) for rule in ours]
    # Nothing else changes, but for the runtimes the reconciler and the webhook read.
    runtimes = [rule for rule in rules if set(rule["resources"]) & set(RUNTIMES)]
    assert runtimes == (
        []
        if part == "housekeeper"
        else [
            {"apiGroups": [GROUP], "resources": list(RUNTIMES), "verbs": ["get", "list", "watch"]}
        ]
    )
    without = [rule for rule in rules if not mentions_trainer(rule)]
    assert without == rules_of(component(disabled, "ClusterRole", part))
    # Trainer's objects only in the cluster-wide role; the namespaced one is the leader's.
    roles = [m for m in enabled if m["kind"] == "Role"]
    assert not any(mentions_trainer(r) for m in roles for r in rules_of(m))


def test_what_each_service_may_do_with_trainjobs_and_runtimes(enabled: list[Manifest]) -> None:
    group, plural = TRAINJOBS
    reconciler = rules_of(component(enabled, "ClusterRole", "reconciler"))
    assert all(grants(reconciler, group, plural, verb) for verb in ("list", "watch"))
    assert grants(reconciler, group, f"{plural}/status", "patch")
    assert grants(reconciler, group, f"{plural}/finalizers", "update")
    assert not grants(reconciler, group, plural, "delete")
    housekeeper = rules_of(component(enabled, "ClusterRole", "housekeeper"))
    assert all(
        grants(housekeeper, group, plural, verb) for verb in ("get", "list", "watch", "delete")
    )
    assert grants(housekeeper, group, f"{plural}/status", "patch")
    webhook = rules_of(component(enabled, "ClusterRole", "webhook"))
    assert all(grants(webhook, group, plural, verb) for verb in ("get", "list", "watch"))
    writes = ("create", "update", "patch", "delete")
    assert not any(grants(webhook, group, plural, verb) for verb in writes)
    # The runtime a TrainJob names: read by the webhook (admission) and the reconciler (its
    # copy into the job's status), written by neither.
    for rules in (reconciler, webhook):
        for runtime in RUNTIMES:
            assert all(grants(rules, group, runtime, verb) for verb in ("get", "list", "watch"))
            assert not any(grants(rules, group, runtime, verb) for verb in writes)
    assert not any(grants(housekeeper, group, runtime, "get") for runtime in RUNTIMES)


def aggregated_roles(manifests: list[Manifest]) -> dict[str, Manifest]:
    """The aggregated ClusterRoles, by the end of their name (edit, view)."""
    return {
        role["metadata"]["name"].rsplit("-", 1)[1]: role
        for role in find(manifests, "ClusterRole")
        if any(
            k.startswith("rbac.authorization.k8s.io/aggregate-to-")
            for k in role["metadata"]["labels"]
        )
    }


def test_tenants_get_trainjobs_as_they_get_ours_and_their_namespace_runtimes(
    enabled: list[Manifest],
) -> None:
    aggregated = aggregated_roles(enabled)
    assert set(aggregated) == {"edit", "view"}
    for role in aggregated.values():
        rules = rules_of(role)
        ours = job_rules(rules, OURS[0])
        assert job_rules(rules, GROUP) == without_scale([as_trainer(rule) for rule in ours])
        # ClusterTrainingRuntimes are cluster-wide: not in roles bound in a namespace.
        assert not any("clustertrainingruntimes" in rule["resources"] for rule in rules)
    edit, view = rules_of(aggregated["edit"]), rules_of(aggregated["view"])
    assert grants(edit, *TRAINJOBS, "create")
    assert not grants(edit, GROUP, "trainjobs/scale", "update")
    for verb in ("create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"):
        assert grants(edit, GROUP, "trainingruntimes", verb), verb
    assert grants(view, *TRAINJOBS, "list")
    assert not grants(view, *TRAINJOBS, "create")
    assert all(grants(view, GROUP, "trainingruntimes", verb) for verb in ("get", "list", "watch"))
    assert not grants(view, GROUP, "trainingruntimes", "create")


def everyone_reads_cluster_runtimes(manifests: list[Manifest]) -> list[Manifest]:
    """The ClusterRole bound to every signed-in user, if any."""
    bindings = [b for b in find(manifests, "ClusterRoleBinding") if b["subjects"] == EVERYONE]
    return [one(manifests, "ClusterRole", b["roleRef"]["name"]) for b in bindings]


def test_everyone_signed_in_may_read_the_cluster_runtimes(enabled: list[Manifest]) -> None:
    """The Kubeflow SDK reads the ClusterTrainingRuntime a job names as its user."""
    (role,) = everyone_reads_cluster_runtimes(enabled)
    assert rules_of(role) == [
        {
            "apiGroups": [GROUP],
            "resources": ["clustertrainingruntimes"],
            "verbs": ["get", "list", "watch"],
        }
    ]
    assert role["metadata"]["labels"]["app.kubernetes.io/instance"] == RELEASE
    closed = template(settings={**ON, "trainer.runtimesReadableByAll": False})
    assert everyone_reads_cluster_runtimes(closed) == []


def test_trainjobs_are_mutated_and_validated_as_ours(enabled: list[Manifest]) -> None:
    hooks = hooks_of(enabled)
    for action in ("mutate", "validate"):
        ours = hooks[f"jobs.{action}.torchjob.dev"]
        theirs = hooks[f"trainjobs.{action}.torchjob.dev"]
        assert theirs["rules"] == [
            {
                "apiGroups": [GROUP],
                "apiVersions": ["v1alpha1"],
                "resources": ["trainjobs"],
                "operations": ["CREATE", "UPDATE"],
                "scope": "Namespaced",
            }
        ]
        assert theirs["clientConfig"]["service"]["path"] == f"/{action}/trainjobs"
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


@pytest.mark.parametrize(
    ("plural", "scope"),
    [("trainingruntimes", "Namespaced"), ("clustertrainingruntimes", "Cluster")],
)
def test_runtimes_are_validated_as_jobs_are(
    enabled: list[Manifest], plural: str, scope: str
) -> None:
    hooks = hooks_of(enabled)
    ours = hooks["jobs.validate.torchjob.dev"]
    theirs = hooks[f"{plural}.validate.torchjob.dev"]
    assert f"{plural}.mutate.torchjob.dev" not in hooks  # nothing to default
    assert theirs["rules"] == [
        {
            "apiGroups": [GROUP],
            "apiVersions": ["v1alpha1"],
            "resources": [plural],
            "operations": ["CREATE", "UPDATE"],
            "scope": scope,
        }
    ]
    assert theirs["clientConfig"]["service"]["path"] == f"/validate/{plural}"
    drop = ("name", "rules", "clientConfig", "objectSelector")
    assert {k: v for k, v in theirs.items() if k not in drop} == {
        k: v for k, v in ours.items() if k not in drop
    }
    # Only the cluster's runtimes skip the chart's own (test_the_chart_ships_torch_distributed).
    assert ("objectSelector" in theirs) is (plural == "clustertrainingruntimes")


def test_external_url_reaches_the_trainer_paths() -> None:
    url = "https://192.0.2.10:9443"
    hooks = hooks_of(template(settings={**ON, "webhook.externalURL": url}))
    for name, path in (
        ("trainjobs.mutate", "/mutate/trainjobs"),
        ("trainjobs.validate", "/validate/trainjobs"),
        ("trainingruntimes.validate", "/validate/trainingruntimes"),
        ("clustertrainingruntimes.validate", "/validate/clustertrainingruntimes"),
    ):
        assert hooks[f"{name}.torchjob.dev"]["clientConfig"] == {"url": f"{url}{path}"}


# -- Trainer's torch-distributed runtime ----------------------------------------------------------


def selects(selector: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    """Whether a label selector of matchExpressions (Exists, DoesNotExist) selects `labels`."""
    for expression in selector.get("matchExpressions", []):
        present = expression["key"] in labels
        if present != (expression["operator"] == "Exists"):
            return False
    return True


def test_the_chart_ships_torch_distributed(enabled: list[Manifest]) -> None:
    (runtime,) = find(enabled, "ClusterTrainingRuntime")
    assert runtime["apiVersion"] == f"{GROUP}/v1alpha1"
    metadata = runtime["metadata"]
    assert metadata["name"] == "torch-distributed"
    assert "namespace" not in metadata
    # What the Kubeflow SDK lists runtimes by, and the release's labels.
    assert metadata["labels"][FRAMEWORK_LABEL] == "torch"
    assert metadata["labels"]["app.kubernetes.io/instance"] == RELEASE
    assert runtime["spec"] == TORCH_DISTRIBUTED_SPEC
    # A runtime torchjob runs, by the webhook's and the reconciler's own rules...
    assert runtime_errors(runtime["spec"]) == []
    # ...which is why the runtimes' webhook may skip it: an install creates it before any
    # webhook pod is ready.
    hook = hooks_of(enabled)["clustertrainingruntimes.validate.torchjob.dev"]
    assert not selects(hook["objectSelector"], metadata["labels"])
    assert selects(hook["objectSelector"], {FRAMEWORK_LABEL: "torch"})


def test_the_runtime_follows_its_crd() -> None:
    """Without a cluster (`helm template`, and an install whose cluster has no such CRD yet) the
    runtime is a hook Helm creates after the CRDs, owned by the release so that a later upgrade
    takes it over; trainer/runtimes.yaml looks the CRD and the runtime up to tell
    (test_an_install_creates_the_runtime_after_its_crd_and_upgrades_keep_it, on a cluster)."""
    manifests = template(release=RELEASE, namespace=NAMESPACE, settings=ON)
    (runtime,) = find(manifests, "ClusterTrainingRuntime")
    assert runtime["metadata"]["annotations"] == {
        "helm.sh/resource-policy": "keep",
        "helm.sh/hook": "post-install,post-upgrade",
        "helm.sh/hook-delete-policy": "before-hook-creation",
        "meta.helm.sh/release-name": RELEASE,
        "meta.helm.sh/release-namespace": NAMESPACE,
    }
    text = (CHART / "templates" / "trainer" / "runtimes.yaml").read_text()
    assert (
        'lookup "apiextensions.k8s.io/v1" "CustomResourceDefinition" "" '
        '"clustertrainingruntimes.trainer.kubeflow.org"'
    ) in text
    assert (
        'lookup "trainer.kubeflow.org/v1alpha1" "ClusterTrainingRuntime" "" "torch-distributed"'
        in text
    )


def test_the_runtime_values() -> None:
    image = "registry.example.com/ml/pytorch:2.13.0"
    (runtime,) = find(
        template(settings={**ON, "trainer.runtimes.torchDistributed.image": image}),
        "ClusterTrainingRuntime",
    )
    spec = runtime["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]
    assert spec["template"]["spec"]["containers"] == [{"name": "node", "image": image}]
    # Off: no runtime, the rest as before.
    off = template(settings={**ON, "trainer.runtimes.enabled": False})
    assert find(off, "ClusterTrainingRuntime") == []
    assert set(trainer_crds(off)) == set(PLURALS)


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("trainer.enabled", "yes", "at '/trainer/enabled': got string, want boolean"),
        ("trainer.crd", True, "at '/trainer': additional properties 'crd' not allowed"),
        (
            "trainer.runtimesReadableByAll",
            "true",
            "at '/trainer/runtimesReadableByAll': got string, want boolean",
        ),
        (
            "trainer.runtimes.torchDistributed.image",
            "",
            "at '/trainer/runtimes/torchDistributed/image'",
        ),
        (
            "trainer.runtimes.deepspeed",
            {"enabled": True},
            "at '/trainer/runtimes': additional properties 'deepspeed' not allowed",
        ),
    ],
)
def test_schema_rejects_a_wrong_trainer_value(key: str, value: object, message: str) -> None:
    result = helm(
        "template", "torchjob", str(CHART), *values_args(settings={key: value}), check=False
    )
    assert result.returncode != 0
    assert message in result.stderr, result.stderr


# -- the CRDs of someone else ---------------------------------------------------------------------


def owner_check(tmp_path: Path, name: str, existing: dict[str, Any] | None) -> Any:
    """The chart's check fed the CRD `existing` as `lookup` would return it from a cluster (which
    `helm template` cannot reach: its own lookup finds nothing)."""
    found = json.dumps(existing or {})
    text = (
        '{{- include "torchjob.trainerCRDOwnerCheck" '
        f'(dict "root" $ "name" "{name}" "existing" (fromJson `{found}`)) }}}}\n'
    )
    return render_with(tmp_path, "owner-check.yaml", text, ON, release=RELEASE, namespace=NAMESPACE)


def existing_crd(name: str, annotations: dict[str, str] | None) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name}
    if annotations is not None:
        metadata["annotations"] = annotations
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": metadata,
    }


def helm_owner(release: str, namespace: str) -> dict[str, str]:
    return {"meta.helm.sh/release-name": release, "meta.helm.sh/release-namespace": namespace}


@pytest.mark.parametrize("plural", PLURALS)
@pytest.mark.parametrize(
    ("annotations", "owner"),
    [
        (None, "it carries no Helm release annotations (installed by Kubeflow Trainer's manifests"),
        (
            {"controller-gen.kubebuilder.io/version": "v0.17.2"},
            "it carries no Helm release annotations",
        ),
        (
            helm_owner("kubeflow-trainer", "kubeflow-system"),
            'it belongs to Helm release "kubeflow-trainer" in namespace "kubeflow-system"',
        ),
        (
            helm_owner(RELEASE, "other-system"),
            f'it belongs to Helm release "{RELEASE}" in namespace "other-system"',
        ),
    ],
    ids=["no-annotations", "trainer-manifests", "trainer-chart", "same-name-elsewhere"],
)
def test_a_crd_someone_else_installed_is_refused(
    tmp_path: Path, plural: str, annotations: dict[str, str] | None, owner: str
) -> None:
    name = CRD_NAMES[plural]
    result = owner_check(tmp_path, name, existing_crd(name, annotations))
    assert result.returncode != 0
    message = result.stderr
    assert (
        f"trainer.enabled: the cluster already has the CRD {name}, which this release ({RELEASE} "
        f"in namespace {NAMESPACE}) did not install: {owner}"
    ) in message, message
    assert "Kubeflow Trainer appears to be installed" in message
    assert "lets only its own controller (or MultiKueue) manage a TrainJob" in message
    assert "uninstall Kubeflow Trainer" in message
    assert "leave trainer.enabled false" in message


@pytest.mark.parametrize(
    "existing",
    [None, existing_crd(CRD_NAMES["trainjobs"], helm_owner(RELEASE, NAMESPACE))],
    ids=["none", "this-release"],
)
def test_no_crd_or_our_own_is_installed_over(
    tmp_path: Path, existing: dict[str, Any] | None
) -> None:
    result = owner_check(tmp_path, CRD_NAMES["trainjobs"], existing)
    assert result.returncode == 0, result.stderr


def test_the_crd_template_checks_what_the_cluster_has() -> None:
    """The check above runs on what `lookup` finds of each CRD the template renders."""
    text = (CHART / "templates" / "trainer" / "crd.yaml").read_text()
    assert (
        '"torchjob.trainerCRDOwnerCheck" (dict "root" $ "name" $name "existing" (lookup '
        '"apiextensions.k8s.io/v1" "CustomResourceDefinition" "" $name))'
    ) in text
    # Without a cluster lookup finds nothing, and the CRDs are rendered.
    assert set(trainer_crds(template(settings=ON))) == set(PLURALS)


# -- NOTES ----------------------------------------------------------------------------------------


def test_notes_say_how_to_submit_a_trainjob(tmp_path: Path) -> None:
    on = notes(tmp_path / "on", ON, release=RELEASE, namespace=NAMESPACE)
    assert "kubectl -n demo get trainjobs" in on
    assert "apiVersion: trainer.kubeflow.org/v1alpha1" in on and "kind: TrainJob" in on
    assert "ClusterTrainingRuntime torch-distributed" in on
    assert "docs/api-trainer.md" in on
    bare = notes(tmp_path / "bare", {**ON, "trainer.runtimes.enabled": False}, release=RELEASE)
    assert "kubectl -n demo get trainjobs" in bare and "torch-distributed)" not in bare
    off = notes(tmp_path / "off", {}, release=RELEASE, namespace=NAMESPACE)
    assert "trainjobs" not in off.lower() and "Trainer's TrainJob" not in off


# -- installed ------------------------------------------------------------------------------------


def runtime_on(plane: ControlPlane) -> dict[str, Any]:
    result = plane.kubectl("get", "clustertrainingruntime", "torch-distributed", "-o", "json")
    return dict(json.loads(result.stdout))


def node_image(runtime: Mapping[str, Any]) -> str:
    node = runtime["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]
    return str(node["template"]["spec"]["containers"][0]["image"])


@pytest.mark.e2e
def test_an_install_creates_the_runtime_after_its_crd_and_upgrades_keep_it() -> None:
    """On a control plane of its own, with none of Trainer's CRDs: Helm maps every object of a
    release before it creates any, so the runtime must be a hook that follows its CRD; no webhook
    pod runs here, as none is ready yet on a real install. An upgrade that changes nothing keeps
    that same runtime; one that changes it (or finds it changed by hand) makes it anew as the
    values say. Uninstalling leaves it, and the CRDs."""
    with ControlPlane() as plane:
        kubeconfig = ("--kubeconfig", str(plane.kubeconfig))
        plane.kubectl("create", "namespace", NAMESPACE)
        where = ("--namespace", NAMESPACE, *kubeconfig)

        def release(action: str, **values: object) -> dict[str, Any]:
            settings = values_args(settings={"trainer.enabled": True, **values})
            helm(action, RELEASE, str(CHART), *where, *settings)
            return runtime_on(plane)

        made = release("install")
        assert made["spec"] == TORCH_DISTRIBUTED_SPEC
        crd = json.loads(plane.kubectl("get", "crd", CRD_NAMES["trainjobs"], "-o", "json").stdout)
        assert crd["metadata"]["annotations"]["meta.helm.sh/release-name"] == RELEASE

        kept = release("upgrade")
        assert kept["metadata"]["uid"] == made["metadata"]["uid"]

        image = "registry.example.com/ml/pytorch:2.13.0"
        changed = release("upgrade", **{"trainer.runtimes.torchDistributed.image": image})
        assert node_image(changed) == image
        again = release("upgrade", **{"trainer.runtimes.torchDistributed.image": image})
        assert again["metadata"]["uid"] == changed["metadata"]["uid"]

        edit = [{"op": "replace", "path": "/spec/mlPolicy/numNodes", "value": 4}]
        plane.kubectl(
            "patch", "clustertrainingruntime", "torch-distributed", "--type=json",
            "-p", json.dumps(edit),
        )  # fmt: skip
        undone = release("upgrade", **{"trainer.runtimes.torchDistributed.image": image})
        assert undone["spec"]["mlPolicy"]["numNodes"] == 1 and node_image(undone) == image

        helm("uninstall", RELEASE, *where)
        assert runtime_on(plane)["metadata"]["uid"] == undone["metadata"]["uid"]
        for name in CRD_NAMES.values():
            plane.kubectl("get", "crd", name)


@pytest.mark.e2e
def test_the_trainer_crds_of_another_owner_are_not_taken_over(
    control_plane: ControlPlane, crd: None, namespace: str
) -> None:
    """The control plane's Trainer CRDs were applied without Helm (as Trainer's manifests apply
    them): `helm install` with trainer.enabled looks them up and refuses before it creates
    anything."""
    kubeconfig = ("--kubeconfig", str(control_plane.kubeconfig))
    refused = helm(
        *("install", "tj-trainer", str(CHART), "--namespace", namespace, *kubeconfig),
        *values_args(settings={"trainer.enabled": True}),
        check=False,
    )
    assert refused.returncode != 0
    assert "already has the CRD trainjobs.trainer.kubeflow.org" in refused.stderr, refused.stderr
    assert "Kubeflow Trainer appears to be installed" in refused.stderr
    listed = helm("list", "--all", "--namespace", namespace, "-o", "json", *kubeconfig)
    assert json.loads(listed.stdout) == [], "no release was recorded"
