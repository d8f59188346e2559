"""The real single-node cluster of `make node-up` (hack/node.sh) as tests use it: kubectl and helm
as its admin, the names of the images built for it, and polling for what real pods take time to
reach. Every wait is bounded by a generous deadline: a verdict is about what happens, never how
fast it happens on a busy machine."""

from __future__ import annotations

import base64
import json
import os
import shlex
import shutil
import subprocess
import textwrap
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import yaml

from torchjob.api.constants import LABEL_JOB_NAME

from .cli import TORCHJOB
from .controlplane import REPO_ROOT, KubectlError
from .eventually import eventually_sync
from .helm import HelmError, helm_binary
from .jobs import JobBuilder

NODE_SCRIPT = REPO_ROOT / "hack" / "node.sh"
COMMON_SCRIPT = REPO_ROOT / "hack" / "node" / "common.sh"
CHART = REPO_ROOT / "charts" / "torchjob"
HOST_VOLUMES = Path("/var/lib/torchjob-node-test-volumes")
# What the chart's services keep in its namespace (the release hack/node.sh installs).
WEBHOOK_SECRET = "torchjob-webhook-tls"
RECONCILER_LEASE = "torchjob-reconciler"
POLL_INTERVAL = 1.0
# Long enough for a cold start of torch in four processes on two busy cores.
SLOW = 900.0
# A `torchjob` command may wait on real pods (logs -f, wait) for this long.
CLI_TIMEOUT = 1200.0

T = TypeVar("T")
Manifest = dict[str, Any]


class NodeError(RuntimeError):
    pass


def node_settings() -> dict[str, str]:
    """The names hack/node/common.sh gives paths and images (the one place they are written)."""
    names = [
        "CONTAINERD_SOCKET",
        "IMAGES_DIR",
        "KUBECONFIG_ADMIN",
        "KUBE_DIR",
        "NODE_NAME",
        "CHART_NAMESPACE",
        "BASE_IMAGE",
        "EXAMPLE_IMAGE",
        "TORCHJOB_IMAGE_REPOSITORY",
    ]
    script = f"source {shlex.quote(str(COMMON_SCRIPT))}; load_build_dirs; " + "; ".join(
        f'echo "{name}=${name}"' for name in names
    )
    output = subprocess.run(
        ["bash", "-c", script], capture_output=True, text=True, check=True
    ).stdout
    return dict(line.split("=", 1) for line in output.splitlines() if "=" in line)


def node_is_up() -> bool:
    return subprocess.run(["bash", str(NODE_SCRIPT), "status"], capture_output=True).returncode == 0


def run_node_script(command: str, log_path: Path, *args: str) -> None:
    """`hack/node.sh <command> <args>`, its output in `log_path`; raises with the log's tail on
    failure."""
    with log_path.open("ab") as log:
        result = subprocess.run(
            ["bash", str(NODE_SCRIPT), command, *args], stdout=log, stderr=subprocess.STDOUT
        )
    if result.returncode != 0:
        tail = "\n".join(log_path.read_text(errors="replace").splitlines()[-40:])
        raise NodeError(f"hack/node.sh {command} failed ({result.returncode}):\n{tail}")


def wait_until(
    what: str, probe: Callable[[], T | None], timeout: float = SLOW, interval: float = POLL_INTERVAL
) -> T:
    """The first truthy value of `probe()`, polled at the pace real pods change."""
    found = eventually_sync(probe, what, timeout=timeout, interval=interval)
    assert found is not None
    return found


