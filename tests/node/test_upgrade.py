"""`helm upgrade` with jobs running, on the real node: the chart and image of an earlier commit
installed, two jobs started under them (a PyTorchTrainingJob reporting progress and a Kubeflow
PyTorchJob, each a master and a worker doing gloo steps until the test lets them stop), then the
chart and image of this tree, then the earlier ones again. After each upgrade, both jobs still
running: no pod of theirs recreated or restarted, nothing charged, the progress kept, the
reconciler's lease taken by a pod of the new release, the webhook's certificate unchanged in its
Secret and the webhook admitting. Both jobs then succeed on the pods they started on, and this
tree's chart is installed again.

The earlier commit is EARLIER unless TORCHJOB_UPGRADE_FROM names another (`make upgrade-test
FROM=<rev>`); its image is built from its own tree (hack/node-images.sh torchjob-of), its chart
installed with its own node values (hack/node.sh chart). As `helm upgrade` does, the CRDs are
those installed: this tree's, applied before its chart; going back leaves them."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from support.controlplane import REPO_ROOT
from support.jobs import JobBuilder
from support.node import (
    Node,
    host_path_claim,
    image_tag,
    lease_holder,
    restarts,
    run_node_script,
    secret_cert,
    wait_until,
)

# The chart and services as released before the job kinds shared one seam, per-job Services,
# the scale tier and Kueue (2026-11-28).
EARLIER = "cebf998"
EARLIER_VARIABLE = "TORCHJOB_UPGRADE_FROM"
IMAGES_SCRIPT = REPO_ROOT / "hack" / "node-images.sh"
STEPS_UNTIL_STOPPED = (Path(__file__).parent / "scripts" / "steps_until_stopped.py").read_text()
TORCHJOB_JOB, KUBEFLOW_JOB = "steps", "kubeflow-steps"
# A claim both jobs mount: the test writes STOP_FILE into it when the jobs may end.
CLAIM, SHARED = "shared", "/shared"
STOP_FILE = f"{SHARED}/stop"
Manifest = dict[str, Any]


@dataclass(frozen=True)
class Release:
    """What hack/node.sh installs: a source tree's chart with its node values, and an image."""

    tree: Path
    tag: str


def earlier_commit() -> str:
    rev = os.environ.get(EARLIER_VARIABLE) or EARLIER
    found = subprocess.run(
        ["git", "-C", str(REPO_ROOT), "rev-parse", "--verify", f"{rev}^{{commit}}"],
        capture_output=True,
        text=True,
    )
    assert found.returncode == 0, f"no commit {rev} in this clone's history: {found.stderr}"
    return found.stdout.strip()


@pytest.fixture(scope="module")
def earlier(tmp_path_factory: pytest.TempPathFactory) -> Release:
    """The earlier commit's tree (git archive), its image built and imported into the node."""
    tree = tmp_path_factory.mktemp("earlier")
    archive = subprocess.run(
        ["git", "-C", str(REPO_ROOT), "archive", "--format=tar", earlier_commit()],
        capture_output=True,
        check=True,
    )
    subprocess.run(["tar", "-x", "-C", str(tree)], input=archive.stdout, check=True)
    built = subprocess.run(
        ["bash", str(IMAGES_SCRIPT), "torchjob-of", str(tree)],
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert built.returncode == 0, built.stderr[-3000:]
    return Release(tree, built.stdout.split()[-1])


@pytest.fixture(scope="module")
def current(node: Node) -> Release:
    return Release(REPO_ROOT, node.torchjob_tag)


def install(release: Release) -> None:
    """hack/node.sh's install of `release` (this tree's CRD first when it is this tree's)."""
    log = Path(tempfile.gettempdir()) / "torchjob-node.log"
    run_node_script("chart", log, str(release.tree), release.tag)


@pytest.fixture
def installed_earlier(earlier: Release, current: Release) -> Iterator[None]:
    """The earlier release installed for the test; this tree's put back after it, whatever
    happened."""
    try:
        install(earlier)
        yield
    finally:
        install(current)


def replica_container(name: str, image: str) -> Manifest:
    """STEPS_UNTIL_STOPPED in the example image, the claim CLAIM mounted at SHARED."""
    return {
        "name": name,
        "image": image,
        "command": ["python", "-c", STEPS_UNTIL_STOPPED, STOP_FILE],
        "resources": {"requests": {"cpu": "100m", "memory": "256Mi"}},
        "volumeMounts": [{"name": "shared", "mountPath": SHARED}],
    }


SHARED_VOLUME = {"name": "shared", "persistentVolumeClaim": {"claimName": CLAIM}}


def torchjob_job(image: str) -> Manifest:
    """A PyTorchTrainingJob of a master and a worker running until told to stop."""
    container = replica_container("python", image)
    return (
        JobBuilder(TORCHJOB_JOB)
        .replicas("master", 1, container=container, restartPolicy="OnFailure")
        .replicas("worker", 1, container=container, restartPolicy="OnFailure")
        .pod_spec(volumes=[SHARED_VOLUME])
        .build()
    )


def kubeflow_job(image: str) -> Manifest:
    """A Kubeflow PyTorchJob of a Master and a Worker running until told to stop."""
    replica = {
        "replicas": 1,
        "restartPolicy": "OnFailure",
        "template": {
            "spec": {
                "containers": [replica_container("pytorch", image)],
                "volumes": [SHARED_VOLUME],
            }
        },
    }
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": KUBEFLOW_JOB},
        "spec": {"pytorchReplicaSpecs": {"Master": replica, "Worker": copy.deepcopy(replica)}},
    }


