"""Kubeflow's training-operator v1.9 (`make kubeflow-build`) as a process on the test control
plane, for the side-by-side bench (tests/bench/kubeflow.py): only the PyTorchJob framework, no
leader election, no gang scheduling, its client limits given, its validating webhook served.

v1.9 cannot turn its certificate controller off: it reads the Secret named by
--webhook-secret-name in its namespace (MY_POD_NAMESPACE), keeps a CA and serving certificate
there that are valid for `<--webhook-service-name>.<namespace>.svc` and 90 days more (or makes
new ones), writes them to a fixed directory it serves from, and patches the CA into its
ValidatingWebhookConfiguration; it waits for the Secret's files in that directory, which the
kubelet would mount. On loopback the apiserver calls the webhook by URL at
127.0.0.1, which the certificate it makes does not name; so the Secret is filled beforehand with
a CA and a certificate naming both, which it keeps."""

from __future__ import annotations

import base64
import datetime
import ipaddress
import json
import os
import subprocess
import tempfile
import time
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from support.controlplane import REPO_ROOT, ControlPlane, free_port
from support.eventually import eventually_sync
from support.kubeflow import pytorchjob
from support.operator import OPT_IN_LABEL
from support.processes import READY_TIMEOUT, STOP_GRACE

BUILD_SCRIPT = REPO_ROOT / "hack" / "build-kubeflow.sh"
NAMESPACE = "kubeflow"
SERVICE_NAME = "training-operator"
SECRET_NAME = "training-operator-webhook-cert"
# Names the binary reads or checks, fixed in v1.9's cmd/training-operator.v1 and pkg/cert.
WEBHOOK_CONFIGURATION = "validator.training-operator.kubeflow.org"
CA_NAME = "training-operator-ca"
WEBHOOK_NAME = "validator.pytorchjob.training-operator.kubeflow.org"
WEBHOOK_PATH = "/validate-kubeflow-org-v1-pytorchjob"
# Where its Deployment mounts the Secret; fixed in v1.9 (pkg/cert), and controller-runtime's
# webhook server reads the same directory under the temporary directory.
CERT_DIR = Path("/tmp/k8s-webhook-server/serving-certs")
# Past the certificate controller's 90 days of look-ahead, so it keeps what it is given.
VALIDITY = datetime.timedelta(days=365)
# What its PyTorchJob controller logs once its workers run (controller-runtime's message).
WORKERS_STARTED = ("Starting workers", "pytorchjob-controller")


def binary() -> Path:
    printed = subprocess.run(
        ["bash", str(BUILD_SCRIPT), "print-binary"], capture_output=True, text=True, check=True
    ).stdout.strip()
    path = Path(printed)
    if not path.is_file():
        raise SystemExit(f"{path} is missing: run `make kubeflow-build` first")
    return path


def _certificate(
    subject: str, issuer: x509.Name, public: rsa.RSAPublicKey
) -> x509.CertificateBuilder:
    now = datetime.datetime.now(datetime.UTC)
    return (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
        .issuer_name(issuer)
        .public_key(public)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + VALIDITY)
    )


def _pem(cert: x509.Certificate, key: rsa.RSAPrivateKey) -> tuple[bytes, bytes]:
    key_pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.TraditionalOpenSSL,  # PKCS #1, which it parses
        serialization.NoEncryption(),
    )
    return cert.public_bytes(serialization.Encoding.PEM), key_pem


def webhook_secret() -> dict[str, bytes]:
    """A CA (which the certificate controller verifies for the name CA_NAME) and a serving
    certificate for the Service's DNS name and 127.0.0.1, as the Secret's keys."""
    ca_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    ca_subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, CA_NAME)])
    ca = (
        _certificate(CA_NAME, ca_subject, ca_key.public_key())
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(CA_NAME)]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    names = [
        x509.DNSName(f"{SERVICE_NAME}.{NAMESPACE}.svc"),
        x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
    ]
    serving = (
        _certificate(f"{SERVICE_NAME}.{NAMESPACE}.svc", ca.subject, key.public_key())
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    ca_crt, ca_pem_key = _pem(ca, ca_key)
    tls_crt, tls_key = _pem(serving, key)
    return {"ca.crt": ca_crt, "ca.key": ca_pem_key, "tls.crt": tls_crt, "tls.key": tls_key}


def webhook_configuration(port: int, ca_bundle: bytes) -> dict[str, object]:
    """Kubeflow's ValidatingWebhookConfiguration with its PyTorchJob entry only, called by URL on
    loopback, in the namespaces the bench opts in (as torchjob's webhook is registered)."""
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": WEBHOOK_CONFIGURATION},
        "webhooks": [
            {
                "name": WEBHOOK_NAME,
                "admissionReviewVersions": ["v1"],
                "clientConfig": {
                    "url": f"https://127.0.0.1:{port}{WEBHOOK_PATH}",
                    "caBundle": base64.b64encode(ca_bundle).decode(),
                },
                "failurePolicy": "Fail",
                "sideEffects": "None",
                "namespaceSelector": {"matchLabels": {OPT_IN_LABEL: "on"}},
                "rules": [
                    {
                        "apiGroups": ["kubeflow.org"],
                        "apiVersions": ["v1"],
                        "operations": ["CREATE", "UPDATE"],
                        "resources": ["pytorchjobs"],
                    }
                ],
            }
        ],
    }


