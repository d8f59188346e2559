"""The operator as e2e tests run it: the webhook registered with the real apiserver through real
webhook configurations (URL client config; the webhook patches in its own caBundle), and the
services as processes."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import yaml

from support.controlplane import ControlPlane, free_port
from support.processes import READY_TIMEOUT, ServiceProcess
from torchjob.api import constants

DATA = Path(__file__).parents[1] / "data" / "t9k"
SYSTEM_NAMESPACE = "torchjob-system"
RECONCILER = f"system:serviceaccount:{SYSTEM_NAMESPACE}:torchjob-reconciler"
OPT_IN_LABEL = "torchjob.test/webhook"
MUTATING, VALIDATING = "torchjob-mutating-e2e", "torchjob-validating-e2e"
SECRET = "torchjob-webhook-tls"


def webhook(
    name: str, url: str, resources: str, operations: list[str], **extra: Any
) -> dict[str, Any]:
    group, version = ("", "v1") if resources == "pods" else ("batch.tensorstack.dev", "v1beta1")
    return {
        "name": name,
        "clientConfig": {"url": url},
        "rules": [
            {
                "apiGroups": [group],
                "apiVersions": [version],
                "operations": operations,
                "resources": [resources],
                "scope": "Namespaced",
            }
        ],
        "admissionReviewVersions": ["v1"],
        "sideEffects": "None",
        "failurePolicy": "Fail",
        "timeoutSeconds": 5,
        "namespaceSelector": {"matchLabels": {OPT_IN_LABEL: "on"}},
        **extra,
    }


def configurations(port: int) -> list[dict[str, Any]]:
    base = f"https://127.0.0.1:{port}"
    job_selector = {"matchExpressions": [{"key": constants.LABEL_JOB_NAME, "operator": "Exists"}]}
    return [
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "MutatingWebhookConfiguration",
            "metadata": {"name": MUTATING},
            "webhooks": [
                webhook(
                    "jobs.mutate.torchjob.dev",
                    f"{base}/mutate/pytorchtrainingjobs",
                    "pytorchtrainingjobs",
                    ["CREATE", "UPDATE"],
                ),
                webhook(
                    "pods.mutate.torchjob.dev",
                    f"{base}/mutate/pods",
                    "pods",
                    ["CREATE"],
                    objectSelector=job_selector,
                    reinvocationPolicy="IfNeeded",
                ),
            ],
        },
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingWebhookConfiguration",
            "metadata": {"name": VALIDATING},
            "webhooks": [
                webhook(
                    "jobs.validate.torchjob.dev",
                    f"{base}/validate/pytorchtrainingjobs",
                    "pytorchtrainingjobs",
                    ["CREATE", "UPDATE"],
                )
            ],
        },
    ]


def job_manifest(stem: str = "torchrun", name: str | None = None) -> dict[str, Any]:
    data = yaml.safe_load((DATA / f"{stem}.yaml").read_text())
    assert isinstance(data, dict)
    if name:
        data["metadata"]["name"] = name
    return data


def wait_until_admitting(control_plane: ControlPlane, namespace: str, timeout: float = 30) -> None:
    """The apiserver reads the patched caBundle asynchronously: wait until a call goes through."""
    deadline = time.monotonic() + timeout
    probe = json.dumps(job_manifest("basic", "admission-probe"))
    while True:
        result = control_plane.kubectl(
            "create", "--dry-run=server", "-n", namespace, "-f", "-", input=probe, check=False
        )
        if result.returncode == 0:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"the webhook never admitted a job: {result.stderr}")
        time.sleep(0.3)


def start_webhook(control_plane: ControlPlane) -> ServiceProcess:
    """Register the webhook configurations and start the webhook; ready when it serves."""
    port, probe_port = free_port(), free_port()
    control_plane.kubectl("create", "namespace", SYSTEM_NAMESPACE, check=False)
    for config in configurations(port):
        control_plane.kubectl("apply", "-f", "-", input=json.dumps(config))
    args = [
        *("--namespace", SYSTEM_NAMESPACE, "--host", "127.0.0.1", "--port", str(port)),
        *("--probe-port", str(probe_port), "--ip-addresses", "127.0.0.1"),
        *("--extra-dns-names", "localhost", "--mutating-config", MUTATING),
        *("--validating-config", VALIDATING, "--pod-creators", RECONCILER),
        *("--kubeconfig", str(control_plane.kubeconfig), "--rotate-check-seconds", "0.5"),
    ]
    server = ServiceProcess("torchjob.webhook", args, probe_port)
    try:
        server.start().wait_ready()
    except BaseException:
        server.close()
        raise
    return server


def stop_webhook(control_plane: ControlPlane, server: ServiceProcess) -> None:
    server.close()
    for kind, name in (
        ("mutatingwebhookconfiguration", MUTATING),
        ("validatingwebhookconfiguration", VALIDATING),
    ):
        control_plane.kubectl("delete", kind, name, "--ignore-not-found", check=False)


def webhook_port(server: ServiceProcess) -> int:
    return int(server.argv[server.argv.index("--port") + 1])


def reconciler_kubeconfig(control_plane: ControlPlane) -> Path:
    """Credentials carrying the reconciler's ServiceAccount username (the name the webhook
    accepts pods from), bound to cluster-admin; the chart's least-privilege role is tested apart."""
    path = control_plane.issue_kubeconfig(RECONCILER)
    control_plane.kubectl(
        "create",
        "clusterrolebinding",
        "torchjob-reconciler-e2e",
        "--clusterrole=cluster-admin",
        f"--user={RECONCILER}",
        check=False,
    )
    return path


