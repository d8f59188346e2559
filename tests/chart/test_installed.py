"""The chart as installed: `helm install` on the real control plane (CRD, RBAC, ServiceAccounts,
webhook configurations and the rest), then each service run as a local process with exactly the
arguments and environment of its rendered Deployment, authenticated with a token of its own
ServiceAccount. Jobs then go through the chart's webhook configurations and the reconciler
drives them with nothing but the chart's RBAC; each service is refused what it does not need;
a tenant bound to the built-in `edit` role manages jobs in its namespace only."""

from __future__ import annotations

import asyncio
import json
import re
import secrets
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes_asyncio import client
from support import ControlPlane
from support.controlplane import free_port
from support.eventually import eventually
from support.helm import (
    CHART,
    Manifest,
    component,
    container_command,
    helm,
    one,
    run_as_deployed,
    values_args,
)
from support.jobs import job_manifest
from support.operator import wait_until_admitting
from support.pods import bare_pod
from support.processes import ServiceProcess
from support.scenarios import happy_path, master_failure, ttl_deletes_everything

from torchjob.api import types
from torchjob.api.constants import REPORTER_RECONCILER

pytestmark = pytest.mark.e2e

RELEASE = "tj"
# The services started from the chart's Deployments.
SERVICES = ("webhook", "reconciler", "housekeeper")
# Namespaces carrying this label (valued with the release namespace) go through this release's
# webhook; other tests' namespaces do not.
OPT_IN_LABEL = "torchjob.test/chart"


@dataclass
class Installation:
    namespace: str
    manifests: list[Manifest]
    notes: str
    processes: dict[str, ServiceProcess]

    def account(self, part: str) -> str:
        return str(component(self.manifests, "ServiceAccount", part)["metadata"]["name"])

    def user(self, part: str) -> str:
        return f"system:serviceaccount:{self.namespace}:{self.account(part)}"


@pytest.fixture(scope="module")
def installed(control_plane: ControlPlane, crd: None) -> Iterator[Installation]:
    namespace = f"tj-chart-{secrets.token_hex(3)}"
    webhook_port = free_port()
    settings: dict[str, object] = {
        # The apiserver cannot reach a Service here: it calls the local process by URL, and the
        # webhook's own certificate covers that address.
        "webhook.externalURL": f"https://127.0.0.1:{webhook_port}",
        "webhook.certificate.ipAddresses": ["127.0.0.1"],
        "webhook.namespaceSelector": {"matchLabels": {OPT_IN_LABEL: namespace}},
        "webhook.port": webhook_port,
        "progress.port": free_port(),
        "webhook.logLevel": "DEBUG",
        "reconciler.logLevel": "DEBUG",
        **{f"{part}.probePort": free_port() for part in ("webhook", "reconciler", "housekeeper")},
    }
    kubeconfig = ("--kubeconfig", str(control_plane.kubeconfig))
    control_plane.kubectl("create", "namespace", namespace)
    install = helm(
        "install",
        RELEASE,
        str(CHART),
        "--namespace",
        namespace,
        *kubeconfig,
        *values_args(settings=settings),
    )
    processes: dict[str, ServiceProcess] = {}
    try:
        manifest = helm("get", "manifest", RELEASE, "--namespace", namespace, *kubeconfig).stdout
        manifests = [doc for doc in yaml.safe_load_all(manifest) if doc]
        for part in SERVICES:
            deployment = component(manifests, "Deployment", part)
            processes[part] = run_as_deployed(control_plane, deployment)
        yield Installation(namespace, manifests, install.stdout, processes)
    finally:
        for process in processes.values():
            process.close()
        helm("uninstall", RELEASE, "--namespace", namespace, *kubeconfig, check=False)
        control_plane.kubectl("delete", "namespace", namespace, "--wait=false", check=False)


@pytest.fixture
def chart_namespace(control_plane: ControlPlane, namespace: str, installed: Installation) -> str:
    """A fresh namespace whose jobs and pods go through the installed chart's webhook."""
    control_plane.kubectl("label", "namespace", namespace, f"{OPT_IN_LABEL}={installed.namespace}")
    wait_until_admitting(control_plane, namespace)
    return namespace


