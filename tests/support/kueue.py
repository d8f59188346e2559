"""Kueue's manager (sigs.k8s.io/kueue, built by `make kueue-build`) as a process beside a
cluster's control plane (the e2e tier's, the real node's, the scale tier's): its CRDs applied as
its release publishes them, its webhook configurations called by URL on loopback with a CA of the
test's, and a Configuration of the test's: only the plain pod integration, in the namespaces
labelled `MANAGED_LABEL`, no leader election, no certificate management of its own, health and
metrics on free loopback ports.

A control plane may be shared with other tests, so every webhook of Kueue's is limited to the
namespaces it manages (its release limits the pod webhooks the same way, to all but kube-system
and its own namespace): a test elsewhere never waits on Kueue, running or not. Kueue's manager
runs as the control plane's admin (its release grants it a ClusterRole)."""

from __future__ import annotations

import base64
import contextlib
import copy
import json
import os
import shlex
import shutil
import subprocess
import tempfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import yaml

from .controlplane import REPO_ROOT, free_port
from .eventually import eventually_sync
from .pki import CertAndKey, issue_serving_cert, new_ca, write_cert
from .processes import READY_TIMEOUT, ServiceProcess

BUILD_SCRIPT = REPO_ROOT / "hack" / "build-kueue.sh"
# Seconds to wait for a build: a cold one takes 5 to 10 minutes of a busy two-core machine.
BUILD_WAIT = 1800
NAMESPACE = "kueue-system"  # where its release runs it; its Configuration names it
# Namespaces labelled `<MANAGED_LABEL>=on` are Kueue's (managedJobsNamespaceSelector), and only
# their objects reach its webhooks.
MANAGED_LABEL = "torchjob.test/kueue"
# With its own certificate management off, Kueue's metrics server reads its certificate from this
# directory (fixed in v0.17's cmd/kueue: its Deployment mounts a Secret there), and refuses to
# start without one.
METRICS_CERT_DIR = Path("/etc/kueue/metrics/certs")
# ... and its visibility server from this one (fixed in v0.17's pkg/visibility).
VISIBILITY_CERT_DIR = Path("/visibility")
# Kueue's visibility API (an aggregated API server in its manager): the APIService its release
# registers, and the Service it names, whose endpoint here is this machine's address (the
# apiserver routes to an aggregated API's endpoints, and refuses a loopback one).
VISIBILITY_VERSION = "v1beta2"
VISIBILITY_SERVICE = "visibility-server"
# Its release's names for its webhook configurations (config/default prefixes `kueue-`).
CONFIGURATION_NAMES = {
    "MutatingWebhookConfiguration": "kueue-mutating-webhook-configuration",
    "ValidatingWebhookConfiguration": "kueue-validating-webhook-configuration",
}
# The API version of Kueue's objects that v0.17 stores (and its manager reads).
API_VERSION = "kueue.x-k8s.io/v1beta2"
Manifest = dict[str, Any]


class Cluster(Protocol):
    """Where Kueue runs: the e2e tier's control plane or the real node, each with kubectl as
    its admin and the admin's kubeconfig."""

    @property
    def kubeconfig(self) -> Path: ...

    def kubectl(
        self, *args: str, input: str | None = None, check: bool = True
    ) -> subprocess.CompletedProcess[str]: ...


class KueueMissing(RuntimeError):
    """Kueue cannot run here: its build is not in the cache, or what it reads cannot be
    written."""


@dataclass(frozen=True)
class KueueBuild:
    """The manager's binary and what running it needs, as hack/build-kueue.sh caches them."""

    binary: Path
    crds: tuple[Path, ...]
    webhook_manifests: Path

    @classmethod
    def locate(cls) -> KueueBuild:
        """The build, once the one `make test` started in the background has ended (or, when
        none was started, once it is built here)."""
        waited = subprocess.run(
            ["bash", str(BUILD_SCRIPT), "wait"], capture_output=True, text=True, timeout=BUILD_WAIT
        )
        printed = subprocess.run(
            ["bash", str(BUILD_SCRIPT), "print-dir"], capture_output=True, text=True, check=True
        ).stdout.strip()
        directory = Path(printed)
        if waited.returncode != 0 or not (directory / ".built").is_file():
            raise KueueMissing(
                f"Kueue could not be built in {directory} (`make kueue-build`):\n{waited.stderr}"
            )
        return cls(
            binary=directory / "kueue",
            crds=tuple(sorted((directory / "crds").glob("*.yaml"))),
            webhook_manifests=directory / "webhook" / "manifests.yaml",
        )