# Tests restart replicas after this delay, not the reconciler's default of 10 seconds; a test of
# the delay itself passes --restart-backoff again (the last one given wins).
TEST_RESTART_BACKOFF = ("--restart-backoff", "0.2")


def start_reconciler(
    control_plane: ControlPlane,
    kubeconfig: Path,
    identity: str = "r1",
    *extra_args: str,
    leading: bool = True,
) -> ServiceProcess:
    """The reconciler as a process; returned once it leads and its caches have synced, or with
    `leading=False` once it is ready (a standby is ready at once)."""
    args = (*TEST_RESTART_BACKOFF, *extra_args)
    return _start_controller("torchjob.reconciler", kubeconfig, identity, args, leading)


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
    deadline = time.monotonic() + timeout
    while not (is_leading(process) and process.probe("/readyz") == 200):
        if process.process is None or process.process.poll() is not None:
            raise RuntimeError(f"{process.module} exited:\n{process.log_tail()}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"{process.module} never led:\n{process.log_tail()}")
        time.sleep(0.1)


HOUSEKEEPER = f"system:serviceaccount:{SYSTEM_NAMESPACE}:torchjob-housekeeper"
ALL = ["get", "list", "watch", "create", "update", "patch", "delete"]
# The housekeeper's cluster-wide RBAC, as the chart grants it (charts/torchjob/templates/
# housekeeper/rbac.yaml); its Lease rule is LEASE_RULES, not limited to one name here.
HOUSEKEEPER_RULES: list[dict[str, Any]] = [
    {
        "apiGroups": ["batch.tensorstack.dev"],
        "resources": ["pytorchtrainingjobs"],
        "verbs": ["get", "list", "watch", "delete"],
    },
    {
        "apiGroups": ["batch.tensorstack.dev"],
        "resources": ["pytorchtrainingjobs/status"],
        "verbs": ["get", "patch"],
    },
    {
        "apiGroups": ["batch.tensorstack.dev"],
        "resources": ["pytorchtrainingjobs/finalizers"],
        "verbs": ["update"],
    },
    {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch", "delete"]},
    {"apiGroups": [""], "resources": ["services"], "verbs": ALL},
    {"apiGroups": ["apps"], "resources": ["deployments"], "verbs": ALL},
    {"apiGroups": ["events.k8s.io"], "resources": ["events"], "verbs": ["create", "patch"]},
]
LEASE_RULES: list[dict[str, Any]] = [
    {
        "apiGroups": ["coordination.k8s.io"],
        "resources": ["leases"],
        "verbs": ["get", "create", "update", "patch"],
    }
]


def _bound(kind: str, name: str, user: str, rules: list[dict[str, Any]]) -> list[dict[str, Any]]:
    namespace = {"namespace": SYSTEM_NAMESPACE} if kind == "Role" else {}
    meta = {"name": name, **namespace}
    role = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": kind, "metadata": meta}
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": f"{kind}Binding",
        "metadata": meta,
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": name},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}],
    }
    return [{**role, "rules": rules}, binding]


def housekeeper_kubeconfig(
    control_plane: ControlPlane,
    user: str = HOUSEKEEPER,
    rules: list[dict[str, Any]] = HOUSEKEEPER_RULES,
) -> Path:
    """Credentials for `user`, granted exactly `rules` cluster-wide and the Lease verbs in the
    operator's namespace (the housekeeper's RBAC as the chart grants it, unless told otherwise)."""
    control_plane.kubectl("create", "namespace", SYSTEM_NAMESPACE, check=False)
    name = "torchjob-" + user.rsplit(":", 1)[-1] + "-e2e"
    objects = _bound("ClusterRole", name, user, rules) + _bound("Role", name, user, LEASE_RULES)
    control_plane.kubectl(
        "apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": objects})
    )
    return control_plane.issue_kubeconfig(user)


def start_housekeeper(
    kubeconfig: Path, identity: str = "h1", *extra_args: str, leading: bool = True
) -> ServiceProcess:
    return _start_controller("torchjob.housekeeper", kubeconfig, identity, extra_args, leading)