def test_install_says_what_to_do_next(installed: Installation) -> None:
    notes = installed.notes
    assert "NOTES:" in notes
    webhook = component(installed.manifests, "Deployment", "webhook")["metadata"]["name"]
    assert f"kubectl -n {installed.namespace} rollout status deployment/{webhook}" in notes
    assert "kind: PyTorchTrainingJob" in notes
    assert "kubectl -n demo wait ptj/hello --for=condition=Completed" in notes
    assert "webhook.namespaceSelector" in notes  # the selector the test set is explained
    assert "https://127.0.0.1:" in notes  # and the external URL


def test_webhook_keeps_its_certificate_with_the_chart_rbac(
    control_plane: ControlPlane, installed: Installation
) -> None:
    command = container_command(component(installed.manifests, "Deployment", "webhook"), "w")
    secret = json.loads(
        control_plane.kubectl(
            "get", "secret", command.arg("--secret-name"), "-n", installed.namespace, "-o", "json"
        ).stdout
    )
    assert secret["type"] == "kubernetes.io/tls"
    for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
        name = one(installed.manifests, kind)["metadata"]["name"]
        live = json.loads(control_plane.kubectl("get", kind, name, "-o", "json").stdout)
        assert all(hook["clientConfig"].get("caBundle") for hook in live["webhooks"])


async def test_happy_path_as_installed(
    control_plane: ControlPlane, kube_client: client.ApiClient, chart_namespace: str
) -> None:
    await happy_path(control_plane, kube_client, chart_namespace, in_place=True)

    def reconciler_events() -> list[Any]:
        listed = control_plane.kubectl(
            "get", "events.events.k8s.io", "-n", chart_namespace, "-o", "json"
        ).stdout
        return [
            e
            for e in json.loads(listed)["items"]
            if e.get("reportingController") == REPORTER_RECONCILER
        ]

    # An Event follows the status write it announces: it may come after the job shows Succeeded.
    await eventually(reconciler_events, "an Event the reconciler recorded")


async def test_tensorboard_and_ttl_as_installed(
    kube_client: client.ApiClient, chart_namespace: str
) -> None:
    await ttl_deletes_everything(kube_client, chart_namespace)


async def test_failure_path_as_installed(
    control_plane: ControlPlane, kube_client: client.ApiClient, chart_namespace: str
) -> None:
    await master_failure(control_plane, kube_client, chart_namespace)


async def test_a_labelled_pod_from_anyone_else_is_refused(
    control_plane: ControlPlane, chart_namespace: str, installed: Installation
) -> None:
    labels = {"batch.tensorstack.dev/job-name": "x"}
    pod = bare_pod("impostor", labels=labels, container="c", image="busybox")
    result = await asyncio.to_thread(
        control_plane.kubectl,
        "create",
        "-n",
        chart_namespace,
        "-f",
        "-",
        input=json.dumps(pod),
        check=False,
    )
    assert result.returncode != 0
    assert "pods.mutate.torchjob.dev" in result.stderr


# -- least privilege -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Attempt:
    """A kubectl command a ServiceAccount must be refused, with what it sends on stdin."""

    part: str
    args: tuple[str, ...]
    body: dict[str, Any] | None = None


POD = bare_pod("p", container="c", image="busybox")


def refused_attempts(installation: Installation, job_namespace: str) -> list[Attempt]:
    ns = installation.namespace
    webhook_secret = container_command(
        component(installation.manifests, "Deployment", "webhook"), "w"
    ).arg("--secret-name")
    create = ("create", "-n", job_namespace, "-f", "-")
    return [
        # The webhook reads jobs and its own Secret: it deletes nothing, reads no other Secret
        # and patches no other webhook configuration.
        Attempt("webhook", ("delete", "pod", "any", "-n", job_namespace)),
        Attempt("webhook", ("get", "secrets", "-n", ns)),
        Attempt("webhook", ("get", "secret", webhook_secret, "-n", job_namespace)),
        Attempt("webhook", ("patch", "mutatingwebhookconfiguration", "someone-elses", "-p", "{}")),
        Attempt("webhook", create, job_manifest("basic")),
        # The reconciler owns pods and services, not jobs and not Secrets.
        Attempt("reconciler", ("delete", "ptj", "any", "-n", job_namespace)),
        Attempt("reconciler", ("patch", "ptj", "any", "-n", job_namespace, "-p", "{}")),
        Attempt("reconciler", ("get", "secrets", "-n", job_namespace)),
        Attempt("reconciler", ("patch", "service", "any", "-n", job_namespace, "-p", "{}")),
        Attempt("reconciler", ("get", "lease", "someone-elses", "-n", ns)),
        # The housekeeper cleans up; it creates no pods or jobs and reads no Secrets.
        Attempt("housekeeper", create, POD),
        Attempt("housekeeper", create, job_manifest("basic")),
        Attempt("housekeeper", ("get", "secrets", "-n", job_namespace)),
    ]