def webhook_configurations(manifests: str, port: int, ca_bundle: bytes) -> list[Manifest]:
    """Kueue's webhook configurations as its release writes them for its Service, called instead
    at `https://127.0.0.1:<port><path>` with `ca_bundle`, in the namespaces it manages."""
    selector = {"matchLabels": {MANAGED_LABEL: "on"}}
    bundle = base64.b64encode(ca_bundle).decode()
    configurations = []
    for document in yaml.safe_load_all(manifests):
        if not document:
            continue
        configuration = copy.deepcopy(document)
        configuration["metadata"] = {"name": CONFIGURATION_NAMES[configuration["kind"]]}
        for webhook in configuration["webhooks"]:
            path = webhook["clientConfig"]["service"]["path"]
            webhook["clientConfig"] = {"url": f"https://127.0.0.1:{port}{path}", "caBundle": bundle}
            webhook["namespaceSelector"] = selector
        configurations.append(configuration)
    return configurations


@dataclass(frozen=True)
class Ports:
    webhook: int
    health: int
    metrics: int
    visibility: int


def configuration(ports: Ports, cert_dir: Path) -> Manifest:
    """Kueue's Configuration for the test: the plain pod integration only, in the namespaces
    labelled MANAGED_LABEL; no leader election; its visibility server on a port of the test's."""
    return {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2",
        "kind": "Configuration",
        "namespace": NAMESPACE,
        "health": {"healthProbeBindAddress": f"127.0.0.1:{ports.health}"},
        "metrics": {"bindAddress": f"127.0.0.1:{ports.metrics}"},
        "webhook": {"host": "127.0.0.1", "port": ports.webhook, "certDir": str(cert_dir)},
        "leaderElection": {"leaderElect": False},
        "internalCertManagement": {"enable": False},
        "integrations": {"frameworks": ["pod"]},
        "managedJobsNamespaceSelector": {"matchLabels": {MANAGED_LABEL: "on"}},
        "visibilityServer": {"bindPort": ports.visibility},
    }


def _write_serving(directory: Path, serving: CertAndKey) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    serving.write(directory / "tls.crt", directory / "tls.key")


