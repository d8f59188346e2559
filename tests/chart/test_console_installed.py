"""The console's ServiceAccount as installed by `helm install` on the real control plane, in token
mode and in proxy mode: its own token reads nothing at all (the console makes every request as the
signed-in user), and in proxy mode it may impersonate only the users and groups the chart names,
never a ServiceAccount. The console service itself is not run here."""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from support import ControlPlane
from support.helm import CHART, component, helm, values_args

from torchjob.api import types

pytestmark = pytest.mark.e2e

# Namespaces carrying this label go through the release's webhook: none does, so the release's
# webhook configurations (whose webhook does not run here) stand in no other test's way.
OPT_IN_LABEL = "torchjob.test/console-chart"
ALLOWED_USER = "alice"
ALLOWED_GROUP = "team-a"
# A grant: API group, resource, resource name ("" for any), verb.
Rule = tuple[str, str, str, str]


@dataclass(frozen=True)
class Console:
    mode: str
    namespace: str
    account: str
    kubeconfig: Path

    @property
    def user(self) -> str:
        return f"system:serviceaccount:{self.namespace}:{self.account}"


@pytest.fixture(scope="module", params=["token", "proxy"])
def console(
    request: pytest.FixtureRequest, control_plane: ControlPlane, crd: None
) -> Iterator[Console]:
    mode: str = request.param
    namespace = f"tj-console-{mode}-{secrets.token_hex(3)}"
    release = f"tjc-{mode}"
    settings: dict[str, object] = {
        "console.enabled": True,
        "console.auth.mode": mode,
        "webhook.namespaceSelector": {"matchLabels": {OPT_IN_LABEL: namespace}},
    }
    if mode == "proxy":
        settings["console.auth.proxy.from"] = [{"podSelector": {}}]
        settings["console.auth.proxy.impersonate.users"] = [ALLOWED_USER]
        settings["console.auth.proxy.impersonate.groups"] = [ALLOWED_GROUP]
    kubeconfig = ("--kubeconfig", str(control_plane.kubeconfig))
    control_plane.kubectl("create", "namespace", namespace)
    try:
        helm(
            *("install", release, str(CHART), "--namespace", namespace, *kubeconfig),
            *values_args(settings=settings),
        )
        manifest = helm("get", "manifest", release, "--namespace", namespace, *kubeconfig).stdout
        manifests = [doc for doc in yaml.safe_load_all(manifest) if doc]
        account = str(component(manifests, "ServiceAccount", "console")["metadata"]["name"])
        token = control_plane.issue_service_account_kubeconfig(namespace, account)
        yield Console(mode, namespace, account, token)
    finally:
        helm("uninstall", release, "--namespace", namespace, *kubeconfig, check=False)
        control_plane.kubectl("delete", "namespace", namespace, "--wait=false", check=False)


def rules_of(control_plane: ControlPlane, kubeconfig: Path, namespace: str) -> set[Rule]:
    """What `kubectl auth can-i --list` asks (a SelfSubjectRulesReview) with that identity, one
    (group, resource, name, verb) per grant."""
    review = {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SelfSubjectRulesReview",
        "spec": {"namespace": namespace},
    }
    listed = control_plane.kubectl(
        *("create", "-f", "-", "-o", "json", "--validate=false", "--kubeconfig", str(kubeconfig)),
        input=json.dumps(review),
    )
    return {
        (group, resource, name, verb)
        for rule in json.loads(listed.stdout)["status"]["resourceRules"]
        for group in rule.get("apiGroups") or [""]
        for resource in rule["resources"]
        for name in rule.get("resourceNames") or [""]
        for verb in rule["verbs"]
    }


def test_its_rules_are_a_bare_account_s_and_impersonation_alone(
    control_plane: ControlPlane, console: Console
) -> None:
    """With its own token, in the release namespace and in another, the console's ServiceAccount
    may do what a ServiceAccount bound to nothing may (self-reviews, discovery), and in proxy
    mode impersonate the named users and groups: nothing else."""
    control_plane.kubectl("create", "serviceaccount", "bare", "-n", console.namespace)
    bare = control_plane.issue_service_account_kubeconfig(console.namespace, "bare")
    impersonation: set[Rule] = set()
    if console.mode == "proxy":
        impersonation = {
            ("", "users", ALLOWED_USER, "impersonate"),
            ("", "groups", ALLOWED_GROUP, "impersonate"),
        }
    for namespace in (console.namespace, "default"):
        baseline = rules_of(control_plane, bare, namespace)
        assert not [rule for rule in baseline if rule[1] in ("pods", "secrets", "namespaces")]
        granted = rules_of(control_plane, console.kubeconfig, namespace)
        assert granted == baseline | impersonation, namespace


READS = [
    ("get", "pods", "--all-namespaces"),
    ("get", "pods", "-n", "default"),
    ("get", f"{types.PLURAL}.{types.GROUP}", "--all-namespaces"),
    ("get", "jobs.batch", "--all-namespaces"),
    ("get", "namespaces"),
    ("get", "secrets", "-n", "{release}"),
    ("get", "configmaps", "-n", "{release}"),
    ("get", "serviceaccounts", "-n", "{release}"),
    ("get", "events", "-n", "default"),
    ("get", "nodes"),
]


@pytest.mark.parametrize("read", READS, ids=[" ".join(r[1:3]) for r in READS])
def test_its_own_token_reads_nothing(
    control_plane: ControlPlane, console: Console, read: tuple[str, ...]
) -> None:
    args = [arg.format(release=console.namespace) for arg in read]
    result = control_plane.kubectl(*args, "--kubeconfig", str(console.kubeconfig), check=False)
    assert result.returncode != 0, f"{args} was allowed"
    assert "forbidden" in result.stderr.lower(), result.stderr
    assert console.user in result.stderr, result.stderr


def test_it_impersonates_only_the_names_given(
    control_plane: ControlPlane, console: Console
) -> None:
    """Impersonating a named user works (and reads only what that user may: here nothing); any
    other user, any other group, and every ServiceAccount are refused."""

    def get_pods(*identity: str) -> str:
        result = control_plane.kubectl(
            *("get", "pods", "-n", "default", *identity),
            *("--kubeconfig", str(console.kubeconfig)),
            check=False,
        )
        assert result.returncode != 0, identity
        return str(result.stderr)

    as_alice = get_pods(f"--as={ALLOWED_USER}", f"--as-group={ALLOWED_GROUP}")
    own = f"system:serviceaccount:{console.namespace}:{console.account}"
    refused = {
        "users": get_pods("--as=mallory"),
        "groups": get_pods(f"--as={ALLOWED_USER}", "--as-group=system:masters"),
        "serviceaccounts": get_pods(f"--as={own}"),
        "uids": get_pods(f"--as={ALLOWED_USER}", "--as-uid=1"),
        "userextras/scopes": get_pods(f"--as={ALLOWED_USER}", "--as-user-extra=scopes=all"),
    }
    refused["kube-system serviceaccounts"] = get_pods(
        "--as=system:serviceaccount:kube-system:default"
    )
    if console.mode == "proxy":
        # The apiserver acts as alice, and alice may not list pods.
        assert f'User "{ALLOWED_USER}" cannot list resource "pods"' in as_alice, as_alice
        for resource, stderr in refused.items():
            what = resource.split()[-1]
            assert f'"{console.user}" cannot impersonate resource "{what}"' in stderr, stderr
    else:
        for stderr in [as_alice, *refused.values()]:
            assert f'"{console.user}" cannot impersonate' in stderr, stderr
