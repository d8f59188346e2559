"""The console's objects as the chart renders them: off by default; in token mode a ServiceAccount
bound to nothing, whose pods mount the apiserver's CA and no token; in proxy mode a token whose
only right is to impersonate users and groups, and a NetworkPolicy that lets only the proxy reach
the pages; every setting passed as a flag the console declares. (The services run, and the
ServiceAccount's token tried on the real control plane: test_console_installed.py.)"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from support.helm import (
    CHART,
    Manifest,
    component,
    component_objects,
    container_command,
    find,
    helm,
    notes,
    one,
    rules_of,
    template,
    values_args,
)

from torchjob.console import settings as console_settings

NAMESPACE = "ml-system"
TOKEN_VALUES = CHART / "ci" / "console-values.yaml"
PROXY_VALUES = CHART / "ci" / "console-proxy-values.yaml"
RBAC_KINDS = ("Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding")
CA_DIRECTORY = "/var/run/secrets/kubernetes.io/serviceaccount"
PROXY_PEERS = [{"podSelector": {"matchLabels": {"app.kubernetes.io/name": "oauth2-proxy"}}}]


def render(path: Path | None = None, settings: dict[str, object] | None = None) -> list[Manifest]:
    return template(namespace=NAMESPACE, values_files=[path] if path else [], settings=settings)


def values_in(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load(path.read_text())["console"]
    return data


def pod_spec(manifests: list[Manifest]) -> dict[str, Any]:
    spec: dict[str, Any] = component(manifests, "Deployment", "console")["spec"]["template"]["spec"]
    return spec


def bindings_of(manifests: list[Manifest], account: str) -> list[Manifest]:
    """Every RoleBinding and ClusterRoleBinding naming the ServiceAccount `account`."""
    return [
        binding
        for kind in ("RoleBinding", "ClusterRoleBinding")
        for binding in find(manifests, kind)
        for subject in binding.get("subjects") or []
        if subject.get("kind") == "ServiceAccount"
        and subject.get("name") == account
        and subject.get("namespace") == NAMESPACE
    ]


def test_off_by_default() -> None:
    assert component_objects(render(), "console") == []


def test_token_mode_grants_the_service_account_nothing() -> None:
    manifests = render(TOKEN_VALUES)
    account = component(manifests, "ServiceAccount", "console")["metadata"]["name"]
    assert account == "torchjob-console"
    # The pages' Service (beside the -metrics one every service has).
    assert {
        s["metadata"]["name"] for s in find(component_objects(manifests, "console"), "Service")
    } == {
        "torchjob-console",
        "torchjob-console-metrics",
    }
    assert component(manifests, "Deployment", "console")["metadata"]["name"] == "torchjob-console"
    assert [m for m in component_objects(manifests, "console") if m["kind"] in RBAC_KINDS] == []
    assert bindings_of(manifests, account) == []


def test_token_mode_mounts_the_apiserver_ca_and_no_token() -> None:
    pod = pod_spec(render(TOKEN_VALUES))
    assert pod["automountServiceAccountToken"] is False
    (container,) = pod["containers"]
    (mount,) = [m for m in container["volumeMounts"] if m["mountPath"] == CA_DIRECTORY]
    assert mount["readOnly"] is True
    (volume,) = [v for v in pod["volumes"] if v["name"] == mount["name"]]
    # Only the CA: no serviceAccountToken source, nothing but the one ConfigMap key.
    assert volume["projected"]["sources"] == [
        {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}}
    ]
    assert not [
        v
        for v in pod["volumes"]
        for s in (v.get("projected") or {}).get("sources", [])
        if "serviceAccountToken" in s
    ]


def test_proxy_mode_may_only_impersonate_users_and_groups() -> None:
    manifests = render(PROXY_VALUES)
    account = component(manifests, "ServiceAccount", "console")["metadata"]["name"]
    (binding,) = bindings_of(manifests, account)
    assert binding["kind"] == "ClusterRoleBinding"
    role = component(manifests, "ClusterRole", "console")
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": role["metadata"]["name"],
    }
    assert not [
        m for m in component_objects(manifests, "console") if m["kind"] in ("Role", "RoleBinding")
    ]
    impersonate = values_in(PROXY_VALUES)["auth"]["proxy"]["impersonate"]
    expected: list[dict[str, Any]] = []
    for resource in ("users", "groups"):
        rule: dict[str, Any] = {
            "apiGroups": [""],
            "resources": [resource],
            "verbs": ["impersonate"],
        }
        if impersonate[resource]:
            rule["resourceNames"] = impersonate[resource]
        expected.append(rule)
    assert rules_of(role) == expected
    assert pod_spec(manifests)["automountServiceAccountToken"] is True


@pytest.mark.parametrize(
    ("users", "groups"), [(["alice", "bob"], []), ([], ["team-a"]), (["alice"], ["team-a", "b"])]
)
def test_impersonation_is_limited_to_the_names_given(users: list[str], groups: list[str]) -> None:
    manifests = render(
        PROXY_VALUES,
        {
            "console.auth.proxy.impersonate.users": users,
            "console.auth.proxy.impersonate.groups": groups,
        },
    )
    rules = rules_of(component(manifests, "ClusterRole", "console"))
    by_resource = {rule["resources"][0]: rule for rule in rules}
    assert set(by_resource) == {"users", "groups"}
    for resource, names in (("users", users), ("groups", groups)):
        assert by_resource[resource].get("resourceNames", []) == names
    # Never ServiceAccounts, user extras or UIDs, nor any other verb.
    assert {r for rule in rules for r in rule["resources"]} == {"users", "groups"}
    assert {v for rule in rules for v in rule["verbs"]} == {"impersonate"}


def page_rule(manifests: list[Manifest]) -> dict[str, Any]:
    (policy,) = find(component_objects(manifests, "console"), "NetworkPolicy")
    rules: list[dict[str, Any]] = policy["spec"]["ingress"]
    (rule,) = [r for r in rules if {"port": "http", "protocol": "TCP"} in r["ports"]]
    ports = {p["port"] for r in rules for p in r["ports"]}
    assert ports == {"http", "probes"}
    return rule


def test_network_policy_of_the_pages() -> None:
    # Token mode: pages from anywhere, and a policy only with networkPolicy.enabled.
    assert "from" not in page_rule(render(TOKEN_VALUES))
    assert (
        find(
            component_objects(render(settings={"console.enabled": True}), "console"),
            "NetworkPolicy",
        )
        == []
    )
    # Proxy mode: only from the proxy, with or without networkPolicy.enabled.
    proxied = values_in(PROXY_VALUES)["auth"]["proxy"]["from"]
    assert page_rule(render(PROXY_VALUES))["from"] == proxied
    everywhere = render(PROXY_VALUES, {"networkPolicy.enabled": True})
    assert page_rule(everywhere)["from"] == proxied


def test_proxy_mode_without_the_proxy_peers_is_refused() -> None:
    settings = {"console.enabled": True, "console.auth.mode": "proxy"}
    result = helm("template", "torchjob", str(CHART), *values_args(settings=settings), check=False)
    assert result.returncode != 0
    assert "console.auth.proxy.from must name the auth proxy's pods" in result.stderr


@pytest.mark.parametrize(
    ("path", "mode"), [(TOKEN_VALUES, "token"), (PROXY_VALUES, "proxy")], ids=["token", "proxy"]
)
def test_the_console_gets_every_value_as_a_flag(path: Path, mode: str) -> None:
    """Parsed with the console's own parser (the service itself is not run here)."""
    manifests = render(path)
    values = values_in(path)
    command = container_command(component(manifests, "Deployment", "console"), "console-pod")
    assert command.module == "torchjob.console"
    parsed = console_settings.parse(command.args)
    assert parsed.namespace == NAMESPACE
    assert parsed.auth_mode == mode
    assert parsed.probe_port == command.probe_port == 8080
    assert parsed.external_url == values["externalURL"].rstrip("/")
    assert parsed.namespaces == tuple(values.get("namespaces", ()))
    assert parsed.prometheus_url == values.get("prometheus", {}).get("url")
    assert parsed.session_idle_seconds == values.get("sessionIdleSeconds", 3600)
    assert parsed.session_max_seconds == values.get("sessionMaxSeconds", 43200)
    assert parsed.max_body_bytes == values.get("maxBodyBytes", 262144)
    if mode == "proxy":
        proxy = values["auth"]["proxy"]
        assert parsed.proxy_user_header == proxy["userHeader"]
        assert parsed.proxy_groups_header == proxy["groupsHeader"]
    # The Service's port 80 reaches the pages' container port.
    (container,) = pod_spec(manifests)["containers"]
    http = next(p for p in container["ports"] if p["name"] == "http")
    assert http["containerPort"] == parsed.port == 8000
    service = one(manifests, "Service", "torchjob-console")
    assert service["spec"]["ports"] == [
        {"name": "http", "port": 80, "targetPort": "http", "protocol": "TCP"}
    ]