class KueueManager:
    """Kueue's manager on a cluster's control plane; `process` once started."""

    def __init__(self, plane: Cluster, build: KueueBuild | None = None) -> None:
        self.plane = plane
        self.build = build or KueueBuild.locate()
        self.ports = Ports(free_port(), free_port(), free_port(), free_port())
        self.dir = Path(tempfile.mkdtemp(prefix="kueue-"))
        self.process: ServiceProcess | None = None

    def start(self) -> KueueManager:
        try:
            self._install()
            self._launch()
            self._wait_admitting()
            self._wait_visible()
        except BaseException:
            self.close()
            raise
        return self

    def _install(self) -> None:
        """Its namespace, its CRDs (Established), and its webhook configurations with a CA of
        the test's whose serving certificate the manager serves."""
        self.plane.kubectl("create", "namespace", NAMESPACE, check=False)
        apply_crds(self.plane, self.build.crds)
        ca = new_ca("kueue-test-ca")
        serving = issue_serving_cert(ca, "kueue-webhook")
        _write_serving(self.dir / "webhook-certs", serving)
        service_host = f"{VISIBILITY_SERVICE}.{NAMESPACE}.svc"
        visibility = issue_serving_cert(ca, "kueue-visibility", [service_host, visibility_host()])
        _write_serving(self.dir / "metrics-certs", serving)
        _write_serving(self.dir / "visibility-certs", visibility)
        write_cert(self.dir / "ca.crt", ca.cert)
        manifests = self.build.webhook_manifests.read_text()
        bundle = (self.dir / "ca.crt").read_bytes()
        configurations = webhook_configurations(manifests, self.ports.webhook, bundle)
        registered = visibility_objects(self.ports.visibility, bundle)
        items = {"apiVersion": "v1", "kind": "List", "items": [*configurations, *registered]}
        self.plane.kubectl("apply", "--server-side", "-f", "-", input=json.dumps(items))

    def _launch(self) -> None:
        config = self.dir / "configuration.yaml"
        config.write_text(yaml.safe_dump(configuration(self.ports, self.dir / "webhook-certs")))
        argv = [
            str(self.build.binary),
            f"--config={config}",
            # Its visibility server authenticates and authorizes each request through the
            # apiserver with the flag's kubeconfig (not KUBECONFIG's).
            f"--kubeconfig={self.plane.kubeconfig}",
            "--zap-log-level=2",
        ]
        mounts = {
            self.dir / "metrics-certs": METRICS_CERT_DIR,
            self.dir / "visibility-certs": VISIBILITY_CERT_DIR,
        }
        env = {"KUBECONFIG": str(self.plane.kubeconfig)}
        self.process = ServiceProcess.program(
            "kueue", with_mounts(mounts, argv), self.ports.health, env
        )
        self.process.start().wait_ready(READY_TIMEOUT)

    def _wait_visible(self) -> None:
        """Until the apiserver reaches Kueue's visibility API (its APIService Available)."""
        name = f"{VISIBILITY_VERSION}.visibility.kueue.x-k8s.io"
        said = ""

        def available() -> bool:
            nonlocal said
            got = self.plane.kubectl("get", "apiservice", name, "-o", "json", check=False)
            said = got.stdout or got.stderr
            return (
                got.returncode == 0
                and condition_status(json.loads(got.stdout), "Available") == "True"
            )

        eventually_sync(
            available, "Kueue's visibility API available", timeout=90, explain=lambda: said
        )

    def _wait_admitting(self) -> None:
        """Until the apiserver reaches its webhook (it reads a new caBundle asynchronously): a
        ResourceFlavor goes through Kueue's webhooks when created, here in a dry run."""
        probe = {"apiVersion": API_VERSION, "kind": "ResourceFlavor", "metadata": {"name": "p"}}
        said = ""

        def admitted() -> bool:
            nonlocal said
            result = self.plane.kubectl(
                "create", "--dry-run=server", "-f", "-", input=json.dumps(probe), check=False
            )
            said = result.stderr
            return result.returncode == 0

        eventually_sync(admitted, "Kueue's webhook to admit", timeout=60, explain=lambda: said)

    def log_tail(self, lines: int = 60) -> str:
        return self.process.log_tail(lines) if self.process else "(not started)"

    def close(self) -> None:
        """Its webhook configurations removed first (nothing answers them once it stops), then
        the manager stopped and its files removed."""
        for kind, name in CONFIGURATION_NAMES.items():
            self.plane.kubectl("delete", kind.lower(), name, "--ignore-not-found", check=False)
        # An aggregated API that no longer answers fails every client's discovery.
        apiservice = f"{VISIBILITY_VERSION}.visibility.kueue.x-k8s.io"
        self.plane.kubectl("delete", "apiservice", apiservice, "--ignore-not-found", check=False)
        if self.process is not None:
            self.process.close()
            self.process = None
        shutil.rmtree(self.dir, ignore_errors=True)