@dataclass(frozen=True)
class Snapshot:
    """The jobs' pods (name: uid and restarts of all containers), what each job charged, and
    the PyTorchTrainingJob's last reported progress."""

    pods: dict[str, tuple[str, int]]
    charged: dict[str, tuple[int, int]]  # job: (backoffCount, gangRestarts)
    progress: int

    @classmethod
    def take(cls, node: Node, namespace: str) -> Snapshot:
        pods = {
            pod["metadata"]["name"]: (pod["metadata"]["uid"], restarts(pod))
            for pod in node.objects("pods", namespace)
        }
        ours = node.job(namespace, TORCHJOB_JOB).get("status") or {}
        kubeflow = node.get("pytorchjobs.kubeflow.org", KUBEFLOW_JOB, namespace) or {}
        theirs = (kubeflow.get("status") or {}).get("torchjob") or {}
        charged = {
            name: (status.get("backoffCount", 0), status.get("gangRestarts", 0))
            for name, status in ((TORCHJOB_JOB, ours), (KUBEFLOW_JOB, theirs))
        }
        progress = (ours.get("trainerStatus") or {}).get("progressPercentage", 0)
        return cls(pods, charged, progress)


def both_running(node: Node, namespace: str) -> Snapshot | None:
    """The snapshot once all four pods run and the PyTorchTrainingJob reported progress."""
    snapshot = Snapshot.take(node, namespace)
    pods = node.objects("pods", namespace)
    running = [p for p in pods if (p.get("status") or {}).get("phase") == "Running"]
    return snapshot if len(running) == 4 and snapshot.progress > 0 else None


def assert_handed_over(node: Node, release: Release, leader: str, certificate: bytes) -> None:
    """The reconciler's lease taken from `leader` by a pod running `release`'s image; the
    webhook's Secret still holding `certificate`, and the webhook admitting (a dry-run create)."""

    def new_leader() -> str | None:
        holder = lease_holder(node)
        if holder in (None, leader):
            return None
        pod = node.get("pod", str(holder), node.chart_namespace)
        return holder if pod is not None and image_tag(pod) == release.tag else None

    wait_until("the lease taken by a reconciler of the new release", new_leader)
    assert secret_cert(node) == certificate
    probe = JobBuilder("admission-probe").replicas("worker", 1).build()
    node.kubectl("create", "--dry-run=server", "-n", "default", "-f", "-", input=json.dumps(probe))


def assert_nothing_restarted(before: Snapshot, after: Snapshot) -> None:
    assert after.pods == before.pods, "a pod was recreated or restarted"
    assert after.charged == before.charged
    assert after.progress >= before.progress > 0


def succeeded(job: Manifest | None) -> Manifest | None:
    conditions = ((job or {}).get("status") or {}).get("conditions") or []
    done = any(c["type"] == "Succeeded" and c["status"] == "True" for c in conditions)
    return job if done else None


def pod_uids(node: Node, namespace: str) -> dict[str, str]:
    return {p["metadata"]["name"]: p["metadata"]["uid"] for p in node.objects("pods", namespace)}


# The namespace comes last: its jobs are deleted before this tree's chart is installed again.
def test_helm_upgrade_and_back_restarts_no_running_job(
    node: Node, current: Release, earlier: Release, installed_earlier: None, node_namespace: str
) -> None:
    stop = host_path_claim(node, node_namespace, CLAIM) / Path(STOP_FILE).name
    image = node.example_image
    node.apply(node_namespace, torchjob_job(image), kubeflow_job(image))
    before = wait_until("both jobs running", lambda: both_running(node, node_namespace))
    first_pods = pod_uids(node, node_namespace)
    certificate = secret_cert(node)

    for release in (current, earlier):
        leader = lease_holder(node)
        assert leader is not None
        install(release)
        assert_handed_over(node, release, leader, certificate)
        after = Snapshot.take(node, node_namespace)
        assert_nothing_restarted(before, after)
        before = after

    stop.touch()
    ours = node.wait_for_phase(node_namespace, TORCHJOB_JOB, ["Succeeded", "Failed"])
    assert ours["status"]["phase"] == "Succeeded"
    wait_until(
        "the PyTorchJob succeeded",
        lambda: succeeded(node.get("pytorchjobs.kubeflow.org", KUBEFLOW_JOB, node_namespace)),
    )
    # The same pods from the first to the last: none recreated by either release's reconciler.
    assert pod_uids(node, node_namespace) == first_pods
    assert Snapshot.take(node, node_namespace).charged == {
        TORCHJOB_JOB: (0, 0),
        KUBEFLOW_JOB: (0, 0),
    }
