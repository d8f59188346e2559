"""The admission webhook, registered with the real apiserver through real webhook configurations
(URL client config + the caBundle the webhook patches in itself) and running as a process."""

from __future__ import annotations

import asyncio
import contextlib
import copy
import json
import socket
import ssl
import urllib.request
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from kubernetes_asyncio import client
from support import ControlPlane
from support.abuse import Abuse, expensive_review
from support.eventually import eventually
from support.jobs import job_manifest
from support.operator import SYSTEM_NAMESPACE, user, webhook_port, webhook_secret
from support.processes import ServiceProcess

from torchjob.api import constants
from torchjob.render.in_place import AGENT, add_in_place, restarts_in_place
from torchjob.render.wait import WAIT_SCRIPT
from torchjob.webhook.certificates.pki import bundle_from_secret_data, renew, secret_data

DATA = Path(__file__).parents[1] / "data" / "t9k"


def test_defaults_are_stored_and_a_reapply_changes_nothing(
    control_plane: ControlPlane, admitted_namespace: str
) -> None:
    manifest = job_manifest("basic")
    text = json.dumps(manifest)
    control_plane.kubectl("apply", "-n", admitted_namespace, "-f", "-", input=text)
    stored = json.loads(
        control_plane.kubectl(
            "get", "ptj", "pytorch-example", "-n", admitted_namespace, "-o", "json"
        ).stdout
    )
    assert stored["spec"]["runPolicy"] == {"backoffLimit": 3, "cleanUpPolicy": "None"}
    assert stored["spec"]["replicaSpecs"][0]["restartPolicy"] == "OnFailure"
    assert stored["spec"]["replicaSpecs"][0]["replicas"] == 4
    diff = control_plane.kubectl(
        "diff", "-n", admitted_namespace, "-f", "-", input=text, check=False
    )
    assert diff.returncode == 0, f"a GitOps diff would show changes:\n{diff.stdout}"
    again = control_plane.kubectl("apply", "-n", admitted_namespace, "-f", "-", input=text)
    assert "unchanged" in again.stdout


def test_invalid_job_prints_every_violated_field(
    control_plane: ControlPlane, admitted_namespace: str
) -> None:
    manifest = job_manifest("torchrun", name="j" * 55)
    container = manifest["spec"]["replicaSpecs"][0]["template"]["spec"]["containers"][0]
    container["command"] = ["python", "dist_mnist.py"]
    del container["args"]
    manifest["spec"]["tensorboardSpec"] = {
        "image": "tb",
        "trainingLogFilesets": ["s3://bucket/logs"],
    }
    result = control_plane.kubectl(
        "apply", "-n", admitted_namespace, "-f", "-", input=json.dumps(manifest), check=False
    )
    assert result.returncode != 0
    for field in (
        "spec.replicaSpecs[0].type",
        "spec.replicaSpecs[0].template.spec.containers[0].args",
        "spec.tensorboardSpec.trainingLogFilesets[0]",
    ):
        assert field in result.stderr, result.stderr
    assert "'s3' is not supported" in result.stderr


def test_forbidden_update_is_refused(control_plane: ControlPlane, admitted_namespace: str) -> None:
    manifest = job_manifest("basic")
    control_plane.kubectl("apply", "-n", admitted_namespace, "-f", "-", input=json.dumps(manifest))
    manifest["spec"]["replicaSpecs"][0]["replicas"] = 2
    result = control_plane.kubectl(
        "apply", "-n", admitted_namespace, "-f", "-", input=json.dumps(manifest), check=False
    )
    assert result.returncode != 0
    assert "spec.replicaSpecs: is immutable" in result.stderr


def test_soft_problems_come_back_as_warnings(
    control_plane: ControlPlane, admitted_namespace: str
) -> None:
    manifest = job_manifest("torchrun")
    manifest["spec"]["torchrunConfig"]["rdzvBackend"] = "etcd"
    container = manifest["spec"]["replicaSpecs"][0]["template"]["spec"]["containers"][0]
    container["env"] = [{"name": "WORLD_SIZE", "value": "8"}]
    result = control_plane.kubectl(
        "apply", "-n", admitted_namespace, "-f", "-", input=json.dumps(manifest)
    )
    assert "Warning:" in result.stderr
    assert "WORLD_SIZE is set by you" in result.stderr
    assert "--rdzv-endpoint" in result.stderr


