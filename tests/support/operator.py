"""The operator as e2e tests run it, configured by the chart: `helm template` renders the
ServiceAccounts, RBAC and webhook configurations the chart ships, which are applied to the test
control plane. The webhook runs as a process with its Deployment's arguments and reached by URL
(`webhook.externalURL`; it patches in its own caBundle); the reconciler and the housekeeper run
as processes with tokens of their ServiceAccounts, so each has exactly the chart's RBAC."""

from __future__ import annotations

import copy
import functools
import json
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from support.controlplane import REPO_ROOT, ControlPlane, free_port
from support.eventually import eventually_sync
from support.helm import (
    Manifest,
    component,
    component_objects,
    container_command,
    find,
    run_as_deployed,
    template,
)
from support.jobs import job_manifest
from support.processes import READY_TIMEOUT, ServiceProcess

RELEASE = "torchjob"
SYSTEM_NAMESPACE = "torchjob-system"
# Only namespaces carrying this label go through the e2e webhook (webhook.namespaceSelector).
OPT_IN_LABEL = "torchjob.test/webhook"
SERVICES = ("webhook", "reconciler", "housekeeper")
RBAC_KINDS = ("ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding")
WEBHOOK_CONFIGURATION_KINDS = ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")
Rules = list[dict[str, Any]]


def rendered(**settings: object) -> list[Manifest]:
    """The chart as the e2e suite sets it (only opted-in namespaces go through the webhook, and
    Kubeflow's PyTorchJobs and Trainer's TrainJobs are served), with `settings` (`--set-json`
    keys) on top."""
    base: dict[str, object] = {
        "webhook.namespaceSelector": {"matchLabels": {OPT_IN_LABEL: "on"}},
        "kubeflow.enabled": True,
        "trainer.enabled": True,
    }
    return copy.deepcopy(_render(json.dumps({**base, **settings}, sort_keys=True)))


@functools.cache
def _render(settings: str) -> list[Manifest]:
    return template(
        release=RELEASE,
        namespace=SYSTEM_NAMESPACE,
        settings=json.loads(settings),
        include_crds=False,
    )


def service_account(part: str) -> str:
    """The name of the chart's ServiceAccount of `part` (webhook, reconciler, housekeeper)."""
    return str(component(rendered(), "ServiceAccount", part)["metadata"]["name"])


def user(part: str) -> str:
    """The username the apiserver gives the ServiceAccount of `part`."""
    return f"system:serviceaccount:{SYSTEM_NAMESPACE}:{service_account(part)}"


def webhook_secret() -> str:
    """The Secret the webhook keeps its serving certificate in."""
    deployment = component(rendered(), "Deployment", "webhook")
    return container_command(deployment, "webhook").arg("--secret-name")


def pod_webhook() -> dict[str, Any]:
    """The chart's webhook on replica pods (an entry of its MutatingWebhookConfiguration)."""
    (mutating,) = find(rendered(), "MutatingWebhookConfiguration")
    (hook,) = [h for h in mutating["webhooks"] if h["name"].startswith("pods.")]
    return dict(hook)


def apply(control_plane: ControlPlane, objects: Iterable[Manifest]) -> None:
    items = {"apiVersion": "v1", "kind": "List", "items": list(objects)}
    control_plane.kubectl("apply", "-f", "-", input=json.dumps(items))


def _rbac(manifests: Iterable[Manifest], part: str) -> list[Manifest]:
    return [m for m in component_objects(manifests, part) if m["kind"] in RBAC_KINDS]


def install_rbac(control_plane: ControlPlane) -> None:
    """The operator's namespace, and every service's ServiceAccount and RBAC as the chart grants
    them."""
    control_plane.kubectl("create", "namespace", SYSTEM_NAMESPACE, check=False)
    apply(control_plane, [m for part in SERVICES for m in _rbac(rendered(), part)])


def _renamed(objects: Iterable[Manifest], suffix: str) -> list[Manifest]:
    """The roles and bindings under names of their own (`<name>-<suffix>`), beside the chart's."""
    renamed = []
    for manifest in objects:
        manifest = copy.deepcopy(manifest)
        if manifest["kind"] != "ServiceAccount":
            manifest["metadata"]["name"] += f"-{suffix}"
        if "roleRef" in manifest:
            manifest["roleRef"]["name"] += f"-{suffix}"
        renamed.append(manifest)
    return renamed