@dataclass(frozen=True)
class Node:
    kubeconfig: Path
    kubectl_path: Path
    containerd_socket: Path
    chart_namespace: str
    node_name: str
    base_image: str
    example_image: str
    torchjob_repository: str
    torchjob_tag: str

    @classmethod
    def locate(cls) -> Node:
        settings = node_settings()
        return cls(
            kubeconfig=Path(settings["KUBECONFIG_ADMIN"]),
            kubectl_path=Path(settings["KUBE_DIR"]) / "kubectl",
            containerd_socket=Path(settings["CONTAINERD_SOCKET"]),
            chart_namespace=settings["CHART_NAMESPACE"],
            node_name=settings["NODE_NAME"],
            base_image=settings["BASE_IMAGE"],
            example_image=settings["EXAMPLE_IMAGE"],
            torchjob_repository=settings["TORCHJOB_IMAGE_REPOSITORY"],
            torchjob_tag=(Path(settings["IMAGES_DIR"]) / "torchjob.tag").read_text().strip(),
        )

    # -- kubectl ---------------------------------------------------------------------------------

    def kubectl(
        self, *args: str, input: str | None = None, check: bool = True, timeout: float = 120.0
    ) -> subprocess.CompletedProcess[str]:
        argv = [str(self.kubectl_path), *args]
        env = {**os.environ, "KUBECONFIG": str(self.kubeconfig)}
        result = subprocess.run(
            argv, input=input, capture_output=True, text=True, env=env, timeout=timeout
        )
        if check and result.returncode != 0:
            raise KubectlError(result.returncode, argv, result.stdout, result.stderr)
        return result

    def apply(self, namespace: str, *manifests: Manifest) -> None:
        self.kubectl("apply", "-n", namespace, "-f", "-", input=yaml.safe_dump_all(manifests))

    def get(self, kind: str, name: str, namespace: str | None = None) -> Manifest | None:
        args = ["get", kind, name, "-o", "json"] + (["-n", namespace] if namespace else [])
        result = self.kubectl(*args, check=False)
        if result.returncode != 0:
            if "NotFound" in result.stderr:
                return None
            raise KubectlError(result.returncode, args, result.stdout, result.stderr)
        found: Manifest = json.loads(result.stdout)
        return found

    def objects(self, kind: str, namespace: str | None, selector: str = "") -> list[Manifest]:
        """Objects of `kind` in `namespace` (None: cluster-scoped kinds)."""
        args = ["get", kind, "-o", "json"] + (["-n", namespace] if namespace else [])
        if selector:
            args += ["-l", selector]
        items: list[Manifest] = json.loads(self.kubectl(*args).stdout)["items"]
        return items

    def job(self, namespace: str, name: str) -> Manifest:
        job = self.get("pytorchtrainingjobs", name, namespace)
        assert job is not None, f"job {namespace}/{name} is gone"
        return job

    def wait_for_phase(
        self, namespace: str, name: str, phases: Iterable[str], timeout: float = SLOW
    ) -> Manifest:
        wanted = set(phases)

        def reached() -> Manifest | None:
            job = self.job(namespace, name)
            return job if (job.get("status") or {}).get("phase") in wanted else None

        return wait_until(f"job {name} in phase {sorted(wanted)}", reached, timeout)

    def job_pods(self, namespace: str, job: str) -> list[Manifest]:
        return self.objects("pods", namespace, f"{LABEL_JOB_NAME}={job}")

    def wait_for_pod_phase(
        self, namespace: str, name: str, phases: Iterable[str], timeout: float = SLOW
    ) -> Manifest:
        wanted = set(phases)

        def reached() -> Manifest | None:
            pod = self.get("pod", name, namespace)
            return pod if pod and pod.get("status", {}).get("phase") in wanted else None

        return wait_until(f"pod {name} in phase {sorted(wanted)}", reached, timeout)

    def pod_when(
        self, namespace: str, name: str, what: str, condition: Callable[[Manifest], bool]
    ) -> Manifest:
        """The pod once `condition` holds for it."""

        def probe() -> Manifest | None:
            pod = self.get("pod", name, namespace)
            return pod if pod is not None and condition(pod) else None

        return wait_until(f"pod {name}: {what}", probe)

    def job_when(
        self, namespace: str, name: str, what: str, condition: Callable[[Manifest], bool]
    ) -> Manifest:
        """The job once `condition` holds for it."""

        def probe() -> Manifest | None:
            job = self.job(namespace, name)
            return job if condition(job) else None

        return wait_until(f"job {name}: {what}", probe)

    def events(self, namespace: str, involved_name: str) -> list[Manifest]:
        return [
            event
            for event in self.objects("events", namespace)
            if event["involvedObject"].get("name") == involved_name
        ]

    def logs(self, namespace: str, pod: str, container: str | None = None) -> str:
        args = ["logs", "-n", namespace, pod] + (["-c", container] if container else [])
        return self.kubectl(*args).stdout

    # -- containerd and helm ---------------------------------------------------------------------

    def ctr(self, *args: str) -> str:
        argv = ["ctr", "--address", str(self.containerd_socket), "--namespace", "k8s.io", *args]
        return subprocess.run(argv, capture_output=True, text=True, check=True).stdout

    def helm(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        argv = [str(helm_binary()), "--kubeconfig", str(self.kubeconfig), *args]
        result = subprocess.run(argv, capture_output=True, text=True)
        if check and result.returncode != 0:
            raise HelmError(result.returncode, argv, result.stdout, result.stderr)
        return result


def torchjob(
    node: Node, namespace: str, *args: str, timeout: float = CLI_TIMEOUT
) -> subprocess.CompletedProcess[str]:
    """The `torchjob` command as the node's admin, in `namespace`."""
    return subprocess.run(
        [str(TORCHJOB), *args, f"--kubeconfig={node.kubeconfig}", f"--namespace={namespace}"],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def ok(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, f"exit {result.returncode}\n{result.stdout}\n{result.stderr}"
    return result.stdout


# -- the chart's services as installed -----------------------------------------------------------


def restarts(pod: Manifest) -> int:
    """The restarts of all the pod's containers."""
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    return sum(status.get("restartCount", 0) for status in statuses)


def image_tag(pod: Manifest) -> str:
    return str(pod["spec"]["containers"][0]["image"]).rsplit(":", 1)[1]


def lease_holder(node: Node) -> str | None:
    lease = node.get("lease", RECONCILER_LEASE, node.chart_namespace)
    holder = (lease or {}).get("spec", {}).get("holderIdentity")
    return str(holder) if holder else None


def secret_data(node: Node) -> dict[str, bytes]:
    secret = node.get("secret", WEBHOOK_SECRET, node.chart_namespace)
    assert secret is not None
    return {key: base64.b64decode(value) for key, value in secret["data"].items()}


def secret_cert(node: Node) -> bytes:
    return secret_data(node)["tls.crt"]


def container_id(pod: Manifest, container: str) -> str:
    """The runtime's id of a running container of `pod` (without the `containerd://` prefix)."""
    for status in pod.get("status", {}).get("containerStatuses") or []:
        if status["name"] == container and status.get("containerID"):
            return str(status["containerID"]).split("://", 1)[1]
    raise AssertionError(f"{pod['metadata']['name']} has no container {container} yet")


def running(pod: Manifest, container: str) -> bool:
    return any(
        status["name"] == container and "running" in (status.get("state") or {})
        for status in pod.get("status", {}).get("containerStatuses") or []
    )


def training_job(
    name: str,
    image: str,
    args: list[str],
    *,
    replicas: int = 1,
    replica_type: str = "worker",
    restart_policy: str = "ExitCode",
    backoff_limit: int = 3,
    limits: dict[str, str] | None = None,
) -> Manifest:
    """A PyTorchTrainingJob of one replica spec (`worker` unless told) running `python args`, no
    torchrun."""
    container: Manifest = {
        "name": "python",
        "image": image,
        "command": ["python"],
        "args": args,
        "resources": small_resources(limits or {"cpu": "500m", "memory": "256Mi"}),
    }
    return (
        JobBuilder(name)
        .replicas(replica_type, replicas, container=container, restartPolicy=restart_policy)
        .run_policy(backoffLimit=backoff_limit, activeDeadlineSeconds=3600)
        .build()
    )


def small_resources(limits: dict[str, str]) -> Manifest:
    """Small requests under `limits`, so that the tests' jobs fit beside the chart's services."""
    return {"requests": {"cpu": "100m", "memory": "64Mi"}, "limits": limits}


def host_path_claim(node: Node, namespace: str, claim: str, size: str = "1Gi") -> Path:
    """A PersistentVolumeClaim bound to a new hostPath PersistentVolume, writable by any user.
    The tests/node `node_namespace` fixture removes both after the test (`release_claims`)."""
    directory = HOST_VOLUMES / namespace / claim
    directory.mkdir(parents=True, exist_ok=True)
    directory.chmod(0o1777)
    volume = f"{namespace}-{claim}"
    node.kubectl(
        "apply",
        "-f",
        "-",
        input=textwrap.dedent(
            f"""\
            apiVersion: v1
            kind: PersistentVolume
            metadata: {{name: {volume}}}
            spec:
              capacity: {{storage: {size}}}
              accessModes: [ReadWriteMany]
              persistentVolumeReclaimPolicy: Retain
              storageClassName: ""
              hostPath: {{path: {directory}, type: Directory}}
              claimRef: {{namespace: {namespace}, name: {claim}}}
            ---
            apiVersion: v1
            kind: PersistentVolumeClaim
            metadata: {{name: {claim}, namespace: {namespace}}}
            spec:
              accessModes: [ReadWriteMany]
              storageClassName: ""
              volumeName: {volume}
              resources: {{requests: {{storage: {size}}}}}
            """
        ),
    )
    return directory


def pod_log(node: Node, namespace: str, pod: str) -> str:
    """The pod's training container's log; empty while it has none (not started yet, gone)."""
    return node.kubectl("logs", "-n", namespace, pod, "-c", "python", check=False).stdout


def all_logs(node: Node, namespace: str, job: str) -> str:
    """The logs of the job's pods as they are now, one after the other."""
    pods = node.job_pods(namespace, job)
    return "\n".join(pod_log(node, namespace, pod["metadata"]["name"]) for pod in pods)


def release_claims(node: Node, namespace: str) -> None:
    """Deletes the volumes `host_path_claim` made for `namespace` and their directories."""
    for volume in node.objects("persistentvolumes", None):
        if volume["metadata"]["name"].startswith(f"{namespace}-"):
            node.kubectl("delete", "persistentvolume", volume["metadata"]["name"], "--wait=false")
    shutil.rmtree(HOST_VOLUMES / namespace, ignore_errors=True)


def http_get_from_a_pod(node: Node, namespace: str, url: str) -> str:
    """The body of GET `url` as a pod in `namespace` sees it (cluster DNS, Service addresses)."""
    pod = "http-probe"
    script = (
        "import sys, urllib.request\n"
        f"print(urllib.request.urlopen({url!r}, timeout=30).read().decode())\n"
    )
    node.kubectl(
        "run",
        pod,
        "-n",
        namespace,
        f"--image={node.base_image}",
        "--restart=Never",
        "--image-pull-policy=IfNotPresent",
        "--command",
        "--",
        "python",
        "-c",
        script,
    )
    finished = node.wait_for_pod_phase(namespace, pod, ["Succeeded", "Failed"])
    output = node.logs(namespace, pod)
    assert finished["status"]["phase"] == "Succeeded", output
    node.kubectl("delete", "pod", pod, "-n", namespace, "--wait=false")
    return output