def test_each_service_is_refused_what_it_does_not_need(
    control_plane: ControlPlane, installed: Installation, namespace: str
) -> None:
    kubeconfigs = {
        part: control_plane.issue_service_account_kubeconfig(
            installed.namespace, installed.account(part)
        )
        for part in ("webhook", "reconciler", "housekeeper")
    }
    for attempt in refused_attempts(installed, namespace):
        result = control_plane.kubectl(
            *attempt.args,
            "--kubeconfig",
            str(kubeconfigs[attempt.part]),
            input=json.dumps(attempt.body) if attempt.body else None,
            check=False,
        )
        assert result.returncode != 0, f"{attempt} was allowed"
        assert "forbidden" in result.stderr.lower(), f"{attempt}: {result.stderr}"
        assert installed.user(attempt.part) in result.stderr, result.stderr


# What the housekeeper must be able to do, beyond what the installed scenarios exercise.
HOUSEKEEPER_NEEDS = [
    ("get", "pytorchtrainingjobs.batch.tensorstack.dev"),
    ("watch", "pytorchtrainingjobs.batch.tensorstack.dev"),
    ("delete", "pytorchtrainingjobs.batch.tensorstack.dev"),
    ("patch", "pytorchtrainingjobs.batch.tensorstack.dev", "--subresource=status"),
    ("delete", "pods"),
    ("list", "pods"),
    ("create", "services"),
    ("delete", "services"),
    ("create", "deployments.apps"),
    ("patch", "deployments.apps"),
    ("create", "events.events.k8s.io"),
]


def test_the_housekeeper_may_do_what_it_needs(
    control_plane: ControlPlane, installed: Installation, namespace: str
) -> None:
    kubeconfig = control_plane.issue_service_account_kubeconfig(
        installed.namespace, installed.account("housekeeper")
    )
    for need in HOUSEKEEPER_NEEDS:
        result = control_plane.kubectl(
            "auth", "can-i", *need, "-n", namespace, "--kubeconfig", str(kubeconfig), check=False
        )
        assert result.stdout.strip() == "yes", f"housekeeper may not {need}"
    lease = container_command(component(installed.manifests, "Deployment", "housekeeper"), "h")
    for verb in ("get", "update", "create"):
        result = control_plane.kubectl(
            "auth",
            "can-i",
            verb,
            f"leases.coordination.k8s.io/{lease.arg('--lease-name')}"
            if verb != "create"
            else "leases.coordination.k8s.io",
            "-n",
            installed.namespace,
            "--kubeconfig",
            str(kubeconfig),
            check=False,
        )
        assert result.stdout.strip() == "yes", f"housekeeper may not {verb} its lease"


# -- tenants ---------------------------------------------------------------------------------------


async def test_a_tenant_with_the_edit_role_manages_jobs_in_its_namespace_only(
    control_plane: ControlPlane, installed: Installation, kube_client: client.ApiClient
) -> None:
    own, other = (f"tj-tenant-{secrets.token_hex(3)}" for _ in range(2))
    user = f"alice-{secrets.token_hex(2)}"
    for namespace in (own, other):
        control_plane.kubectl("create", "namespace", namespace)
    try:
        control_plane.kubectl(
            "create",
            "rolebinding",
            "alice-edits",
            "--clusterrole=edit",
            f"--user={user}",
            "-n",
            own,
        )
        alice = str(control_plane.issue_kubeconfig(user))
        await _wait_for_aggregation(control_plane, alice, own)
        job = json.dumps(job_manifest("basic", "alices-job"))

        def as_alice(*args: str, body: str | None = None) -> Any:
            return control_plane.kubectl(*args, "--kubeconfig", alice, input=body, check=False)

        created = as_alice("create", "-n", own, "-f", "-", body=job)
        assert created.returncode == 0, created.stderr
        listed = as_alice("get", "ptj", "-n", own, "-o", "name")
        assert listed.stdout.split() == ["pytorchtrainingjob.batch.tensorstack.dev/alices-job"]
        deleted = as_alice("delete", "ptj", "alices-job", "-n", own, "--wait=false")
        assert deleted.returncode == 0, deleted.stderr
        refused = as_alice("create", "-n", other, "-f", "-", body=job)
        assert refused.returncode != 0
        assert re.search(r"forbidden.*cannot create resource .pytorchtrainingjobs.", refused.stderr)
        assert as_alice("get", "ptj", "-n", other).returncode != 0
    finally:
        for namespace in (own, other):
            control_plane.kubectl("delete", "namespace", namespace, "--wait=false", check=False)


