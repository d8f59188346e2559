"""The chart without a cluster: `helm lint --strict`, `helm template` with every values variant in
charts/torchjob/ci/, the schema refusing wrong values, and what the rendered objects must say."""

from __future__ import annotations

import re
import tarfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml
from support.controlplane import REPO_ROOT, kube_version
from support.helm import (
    CHART,
    CI_VALUES,
    Manifest,
    component,
    component_objects,
    container_command,
    find,
    grants,
    helm,
    one,
    rules_of,
    template,
    values_args,
)

from torchjob.api import constants
from torchjob.console import settings as console_settings
from torchjob.housekeeper import settings as housekeeper_settings
from torchjob.reconciler import settings as reconciler_settings
from torchjob.runtime.settings import PREFIX, SET_IN_EVERY_POD, Setting, undeclared_variables
from torchjob.webhook import settings as webhook_settings

CRD = REPO_ROOT / "crds" / "batch.tensorstack.dev_pytorchtrainingjobs.yaml"
NAMESPACE = "ml-system"
COMPONENTS = ("webhook", "reconciler", "housekeeper")
# Each service's own command-line parser.
PARSERS = {
    "torchjob.webhook": webhook_settings.parse,
    "torchjob.reconciler": reconciler_settings.parse,
    "torchjob.housekeeper": housekeeper_settings.parse,
    "torchjob.console": console_settings.parse,
}
DECLARED: dict[str, Callable[[], Sequence[Setting]]] = {
    "torchjob.webhook": lambda: webhook_settings.declared({}),
    "torchjob.reconciler": reconciler_settings.declared,
    "torchjob.housekeeper": housekeeper_settings.declared,
    "torchjob.console": lambda: console_settings.declared({}),
}


def variant(path: Path) -> str:
    return path.name.removesuffix("-values.yaml")


@pytest.fixture(scope="module", params=CI_VALUES, ids=variant)
def rendered(request: pytest.FixtureRequest) -> tuple[str, list[Manifest]]:
    path: Path = request.param
    return variant(path), template(namespace=NAMESPACE, values_files=[path])


def values_of(name: str) -> dict[str, Any]:
    data = yaml.safe_load((CHART / "ci" / f"{name}-values.yaml").read_text())
    return data or {}


# -- lint and the CRD --------------------------------------------------------------------------


@pytest.mark.parametrize("values", CI_VALUES, ids=variant)
def test_lint_strict(values: Path) -> None:
    result = helm(
        "lint", "--strict", str(CHART), "--values", str(values), "--kube-version", kube_version()
    )
    assert "1 chart(s) linted, 0 chart(s) failed" in result.stdout


def test_the_chart_crd_is_the_generated_file(tmp_path: Path) -> None:
    link = CHART / "crds" / CRD.name
    assert link.is_symlink() and link.resolve() == CRD.resolve()
    assert [p.name for p in (CHART / "crds").iterdir()] == [CRD.name]
    # helm follows the link when rendering...
    (crd,) = find(template(), "CustomResourceDefinition")
    assert crd == yaml.safe_load(CRD.read_text())
    # ...and packs the file's content, byte for byte, into the chart archive.
    helm("package", str(CHART), "--destination", str(tmp_path))
    (archive,) = tmp_path.glob("torchjob-*.tgz")
    with tarfile.open(archive) as tar:
        member = tar.extractfile(f"torchjob/crds/{CRD.name}")
        assert member is not None
        assert member.read() == CRD.read_bytes()
        names = tar.getnames()
    assert not [n for n in names if "/ci/" in n], "ci/ values are for tests, not the package"


# -- what every variant must render ---------------------------------------------------------------