BAD_VALUES = [
    ("console.auth.mode", "oidc", "at '/console/auth/mode': value must be one of"),
    ("console.service.type", "ExternalName", "at '/console/service/type'"),
    ("console.externalURL", "ftp://jobs.example.com", "at '/console/externalURL'"),
    ("console.auth.proxy.impersonate.users", "alice", "at '/console/auth/proxy/impersonate/users'"),
    ("console.namespaces", ["Team_A"], "at '/console/namespaces/0'"),
    ("console.sessionIdleSeconds", 0, "at '/console/sessionIdleSeconds'"),
    ("console.auth.proxy.userHeader", "X User", "at '/console/auth/proxy/userHeader'"),
]


@pytest.mark.parametrize(("key", "value", "message"), BAD_VALUES, ids=[b[0] for b in BAD_VALUES])
def test_schema_rejects_a_wrong_console_value(key: str, value: object, message: str) -> None:
    settings = {"console.enabled": True, key: value}
    result = helm("template", "torchjob", str(CHART), *values_args(settings=settings), check=False)
    assert result.returncode != 0
    assert message in result.stderr, result.stderr


def test_notes_say_how_to_open_it(tmp_path: Path) -> None:
    text = notes(tmp_path / "token", {"console.enabled": True}, namespace=NAMESPACE)
    assert f"torchjob console --namespace-of-operator {NAMESPACE}" in text
    assert f"kubectl -n {NAMESPACE} port-forward service/torchjob-console 8000:80" in text
    proxied = notes(
        tmp_path / "proxy",
        {
            "console.enabled": True,
            "console.auth.mode": "proxy",
            "console.auth.proxy.from": PROXY_PEERS,
            "console.externalURL": "https://jobs.example.com",
        },
        namespace=NAMESPACE,
    )
    assert "Open it through the proxy: https://jobs.example.com" in proxied
    assert "torchjob console" not in proxied
    assert "torchjob console" not in notes(tmp_path / "off", {}, namespace=NAMESPACE)