def replica_pod(job: dict[str, Any], index: int) -> dict[str, Any]:
    name = job["metadata"]["name"]
    owner = {
        "apiVersion": "batch.tensorstack.dev/v1beta1",
        "kind": "PyTorchTrainingJob",
        "name": name,
        "uid": job["metadata"]["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }
    labels = {
        constants.LABEL_JOB_NAME: name,
        constants.LABEL_REPLICA_TYPE: "worker",
        constants.LABEL_REPLICA_INDEX: str(index),
    }
    template = copy.deepcopy(job["spec"]["replicaSpecs"][0]["template"])
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"{name}-worker-{index}",
            "labels": labels,
            "ownerReferences": [owner],
        },
        "spec": template["spec"],
    }


def test_reconciler_pod_is_rewritten_and_tenant_pod_refused(
    control_plane: ControlPlane, admitted_namespace: str
) -> None:
    ns = admitted_namespace
    reconciler = user("reconciler")
    control_plane.kubectl("apply", "-n", ns, "-f", "-", input=json.dumps(job_manifest("torchrun")))
    job = json.loads(
        control_plane.kubectl("get", "ptj", "pytorch-torchrun", "-n", ns, "-o", "json").stdout
    )
    pod = json.dumps(replica_pod(job, 2))
    # Both may create pods as far as RBAC goes; only the webhook tells them apart.
    control_plane.kubectl(
        "create", "rolebinding", "tenant-edit", "--clusterrole=edit", "--user=alice", "-n", ns
    )
    control_plane.kubectl(
        "create",
        "rolebinding",
        "reconciler-edit",
        "--clusterrole=edit",
        f"--user={reconciler}",
        "-n",
        ns,
    )
    tenant = control_plane.kubectl(
        "create", "-n", ns, "-f", "-", input=pod, as_user="alice", check=False
    )
    assert tenant.returncode != 0
    assert "created by torchjob only" in tenant.stderr
    control_plane.kubectl("create", "-n", ns, "-f", "-", input=pod, as_user=reconciler)
    stored = json.loads(
        control_plane.kubectl(
            "get", "pod", "pytorch-torchrun-worker-2", "-n", ns, "-o", "json"
        ).stdout
    )
    container = stored["spec"]["containers"][0]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert stored["spec"]["restartPolicy"] == "Never"
    assert env["RANK"] == "2"
    assert env["WORLD_SIZE"] == "4"
    assert env["MASTER_ADDR"] == f"pytorch-torchrun-worker-0.{ns}.svc"
    assert env["PET_RDZV_ID"] == job["metadata"]["uid"]
    assert container["command"][0] == "torchrun"
    assert "--nnodes=1:4" in container["command"]
    assert container["args"] == ["dist_mnist.py"]
    # The first init container waits until the master's name resolves, with the trainer's image.
    [wait] = stored["spec"]["initContainers"]
    assert wait["name"] == "wait-for-master"
    assert wait["image"] == container["image"]
    assert wait["command"] == ["python", "-c", WAIT_SCRIPT]
    assert wait["env"] == [{"name": "MASTER_ADDR", "value": env["MASTER_ADDR"]}]


def test_the_apiserver_keeps_what_restarting_in_place_needs(
    control_plane: ControlPlane, namespace: str
) -> None:
    """Kubernetes 1.37 serves container restart rules and RestartAllContainers: a pod given the
    restart agent and the training container's rule (render/in_place.py) is stored with them,
    so the reconciler restarts it in place (elsewhere the apiserver drops them, and it is
    recreated)."""
    training = {"name": "python", "image": "img", "command": ["python", "t.py"]}
    pod_spec: dict[str, Any] = {"containers": [training], "restartPolicy": "Never"}
    add_in_place(pod_spec, [training], "OnFailure", "python")
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": pod_spec}
    created = control_plane.kubectl(
        "create",
        "--dry-run=server",
        "-n",
        namespace,
        "-o",
        "json",
        "-f",
        "-",
        input=json.dumps(pod),
    )
    stored = json.loads(created.stdout)["spec"]
    assert restarts_in_place(stored)
    assert [c["name"] for c in stored["initContainers"]] == [AGENT]
    assert stored["containers"][0]["restartPolicyRules"][0]["action"] == "Restart"