def test_every_service_has_its_objects(rendered: tuple[str, list[Manifest]]) -> None:
    name, manifests = rendered
    values = values_of(name)
    for part in COMPONENTS:
        deployment = component(manifests, "Deployment", part)
        account = component(manifests, "ServiceAccount", part)
        assert (
            deployment["spec"]["template"]["spec"]["serviceAccountName"]
            == (account["metadata"]["name"])
        )
        component(manifests, "Service", part)
        component(manifests, "ClusterRole", part)
        component(manifests, "ClusterRoleBinding", part)
        pdb = find(component_objects(manifests, part), "PodDisruptionBudget")
        assert len(pdb) == (0 if name == "minimal" else 1)
        assert len(find(component_objects(manifests, part), "ServiceMonitor")) == (
            1 if values.get("metrics") else 0
        )
        policies = 1 if values.get("networkPolicy", {}).get("enabled") else 0
        if part == "webhook" and values.get("webhook", {}).get("networkPolicy", {}).get(
            "enabled", True
        ):
            policies = 1  # the webhook's own, on by default
        assert len(find(component_objects(manifests, part), "NetworkPolicy")) == policies
    for part in ("reconciler", "housekeeper"):
        # The leader's Lease is the chart's, so that `helm uninstall` takes it; its spec is the
        # leader's alone, so that an upgrade leaves it be.
        lease = component(manifests, "Lease", part)
        assert "spec" not in lease
        command = container_command(component(manifests, "Deployment", part), f"{part}-pod")
        assert command.arg("--lease-name") == lease["metadata"]["name"]
    # Webhook configurations and admission policies (Mutating…, Validating…) are cluster-scoped,
    # and so is Trainer's torch-distributed runtime (trainer.enabled).
    cluster_scoped = (
        "CustomResourceDefinition",
        "ClusterRole",
        "ClusterRoleBinding",
        "ClusterTrainingRuntime",
    )
    for m in manifests:
        if m["kind"] not in cluster_scoped and not m["kind"].startswith(("Mutating", "Validating")):
            assert m["metadata"]["namespace"] == NAMESPACE, m["metadata"]["name"]


def test_pods_are_restricted_and_probed(rendered: tuple[str, list[Manifest]]) -> None:
    _, manifests = rendered
    for deployment in find(manifests, "Deployment"):
        pod = deployment["spec"]["template"]["spec"]
        assert pod["securityContext"]["runAsNonRoot"] is True
        assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
        (container,) = pod["containers"]
        security = container["securityContext"]
        assert security["allowPrivilegeEscalation"] is False
        assert security["readOnlyRootFilesystem"] is True
        assert security["capabilities"] == {"drop": ["ALL"]}
        assert {"cpu", "memory"} <= set(container["resources"]["requests"])
        assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "probes"}
        assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "probes"}
        assert "probes" in {p["name"] for p in container["ports"]}
        assert {"name": "tmp", "mountPath": "/tmp"} in container["volumeMounts"]


def test_webhook_configurations(rendered: tuple[str, list[Manifest]]) -> None:
    name, manifests = rendered
    values = values_of(name).get("webhook", {})
    service = component(manifests, "Service", "webhook")
    service_port = next(p for p in service["spec"]["ports"] if p["targetPort"] == "https")
    hooks = {
        hook["name"]: hook
        for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")
        for hook in one(manifests, kind)["webhooks"]
    }
    kubeflow = values_of(name).get("kubeflow", {}).get("enabled", False)
    trainer = values_of(name).get("trainer", {}).get("enabled", False)
    assert set(hooks) == {
        "jobs.mutate.torchjob.dev",
        "pods.mutate.torchjob.dev",
        "jobs.validate.torchjob.dev",
    } | (
        {"kubeflowjobs.mutate.torchjob.dev", "kubeflowjobs.validate.torchjob.dev"}
        if kubeflow
        else set()
    ) | (
        {
            "trainjobs.mutate.torchjob.dev",
            "trainjobs.validate.torchjob.dev",
            "trainingruntimes.validate.torchjob.dev",
            "clustertrainingruntimes.validate.torchjob.dev",
        }
        if trainer
        else set()
    )
    for hook_name, hook in hooks.items():
        assert hook["sideEffects"] == "None"
        assert hook["failurePolicy"] == "Fail"
        assert hook["timeoutSeconds"] == values.get("timeoutSeconds", 5) <= 30
        assert hook["admissionReviewVersions"] == ["v1"]
        excluded = next(
            e
            for e in hook["namespaceSelector"]["matchExpressions"]
            if e["key"] == "kubernetes.io/metadata.name"
        )
        assert excluded["operator"] == "NotIn"
        assert {"kube-system", NAMESPACE} <= set(excluded["values"])
        client_config = hook["clientConfig"]
        assert "caBundle" not in client_config, "the webhook or cert-manager fills it in"
        objects, action = hook_name.split(".")[:2]
        path = f"/{action}/{PATHS[objects]}"
        if values.get("externalURL"):
            assert client_config == {"url": values["externalURL"] + path}
        else:
            assert client_config["service"] == {
                "name": service["metadata"]["name"],
                "namespace": NAMESPACE,
                "path": path,
                "port": service_port["port"],
            }
    # Pods are sent to the webhook (and refused when it is down) only when they carry the job
    # label: no other pod in the cluster depends on it.
    pods = hooks["pods.mutate.torchjob.dev"]
    assert pods["rules"][0]["resources"] == ["pods"]
    assert pods["objectSelector"] == {
        "matchExpressions": [{"key": constants.LABEL_JOB_NAME, "operator": "Exists"}]
    }
    for job_hook in ("jobs.mutate.torchjob.dev", "jobs.validate.torchjob.dev"):
        assert hooks[job_hook]["rules"][0]["resources"] == ["pytorchtrainingjobs"]


