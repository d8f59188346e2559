"""The services as pods of the chart, as `make node-up` installs it: admission through the
webhook's Service, the webhook renewing its own certificate while its pods stay Ready, the
reconciler's leader pod deleted mid-job, `helm upgrade` to a new image tag and `helm uninstall`."""

from __future__ import annotations

import base64
import datetime
import json
import ssl
import tempfile
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtensionOID
from support.node import (
    CHART,
    WEBHOOK_SECRET,
    Node,
    image_tag,
    lease_holder,
    restarts,
    run_node_script,
    running,
    secret_cert,
    secret_data,
    training_job,
    wait_until,
)

RELEASE = "torchjob"
WEBHOOK_PORT = 9443
SERVICES = ("webhook", "reconciler", "housekeeper")
SERVICE_LABEL = "app.kubernetes.io/component"
NAMESPACED_KINDS = (
    "deployments", "services", "secrets", "configmaps", "leases", "serviceaccounts", "roles",
    "rolebindings",
)  # fmt: skip
CLUSTER_KINDS = (
    "clusterroles", "clusterrolebindings", "mutatingwebhookconfigurations",
    "validatingwebhookconfigurations",
)  # fmt: skip
# Waits until /tmp/done exists, then exits 0: a replica the test ends when it wants to.
WAIT_FOR_DONE = ["-c", "import os, time\nwhile not os.path.exists('/tmp/done'): time.sleep(0.5)"]


def service_pods(node: Node, service: str) -> list[dict[str, Any]]:
    pods = node.objects("pods", node.chart_namespace, f"{SERVICE_LABEL}={service}")
    return [pod for pod in pods if not pod["metadata"].get("deletionTimestamp")]


def ready(pod: dict[str, Any]) -> bool:
    return any(
        c["type"] == "Ready" and c["status"] == "True"
        for c in pod.get("status", {}).get("conditions") or []
    )


def test_admission_goes_through_the_webhook_service(node: Node, node_namespace: str) -> None:
    # A rule the CRD's schema cannot check: the replica's pod and Service name must be a DNS
    # label. Only the webhook refuses this job.
    job = training_job("j" * 56, node.base_image, ["-c", "pass"])

    result = node.kubectl(
        "apply", "-n", node_namespace, "-f", "-", input=json.dumps(job), check=False
    )

    assert result.returncode != 0
    assert "spec.replicaSpecs[0].type: replica name" in result.stderr
    assert "must fit in 63" in result.stderr

    node.apply(node_namespace, training_job("admitted", node.base_image, WAIT_FOR_DONE))
    pod = node.wait_for_pod_phase(node_namespace, "admitted-worker-0", ["Running"])
    env = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}
    # Rewritten by the webhook at the pod's creation: the replica's environment, restarts ours.
    assert env["MASTER_ADDR"] == f"admitted-worker-0.{node_namespace}.svc"
    assert pod["spec"]["restartPolicy"] == "Never"


def test_the_webhook_renews_its_certificate_with_its_pods_ready(
    node: Node, node_namespace: str
) -> None:
    before = {pod["metadata"]["name"]: restarts(pod) for pod in service_pods(node, "webhook")}
    planted = plant_expiring_serving_certificate(node)

    wait_until(
        "the webhook replaced the expiring certificate", lambda: secret_cert(node) != planted
    )
    renewed = secret_cert(node)

    def serving_renewed() -> bool:
        pods = service_pods(node, "webhook")
        return all(ready(pod) and served_cert(pod) == renewed for pod in pods)

    wait_until("every webhook pod serving the renewed certificate", serving_renewed)
    after = {pod["metadata"]["name"]: restarts(pod) for pod in service_pods(node, "webhook")}
    assert after == before, "the webhook pods were not restarted"
    node.apply(node_namespace, training_job("after-renewal", node.base_image, ["-c", "pass"]))
    assert node.wait_for_phase(node_namespace, "after-renewal", ["Succeeded", "Failed"])


def test_the_reconciler_leader_deleted_mid_job_loses_nothing(
    node: Node, node_namespace: str
) -> None:
    node.apply(node_namespace, training_job("steady", node.base_image, WAIT_FOR_DONE, replicas=2))

    def both_running() -> list[dict[str, Any]] | None:
        pods = node.job_pods(node_namespace, "steady")
        return pods if len(pods) == 2 and all(running(p, "python") for p in pods) else None

    pods = wait_until("both replicas running", both_running)
    uids = {pod["metadata"]["name"]: pod["metadata"]["uid"] for pod in pods}
    leader = lease_holder(node)
    assert leader is not None

    node.kubectl("delete", "pod", leader, "-n", node.chart_namespace, "--wait=false")
    wait_until(
        "another reconciler leading",
        lambda: lease_holder(node) not in (None, leader),
    )
    for name in uids:
        node.kubectl("exec", "-n", node_namespace, name, "--", "python", "-c",
                     "open('/tmp/done', 'w').close()")  # fmt: skip

    job = node.wait_for_phase(node_namespace, "steady", ["Succeeded", "Failed"])
    assert job["status"]["phase"] == "Succeeded"
    assert job["status"].get("backoffCount", 0) == 0
    pods = node.job_pods(node_namespace, "steady")
    after = {pod["metadata"]["name"]: pod["metadata"]["uid"] for pod in pods}
    assert after == uids, "no replica was recreated or duplicated"