def with_mounts(mounts: dict[Path, Path], argv: list[str]) -> list[str]:
    """`argv` run in a mount namespace of its own in which each directory of `mounts` is seen at
    its fixed path: two managers (the e2e tier's and the node's, in one `make test`) each read
    their own certificates; on the host the fixed paths stay empty directories."""
    if os.geteuid() != 0:
        raise KueueMissing(
            f"Kueue's manager reads certificates from {', '.join(map(str, mounts.values()))}, "
            "mounted for it in a mount namespace of its own: run the Kueue tests as root"
        )
    for target in mounts.values():
        target.mkdir(parents=True, exist_ok=True)
    binds = " && ".join(
        f"mount --bind {shlex.quote(str(source))} {shlex.quote(str(target))}"
        for source, target in mounts.items()
    )
    script = f'{binds} && exec "$@"'
    return ["unshare", "--mount", "--propagation", "private", "sh", "-c", script, "kueue", *argv]


def apply_crds(plane: Cluster, crds: Iterable[Path]) -> None:
    """The CRDs as published, applied server-side (Kueue's are too large for the annotation a
    client-side apply keeps) and Established."""
    names = []
    for path in crds:
        plane.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(path))
        names.append(yaml.safe_load(path.read_text())["metadata"]["name"])

    def established() -> bool:
        waited = plane.kubectl(
            "wait",
            "--for=condition=Established",
            "--timeout=30s",
            *(f"crd/{n}" for n in names),
            check=False,
        )
        return waited.returncode == 0

    eventually_sync(established, "Kueue's CRDs to be Established", timeout=90, interval=0.5)


# The WorkloadPriorityClasses quota_objects makes, by the suffix of their names: their values.
PRIORITIES = {"low": 100, "high": 1000}


def quota_objects(
    prefix: str, cpu: str, tenants: dict[str, str], memory: str | None = None
) -> Iterator[Manifest]:
    """A ResourceFlavor, a ClusterQueue of `cpu` CPUs of it and, where given, `memory` of memory
    (Kueue admits a pod only if its ClusterQueue covers every resource it asks for); any
    namespace's workloads; a workload of higher priority preempts those of lower priority in it;
    a LocalQueue on it in each tenant namespace (namespace: local queue name), and the
    WorkloadPriorityClasses `<prefix>-low` and `<prefix>-high`; all named from `prefix`."""
    flavor, cluster_queue = f"{prefix}-flavor", f"{prefix}-cq"
    for suffix, value in PRIORITIES.items():
        yield {
            "apiVersion": API_VERSION,
            "kind": "WorkloadPriorityClass",
            "metadata": {"name": f"{prefix}-{suffix}"},
            "value": value,
        }
    yield {"apiVersion": API_VERSION, "kind": "ResourceFlavor", "metadata": {"name": flavor}}
    quotas = {"cpu": cpu} if memory is None else {"cpu": cpu, "memory": memory}
    resources = [{"name": name, "nominalQuota": value} for name, value in quotas.items()]
    quota = {"name": flavor, "resources": resources}
    yield {
        "apiVersion": API_VERSION,
        "kind": "ClusterQueue",
        "metadata": {"name": cluster_queue},
        "spec": {
            "namespaceSelector": {},
            "resourceGroups": [{"coveredResources": list(quotas), "flavors": [quota]}],
            "preemption": {"withinClusterQueue": "LowerPriority"},
        },
    }
    for namespace, queue in tenants.items():
        yield {
            "apiVersion": API_VERSION,
            "kind": "LocalQueue",
            "metadata": {"name": queue, "namespace": namespace},
            "spec": {"clusterQueue": cluster_queue},
        }


@contextlib.contextmanager
def cluster_queue(
    plane: Cluster, prefix: str, cpu: str, tenants: dict[str, str], memory: str | None = None
) -> Iterator[str]:
    """quota_objects applied; the ClusterQueue's name once Kueue says it is active. Deleted
    after, without waiting."""
    objects = list(quota_objects(prefix, cpu, tenants, memory))
    items = {"apiVersion": "v1", "kind": "List", "items": objects}
    plane.kubectl("apply", "-f", "-", input=json.dumps(items))
    name = f"{prefix}-cq"

    def active() -> bool:
        got = plane.kubectl("get", "clusterqueue", name, "-o", "json")
        return condition_status(json.loads(got.stdout), "Active") == "True"

    try:
        eventually_sync(active, f"the ClusterQueue {name} active")
        yield name
    finally:
        made = [("clusterqueue", name), ("resourceflavor", f"{prefix}-flavor")]
        made += [("workloadpriorityclass", f"{prefix}-{suffix}") for suffix in PRIORITIES]
        for kind, object_name in made:
            plane.kubectl("delete", kind, object_name, "--wait=false", check=False)