def _token_kubeconfig(control_plane: ControlPlane, account: str, seconds: int = 3600) -> Path:
    return control_plane.issue_service_account_kubeconfig(SYSTEM_NAMESPACE, account, seconds)


def wait_until_admitting(control_plane: ControlPlane, namespace: str, timeout: float = 30) -> None:
    """The apiserver reads the patched caBundle asynchronously: wait until a call goes through."""
    probe = json.dumps(job_manifest("basic", "admission-probe"))
    refused = ""

    def admitted() -> bool:
        nonlocal refused
        result = control_plane.kubectl(
            "create", "--dry-run=server", "-n", namespace, "-f", "-", input=probe, check=False
        )
        refused = result.stderr
        return result.returncode == 0

    eventually_sync(
        admitted,
        "the webhook to admit a job",
        timeout=timeout,
        interval=0.3,
        explain=lambda: refused,
    )


def start_webhook(control_plane: ControlPlane, *extra_args: str) -> ServiceProcess:
    """Apply the chart's RBAC and webhook configurations, the apiserver calling the webhook by
    URL on loopback, and start the webhook as its Deployment would with a token of its
    ServiceAccount; ready when it serves. Its progress endpoint listens on a loopback port of
    its own, reached by the address its certificate names (`progress_port`). Pods are not made
    to restart in place: no kubelet runs here to restart their containers (a test plays it, or
    kwok). `extra_args` come last (the last of a flag given wins: `--restart-in-place`)."""
    port, probe_port, progress = free_port(), free_port(), free_port()
    manifests = rendered(
        **{
            "webhook.externalURL": f"https://127.0.0.1:{port}",
            "webhook.port": port,
            "webhook.probePort": probe_port,
            "progress.port": free_port(),
            "webhook.certificate.ipAddresses": ["127.0.0.1"],
            "webhook.certificate.dnsNames": ["localhost"],
            "webhook.certificate.rotateCheckSeconds": 0.5,
        }
    )
    install_rbac(control_plane)
    apply(control_plane, [m for m in manifests if m["kind"] in WEBHOOK_CONFIGURATION_KINDS])
    # A pod serves on all of its own addresses; a local process on loopback only.
    deployment = component(manifests, "Deployment", "webhook")
    extra_args = (
        *("--host", "127.0.0.1", "--progress-port", str(progress)),
        *("--progress-url", f"https://127.0.0.1:{progress}"),
        "--no-restart-in-place",
        *extra_args,
    )
    return run_as_deployed(control_plane, deployment, extra_args=extra_args)


def stop_webhook(control_plane: ControlPlane, server: ServiceProcess) -> None:
    server.close()
    for configuration in rendered():
        if configuration["kind"] in WEBHOOK_CONFIGURATION_KINDS:
            name = configuration["metadata"]["name"]
            kind = configuration["kind"].lower()
            control_plane.kubectl("delete", kind, name, "--ignore-not-found", check=False)


def webhook_port(server: ServiceProcess) -> int:
    return int(server.argv[server.argv.index("--port") + 1])


def progress_port(server: ServiceProcess) -> int:
    """The port of the webhook's progress endpoint (the last --progress-port given wins)."""
    given = [i for i, arg in enumerate(server.argv) if arg == "--progress-port"]
    return int(server.argv[given[-1] + 1])


def reconciler_kubeconfig(control_plane: ControlPlane, seconds: int = 3600) -> Path:
    """A token of the reconciler's ServiceAccount (the name the webhook accepts pods from),
    which has the chart's RBAC and nothing else, valid for `seconds`."""
    install_rbac(control_plane)
    return _token_kubeconfig(control_plane, service_account("reconciler"), seconds)


# Tests restart replicas after this delay, not the reconciler's default of 10 seconds; a test of
# the delay itself passes --restart-backoff again (the last one given wins). A job that succeeded
# stops its other replicas at once, not after the default 30 seconds (the test kubelet ends no
# pod by itself; the grace is shown on the real node and in tests/unit/test_finishing.py).
TEST_RESTART_BACKOFF = ("--restart-backoff", "0.2", "--success-grace", "0")


