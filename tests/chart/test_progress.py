"""The chart's progress reporting (progress.*): the webhook's flags, its second port on the pods,
the Service and the NetworkPolicy (open to pods, unlike the admission port), its RBAC, the notes,
nothing of it when off, and the schema refusing values out of range. Without a cluster, but for
the last test, which asks the real apiserver what the rendered RBAC allows."""

from __future__ import annotations

import secrets
from pathlib import Path
from typing import Any

import pytest
import yaml
from support import ControlPlane
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
    notes,
    rules_of,
    template,
    values_args,
)

from torchjob.api import progress as contract
from torchjob.api.job_api import TRAINING_JOB

NAMESPACE = "ml-system"
WEBHOOK_SERVICE = "torchjob-webhook"
PTJ = ("batch.tensorstack.dev", "pytorchtrainingjobs")
PYTORCHJOB = ("kubeflow.org", "pytorchjobs")
TRAINJOB = ("trainer.kubeflow.org", "trainjobs")
# The flags the chart passes when progress is on, each followed by its value.
VALUED_FLAGS = (
    "--progress-port",
    "--progress-url",
    "--progress-write-seconds",
    "--progress-rate",
    "--progress-burst",
)


def variant(path: Path) -> str:
    return path.name.removesuffix("-values.yaml")


def progress_values(path: Path | None = None) -> dict[str, Any]:
    """progress.* of values.yaml, with those of the values file `path` on top."""
    defaults = yaml.safe_load((CHART / "values.yaml").read_text())["progress"]
    given = (yaml.safe_load(path.read_text()) or {}).get("progress", {}) if path else {}
    return {**defaults, **given}


def webhook_args(manifests: list[Manifest]) -> list[str]:
    return container_command(component(manifests, "Deployment", "webhook"), "webhook-pod").args


def flag_values(args: list[str]) -> dict[str, str]:
    return {flag: args[args.index(flag) + 1] for flag in VALUED_FLAGS if flag in args}


def progress_rules(manifests: list[Manifest]) -> list[dict[str, Any]]:
    """The rules of the webhook's NetworkPolicy that name the progress port."""
    (policy,) = find(component_objects(manifests, "webhook"), "NetworkPolicy")
    return [
        rule
        for rule in policy["spec"]["ingress"]
        if any(p["port"] == "progress" for p in rule["ports"])
    ]


# -- the webhook's flags ---------------------------------------------------------------------------


def test_the_defaults_become_the_webhook_flags() -> None:
    args = webhook_args(template(namespace=NAMESPACE))
    assert "--progress" in args and "--no-progress" not in args
    assert flag_values(args) == {
        "--progress-port": "9444",
        "--progress-url": f"https://{WEBHOOK_SERVICE}.{NAMESPACE}.svc:9444",
        "--progress-write-seconds": "10",
        "--progress-rate": "1",
        "--progress-burst": "10",
    }


def test_set_values_become_the_webhook_flags() -> None:
    settings = {
        "progress.port": 10444,
        "progress.writeIntervalSeconds": 45,
        "progress.ratePerSecond": 0.25,
        "progress.burst": 3,
    }
    args = webhook_args(template(namespace=NAMESPACE, settings=settings))
    assert flag_values(args) == {
        "--progress-port": "10444",
        "--progress-url": f"https://{WEBHOOK_SERVICE}.{NAMESPACE}.svc:10444",
        "--progress-write-seconds": "45",
        "--progress-rate": "0.25",
        "--progress-burst": "3",
    }
    # A large port or burst is written as an integer, not in a float's exponent form.
    big = webhook_args(template(settings={"progress.burst": 1000000}))
    assert flag_values(big)["--progress-burst"] == "1000000"
    # progress.url replaces the Service's URL (a trailing slash is dropped: paths are appended).
    url = webhook_args(template(settings={"progress.url": "https://192.0.2.10:9444/"}))
    assert flag_values(url)["--progress-url"] == "https://192.0.2.10:9444"


def test_off_tells_the_webhook_so_and_passes_nothing_else() -> None:
    args = webhook_args(template(settings={"progress.enabled": False}))
    assert "--no-progress" in args and "--progress" not in args
    assert flag_values(args) == {}


# -- every variant: port, Service, NetworkPolicy, RBAC --------------------------------------------


@pytest.fixture(scope="module", params=CI_VALUES, ids=variant)
def rendered(
    request: pytest.FixtureRequest,
) -> tuple[dict[str, Any], list[Manifest], dict[str, bool]]:
    path: Path = request.param
    manifests = template(namespace=NAMESPACE, values_files=[path])
    data = yaml.safe_load(path.read_text()) or {}
    # Whether each opt-in job API is served (kubeflow.enabled, trainer.enabled).
    served = {key: bool(data.get(key, {}).get("enabled")) for key in ("kubeflow", "trainer")}
    return progress_values(path), manifests, served