async def test_a_viewer_reads_jobs_and_changes_nothing(
    control_plane: ControlPlane, installed: Installation, namespace: str
) -> None:
    user = f"victor-{secrets.token_hex(2)}"
    control_plane.kubectl(
        "create",
        "rolebinding",
        "victor-views",
        "--clusterrole=view",
        f"--user={user}",
        "-n",
        namespace,
    )
    viewer = str(control_plane.issue_kubeconfig(user))
    await _wait_for_aggregation(control_plane, viewer, namespace, verb="list")
    assert (
        control_plane.kubectl("get", "ptj", "-n", namespace, "--kubeconfig", viewer).returncode == 0
    )
    refused = control_plane.kubectl(
        "create",
        "-n",
        namespace,
        "-f",
        "-",
        "--kubeconfig",
        viewer,
        input=json.dumps(job_manifest("basic")),
        check=False,
    )
    assert refused.returncode != 0 and "forbidden" in refused.stderr


async def _wait_for_aggregation(
    control_plane: ControlPlane, kubeconfig: str, namespace: str, verb: str = "create"
) -> None:
    """The clusterrole-aggregation controller folds our rules into the built-in role shortly
    after the install."""

    async def covered() -> bool:
        result = await asyncio.to_thread(
            control_plane.kubectl,
            "auth",
            "can-i",
            verb,
            f"{types.PLURAL}.{types.GROUP}",
            "-n",
            namespace,
            "--kubeconfig",
            kubeconfig,
            check=False,
        )
        return result.stdout.strip() == "yes"

    await eventually(covered, f"the built-in role to cover {verb} on jobs", interval=0.2)


# The apiserver's words for an RBAC denial: `... is forbidden: User "<name>" cannot <verb> ...`,
# with the quotes escaped once more inside a JSON log line.
RBAC_REFUSAL = re.compile(r'User \\*"[^"]+\\*" cannot ')


def test_no_service_was_refused_anything(installed: Installation) -> None:
    """Last in this module: what the services did above, they did with the chart's RBAC alone."""
    for part, process in installed.processes.items():
        log = Path(process.log_path).read_text()
        # Only what RBAC refuses: other 403s (a namespace being deleted by another test, a
        # quota) say "forbidden" too, and the services retry those by design.
        assert not RBAC_REFUSAL.search(log), f"{part} was refused something:\n{process.log_tail()}"
        faults = [line for line in log.splitlines() if "Traceback" in line]
        assert not faults, f"{part} failed:\n" + "\n".join(faults)


def test_the_kubeflow_crd_of_another_owner_is_not_taken_over(
    control_plane: ControlPlane, crd: None, namespace: str
) -> None:
    """The control plane's PyTorchJob CRD was applied without Helm (as Kubeflow's manifests
    apply it): `helm install` with kubeflow.enabled looks it up on the cluster and refuses,
    saying whose it is, before it creates anything."""
    kubeconfig = ("--kubeconfig", str(control_plane.kubeconfig))
    refused = helm(
        *("install", "tj-kubeflow", str(CHART), "--namespace", namespace, *kubeconfig),
        *values_args(settings={"kubeflow.enabled": True}),
        check=False,
    )
    assert refused.returncode != 0
    assert "already has the CRD pytorchjobs.kubeflow.org" in refused.stderr, refused.stderr
    assert "carries no Helm release annotations" in refused.stderr, refused.stderr
    listed = helm("list", "--all", "--namespace", namespace, "-o", "json", *kubeconfig)
    assert json.loads(listed.stdout) == [], "no release was recorded"
    crd_now = json.loads(
        control_plane.kubectl("get", "crd", "pytorchjobs.kubeflow.org", "-o", "json").stdout
    )
    assert "meta.helm.sh/release-name" not in (crd_now["metadata"].get("annotations") or {})
