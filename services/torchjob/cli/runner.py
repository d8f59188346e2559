"""`torchjob run`: a job's replicas as local processes, driven by the reconciler's own decisions.

The runner plays the apiserver, the kubelet and the reconciler's executor on one machine: each
round it builds the same `Observed` the reconciler builds (the job, its status, every replica's
pod as `lifecycle.observe` reads it, the Services that exist), asks `lifecycle.plan` for the plan
and carries it out: the status is kept in memory, a created Service is a free local port, a
created pod is a process started from the pod the webhook would have rewritten, and a deleted pod
is a process stopped as the kubelet stops a container: SIGTERM to its main process, SIGKILL to
all of it after the grace period. When a replica's main process exits, whatever it left running
is killed (cli/processes.py finds a replica's processes), as a container runtime tears down a
container whose main process has exited. The deadline is enforced by waking at the plan's
`requeue_after`, as the reconciler's timed requeue does.

A Kubeflow PyTorchJob's status is shown as Kubeflow shows it (its conditions, moved on round by
round as the operator writes them, and its replicaStatuses), rendered from the lifecycle's record
as the reconciler renders it.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import time
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

from torchjob.api import constants, queries
from torchjob.api.constants import REASON_RESTART_BACKOFF
from torchjob.api.jsoncopy import merge_patched
from torchjob.api.kubeflow import UNLIMITED_BACKOFF
from torchjob.cli.cluster import admitted_pod
from torchjob.cli.manifest import AdmittedJob
from torchjob.cli.processes import (
    REPLICA_MARKER,
    exited,
    free_port,
    kill_replica,
    shown_command,
)
from torchjob.cli.terminal import Console
from torchjob.lifecycle.backoff import DEFAULT_BACKOFF, RestartBackoff, RestartRules
from torchjob.lifecycle.local import exit_code_of, local_pod_status
from torchjob.lifecycle.observe import view_pod
from torchjob.lifecycle.plan import Plan, PodToCreate, plan
from torchjob.lifecycle.round import Observed
from torchjob.lifecycle.status import is_terminal
from torchjob.lifecycle.times import format_time
from torchjob.render.job_kinds import kind_of
from torchjob.render.topology import (
    Replica,
    replica_name,
    replicas_of,
    service_host,
    service_name,
)
from torchjob.views.cli.local import LocalCommand, local_command

# The exit code a container that could not be started reports (containerd's StartError).
START_ERROR = 128
OUTPUT_LIMIT = 1 << 20  # longest line read at once; longer ones are split
DRAIN_TIMEOUT = 5.0  # output still arriving after a replica's process group was killed
SETTLE_TIMEOUT = 5.0  # replicas still running when the job finished may end by themselves
MAX_ROUNDS_WITHOUT_WAITING = 100


@dataclass(slots=True)
class LocalPod:
    replica: Replica
    pod: dict[str, Any]
    command: LocalCommand
    process: subprocess.Popen[bytes] | None
    started: datetime
    exit_code: int | None = None
    finished: datetime | None = None
    deleting: bool = False
    exited: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def name(self) -> str:
        return str(self.pod["metadata"]["name"])

    @property
    def uid(self) -> str:
        return str(self.pod["metadata"]["uid"])

    @property
    def running(self) -> bool:
        return not self.exited.is_set()

    def as_observed(self) -> dict[str, Any]:
        pod = dict(self.pod)
        if self.deleting:
            pod["metadata"] = {**pod["metadata"], "deletionTimestamp": format_time(self.started)}
        pod["status"] = local_pod_status(self.pod, self.started, self.exit_code, self.finished)
        return pod


@dataclass(frozen=True, slots=True)
class RunResult:
    status: dict[str, Any]  # the lifecycle's record of the job
    interrupted: bool
    stalled: bool
    duration: float
    shown: dict[str, Any] = field(default_factory=dict)  # the status as the job's API shows it

    @property
    def succeeded(self) -> bool:
        return self.status.get("phase") == "Succeeded" and not self.interrupted


class LocalRunner:
    def __init__(
        self,
        job: AdmittedJob,
        console: Console,
        *,
        gpu_shares: dict[int, list[str]] | None = None,
        logs_dir: Path | None = None,
        grace_period: float = 10.0,
        backoff: RestartBackoff = DEFAULT_BACKOFF,
        environment: dict[str, str] | None = None,  # what replicas inherit (else this one's)
    ) -> None:
        self.job = job
        self.console = console
        self.gpu_shares = gpu_shares
        self.logs_dir = logs_dir
        self.grace_period = grace_period
        self.rules = RestartRules(backoff=backoff)
        self.environment = os.environ if environment is None else environment
        self.status: dict[str, Any] = {}
        self.shown: dict[str, Any] = {}  # the status as the job's API shows it
        self.ports: dict[str, int] = {}  # Service host -> local port
        self.pods: dict[tuple[str, int], LocalPod] = {}
        self.wake = asyncio.Event()
        self.interrupted = False
        self._tasks: set[asyncio.Task[None]] = set()
        self._logs: dict[str, IO[str]] = {}
        self._noted: set[str] = set()
        self._began = time.monotonic()

    # -- the loop --------------------------------------------------------------------------------

    async def run(self) -> RunResult:
        self.console.names([self._name(r) for r in replicas_of(self.job.spec)])
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, self.interrupt)
        ticker = asyncio.create_task(self._tick(), name="torchjob-status-line")
        stalled = False
        try:
            stalled = await self._reconcile_until_finished()
            await self._stop_everything()
            if is_terminal(self.status):
                # The status as the reconciler keeps it after the end: each replica's last state.
                self._record_status(plan(self._observe(), self.rules).status)
        finally:
            for signum in (signal.SIGINT, signal.SIGTERM):
                loop.remove_signal_handler(signum)
            ticker.cancel()
            await asyncio.gather(ticker, return_exceptions=True)
            await self._kill_everything()
            self.console.close()
            for handle in self._logs.values():
                handle.close()
        return RunResult(
            self.status, self.interrupted, stalled, time.monotonic() - self._began, self.shown
        )

    def interrupt(self) -> None:
        """Ctrl-C: stop every replica; a second Ctrl-C kills them at once."""
        if self.interrupted:
            for pod in self.pods.values():
                self._kill(pod)
        else:
            self.console.say("interrupted: stopping every replica (Ctrl-C again to kill them)")
        self.interrupted = True
        self.wake.set()

    async def _reconcile_until_finished(self) -> bool:
        """Plan and act until the job is finished or interrupted; True when nothing can happen
        any more although the job has not finished (a paused job has no one to resume it)."""
        rounds = 0
        while not self.interrupted:
            self.wake.clear()
            decision = plan(self._observe(), self.rules)
            acted = self._execute(decision)
            if is_terminal(self.status):
                return False
            rounds = rounds + 1 if acted else 0
            if acted and rounds < MAX_ROUNDS_WITHOUT_WAITING:
                continue
            if not acted and decision.requeue_after is None and not self._alive():
                self.console.say(
                    f"the job is {self.status.get('phase')} and nothing can change it here"
                )
                return True
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.wake.wait(), decision.requeue_after)
        return False

    def _observe(self) -> Observed:
        views = [v for p in self.pods.values() if (v := view_pod(p.as_observed())) is not None]
        services = frozenset(
            self._service(r) for r in replicas_of(self.job.spec) if self._host(r) in self.ports
        )
        return Observed.of_json(
            self.job.meta, self.job.spec, self.status, views, services, datetime.now(UTC)
        )

    def _execute(self, decision: Plan) -> bool:
        """Carry out the plan as the reconciler's executor does: status, deletions, creations."""
        acted = decision.status != self.status
        self._record_status(decision.status)
        # Phase changes show on the status line; a restart's delay is said when it is decided.
        restarts = [e for e in decision.status_events if e.reason == REASON_RESTART_BACKOFF]
        for event in [*decision.events, *restarts]:
            self.console.say(f"{event.reason}: {event.message}")
        for name, uid in decision.delete_pods:
            acted |= self._delete(name, uid)
        # A Service is a local port for each replica it publishes.
        created = {self._service(r) for r in decision.create_services}
        for replica in replicas_of(self.job.spec):
            if self._service(replica) in created:
                self.ports[self._host(replica)] = free_port()
                acted = True
        for item in decision.create_pods:
            self._start(item)
            acted = True
        return acted

    def _record_status(self, status: dict[str, Any]) -> None:
        if status != self.status or not self.shown:
            self.shown = shown_status(self.job, self.shown, status)
        self.status = status
        self.console.status(self._status_line())

    def _alive(self) -> bool:
        return any(p.running for p in self.pods.values())

    # -- pods as processes -----------------------------------------------------------------------

    def _name(self, replica: Replica) -> str:
        return replica_name(self.job.meta["name"], replica.type, replica.index)

    def _host(self, replica: Replica) -> str:
        meta = self.job.meta
        scope = queries.service_scope(meta)
        return service_host(meta["name"], meta["namespace"], *_key(replica), scope)

    def _service(self, replica: Replica) -> str:
        return service_name(self.job.meta["name"], replica, queries.service_scope(self.job.meta))

    def _start(self, item: PodToCreate) -> None:
        replica = item.replica
        pod = admitted_pod(self.job, replica, item.annotations)
        pod["metadata"]["uid"] = str(uuid.uuid4())
        gpus = None if self.gpu_shares is None else self.gpu_shares.get(replica.rank, [])
        command = local_command(
            self.job.spec,
            pod,
            self.ports,
            is_master=replica.is_master,
            gpus=gpus,
            container_name=training_container_name(self.job),
        )
        name = str(pod["metadata"]["name"])
        self._note_once(name, command)
        local = LocalPod(replica, pod, command, None, datetime.now(UTC))
        self.pods[_key(replica)] = local
        log = self._log_file(name, item.annotations)
        try:
            local.process = subprocess.Popen(
                command.argv,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                env={**self.environment, **command.env, REPLICA_MARKER: local.uid},
                cwd=self._working_dir(command),
                start_new_session=True,
            )
        except OSError as error:
            self.console.say(f"{name} could not start: {command.argv[0]}: {error.strerror}")
            self._finished(local, START_ERROR)
            return
        self.console.say(f"started {name} (pid {local.process.pid}): {shown_command(command.argv)}")
        self._spawn(self._watch(local, log), f"torchjob-watch-{name}")

    def _working_dir(self, command: LocalCommand) -> str | None:
        wanted = command.working_dir
        return wanted if wanted and Path(wanted).is_dir() else None

    def _note_once(self, name: str, command: LocalCommand) -> None:
        if name in self._noted:
            return
        self._noted.add(name)
        notes = list(command.notes)
        if command.working_dir and self._working_dir(command) is None:
            notes.append(
                f"workingDir {command.working_dir} does not exist here; running in {os.getcwd()}"
            )
        for note in notes:
            self.console.say(f"{name}: {note}")

    async def _watch(self, pod: LocalPod, log: IO[str] | None) -> None:
        process = pod.process
        assert process is not None and process.stdout is not None
        loop = asyncio.get_running_loop()
        stream = asyncio.StreamReader(limit=OUTPUT_LIMIT)
        transport, _ = await loop.connect_read_pipe(
            lambda: asyncio.StreamReaderProtocol(stream), process.stdout
        )
        reader = asyncio.create_task(self._pump(pod.name, stream, log))
        try:
            # Not asyncio's Process.wait(): it also waits for the output pipe to close, which a
            # process the replica left behind can hold open.
            returncode = await exited(process)
            # What the replica left behind goes with it, as when a container's main process exits.
            self._kill(pod)
            try:
                await asyncio.wait_for(asyncio.shield(reader), DRAIN_TIMEOUT)
            except TimeoutError:
                reader.cancel()
        finally:
            await asyncio.gather(reader, return_exceptions=True)
            transport.close()
        self._finished(pod, exit_code_of(returncode))

    def _finished(self, pod: LocalPod, exit_code: int) -> None:
        pod.exit_code = exit_code
        pod.finished = datetime.now(UTC)
        pod.exited.set()
        verb = "was stopped" if pod.deleting else "exited"
        self.console.say(f"{pod.name} {verb} with exit code {exit_code}")
        if pod.deleting and self.pods.get(_key(pod.replica)) is pod:
            del self.pods[_key(pod.replica)]  # a deleted pod is gone once it has terminated
        self.wake.set()

    async def _pump(self, name: str, stream: asyncio.StreamReader, log: IO[str] | None) -> None:
        while True:
            try:
                chunk = await stream.readline()
            except ValueError:  # a line longer than the limit: take what there is
                chunk = await stream.read(OUTPUT_LIMIT)
            if not chunk:
                return
            text = chunk.decode(errors="replace").rstrip("\r\n")
            self.console.replica_line(name, text)
            if log is not None:
                log.write(text + "\n")
                log.flush()

    def _delete(self, name: str, uid: str) -> bool:
        pod = next((p for p in self.pods.values() if p.name == name and p.uid == uid), None)
        if pod is None or pod.deleting:
            return False
        pod.deleting = True
        if not pod.running:
            del self.pods[_key(pod.replica)]
            return True
        self.console.say(f"stopping {name}")
        self._spawn(self._terminate(pod), f"torchjob-stop-{name}")
        return True

    async def _terminate(self, pod: LocalPod) -> None:
        """SIGTERM to the main process, as the kubelet sends it to a container's; SIGKILL to
        every process of the replica after the grace period."""
        if pod.process is not None and pod.process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                pod.process.send_signal(signal.SIGTERM)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(pod.exited.wait(), self.grace_period)
            return
        self._kill(pod)
        await pod.exited.wait()

    def _kill(self, pod: LocalPod) -> None:
        """SIGKILL to every process of the replica: its session, and whatever carries its uid."""
        if pod.process is None:
            return
        kill_replica(pod.process, pod.uid)

    async def _stop_everything(self) -> None:
        """After the job finished (or on Ctrl-C): replicas still running are stopped."""
        running = [p for p in self.pods.values() if p.running]
        if running and not self.interrupted:
            # They may be about to end by themselves (the master finished first): a moment, or
            # until Ctrl-C.
            self.wake.clear()
            waiting = [
                asyncio.create_task(_all_exited(running)),
                asyncio.create_task(self._until_interrupted()),
            ]
            await asyncio.wait(waiting, timeout=SETTLE_TIMEOUT, return_when=asyncio.FIRST_COMPLETED)
            for task in waiting:
                task.cancel()
            await asyncio.gather(*waiting, return_exceptions=True)
        for pod in [p for p in self.pods.values() if p.running and not p.deleting]:
            pod.deleting = True
            self.console.say(f"stopping {pod.name}")
            self._spawn(self._terminate(pod), f"torchjob-stop-{pod.name}")
        await self._join()

    async def _until_interrupted(self) -> None:
        while not self.interrupted:
            await self.wake.wait()
            self.wake.clear()

    async def _kill_everything(self) -> None:
        """The last resort, whatever went wrong: no replica outlives `torchjob run`."""
        for pod in self.pods.values():
            self._kill(pod)
        await self._join()

    async def _join(self) -> None:
        while self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)

    def _spawn(self, coroutine: Any, name: str) -> None:
        task = asyncio.create_task(coroutine, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _log_file(self, name: str, annotations: dict[str, str]) -> IO[str] | None:
        if self.logs_dir is None:
            return None
        handle = self._logs.get(name)
        if handle is None:
            self.logs_dir.mkdir(parents=True, exist_ok=True)
            handle = self._logs[name] = (self.logs_dir / f"{name}.log").open("a")
        else:
            count = annotations.get(constants.ANNOTATION_BACKOFF_COUNT, "")
            handle.write(f"--- torchjob: {name} restarted (job backoff count {count}) ---\n")
        return handle

    # -- the live status line --------------------------------------------------------------------

    async def _tick(self) -> None:
        while True:
            await asyncio.sleep(1.0)
            self.console.status(self._status_line())

    def _status_line(self) -> str:
        elapsed = int(time.monotonic() - self._began)
        replicas = ", ".join(
            f"{self._name(r).removeprefix(self.job.meta['name'] + '-')} {self._phase(r)}"
            for r in replicas_of(self.job.spec)
        )
        limit = queries.backoff_limit(self.job.spec)
        return (
            f"{self.job.meta['name']} {shown_state(self.job, self.shown)} "
            f"{elapsed // 60}:{elapsed % 60:02d} | {replicas} | "
            f"restarts {self.status.get('backoffCount', 0)}"
            + ("" if limit == UNLIMITED_BACKOFF else f"/{limit}")
        )

    def _phase(self, replica: Replica) -> str:
        pod = self.pods.get(_key(replica))
        if pod is None:
            return "-"
        if pod.deleting and pod.running:
            return "Stopping"
        return str(local_pod_status(pod.pod, pod.started, pod.exit_code, pod.finished)["phase"])


def training_container_name(job: AdmittedJob) -> str | None:
    """The name of a replica's training container: Kubeflow's `pytorch` for a PyTorchJob
    (None: torchjob's own choice, `python` else the first)."""
    return kind_of(job.api).training_container


def shown_status(
    job: AdmittedJob, before: dict[str, Any], record: dict[str, Any]
) -> dict[str, Any]:
    """The job's status as its API shows it, moved on from `before` to what the lifecycle's
    `record` says: written as the reconciler writes it, a merge patch over what the job showed."""
    kind = kind_of(job.api)
    stored = kind.training_job({**job.manifest, "metadata": job.meta, "status": before})
    written = kind.shown_status(stored, record, format_time(datetime.now(UTC)))
    shown: dict[str, Any] = merge_patched(before, written)
    return shown


def shown_state(job: AdmittedJob, shown: dict[str, Any]) -> str:
    """The job's state in one word, as its API's printer column shows it."""
    return kind_of(job.api).phase({"status": shown})


async def _all_exited(pods: list[LocalPod]) -> None:
    for pod in pods:
        await pod.exited.wait()


def _key(replica: Replica) -> tuple[str, int]:
    return replica.type, replica.index