def test_the_pods_and_the_service_serve_the_progress_port(
    rendered: tuple[dict[str, Any], list[Manifest], dict[str, bool]],
) -> None:
    values, manifests, _ = rendered
    deployment = component(manifests, "Deployment", "webhook")
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    ports = {p["name"]: p for p in container["ports"]}
    service = component(manifests, "Service", "webhook")
    service_ports = {p["name"]: p for p in service["spec"]["ports"]}
    if not values["enabled"]:
        assert "progress" not in ports and "progress" not in service_ports
        return
    assert ports["progress"] == {
        "name": "progress",
        "containerPort": values["port"],
        "protocol": "TCP",
    }
    assert service_ports["progress"] == {
        "name": "progress",
        "port": values["port"],
        "targetPort": "progress",
        "protocol": "TCP",
    }
    # The URL training pods are given reaches that Service port, under a name the webhook's
    # certificate covers (its dnsNames include <service>.<namespace>.svc).
    url = flag_values(webhook_args(manifests))["--progress-url"]
    expected = f"https://{service['metadata']['name']}.{NAMESPACE}.svc:{values['port']}"
    assert url == (values["url"] or expected)
    # Every URL the webhook hands out is that base and a job's status path.
    job = contract.JobRef(TRAINING_JOB, "team-a", "bert")
    assert contract.ProgressEndpoint(url, ca_pem="").url(job) == url + job.path


def test_the_network_policy_opens_only_the_progress_port_to_pods(
    rendered: tuple[dict[str, Any], list[Manifest], dict[str, bool]],
) -> None:
    values, manifests, _ = rendered
    policies = find(component_objects(manifests, "webhook"), "NetworkPolicy")
    if not policies:
        return  # no policy at all in this variant
    rules = progress_rules(manifests)
    if not values["enabled"]:
        assert rules == []
        return
    (rule,) = rules
    # A rule of its own: the pods it admits reach the progress port and nothing else.
    assert rule["ports"] == [{"port": "progress", "protocol": "TCP"}]
    assert rule.get("from", []) == values["networkPolicy"]["from"]
    (admission,) = [
        r
        for r in policies[0]["spec"]["ingress"]
        if {"port": "https", "protocol": "TCP"} in r["ports"]
    ]
    assert admission["ports"] == [{"port": "https", "protocol": "TCP"}]


def test_the_default_policy_admits_pods_to_progress_and_keeps_them_off_admission() -> None:
    pods = ["10.244.0.0/16", "fd00:10:244::/56"]
    for shared in (False, True):  # the webhook's own policy, and the one of networkPolicy.enabled
        settings = {
            "webhook.networkPolicy.podCIDRs": pods,
            "networkPolicy.enabled": shared,
        }
        manifests = template(settings=settings)
        (policy,) = find(component_objects(manifests, "webhook"), "NetworkPolicy")
        assert ("Egress" in policy["spec"]["policyTypes"]) is shared
        if shared:
            # The endpoint's TokenReviews, pod reads and status patches go to the apiserver.
            egress_ports = {p["port"] for rule in policy["spec"]["egress"] for p in rule["ports"]}
            assert {443, 6443} <= egress_ports
        by_port = {p["port"]: rule for rule in policy["spec"]["ingress"] for p in rule["ports"]}
        assert set(by_port) == {"probes", "https", "progress"}
        # Pods of every namespace reach the progress port...
        assert by_port["progress"]["from"] == [{"namespaceSelector": {}}]
        # ...while the admission port admits only addresses outside the pod ranges.
        excepted = [
            cidr for peer in by_port["https"]["from"] for cidr in peer["ipBlock"].get("except", [])
        ]
        assert sorted(excepted) == sorted(pods)
        assert not any(
            "namespaceSelector" in peer or "podSelector" in peer
            for peer in by_port["https"]["from"]
        )
    # An empty progress.networkPolicy.from admits any address to that port.
    manifests = template(settings={"progress.networkPolicy.from": []})
    (rule,) = progress_rules(manifests)
    assert "from" not in rule


def test_the_webhook_may_check_tokens_read_pods_and_patch_job_status(
    rendered: tuple[dict[str, Any], list[Manifest], dict[str, bool]],
) -> None:
    values, manifests, served = rendered
    rules = rules_of(component(manifests, "ClusterRole", "webhook"))
    on = values["enabled"]
    assert grants(rules, "authentication.k8s.io", "tokenreviews", "create") is on
    assert grants(rules, "", "pods", "get") is on
    assert grants(rules, PTJ[0], f"{PTJ[1]}/status", "patch") is on
    for (group, plural), key in ((PYTORCHJOB, "kubeflow"), (TRAINJOB, "trainer")):
        assert grants(rules, group, f"{plural}/status", "patch") is (on and served[key]), plural
    # Never more than that: no pod listing or writes, no writes to jobs beyond their status.
    for verb in ("list", "watch", "create", "update", "patch", "delete"):
        assert not grants(rules, "", "pods", verb), verb
    for group, plural in (PTJ, PYTORCHJOB, TRAINJOB):
        for verb in ("create", "update", "patch", "delete"):
            assert not grants(rules, group, plural, verb), (plural, verb)
        assert not grants(rules, group, f"{plural}/status", "update")
    # The jobs it checks a pod against come from the cache it already keeps.
    assert grants(rules, PTJ[0], PTJ[1], "watch")