class KubeflowOperator:
    """The training-operator process; `process` is its Popen once started."""

    def __init__(self, plane: ControlPlane, qps: float, burst: int, threads: int) -> None:
        self.plane = plane
        self.webhook_port, self.probe_port, metrics_port = free_port(), free_port(), free_port()
        self.argv = [
            str(binary()),
            *("--kubeconfig", str(plane.kubeconfig), "--enable-scheme=pytorchjob"),
            *("--kube-api-qps", str(round(qps)), "--kube-api-burst", str(burst)),
            "--leader-elect=false",
            "--gang-scheduler-name=",
            f"--controller-threads={threads}",
            f"--webhook-server-port={self.webhook_port}",
            f"--health-probe-bind-address=127.0.0.1:{self.probe_port}",
            f"--metrics-bind-address=127.0.0.1:{metrics_port}",
            # Production logging (JSON at info), as torchjob's services log at INFO here.
            "--zap-devel=false",
        ]
        handle, name = tempfile.mkstemp(prefix="training-operator-", suffix=".log")
        os.close(handle)
        self.log_path = Path(name)
        self.process: subprocess.Popen[bytes] | None = None

    def install(self) -> None:
        """Its namespace, the Secret of certificates and its webhook configuration."""
        secret = webhook_secret()
        self.plane.kubectl("create", "namespace", NAMESPACE, check=False)
        manifest = {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": SECRET_NAME, "namespace": NAMESPACE},
            "data": {k: base64.b64encode(v).decode() for k, v in secret.items()},
        }
        self.plane.kubectl("apply", "-f", "-", input=json.dumps(manifest))
        CERT_DIR.mkdir(parents=True, exist_ok=True)  # as the kubelet mounts the Secret
        for key, value in secret.items():
            (CERT_DIR / key).write_bytes(value)
        configuration = webhook_configuration(self.webhook_port, secret["ca.crt"])
        self.plane.kubectl("apply", "-f", "-", input=json.dumps(configuration))

    def start(self) -> KubeflowOperator:
        self.install()
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                self.argv,
                stdout=log,
                stderr=subprocess.STDOUT,
                env={"MY_POD_NAMESPACE": NAMESPACE, "HOME": "/tmp"},
                start_new_session=True,
            )
        self.wait_working()
        return self

    def wait_working(self, timeout: float = READY_TIMEOUT) -> None:
        """Until its PyTorchJob controller's workers run (after its certificates are ready)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process is None or self.process.poll() is not None:
                raise RuntimeError(f"training-operator exited:\n{self.log_tail()}")
            lines = self.log_path.read_text(errors="replace").splitlines()
            if any(all(part in line for part in WORKERS_STARTED) for line in lines):
                return
            time.sleep(0.2)
        raise RuntimeError(f"training-operator not working after {timeout}s:\n{self.log_tail()}")

    def log_tail(self, lines: int = 40) -> str:
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    def close(self) -> None:
        """Stopped, and its webhook configuration removed (nothing answers it any more)."""
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(STOP_GRACE)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None
        self.plane.kubectl(
            "delete", "validatingwebhookconfiguration", WEBHOOK_CONFIGURATION, check=False
        )
        self.log_path.unlink(missing_ok=True)


def opted_in_namespace(plane: ControlPlane, name: str) -> str:
    """A namespace whose PyTorchJobs go through Kubeflow's webhook, once it answers: a job whose
    name is no DNS-1035 label (which the apiserver itself accepts) is refused by it."""
    plane.kubectl("create", "namespace", name)
    plane.kubectl("label", "namespace", name, f"{OPT_IN_LABEL}=on")
    probe = json.dumps(pytorchjob("0-admission-probe"))
    answer = ""

    def refused_by_webhook() -> bool:
        nonlocal answer
        answer = plane.kubectl(
            "create", "--dry-run=server", "-n", name, "-f", "-", input=probe, check=False
        ).stderr
        return WEBHOOK_NAME in answer

    eventually_sync(
        refused_by_webhook,
        "Kubeflow's webhook to answer",
        timeout=60,
        interval=0.3,
        explain=lambda: answer,
    )
    return name