def served_certificate(port: int) -> bytes:
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    with socket.create_connection(("127.0.0.1", port)) as raw, context.wrap_socket(raw) as tls:
        der = tls.getpeercert(binary_form=True)
    assert der is not None
    return der


async def test_certificate_rotation_loses_no_admission(
    control_plane: ControlPlane,
    admitted_namespace: str,
    kube_client: client.ApiClient,
    webhook_server: ServiceProcess,
) -> None:
    port = webhook_port(webhook_server)
    before = served_certificate(port)
    core = client.CoreV1Api(kube_client)
    secret = await core.read_namespaced_secret(webhook_secret(), SYSTEM_NAMESPACE)
    bundle = bundle_from_secret_data(secret.data)
    assert bundle is not None
    later = datetime.now(UTC) + timedelta(days=300)
    renewed = renew(bundle, ["torchjob-webhook", "localhost"], ["127.0.0.1"], later)
    assert renewed is not None

    objects = client.CustomObjectsApi(kube_client)
    body = job_manifest("basic", "rotation")
    outcomes: list[bool] = []

    async def admit_stream(stop: asyncio.Event) -> None:
        while not stop.is_set():
            try:
                await objects.create_namespaced_custom_object(
                    "batch.tensorstack.dev",
                    "v1beta1",
                    admitted_namespace,
                    "pytorchtrainingjobs",
                    body,
                    dry_run="All",
                )
                outcomes.append(True)
            except client.ApiException:
                outcomes.append(False)

    stop = asyncio.Event()
    streams = [asyncio.create_task(admit_stream(stop)) for _ in range(4)]
    await asyncio.sleep(1.0)
    secret.data = secret_data(renewed)
    await core.replace_namespaced_secret(webhook_secret(), SYSTEM_NAMESPACE, secret)
    with contextlib.suppress(AssertionError):  # asserted below, once the streams have stopped
        await eventually(lambda: served_certificate(port) != before, interval=0.2)
    await asyncio.sleep(1.0)
    stop.set()
    await asyncio.gather(*streams)
    assert served_certificate(port) != before, "the rotated certificate was never served"
    assert outcomes.count(False) == 0, (
        f"{outcomes.count(False)} of {len(outcomes)} admissions failed"
    )
    assert len(outcomes) > 20


def test_metrics_count_admissions(webhook_server: ServiceProcess, admitted_namespace: str) -> None:
    metrics = webhook_server.metrics()
    assert (
        'torchjob_admission_requests_total{endpoint="validate-jobs",outcome="allowed"}' in metrics
    )


async def test_admission_and_probes_answer_while_the_port_is_abused(
    control_plane: ControlPlane, admitted_namespace: str, webhook_server: ServiceProcess
) -> None:
    """20 senders of 2 MB reviews back to back and 20 half-sent 2 MB bodies straight at the
    admission port (the scenario of the issue): a job still goes through the apiserver and both
    of the webhook's admissions, and /healthz still answers. What is asserted is that they
    answer; how fast is the benchmark's (tests/bench/webhook_abuse.py)."""
    port = webhook_port(webhook_server)
    manifest = json.dumps(job_manifest("basic", "under-abuse"))
    async with Abuse(port, expensive_review(2 * 1024 * 1024)) as abuse:
        await eventually(lambda: abuse.answered >= 40, "the abuse is under way", timeout=60)
        created = await asyncio.to_thread(
            control_plane.kubectl,
            *("create", "--dry-run=server", "-n", admitted_namespace, "-f", "-"),
            input=manifest,
            check=False,
        )
        healthz = await asyncio.to_thread(probe, webhook_server.probe_port, "/healthz")
        outcomes = dict(abuse.outcomes)
    assert created.returncode == 0, created.stderr
    assert healthz == 200
    # The abuse was answered: reviewed, refused for now (429), cut off (408) or out of time
    # (504, before its uid was read); never a failure of the webhook (500).
    assert {"200", "429", "408"} & set(outcomes), outcomes
    assert set(outcomes) <= {"200", "429", "408", "504", "closed", "error"}, outcomes
    assert "torchjob_admission_requests_total" in webhook_server.metrics()


def probe(port: int, path: str) -> int:
    """GET a probe with a generous timeout: the assertion is that it answers."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=30) as response:
        return int(response.status)