def start_reconciler(
    control_plane: ControlPlane,
    kubeconfig: Path,
    identity: str = "r1",
    *extra_args: str,
    leading: bool = True,
) -> ServiceProcess:
    """The reconciler as a process; returned once it leads and its caches have synced, or with
    `leading=False` once it is ready (a standby is ready at once). A `--lease-name` of the test's
    own is granted as the chart would grant it under that name."""
    args = (*TEST_RESTART_BACKOFF, *extra_args)
    leases = [args[i + 1] for i, arg in enumerate(args[:-1]) if arg == "--lease-name"]
    if leases:
        grant_lease(control_plane, "reconciler", leases[-1])
    return _start_controller("torchjob.reconciler", kubeconfig, identity, args, leading)


def grant_lease(control_plane: ControlPlane, part: str, lease: str) -> None:
    """The chart's Role of `part` rendered for the Lease `lease`, applied beside the chart's."""
    objects = _rbac(rendered(**{f"{part}.leaseName": lease}), part)
    roles = [m for m in objects if m["kind"] in ("Role", "RoleBinding")]
    apply(control_plane, _renamed(roles, lease))


def _start_controller(
    module: str, kubeconfig: Path, identity: str, extra_args: tuple[str, ...], leading: bool
) -> ServiceProcess:
    """A leader-elected service as a process, its Lease in the operator's namespace."""
    probe_port = free_port()
    args = [
        *("--namespace", SYSTEM_NAMESPACE, "--identity", identity, "--probe-host", "127.0.0.1"),
        *("--probe-port", str(probe_port), "--kubeconfig", str(kubeconfig), "--log-level", "DEBUG"),
        *extra_args,
    ]
    process = ServiceProcess(module, args, probe_port)
    try:
        process.start().wait_ready()
        if leading:
            wait_leading(process)
    except BaseException:
        process.close()
        raise
    return process


def is_leading(process: ServiceProcess) -> bool:
    """Whether the process holds its Lease (its leader-election gauge says 1)."""
    return 1.0 in process.samples("torchjob_leader_election_is_leader").values()


def wait_leading(process: ServiceProcess, timeout: float = READY_TIMEOUT) -> None:
    """Until the process leads and is ready (the leader is ready once its caches synced)."""

    def leading() -> bool:
        if process.process is None or process.process.poll() is not None:
            raise RuntimeError(f"{process.module} exited:\n{process.log_tail()}")
        return is_leading(process) and process.probe("/readyz") == 200

    eventually_sync(leading, f"{process.module} to lead", timeout=timeout, explain=process.log_tail)


def housekeeper_kubeconfig(
    control_plane: ControlPlane,
    account: str | None = None,
    cluster_rules: Callable[[Rules], Rules] | None = None,
) -> Path:
    """A token of the housekeeper's ServiceAccount, which has the chart's RBAC and nothing else.
    With `account`, a ServiceAccount of that name instead, bound to the chart's housekeeper
    roles rendered for it, their cluster-wide rules first passed through `cluster_rules`."""
    install_rbac(control_plane)
    if account is None:
        return _token_kubeconfig(control_plane, service_account("housekeeper"))
    objects = _rbac(rendered(**{"housekeeper.serviceAccount.name": account}), "housekeeper")
    for role in objects:
        if role["kind"] == "ClusterRole" and cluster_rules is not None:
            role["rules"] = cluster_rules(role["rules"])
    apply(control_plane, _renamed(objects, account))
    return _token_kubeconfig(control_plane, account)


def start_housekeeper(
    kubeconfig: Path, identity: str = "h1", *extra_args: str, leading: bool = True
) -> ServiceProcess:
    return _start_controller("torchjob.housekeeper", kubeconfig, identity, extra_args, leading)


CRD_FILES = sorted((REPO_ROOT / "crds").glob("*.yaml"))


def install_crds(plane: ControlPlane, extra: Iterable[Path] = ()) -> None:
    """The generated CRDs (and `extra` ones), applied with plain client-side `kubectl apply`
    and Established."""
    for path in (*CRD_FILES, *extra):
        plane.kubectl("apply", "-f", str(path))
    # `kubectl wait` fails at once on a CRD whose status has no conditions yet: ask again.
    eventually_sync(
        lambda: (
            plane.kubectl(
                "wait", "--for=condition=Established", "--timeout=60s", "crd", "--all", check=False
            ).returncode
            == 0
        ),
        "the CRDs to be Established",
        timeout=90,
        interval=0.5,
    )