def test_the_notes_say_whether_progress_is_reported(tmp_path: Path) -> None:
    on = notes(tmp_path / "on", {})
    assert "Progress reporting is on" in on
    assert 'batch.tensorstack.dev/progress: "false"' in on
    assert contract.ANNOTATION_PROGRESS == "batch.tensorstack.dev/progress"
    off = notes(tmp_path / "off", {"progress.enabled": False})
    assert "Progress reporting is off" in off and "is on" not in off


# -- refusals --------------------------------------------------------------------------------------

BAD_VALUES = [
    ("progress.port", 0, "at '/progress/port': minimum: got 0, want 1"),
    ("progress.port", 65536, "at '/progress/port': maximum: got 65,536, want 65,535"),
    ("progress.writeIntervalSeconds", 0, "at '/progress/writeIntervalSeconds': minimum"),
    ("progress.writeIntervalSeconds", 2.5, "at '/progress/writeIntervalSeconds': got number"),
    ("progress.ratePerSecond", 0, "at '/progress/ratePerSecond': exclusiveMinimum"),
    ("progress.ratePerSecond", -1, "at '/progress/ratePerSecond': exclusiveMinimum"),
    ("progress.burst", 0, "at '/progress/burst': minimum: got 0, want 1"),
    ("progress.enabled", "yes", "at '/progress/enabled': got string, want boolean"),
    ("progress.url", "http://192.0.2.10:9444", "at '/progress/url'"),
    ("progress.url", "https://h:9444/path", "at '/progress/url'"),
    ("progress.networkPolicy.from", {"namespaceSelector": {}}, "at '/progress/networkPolicy/from'"),
    ("progress.rate", 1, "at '/progress': additional properties 'rate' not allowed"),
]


@pytest.mark.parametrize(
    ("key", "value", "message"), BAD_VALUES, ids=[f"{b[0]}={b[1]}" for b in BAD_VALUES]
)
def test_the_schema_refuses_a_wrong_value(key: str, value: object, message: str) -> None:
    result = helm(
        "template", "torchjob", str(CHART), *values_args(settings={key: value}), check=False
    )
    assert result.returncode != 0
    assert "values don't meet the specifications of the schema" in result.stderr
    assert message in result.stderr, result.stderr


@pytest.mark.parametrize("taken", ["webhook.port", "webhook.probePort", "webhook.service.port"])
def test_a_progress_port_another_port_uses_is_refused(taken: str) -> None:
    result = helm(
        "template",
        "torchjob",
        str(CHART),
        *values_args(settings={taken: 9444}),
        check=False,
    )
    assert result.returncode != 0
    assert "progress.port must differ from webhook.port" in result.stderr, result.stderr
    # The same port is fine when nothing serves progress.
    off = {taken: 9444, "progress.enabled": False}
    assert (
        helm("template", "torchjob", str(CHART), *values_args(settings=off), check=False).returncode
        == 0
    )


# -- on the apiserver ------------------------------------------------------------------------------


RBAC_KINDS = ("ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding")


@pytest.mark.e2e
@pytest.mark.parametrize("on", [True, False], ids=["on", "off"])
def test_the_apiserver_grants_the_webhook_what_progress_needs(
    control_plane: ControlPlane, crd: None, namespace: str, on: bool
) -> None:
    """The rendered RBAC applied to the real apiserver (in a release namespace of its own), then
    asked as the webhook's ServiceAccount what it may do to jobs and pods in `namespace`."""
    release_namespace = f"tj-progress-{secrets.token_hex(3)}"
    control_plane.kubectl("create", "namespace", release_namespace)
    manifests = template(
        release="progress",
        namespace=release_namespace,
        settings={"progress.enabled": on, "kubeflow.enabled": True, "trainer.enabled": True},
        include_crds=False,
    )
    rbac = yaml.safe_dump_all(
        [m for m in component_objects(manifests, "webhook") if m["kind"] in RBAC_KINDS]
    )
    account = component(manifests, "ServiceAccount", "webhook")["metadata"]["name"]
    user = f"system:serviceaccount:{release_namespace}:{account}"

    def may(*question: str) -> bool:
        result = control_plane.kubectl(
            "auth", "can-i", *question, "-n", namespace, as_user=user, check=False
        )
        return result.stdout.strip() == "yes"

    try:
        control_plane.kubectl("apply", "-f", "-", input=rbac)
        assert may("create", "tokenreviews.authentication.k8s.io") is on
        assert may("get", "pods") is on
        for plural in (
            "pytorchtrainingjobs.batch.tensorstack.dev",
            "pytorchjobs.kubeflow.org",
            "trainjobs.trainer.kubeflow.org",
        ):
            assert may("patch", plural, "--subresource=status") is on, plural
            assert may("update", plural, "--subresource=status") is False, plural
            assert may("patch", plural) is False, plural
            assert may("watch", plural), plural
        assert may("list", "pods") is False
        assert may("delete", "pods") is False
    finally:
        control_plane.kubectl("delete", "-f", "-", "--ignore-not-found", input=rbac, check=False)
        control_plane.kubectl("delete", "namespace", release_namespace, "--wait=false", check=False)
