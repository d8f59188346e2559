"""The scale tier: the real control plane (tests/support/controlplane.py) serving Kubernetes'
own PodGroups, the real kube-scheduler with native gang scheduling on, and kwok playing the
kubelet of N fake GPU nodes. kwok takes every pod bound to a fake node to Running (its default
Stages, built beside it by hack/build-kwok.sh) and a pod annotated EXIT_CODE_ANNOTATION to
Succeeded or Failed (scale_stages.yaml). The reaper, a process of the tier, ends and removes a
deleted pod at once, as a kubelet that stops its containers at once would (`reap`).

`make scale-up` / `make scale-down` run this module's `up` and `down` (docs/scale.md): the tier
runs in a process of its own in the background until `down` stops it."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

from kubernetes_asyncio import client, config

from torchjob.kube.informer import Informer
from torchjob.kube.resources import PODS
from torchjob.runtime import logging as runtime_logging

from .controlplane import REPO_ROOT, ControlPlane, ControlPlaneError, write_to_stderr
from .eventually import eventually, eventually_sync
from .informers import client_like
from .operator import install_crds
from .scheduling import GENERIC_WORKLOAD_GATE, GPU, POD_GROUP_API_ARGS, POD_GROUP_CONTROLLERS

KWOK_BUILD_SCRIPT = REPO_ROOT / "hack" / "build-kwok.sh"
OUR_STAGES = Path(__file__).with_name("scale_stages.yaml")
# kwok's own Stages the tier plays. Not its pod-delete: kwok deletes by name, and a deletion
# it still has queued for a pod already gone removes the replacement of the same name that a
# gang restart creates next. The reaper below deletes as a kubelet does, by uid.
KWOK_STAGES = ("node-initialize.yaml", "pod-ready.yaml")
# kwok plays only the nodes annotated so, as it would beside real ones.
FAKE_NODE_ANNOTATION = ("kwok.x-k8s.io/node", "fake")
EXIT_CODE_ANNOTATION = "torchjob.test/exit-code"  # read by scale_stages.yaml
# Topology labels: Kubernetes' own zone and hostname, and the block and rack labels of Kueue's
# topology-aware scheduling examples.
ZONE_LABEL = "topology.kubernetes.io/zone"
BLOCK_LABEL = "cloud.provider.com/topology-block"
RACK_LABEL = "cloud.provider.com/topology-rack"
HOSTNAME_LABEL = "kubernetes.io/hostname"
# Pods that name no scheduler are placed by this one.
SCHEDULER = "default-scheduler"
# kube-scheduler's and kube-controller-manager's client limits as kwok's own clusters set them:
# a real cluster of thousands of nodes does not bind pods at the default 50 a second.
COMPONENT_LIMITS = (5000.0, 10000)
# kube-scheduler scores a pod on this share of the nodes (at least 100 of them, its own floor),
# as large clusters set it: by default it scores 42% of 1,000 nodes, about 100 ms a pod on two
# cores, and a gang of 10,000 then outlasts its GangScheduling permit's 5 minutes.
NODES_TO_SCORE_PERCENT = 5
# Pod addresses kwok hands out: room for far more pods than the largest tier runs.
POD_CIDR = "10.64.0.0/10"
NODE_CREATE_CONCURRENCY = 16
NODES_READY_TIMEOUT = 600.0
TESTS_DIR = Path(__file__).resolve().parents[1]
STATE_DIR = Path(os.environ.get("TORCHJOB_CACHE") or Path.home() / ".cache" / "torchjob") / "scale"


@dataclass(frozen=True)
class NodeShape:
    """What each fake node offers: an 8-GPU training node."""

    cpu: str = "192"
    memory: str = "2Ti"
    gpus: int = 8
    pods: int = 110

    def capacity(self) -> dict[str, str]:
        return {"cpu": self.cpu, "memory": self.memory, "pods": str(self.pods), GPU: str(self.gpus)}


@dataclass(frozen=True)
class Topology:
    """How nodes are grouped: racks of nodes, blocks of racks, zones of blocks."""

    nodes_per_rack: int = 16
    racks_per_block: int = 8
    blocks_per_zone: int = 4

    def labels(self, index: int, name: str) -> dict[str, str]:
        rack = index // self.nodes_per_rack
        block = rack // self.racks_per_block
        zone = block // self.blocks_per_zone
        return {
            ZONE_LABEL: f"zone-{zone}",
            BLOCK_LABEL: f"block-{block}",
            RACK_LABEL: f"rack-{rack}",
            HOSTNAME_LABEL: name,
        }


def fake_node(index: int, shape: NodeShape = NodeShape(), topology: Topology = Topology()) -> Any:
    """Node `index` as the tier creates it: kwok's annotation, topology labels, and its capacity
    in its status (a Node may be created with one); kwok makes it Ready."""
    name = f"gpu-node-{index:05d}"
    key, value = FAKE_NODE_ANNOTATION
    capacity = shape.capacity()
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": {key: value},
            "labels": {"type": "kwok", **topology.labels(index, name)},
        },
        "status": {"capacity": capacity, "allocatable": capacity},
    }


def kwok_dir() -> Path:
    """Where hack/build-kwok.sh (the one source of kwok's version) caches kwok."""
    output = subprocess.run(
        ["bash", str(KWOK_BUILD_SCRIPT), "print-dir"], capture_output=True, text=True, check=True
    ).stdout
    directory = Path(output.strip())
    if not (directory / ".built").exists():
        raise ControlPlaneError(f"kwok not found in {directory}: run `make scale-build`")
    return directory


def kwok_argv(directory: Path, kubeconfig: Path) -> list[str]:
    key, value = FAKE_NODE_ANNOTATION
    stages = [*(directory / "stages" / name for name in KWOK_STAGES), OUR_STAGES]
    return [
        str(directory / "kwok"),
        f"--kubeconfig={kubeconfig}",
        "--manage-all-nodes=false",
        f"--manage-nodes-with-annotation-selector={key}={value}",
        # No Leases: no node lifecycle controller runs to read them, and nodes stay Ready.
        "--node-lease-duration-seconds=0",
        f"--cidr={POD_CIDR}",
        "--v=WARN",  # not a line for every pod it patches
        *(f"--config={stage}" for stage in stages),
    ]


class ScaleTier:
    """A control plane with the scheduler, kwok and `nodes` fake nodes; stopped by stop()."""

    def __init__(self, nodes: int = 1000, shape: NodeShape = NodeShape()) -> None:
        self.nodes = nodes
        self.shape = shape
        self.kwok_dir = kwok_dir()
        component_limits = (
            f"--kube-api-qps={COMPONENT_LIMITS[0]:g}",
            f"--kube-api-burst={COMPONENT_LIMITS[1]}",
        )
        self.plane = ControlPlane(
            controllers=POD_GROUP_CONTROLLERS,
            # Nodes stay schedulable without a node lifecycle controller to lift the taint.
            extra_apiserver_args=(
                *POD_GROUP_API_ARGS,
                "--disable-admission-plugins=TaintNodesByCondition",
            ),
            extra_controller_manager_args=(GENERIC_WORKLOAD_GATE, *component_limits),
        )
        self._processes: dict[str, subprocess.Popen[bytes]] = {}  # kwok and the reaper
        self.kwok_log = self.plane.dir / "kwok.log"

    def start(self) -> ScaleTier:
        started = time.monotonic()
        try:
            self.plane.start()
            install_crds(self.plane)
            self.plane.start_scheduler(
                SCHEDULER,
                GENERIC_WORKLOAD_GATE,
                client_limits=COMPONENT_LIMITS,
                nodes_to_score=NODES_TO_SCORE_PERCENT,
            )
            self._start_kwok()
            asyncio.run(self._add_nodes())
        except BaseException:
            self.stop()
            raise
        write_to_stderr(
            f"scale tier ready in {time.monotonic() - started:.1f}s: kube-scheduler, kwok and "
            f"{self.nodes} Ready fake nodes of {self.shape.gpus} GPUs"
        )
        return self

    def stop(self) -> None:
        for process in self._processes.values():
            if process.poll() is None:
                process.terminate()
        for process in self._processes.values():
            try:
                process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        self.plane.stop()

    def __enter__(self) -> ScaleTier:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()

    def _start_kwok(self) -> None:
        reaper = [sys.executable, "-m", "support.scale", "reap"]
        for name, argv in (
            ("kwok", kwok_argv(self.kwok_dir, self.plane.kubeconfig)),
            ("reaper", [*reaper, f"--kubeconfig={self.plane.kubeconfig}"]),
        ):
            with (self.plane.dir / f"{name}.log").open("ab") as log:
                self._processes[name] = subprocess.Popen(
                    argv,
                    cwd=TESTS_DIR,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                )

    async def _add_nodes(self) -> None:
        api = await config.new_client_from_config(
            config_file=str(self.plane.kubeconfig), persist_config=False
        )
        async with api:
            core = client.CoreV1Api(api)
            pending = iter(range(self.nodes))

            async def creator() -> None:
                for index in pending:
                    await core.create_node(fake_node(index, self.shape))

            await asyncio.gather(*(creator() for _ in range(NODE_CREATE_CONCURRENCY)))
            await eventually(
                lambda: self._all_ready(core),
                f"kwok to make {self.nodes} nodes Ready",
                timeout=NODES_READY_TIMEOUT,
                interval=1.0,
                explain=self._kwok_tail,
            )

    async def _all_ready(self, core: client.CoreV1Api) -> bool:
        for name, process in self._processes.items():
            if process.poll() is not None:
                raise ControlPlaneError(f"{name} exited:\n{self._kwok_tail()}")
        # Undecoded: the typed models of thousands of nodes take seconds to build.
        response: Any = await core.list_node(_preload_content=False)
        items = (await response.json())["items"]
        ready = sum(1 for node in items if _ready(node))
        return ready == self.nodes

    def _kwok_tail(self) -> str:
        lines = self.kwok_log.read_text(errors="replace").splitlines()
        return "\n".join(lines[-20:])


def _ready(node: Any) -> bool:
    conditions = (node.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


# -- the reaper -----------------------------------------------------------------------------------

REAP_CONCURRENCY = 16


# What the kubelet reports for a container it stopped because its pod was deleted (SIGTERM).
STOPPED_EXIT_CODE = 143


def stopped_status(pod: Any) -> dict[str, Any]:
    """The status a kubelet writes for a deleted pod once its containers stopped: a terminal
    phase (the kubelet does so before it removes the pod), each container terminated."""
    containers = (pod.get("spec") or {}).get("containers") or ()
    terminated = {"exitCode": STOPPED_EXIT_CODE, "reason": "Error"}
    return {
        "phase": "Failed",
        "containerStatuses": [
            {"name": c["name"], "ready": False, "restartCount": 0, "image": c.get("image", ""),
             "imageID": "", "state": {"terminated": terminated}}
            for c in containers
        ],
    }  # fmt: skip


async def reap(kubeconfig: Path) -> None:
    """Until cancelled: every pod of a node that is being deleted, deleted for good as its
    kubelet would once its containers stopped: its status terminal first (Kueue, for one, lets a
    pod of a group go only once it ended), then with grace 0, the pod's uid as precondition."""
    api = await config.new_client_from_config(config_file=str(kubeconfig), persist_config=False)
    core = client.CoreV1Api(api)
    slots = asyncio.Semaphore(REAP_CONCURRENCY)
    pending: set[asyncio.Task[None]] = set()

    async def remove(pod: Any) -> None:
        meta = pod["metadata"]
        options = client.V1DeleteOptions(
            grace_period_seconds=0, preconditions=client.V1Preconditions(uid=meta["uid"])
        )
        async with slots:
            with contextlib.suppress(client.ApiException):  # gone already, or another pod now
                if (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed"):
                    status = {"metadata": {"uid": meta["uid"]}, "status": stopped_status(pod)}
                    await core.patch_namespaced_pod_status(meta["name"], meta["namespace"], status)
                await core.delete_namespaced_pod(meta["name"], meta["namespace"], body=options)

    def changed(pod: Any) -> None:
        if pod["metadata"].get("deletionTimestamp") and (pod.get("spec") or {}).get("nodeName"):
            task = asyncio.create_task(remove(pod))
            pending.add(task)
            task.add_done_callback(pending.discard)

    async with api, client_like(api) as ours:
        informer = Informer(ours, PODS, on_add=changed, on_update=lambda _, new: changed(new))
        await informer.run()


# -- make scale-up / scale-down ------------------------------------------------------------------


def serve(nodes: int) -> None:
    """Run the tier until SIGTERM; say where its kubeconfig is once it is ready."""
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    with contextlib.suppress(KeyboardInterrupt), ScaleTier(nodes) as tier:
        (STATE_DIR / "kubeconfig").write_text(str(tier.plane.kubeconfig))
        while True:
            time.sleep(3600)


def up(nodes: int) -> None:
    """Start `serve` in the background and return once the tier is ready."""
    STATE_DIR.mkdir(parents=True, exist_ok=True)
    if _running_pid() is not None:
        sys.exit(f"the scale tier already runs (pid file {STATE_DIR / 'pid'}): make scale-down")
    (STATE_DIR / "kubeconfig").unlink(missing_ok=True)
    log_path = STATE_DIR / "tier.log"
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "support.scale", "serve", "--nodes", str(nodes)],
            cwd=TESTS_DIR,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    (STATE_DIR / "pid").write_text(str(process.pid))

    def ready() -> bool:
        if process.poll() is not None:
            sys.exit(f"the scale tier failed to start:\n{log_path.read_text(errors='replace')}")
        return (STATE_DIR / "kubeconfig").exists()

    eventually_sync(ready, "the scale tier", timeout=NODES_READY_TIMEOUT + 180, interval=1.0)
    kubeconfig = (STATE_DIR / "kubeconfig").read_text()
    print(f"scale tier up with {nodes} fake GPU nodes; its log: {log_path}")
    print(f"export KUBECONFIG={kubeconfig}")


def down() -> None:
    pid = _running_pid()
    if pid is None:
        print("no scale tier runs")
    else:
        os.kill(pid, signal.SIGTERM)
        eventually_sync(lambda: not _alive(pid), "the scale tier to stop", timeout=60)
        print("scale tier stopped")
    for name in ("pid", "kubeconfig"):
        (STATE_DIR / name).unlink(missing_ok=True)


def _running_pid() -> int | None:
    with contextlib.suppress(FileNotFoundError, ValueError):
        pid = int((STATE_DIR / "pid").read_text())
        return pid if _alive(pid) else None
    return None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return _not_zombie(pid)


def _not_zombie(pid: int) -> bool:
    with contextlib.suppress(FileNotFoundError):
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] != "Z"
    return False


def main(argv: Iterator[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("command", choices=("up", "down", "serve", "reap"))
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--kubeconfig", type=Path, help="reap: the cluster's")
    args = parser.parse_args(list(argv) if argv is not None else None)
    if args.command == "up":
        up(args.nodes)
    elif args.command == "serve":
        serve(args.nodes)
    elif args.command == "reap":
        runtime_logging.configure("scale-reaper", "WARNING")
        signal.signal(signal.SIGTERM, signal.default_int_handler)
        with contextlib.suppress(KeyboardInterrupt):
            asyncio.run(reap(args.kubeconfig))
    else:
        down()


if __name__ == "__main__":
    main()