def test_helm_upgrade_to_a_new_image_tag(node: Node, node_namespace: str) -> None:
    current = f"{node.torchjob_repository}:{node.torchjob_tag}"
    new_tag = f"{node.torchjob_tag}-upgraded"
    node.ctr("images", "tag", "--force", current, f"{node.torchjob_repository}:{new_tag}")

    node.helm(
        "upgrade", RELEASE, str(CHART), "-n", node.chart_namespace, "--reuse-values",
        "--set", f"image.tag={new_tag}", "--wait", "--timeout", "10m",
    )  # fmt: skip

    def rolled() -> bool:
        pods = [pod for service in SERVICES for pod in service_pods(node, service)]
        return bool(pods) and all(image_tag(p) == new_tag and ready(p) for p in pods)

    wait_until(f"every service rolled to {new_tag}", rolled)
    node.apply(node_namespace, training_job("after-upgrade", node.base_image, ["-c", "pass"]))
    job = node.wait_for_phase(node_namespace, "after-upgrade", ["Succeeded", "Failed"])
    assert job["status"]["phase"] == "Succeeded"


@pytest.mark.uninstalls_chart
def test_helm_uninstall_leaves_nothing_of_ours(node: Node) -> None:
    try:
        node.helm("uninstall", RELEASE, "-n", node.chart_namespace, "--wait", "--timeout", "5m")

        wait_until(
            "the release's pods gone", lambda: not node.objects("pods", node.chart_namespace)
        )
        left = {
            kind: [o["metadata"]["name"] for o in node.objects(kind, node.chart_namespace)]
            for kind in NAMESPACED_KINDS
        }
        left["serviceaccounts"].remove("default")
        left["configmaps"].remove("kube-root-ca.crt")
        assert not any(left.values()), left
        cluster_wide = {
            kind: [o["metadata"]["name"] for o in node.objects(kind, None) if ours(o)]
            for kind in CLUSTER_KINDS
        }
        assert not any(cluster_wide.values()), cluster_wide
    finally:
        reinstall(node)


# -- helpers --------------------------------------------------------------------------------------


def ours(obj: dict[str, Any]) -> bool:
    labels = obj["metadata"].get("labels") or {}
    return labels.get("app.kubernetes.io/instance") == RELEASE or obj["metadata"][
        "name"
    ].startswith("torchjob")


def reinstall(node: Node) -> None:
    """Leaves the node as `make node-up` made it, for whatever runs after."""
    run_node_script("up", Path(tempfile.gettempdir()) / "torchjob-node.log")


def served_cert(pod: dict[str, Any]) -> bytes | None:
    """The certificate the pod presents on its HTTPS port, as PEM."""
    address = pod["status"].get("podIP")
    if not address:
        return None
    try:
        return ssl.get_server_certificate((address, WEBHOOK_PORT), timeout=5).encode()
    except OSError:
        return None


def plant_expiring_serving_certificate(node: Node) -> bytes:
    """Replaces the serving certificate in the webhook's Secret with one from the same CA and for
    the same names that expires in an hour: due for renewal at the webhook's next check."""
    data = secret_data(node)
    ca_cert = x509.load_pem_x509_certificate(data["ca.crt"])
    ca_key = serialization.load_pem_private_key(data["ca.key"], password=None)
    current = x509.load_pem_x509_certificate(data["tls.crt"])
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(current.subject)
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=30))
        .not_valid_after(now + datetime.timedelta(hours=1))
    )
    for extension in current.extensions:
        if extension.oid not in (
            ExtensionOID.SUBJECT_KEY_IDENTIFIER,
            ExtensionOID.AUTHORITY_KEY_IDENTIFIER,
        ):
            builder = builder.add_extension(extension.value, extension.critical)
    cert = builder.sign(ca_key, hashes.SHA256())  # type: ignore[arg-type]
    cert_pem = cert.public_bytes(serialization.Encoding.PEM)
    key_pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    patch = {
        "data": {
            "tls.crt": base64.b64encode(cert_pem).decode(),
            "tls.key": base64.b64encode(key_pem).decode(),
        }
    }
    node.kubectl(
        "patch", "secret", WEBHOOK_SECRET, "-n", node.chart_namespace, "--type=merge",
        "-p", json.dumps(patch),
    )  # fmt: skip
    return cert_pem