# The path of each webhook, by the first part of its name.
PATHS = {
    "jobs": "pytorchtrainingjobs",
    "kubeflowjobs": "pytorchjobs",
    "trainjobs": "trainjobs",
    "trainingruntimes": "trainingruntimes",
    "clustertrainingruntimes": "clustertrainingruntimes",
    "pods": "pods",
}


def test_rendered_arguments_are_what_the_services_accept(
    rendered: tuple[str, list[Manifest]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each Deployment's flags parse with the service's own parser, and name the chart's objects.
    The console (console.enabled) is checked too: its settings are declared, though the service
    is not run here."""
    name, manifests = rendered
    parts = (
        *COMPONENTS,
        *(["console"] if find(component_objects(manifests, "console"), "Deployment") else []),
    )
    commands = {
        part: container_command(component(manifests, "Deployment", part), f"{part}-pod")
        for part in parts
    }
    parsed: dict[str, Any] = {}
    for part, command in commands.items():
        assert command.module == f"torchjob.{part}"
        # Every setting is a flag: of our variables, the chart sets only what the kubelet fills
        # in (a user's extraEnv aside), and none the service does not declare (a misspelling
        # would be read by nothing).
        ours = {name for name in command.env if name.startswith(PREFIX)}
        assert ours <= SET_IN_EVERY_POD, part
        declared = DECLARED[command.module]()
        assert undeclared_variables(command.env, declared) == [], part
        # Each flag exactly as declared: argparse would also take an abbreviation, which a later
        # flag of the same prefix would make ambiguous.
        accepted = {s.flag for s in declared} | {
            f"--no-{s.flag[2:]}" for s in declared if isinstance(s.default, bool)
        }
        assert {a for a in command.args if a.startswith("--")} <= accepted, part
        parse = PARSERS[command.module]
        for key, value in command.env.items():
            monkeypatch.setenv(key, value)
        parsed[part] = parse(command.args)
        assert parsed[part].namespace == NAMESPACE
        assert parsed[part].probe_port == command.probe_port

    webhook = parsed["webhook"]
    reconciler_account = component(manifests, "ServiceAccount", "reconciler")["metadata"]["name"]
    assert f"system:serviceaccount:{NAMESPACE}:{reconciler_account}" in webhook.pod_creators
    assert webhook.service_name == component(manifests, "Service", "webhook")["metadata"]["name"]
    mutating = one(manifests, "MutatingWebhookConfiguration")["metadata"]["name"]
    validating = one(manifests, "ValidatingWebhookConfiguration")["metadata"]["name"]
    assert (webhook.mutating_config, webhook.validating_config) == (mutating, validating)
    https = component(manifests, "Deployment", "webhook")["spec"]["template"]["spec"]
    assert {"name": "https", "containerPort": webhook.port, "protocol": "TCP"} in (
        https["containers"][0]["ports"]
    )
    if values_of(name).get("certManager", {}).get("enabled"):
        certificate = one(manifests, "Certificate")
        volume = next(v for v in https["volumes"] if v["name"] == "tls")
        assert volume["secret"]["secretName"] == certificate["spec"]["secretName"]
        assert webhook.certificates_from_files
        service = component(manifests, "Service", "webhook")["metadata"]["name"]
        assert f"{service}.{NAMESPACE}.svc" in certificate["spec"]["dnsNames"]
    else:
        role = component(manifests, "Role", "webhook")
        assert grants(rules_of(role), "", "secrets", "update", webhook.secret_name)
        assert not webhook.certificates_from_files

    reconciler = parsed["reconciler"]
    assert reconciler.identity == "reconciler-pod"
    lease_rules = rules_of(component(manifests, "Role", "reconciler"))
    assert grants(lease_rules, "coordination.k8s.io", "leases", "patch", reconciler.lease_name)
    flags = commands["reconciler"]
    assert reconciler.qps == float(flags.arg("--qps"))
    assert reconciler.burst == int(flags.arg("--burst"))
    assert reconciler.restart_backoff == float(flags.arg("--restart-backoff"))
    housekeeper = commands["housekeeper"]
    lease = housekeeper.arg("--lease-name")
    assert grants(
        rules_of(component(manifests, "Role", "housekeeper")),
        "coordination.k8s.io",
        "leases",
        "update",
        lease,
    )


def test_webhook_limits_and_its_admission_port(rendered: tuple[str, list[Manifest]]) -> None:
    """The request limits reach the webhook, within the apiserver's timeout and the memory limit;
    the admission port admits only the configured peers or, by default, no pod."""
    name, manifests = rendered
    values = values_of(name)
    defaults = yaml.safe_load((CHART / "values.yaml").read_text())
    wanted = {**defaults["webhook"], **values.get("webhook", {})}
    limits_values = {**defaults["webhook"]["limits"], **wanted.get("limits", {})}
    deployment = component(manifests, "Deployment", "webhook")
    limits = webhook_settings.parse(container_command(deployment, "webhook-pod").args).limits
    assert limits.max_body_bytes == limits_values["maxBodyBytes"]
    assert limits.max_inflight_bytes == limits_values["maxInflightBytes"]
    assert limits.read_timeout_seconds == limits_values["readTimeoutSeconds"]
    assert limits.handler_timeout_seconds == limits_values["handlerTimeoutSeconds"]
    hooks = [
        hook
        for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")
        for hook in one(manifests, kind)["webhooks"]
    ]
    assert all(limits.handler_timeout_seconds < hook["timeoutSeconds"] for hook in hooks)
    # The memory admissions may take (the bound in values.yaml) beside the process's own: one
    # parsed large body and what the allocator keeps between them, 28 times its size.
    bound = 90 * MiB + limits.max_inflight_bytes + MiB + 28 * limits.max_body_bytes + 13 * MiB
    memory = deployment["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]
    assert bound < 0.8 * quantity(memory["memory"])

    policy = find(component_objects(manifests, "webhook"), "NetworkPolicy")
    if not policy:
        return
    ingress = policy[0]["spec"]["ingress"]
    (admission,) = [
        rule for rule in ingress if {"port": "https", "protocol": "TCP"} in rule["ports"]
    ]
    assert admission["ports"] == [{"port": "https", "protocol": "TCP"}]
    peers = values.get("networkPolicy", {}).get("webhookFrom")
    pods = wanted.get("networkPolicy", {}).get("podCIDRs")
    if peers:
        assert admission["from"] == peers
    elif pods:
        blocks = {
            peer["ipBlock"]["cidr"]: peer["ipBlock"].get("except", []) for peer in admission["from"]
        }
        assert set(blocks) == {"0.0.0.0/0", "::/0"}
        assert sorted(blocks["0.0.0.0/0"] + blocks["::/0"]) == sorted(pods)
        assert all(":" in cidr for cidr in blocks["::/0"])
    else:
        assert "from" not in admission
    # Nothing but these ports is open: admission, probes, and progress reports when on
    # (tests/chart/test_progress.py checks that rule).
    progress = {**defaults["progress"], **values.get("progress", {})}["enabled"]
    opened = {"https", "probes"} | ({"progress"} if progress else set())
    assert {p["port"] for rule in ingress for p in rule["ports"]} == opened


MiB = 1024 * 1024


def quantity(text: str) -> float:
    units = {"Ki": 1024, "Mi": MiB, "Gi": 1024 * MiB}
    for suffix, factor in units.items():
        if text.endswith(suffix):
            return float(text.removesuffix(suffix)) * factor
    return float(text)


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"webhook.limits.handlerTimeoutSeconds": 5}, "must be below webhook.timeoutSeconds"),
        (
            {"webhook.limits.readTimeoutSeconds": 3, "webhook.limits.handlerTimeoutSeconds": 2},
            "readTimeoutSeconds must be at most",
        ),
        ({"webhook.limits.maxInflightBytes": 2097152}, "at least webhook.limits.maxBodyBytes"),
    ],
)
def test_inconsistent_webhook_limits_are_refused(settings: dict[str, object], message: str) -> None:
    result = helm("template", "torchjob", str(CHART), *values_args(settings=settings), check=False)
    assert result.returncode != 0
    assert message in result.stderr, result.stderr


EVERYONE = [
    {"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "system:authenticated"}
]


def test_rbac_is_least_privilege(rendered: tuple[str, list[Manifest]]) -> None:
    name, manifests = rendered
    roles = find(manifests, "ClusterRole") + find(manifests, "Role")
    for role in roles:
        for rule in rules_of(role):
            assert "*" not in rule["verbs"] and "*" not in rule["resources"], role["metadata"]
    # Each binding gives one component's role to that component's ServiceAccount only, but for
    # the reading of ClusterTrainingRuntimes by everyone signed in (trainer.runtimesReadableByAll,
    # tests/chart/test_trainer.py), a role with nothing else.
    for kind in ("ClusterRoleBinding", "RoleBinding"):
        for binding in find(manifests, kind):
            if binding["subjects"] == EVERYONE:
                role = one(manifests, "ClusterRole", binding["roleRef"]["name"])
                assert rules_of(role) == [
                    {
                        "apiGroups": ["trainer.kubeflow.org"],
                        "resources": ["clustertrainingruntimes"],
                        "verbs": ["get", "list", "watch"],
                    }
                ]
                continue
            part = binding["metadata"]["labels"]["app.kubernetes.io/component"]
            account = component(manifests, "ServiceAccount", part)["metadata"]
            assert binding["subjects"] == [
                {"kind": "ServiceAccount", "name": account["name"], "namespace": NAMESPACE}
            ]
            assert binding["roleRef"]["name"] == binding["metadata"]["name"]
    webhook_cluster = rules_of(component(manifests, "ClusterRole", "webhook"))
    # Secrets are never readable cluster-wide by any component.
    for part in COMPONENTS:
        cluster_rules = rules_of(component(manifests, "ClusterRole", part))
        assert not any("secrets" in rule["resources"] for rule in cluster_rules), part
    hooks = [r for r in webhook_cluster if r["apiGroups"] == ["admissionregistration.k8s.io"]]
    if values_of(name).get("certManager", {}).get("enabled"):
        assert hooks == []
        assert not find(component_objects(manifests, "webhook"), "Role")
    else:
        mutating = one(manifests, "MutatingWebhookConfiguration")["metadata"]["name"]
        validating = one(manifests, "ValidatingWebhookConfiguration")["metadata"]["name"]
        assert sorted(n for rule in hooks for n in rule["resourceNames"]) == sorted(
            [mutating, validating]
        )
        for rule in hooks:
            assert rule["verbs"] == ["get", "patch"]


def test_aggregated_roles_extend_the_built_in_ones(rendered: tuple[str, list[Manifest]]) -> None:
    name, manifests = rendered
    aggregated = [
        role
        for role in find(manifests, "ClusterRole")
        if any(k.startswith("rbac.authorization.k8s.io/aggregate-to-") for k in labels(role))
    ]
    if name == "minimal":
        assert aggregated == []
        return
    by_target = {
        key.rsplit("-", 1)[1]: role
        for role in aggregated
        for key, value in labels(role).items()
        if key.startswith("rbac.authorization.k8s.io/aggregate-to-") and value == "true"
    }
    assert set(by_target) == {"admin", "edit", "view"}
    group, plural = "batch.tensorstack.dev", "pytorchtrainingjobs"
    for verb in ("create", "delete", "list", "patch", "update", "watch"):
        assert grants(rules_of(by_target["edit"]), group, plural, verb)
    assert grants(rules_of(by_target["view"]), group, plural, "list")
    assert not grants(rules_of(by_target["view"]), group, plural, "create")


def labels(manifest: Manifest) -> dict[str, str]:
    return dict(manifest["metadata"].get("labels") or {})


def test_monitors_and_policies_select_what_exists(rendered: tuple[str, list[Manifest]]) -> None:
    _, manifests = rendered
    for monitor in find(manifests, "ServiceMonitor"):
        selector = monitor["spec"]["selector"]["matchLabels"]
        services = [s for s in find(manifests, "Service") if selector.items() <= labels(s).items()]
        assert len(services) == 1, monitor["metadata"]["name"]
        ports = {p["name"] for p in services[0]["spec"]["ports"]}
        assert {e["port"] for e in monitor["spec"]["endpoints"]} <= ports
    for policy in find(manifests, "NetworkPolicy"):
        selector = policy["spec"]["podSelector"]["matchLabels"]
        (deployment,) = [
            d
            for d in find(manifests, "Deployment")
            if selector.items() <= d["spec"]["template"]["metadata"]["labels"].items()
        ]
        container = deployment["spec"]["template"]["spec"]["containers"][0]
        names = {p["name"] for p in container["ports"]}
        for rule in policy["spec"]["ingress"]:
            assert {p["port"] for p in rule["ports"]} <= names
    for pdb in find(manifests, "PodDisruptionBudget"):
        selector = pdb["spec"]["selector"]["matchLabels"]
        assert any(
            selector.items() <= d["spec"]["template"]["metadata"]["labels"].items()
            for d in find(manifests, "Deployment")
        )


def test_image_is_one_for_all_services() -> None:
    manifests = template()
    images = {
        d["spec"]["template"]["spec"]["containers"][0]["image"]
        for d in find(manifests, "Deployment")
    }
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert images == {f"torchjob:{chart['appVersion']}"}
    digest = "sha256:" + "ab" * 32
    pinned = template(settings={"image.repository": "r.example/tj", "image.digest": digest})
    assert {
        d["spec"]["template"]["spec"]["containers"][0]["image"] for d in find(pinned, "Deployment")
    } == {f"r.example/tj@{digest}"}


# -- the schema -----------------------------------------------------------------------------------

BAD_VALUES = [
    ("webhook.timeoutSeconds", 60, "at '/webhook/timeoutSeconds': maximum: got 60, want 30"),
    (
        "webhook.timeoutSecond",
        6,
        "at '/webhook': additional properties 'timeoutSecond' not allowed",
    ),
    ("reconciler.logLevel", "debug", "at '/reconciler/logLevel': value must be one of"),
    ("reconciler.workers", 0, "at '/reconciler/workers': minimum: got 0, want 1"),
    ("webhook.replicas", "two", "at '/webhook/replicas': got string, want integer"),
    ("webhook.externalURL", "http://192.0.2.1:9443", "at '/webhook/externalURL'"),
    ("image.pullPolicy", "Sometimes", "at '/image/pullPolicy': value must be one of"),
    ("webhook.certificate.ipAddresses", ["localhost"], "at '/webhook/certificate/ipAddresses/0'"),
    ("certManager.issuerRef", {"name": "ca", "kind": "Vault"}, "at '/certManager/issuerRef/kind'"),
    ("networkPolicy.apiServerPorts", [0], "at '/networkPolicy/apiServerPorts/0': minimum"),
    ("webhook.limits.maxBodyBytes", 512, "at '/webhook/limits/maxBodyBytes': minimum"),
    ("webhook.limits.readTimeoutSeconds", 0, "at '/webhook/limits/readTimeoutSeconds'"),
    ("webhook.networkPolicy.podCIDRs", ["10.244.0.0"], "at '/webhook/networkPolicy/podCIDRs/0'"),
    ("scheduling.gang", "kueue", "at '/scheduling/gang': value must be one of"),
    ("scheduling.t9kPriorityClasses", {"101": "top"}, "invalid propertyName '101'"),
]


@pytest.mark.parametrize(("key", "value", "message"), BAD_VALUES, ids=[b[0] for b in BAD_VALUES])
def test_schema_rejects_a_wrong_value(key: str, value: object, message: str) -> None:
    result = helm(
        "template", "torchjob", str(CHART), *values_args(settings={key: value}), check=False
    )
    assert result.returncode != 0
    assert "values don't meet the specifications of the schema" in result.stderr
    assert message in result.stderr, result.stderr


def test_values_are_documented_and_the_schema_knows_every_key() -> None:
    text = (CHART / "values.yaml").read_text()
    schema = yaml.safe_load((CHART / "values.schema.json").read_text())
    assert_closed(yaml.safe_load(text), schema, schema, ())
    # Every value is preceded by a comment ("# -- ...") saying what it is. A block whose key has
    # one is a value as a whole; the keys of any other block are documented one by one.
    lines = text.splitlines()
    blocks: list[tuple[int, bool]] = []  # (indent, documented as a whole) of enclosing blocks
    for number, line in enumerate(lines):
        match = re.match(r"^(\s*)[A-Za-z0-9]+:(.*)$", line)
        if not match:
            continue
        indent, rest = len(match.group(1)), match.group(2).strip()
        blocks = [(i, whole) for i, whole in blocks if i < indent]
        if any(whole for _, whole in blocks):
            continue
        comment = first_comment_line_above(lines, number)
        if rest:
            assert comment.startswith("# "), (
                f"values.yaml:{number + 1}: {line.strip()} undocumented"
            )
        else:
            blocks.append((indent, comment.startswith("# --")))


def first_comment_line_above(lines: list[str], number: int) -> str:
    """The first line of the comment right above line `number` ("" when there is none)."""
    start = number
    while start > 0 and lines[start - 1].strip().startswith("#"):
        start -= 1
    return lines[start].strip() if start < number else ""


def assert_closed(
    values: Any, node: dict[str, Any], root: dict[str, Any], path: tuple[str, ...]
) -> None:
    """Every mapping of the chart's own keys in values.yaml is a schema object that refuses keys
    it does not know, so a misspelt value fails instead of being ignored."""
    if "$ref" in node:
        node = root["$defs"][node["$ref"].rsplit("/", 1)[1]]
    if path in FREE_FORM or not isinstance(values, dict) or not values:
        return
    assert node.get("additionalProperties") is False, (
        f"{'.'.join(path) or 'the top level'} accepts any key"
    )
    for key, value in values.items():
        assert key in node["properties"], f"{'.'.join((*path, key))} is not in the schema"
        assert_closed(value, node["properties"][key], root, (*path, key))


# Values whose keys are Kubernetes', not the chart's.
FREE_FORM = {
    ("podSecurityContext",),
    ("containerSecurityContext",),
    *((part, "resources") for part in (*COMPONENTS, "console")),
}


def test_scheduling_values_become_the_reconciler_flags() -> None:
    settings = {
        "scheduling.gang": "volcano",
        "scheduling.volcanoSchedulerName": "vc",
        "scheduling.t9kQueues": "kueue",
        "scheduling.t9kPriorityClasses": {"0": "low", "90": "high"},
    }
    reconciler = next(
        d
        for d in find(template(settings=settings), "Deployment")
        if "reconciler" in d["metadata"]["name"]
    )
    args = reconciler["spec"]["template"]["spec"]["containers"][0]["args"]
    given = {flag: args[args.index(flag) + 1] for flag in args if flag.startswith("--")}
    assert given["--gang-scheduling"] == "volcano"
    assert given["--volcano-scheduler-name"] == "vc"
    assert given["--t9k-queues"] == "kueue"
    assert given["--t9k-priority-classes"] == "0=low,90=high"


def test_the_tensorboards_get_a_wildcard_host_of_their_own() -> None:
    manifests = template(
        namespace=NAMESPACE, values_files=[CHART / "ci" / "console-tensorboard-values.yaml"]
    )
    deployment = component(manifests, "Deployment", "console")
    args = container_command(deployment, "console-0").args
    assert args[args.index("--tensorboard-url") + 1] == "https://tb.example-boards.com"
    ingress = one(manifests, "Ingress")
    host = "*.tb.example-boards.com"
    assert ingress["spec"]["tls"] == [{"hosts": [host], "secretName": "tensorboards-wildcard-tls"}]
    [rule] = ingress["spec"]["rules"]
    backend = rule["http"]["paths"][0]["backend"]["service"]
    assert rule["host"] == host
    # The console's Service, named as its Deployment is.
    assert backend == {"name": deployment["metadata"]["name"], "port": {"name": "http"}}
    # Without the domain, no board is passed on: no flag, no Ingress.
    plain = template(namespace=NAMESPACE, values_files=[CHART / "ci" / "console-values.yaml"])
    assert (
        "--tensorboard-url"
        not in container_command(component(plain, "Deployment", "console"), "console-0").args
    )
    assert find(plain, "Ingress") == []