@dataclass(frozen=True)
class QuotaSample:
    """What a ClusterQueue's status says at one moment: CPUs reserved (quota held by admitted
    workloads) and in use, and its workloads by state."""

    reserved_cpu: float
    used_cpu: float
    admitted: int
    reserving: int
    pending: int


def cpu_cores(quantity: str) -> float:
    """A CPU quantity as Kubernetes writes it ("2", "1500m") in cores."""
    if quantity.endswith("m"):
        return int(quantity[:-1]) / 1000
    return float(quantity)


def quota_sample(status: dict[str, Any]) -> QuotaSample:
    """The ClusterQueue `status` read into a sample (an empty status: nothing held)."""

    def cpus(field: str) -> float:
        return sum(
            cpu_cores(str(resource.get("total") or "0"))
            for flavor in status.get(field) or ()
            for resource in flavor.get("resources") or ()
            if resource.get("name") == "cpu"
        )

    return QuotaSample(
        reserved_cpu=cpus("flavorsReservation"),
        used_cpu=cpus("flavorsUsage"),
        admitted=int(status.get("admittedWorkloads") or 0),
        reserving=int(status.get("reservingWorkloads") or 0),
        pending=int(status.get("pendingWorkloads") or 0),
    )


def condition_status(obj: dict[str, Any], kind: str) -> str | None:
    """The status ("True", "False") of `obj`'s condition of type `kind`; None without one."""
    conditions = (obj.get("status") or {}).get("conditions") or ()
    return next((str(c.get("status")) for c in conditions if c.get("type") == kind), None)


def visibility_host() -> str:
    """This machine's first IPv4 address other than loopback: the endpoint of Kueue's
    visibility Service, which the apiserver dials."""
    shown = subprocess.run(
        ["ip", "-o", "-4", "addr", "show", "scope", "global"], capture_output=True, text=True
    ).stdout
    for line in shown.splitlines():
        return line.split()[3].split("/")[0]
    raise KueueMissing(
        "Kueue's visibility API needs an IPv4 address of this machine's other than loopback"
    )


def visibility_objects(port: int, ca_bundle: bytes) -> list[Manifest]:
    """Kueue's visibility APIService as its release registers it (with the test's CA rather than
    no verification), and its Service, whose one endpoint is this machine's address at `port`."""
    service = {"name": VISIBILITY_SERVICE, "namespace": NAMESPACE}
    return [
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": service,
            "spec": {"ports": [{"name": "https", "port": 443, "targetPort": port}]},
        },
        {
            "apiVersion": "discovery.k8s.io/v1",
            "kind": "EndpointSlice",
            "metadata": {
                "name": VISIBILITY_SERVICE,
                "namespace": NAMESPACE,
                "labels": {"kubernetes.io/service-name": VISIBILITY_SERVICE},
            },
            "addressType": "IPv4",
            "endpoints": [{"addresses": [visibility_host()], "conditions": {"ready": True}}],
            "ports": [{"name": "https", "port": port, "protocol": "TCP"}],
        },
        {
            "apiVersion": "apiregistration.k8s.io/v1",
            "kind": "APIService",
            "metadata": {"name": f"{VISIBILITY_VERSION}.visibility.kueue.x-k8s.io"},
            "spec": {
                "group": "visibility.kueue.x-k8s.io",
                "version": VISIBILITY_VERSION,
                "groupPriorityMinimum": 100,
                "versionPriority": 100,
                "caBundle": base64.b64encode(ca_bundle).decode(),
                "service": {**service, "port": 443},
            },
        },
    ]
