"""Chaos on the real node: replicas of several running jobs SIGKILLed at random moments, many
times; every job must still end Succeeded, charged exactly one restart per kill, with no pod
created twice.

The node of `make node-up` (hack/node.sh) with the chart installed; skipped, with a line saying
so, when it is not up or its containerd socket cannot be reached (the kills need root).

The jobs. J jobs (--jobs, 3) of R replicas (--replicas, 3: a master and R-1 workers), plain
python without torchrun, so each restarts as a gang (the default restart scope of a job whose
replicas cannot rejoin a running group): every replica runs tests/node/scripts/gloo_steps.py, one
gloo all_reduce a second for --run-seconds (240), from the first step again after each restart.
Pods are small (100m CPU requested; the node has two cores). backoffLimit is above the kills, so
that no job may fail for them.

The chaos. K times (--kills, 8): a random pause (--pause-min..--pause-max seconds), then a job
drawn at random among the ready ones and a replica drawn at random in it, whose training
container is SIGKILLed from the host (`ctr tasks kill`, as the OOM killer or a crash would: exit
code 137). A job is ready when its status says Running, each of its replicas has exactly one pod,
Running with its training container running, and a kill made to it earlier has been recovered
from (its replicas all run in pods created after that kill). Only a ready job is killed: a kill
made while a job restarts would merge into that restart (one gang restart for two kills) and the
counts below could not be told apart. A job is also not killed in the last --margin seconds (30)
of its run, lest its container has already exited 0 when the signal arrives. --seed fixes the
draws (which job and replica, the pauses); which jobs are ready at each draw depends on how fast
the node is, so two runs with one seed can still differ.

What is read. Two watches (`kubectl get --watch`) keep the jobs and their pods as the API
shows them, and every pod uid each replica ever had: a pod created and deleted between two looks
is still counted. After the last kill, the bench waits for every job to end, then reads:
- each job's phase, which must be Succeeded;
- status.backoffCount and status.gangRestarts, which must each equal the kills made to the job;
- the distinct pods each replica had, which must be the job's kills + 1 (the first pod and one
  per gang restart): more is a pod created twice, fewer a restart that did not recreate it;
- per kill, the time from the kill until the job is ready again (its pods replaced and running,
  its status Running), as the watches show it (a quarter of a second of polling on top); this
  includes the restart delay (lifecycle/backoff.py: 10 s, doubling with each restart in a row).
It prints a table, these figures, and a line for each violation found. The exit status says
nothing about them. The operator itself is killed by tests/e2e/test_gang_restart_chaos.py.

    .venv/bin/python tests/bench/chaos.py                       # 3 jobs x 3 replicas, 8 kills
    .venv/bin/python tests/bench/chaos.py --kills 3 --run-seconds 120 --seed 7
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from torchjob.api.constants import LABEL_JOB_NAME

TESTS_DIR = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(TESTS_DIR))

from support.jobs import JobBuilder  # noqa: E402
from support.node import Node, container_id, node_is_up, running, small_resources  # noqa: E402

GLOO_STEPS = (TESTS_DIR / "node" / "scripts" / "gloo_steps.py").read_text()
CONTAINER = "python"
TICK = 0.25  # seconds between looks at what the watches hold
# Bounds on waiting, generous on two busy cores: a job's restarts in a row wait longer each time.
READY_TIMEOUT = 900.0
END_TIMEOUT = 1800.0

Manifest = dict[str, Any]


def parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--jobs", type=int, default=3, help="jobs running at once")
    p.add_argument("--replicas", type=int, default=3, help="replicas per job (a master, workers)")
    p.add_argument("--kills", type=int, default=8, help="SIGKILLs, over all jobs")
    p.add_argument("--seed", type=int, default=1, help="seed of the draws")
    p.add_argument(
        "--run-seconds", type=int, default=240, help="seconds of steps in each run of a job"
    )
    p.add_argument("--pause-min", type=float, default=5.0, help="shortest pause between kills")
    p.add_argument("--pause-max", type=float, default=30.0, help="longest pause between kills")
    p.add_argument(
        "--margin", type=float, default=30.0, help="no kill this close to a run's expected end"
    )
    p.add_argument("--keep", action="store_true", help="keep the namespace for inspection")
    return p.parse_args()


def gloo_job(name: str, image: str, replicas: int, run_seconds: int, kills: int) -> Manifest:
    """A master and replicas-1 workers running gloo_steps.py, one step a second."""
    container = {
        "name": CONTAINER,
        "image": image,
        "imagePullPolicy": "IfNotPresent",  # no registry is reachable from the node
        "command": ["python"],
        "args": ["-c", GLOO_STEPS, str(run_seconds), "1"],
        "resources": small_resources({"cpu": "500m", "memory": "1Gi"}),
    }
    builder = JobBuilder(name).replicas("master", 1, container=container, restartPolicy="OnFailure")
    if replicas > 1:
        builder.replicas("worker", replicas - 1, container=container, restartPolicy="OnFailure")
    return builder.run_policy(backoffLimit=kills + 2, activeDeadlineSeconds=7200).build()


# -- watching ------------------------------------------------------------------------------------


def watch_events(lines: Iterable[str]) -> Iterator[Manifest]:
    """The watch events in the output of `kubectl get --watch --output-watch-events -o json`:
    one JSON object each, on a line of its own (as kubectl prints them when watching) or
    indented over several lines, the closing brace alone at the start of the last one."""
    buffered: list[str] = []
    for line in lines:
        buffered.append(line)
        one_line = len(buffered) == 1 and line.rstrip().endswith("}")
        if one_line or line.startswith("}"):
            text = "".join(buffered).strip()
            buffered.clear()
            if text:
                yield json.loads(text)


@dataclass
class Watch:
    """Objects of one kind in one namespace as a kubectl watch shows them, and every uid each
    name has had. A watch that ends (the apiserver closes watches after a while) is started
    again; its objects are listed afresh, the uids kept."""

    node: Node
    namespace: str
    kind: str
    selector: str = ""
    objects: dict[str, Manifest] = field(default_factory=dict)
    uids: dict[str, set[str]] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)
    stopping: threading.Event = field(default_factory=threading.Event)
    process: subprocess.Popen[str] | None = None

    def argv(self) -> list[str]:
        argv = [str(self.node.kubectl_path), "get", self.kind, "-n", self.namespace]
        argv += ["--watch", "--output-watch-events", "-o", "json"]
        return argv + (["-l", self.selector] if self.selector else [])

    def follow(self) -> None:
        env = {**os.environ, "KUBECONFIG": str(self.node.kubeconfig)}
        while not self.stopping.is_set():
            self.process = subprocess.Popen(
                self.argv(), stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env
            )
            assert self.process.stdout is not None
            with self.lock:
                self.objects.clear()
            for event in watch_events(self.process.stdout):
                self.seen(event)
            self.process.wait()
            self.stopping.wait(1.0)

    def seen(self, event: Manifest) -> None:
        obj = event.get("object") or {}
        if event.get("type") not in ("ADDED", "MODIFIED", "DELETED") or "metadata" not in obj:
            return  # a BOOKMARK, or an ERROR carrying a Status
        name, uid = obj["metadata"]["name"], obj["metadata"]["uid"]
        with self.lock:
            self.uids.setdefault(name, set()).add(uid)
            if event["type"] == "DELETED":
                self.objects.pop(name, None)
            else:
                self.objects[name] = obj

    def snapshot(self) -> dict[str, Manifest]:
        with self.lock:
            return dict(self.objects)

    def uids_seen(self) -> dict[str, set[str]]:
        with self.lock:
            return {name: set(uids) for name, uids in self.uids.items()}

    def stop(self) -> None:
        self.stopping.set()
        if self.process is not None:
            self.process.terminate()


@contextmanager
def watching(node: Node, namespace: str, kind: str, selector: str = "") -> Iterator[Watch]:
    watch = Watch(node, namespace, kind, selector)
    thread = threading.Thread(target=watch.follow, name=f"watch-{kind}", daemon=True)
    thread.start()
    try:
        yield watch
    finally:
        watch.stop()
        thread.join(timeout=10)


# -- the state of a job --------------------------------------------------------------------------


def phase(job: Manifest | None) -> str:
    return str(((job or {}).get("status") or {}).get("phase") or "")


def pods_of(pods: dict[str, Manifest], job: str) -> dict[str, Manifest]:
    return {
        name: pod
        for name, pod in pods.items()
        if (pod["metadata"].get("labels") or {}).get(LABEL_JOB_NAME) == job
    }


def running_pods(job: Manifest | None, pods: dict[str, Manifest], replicas: int) -> bool:
    """The job says Running and each of its replicas has one pod, its training container
    running, none of them being deleted."""
    return (
        phase(job) == "Running"
        and len(pods) == replicas
        and all(
            not pod["metadata"].get("deletionTimestamp") and running(pod, CONTAINER)
            for pod in pods.values()
        )
    )


def replaced(pods: dict[str, Manifest], before: set[str]) -> bool:
    """No pod of `pods` is one of the uids `before` (those of the job when it was killed)."""
    return all(pod["metadata"]["uid"] not in before for pod in pods.values())


@dataclass
class Kill:
    job: str
    pod: str
    at: float  # time.monotonic()
    uids_before: set[str]
    back_after: float | None = None  # seconds until the job was ready again


@dataclass
class Chaos:
    """The kills made, and what the watches showed of the jobs meanwhile."""

    node: Node
    jobs: Watch
    pods: Watch
    names: list[str]
    replicas: int
    run_seconds: float
    started: float = field(default_factory=time.monotonic)
    kills: list[Kill] = field(default_factory=list)
    # When each job was first seen ready with its current pods, by the pods' uids.
    ready_since: dict[str, tuple[frozenset[str], float]] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)

    def last_kill(self, job: str) -> Kill | None:
        return next((kill for kill in reversed(self.kills) if kill.job == job), None)

    def look(self) -> list[str]:
        """One look at the watches: records recoveries; returns the jobs ready now."""
        now = time.monotonic()
        jobs, pods = self.jobs.snapshot(), self.pods.snapshot()
        ready = []
        for name in self.names:
            mine = pods_of(pods, name)
            if not running_pods(jobs.get(name), mine, self.replicas):
                continue
            kill = self.last_kill(name)
            if kill is not None and not replaced(mine, kill.uids_before):
                continue
            if kill is not None and kill.back_after is None:
                kill.back_after = now - kill.at
                print(f"  {name} ready again {kill.back_after:6.1f} s after its kill", flush=True)
            uids = frozenset(pod["metadata"]["uid"] for pod in mine.values())
            if self.ready_since.get(name, (None, 0.0))[0] != uids:
                self.ready_since[name] = (uids, now)
            ready.append(name)
        return ready

    def killable(self, margin: float) -> list[str]:
        """The ready jobs whose current run has more than `margin` seconds of steps left."""
        now = time.monotonic()
        return [
            name
            for name in self.look()
            if now - self.ready_since[name][1] < self.run_seconds - margin
        ]

    def observe_for(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            self.look()
            time.sleep(TICK)

    def wait_for_target(self, margin: float) -> list[str]:
        deadline = time.monotonic() + READY_TIMEOUT
        while time.monotonic() < deadline:
            candidates = self.killable(margin)
            if candidates or self.all_ended():
                return candidates
            time.sleep(TICK)
        return []

    def kill(self, job: str, pod_name: str) -> None:
        pods = pods_of(self.pods.snapshot(), job)
        at = time.monotonic()
        try:
            self.node.ctr(
                "tasks", "kill", "--signal", "SIGKILL", container_id(pods[pod_name], CONTAINER)
            )
        except (subprocess.CalledProcessError, AssertionError, KeyError) as error:
            detail = getattr(error, "stderr", "") or error
            self.problems.append(f"kill of {pod_name} failed (not counted): {detail}")
            return
        uids = {pod["metadata"]["uid"] for pod in pods.values()}
        self.kills.append(Kill(job, pod_name, at, uids))
        count = sum(kill.job == job for kill in self.kills)
        print(
            f"kill {len(self.kills)} at {at - self.started:6.1f} s: {pod_name} "
            f"(kill {count} of {job})",
            flush=True,
        )

    def all_ended(self) -> bool:
        jobs = self.jobs.snapshot()
        return all(phase(jobs.get(name)) in ("Succeeded", "Failed") for name in self.names)

    def wait_for_ends(self) -> None:
        deadline = time.monotonic() + END_TIMEOUT
        while not self.all_ended() and time.monotonic() < deadline:
            self.look()
            time.sleep(TICK)


def make_kills(chaos: Chaos, args: argparse.Namespace, rng: random.Random) -> None:
    for _ in range(args.kills):
        chaos.observe_for(rng.uniform(args.pause_min, args.pause_max))
        candidates = chaos.wait_for_target(args.margin)
        if not candidates:
            why = "every job had ended" if chaos.all_ended() else "no job was ready"
            chaos.problems.append(f"only {len(chaos.kills)} of {args.kills} kills made: {why}")
            return
        job = rng.choice(sorted(candidates))
        pod = rng.choice(sorted(pods_of(chaos.pods.snapshot(), job)))
        chaos.kill(job, pod)


# -- the verdicts --------------------------------------------------------------------------------


@dataclass
class JobFigures:
    name: str
    phase: str
    kills: int
    backoff_count: int | None
    gang_restarts: int | None
    pods_by_replica: dict[str, int]
    back_after: list[float]


def job_figures(name: str, job: Manifest | None, chaos: Chaos) -> JobFigures:
    status = (job or {}).get("status") or {}
    pods = {
        pod: len(uids) for pod, uids in chaos.pods.uids_seen().items() if pod.startswith(f"{name}-")
    }
    kills = [kill for kill in chaos.kills if kill.job == name]
    return JobFigures(
        name,
        phase(job) or "?",
        len(kills),
        status.get("backoffCount"),
        status.get("gangRestarts"),
        pods,
        [kill.back_after for kill in kills if kill.back_after is not None],
    )


def violations(figures: JobFigures, replicas: int) -> list[str]:
    name, kills = figures.name, figures.kills
    found = []
    if figures.phase != "Succeeded":
        found.append(f"{name} ended {figures.phase}, not Succeeded")
    for field_name, value in (
        ("backoffCount", figures.backoff_count),
        ("gangRestarts", figures.gang_restarts),
    ):
        if (value or 0) != kills:
            found.append(f"{name} status.{field_name} {value}, but {kills} kills made to it")
    if len(figures.pods_by_replica) != replicas:
        found.append(
            f"{name} has {len(figures.pods_by_replica)} replicas seen: "
            f"{sorted(figures.pods_by_replica)}, not {replicas}"
        )
    for pod, count in sorted(figures.pods_by_replica.items()):
        if count != kills + 1:
            found.append(f"{pod} had {count} distinct pods, not {kills + 1} (kills + 1)")
    if len(figures.back_after) != kills:
        found.append(f"{name} ready again after {len(figures.back_after)} of its {kills} kills")
    return found


def seconds_text(values: list[float]) -> str:
    if not values:
        return f"{'-':>7} {'-':>7}"
    return f"{statistics.median(values):6.1f}s {max(values):6.1f}s"


def report(chaos: Chaos, figures: list[JobFigures]) -> None:
    print()
    print(
        f"{'job':<10} {'phase':<10} {'kills':>5} {'backoff':>7} {'gang':>5} "
        f"{'pods':>5} {'expect':>6} {'back p50':>8} {'max':>7}"
    )
    for f in figures:
        pods, expected = sum(f.pods_by_replica.values()), chaos.replicas * (f.kills + 1)
        print(
            f"{f.name:<10} {f.phase:<10} {f.kills:>5} {f.backoff_count!s:>7} "
            f"{f.gang_restarts!s:>5} {pods:>5} {expected:>6} {seconds_text(f.back_after)}"
        )
    every = [kill.back_after for kill in chaos.kills if kill.back_after is not None]
    print(
        f"kills: {len(chaos.kills)}; kill -> job ready again, over all kills: "
        f"median {statistics.median(every) if every else float('nan'):.1f} s, "
        f"max {max(every, default=float('nan')):.1f} s"
    )
    found = chaos.problems + [v for f in figures for v in violations(f, chaos.replicas)]
    print(f"violations: {len(found)}")
    for line in found:
        print(f"  VIOLATION {line}")


# -- main ----------------------------------------------------------------------------------------


def unavailable() -> tuple[Node | None, str]:
    """The node, or why the bench cannot run here."""
    if not node_is_up():
        return None, "the real node is not up (make node-up)"
    node = Node.locate()
    if not os.access(node.containerd_socket, os.R_OK | os.W_OK):
        return None, f"cannot reach {node.containerd_socket} to kill containers (run as root)"
    return node, ""


def run(node: Node, namespace: str, args: argparse.Namespace) -> None:
    names = [f"chaos-{index}" for index in range(args.jobs)]
    with (
        watching(node, namespace, "pytorchtrainingjobs") as jobs,
        watching(node, namespace, "pods", LABEL_JOB_NAME) as pods,
    ):
        image, replicas, seconds = node.example_image, args.replicas, args.run_seconds
        node.apply(namespace, *(gloo_job(n, image, replicas, seconds, args.kills) for n in names))
        chaos = Chaos(node, jobs, pods, names, args.replicas, args.run_seconds)
        make_kills(chaos, args, random.Random(args.seed))
        chaos.wait_for_ends()
        if not chaos.all_ended():
            chaos.problems.append(f"a job had not ended {END_TIMEOUT:.0f} s after the last kill")
        figures = [
            job_figures(name, node.get("pytorchtrainingjobs", name, namespace), chaos)
            for name in names
        ]
    report(chaos, figures)


def main() -> None:
    args = parse()
    node, reason = unavailable()
    if node is None:
        print(f"chaos: skipped: {reason}", flush=True)
        return
    # SIGTERM unwinds like Ctrl-C, through the namespace's deletion.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    namespace = f"bench-chaos-{uuid.uuid4().hex[:6]}"
    print(
        f"chaos: {args.jobs} gloo jobs x {args.replicas} replicas (no torchrun: gang restarts), "
        f"{args.run_seconds} s of steps a run; {args.kills} SIGKILLs, pauses "
        f"{args.pause_min:.0f}-{args.pause_max:.0f} s, seed {args.seed}; namespace {namespace}",
        flush=True,
    )
    node.kubectl("create", "namespace", namespace)
    try:
        run(node, namespace, args)
    finally:
        if not args.keep:
            node.kubectl("delete", "namespace", namespace, "--wait=false", check=False)
    sys.stdout.flush()


if __name__ == "__main__":
    main()
