"""Checks for every test: asyncio tasks and child processes must not outlive the test that
started them, or they fail (or slow down) whichever test happens to run next.

And the fixtures of every test that needs Kubernetes (tests/e2e, tests/chart): one real control
plane per session, an admin API client, the CRD, and a fresh namespace per test; for tests/node,
one real node per session (`make node-up`) and a fresh namespace on it per test."""

from __future__ import annotations

import asyncio
import contextlib
import glob
import os
import re
import secrets
import signal
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import pytest
from kubernetes_asyncio import client, config
from support import ControlPlane, control_plane_pids
from support.controlplane import write_to_stderr
from support.eventually import eventually, eventually_sync
from support.node import Node, node_is_up, release_claims, run_node_script
from support.operator import install_crds

from torchjob.kube.client import KubeClient, new_kube_client

# Long enough for a cancelled task or a terminated child to finish its clean-up.
LEFTOVER_GRACE = 1.0
DNS_LABEL_MAX = 63


@pytest.fixture(autouse=True)
async def no_leftover_asyncio_tasks() -> AsyncIterator[None]:
    before = asyncio.all_tasks()
    yield
    leftover = await _tasks_still_pending(before)
    if leftover:
        # Cancelled here so that the next test starts clean and only this one fails.
        for task in leftover:
            task.cancel()
        await asyncio.wait(leftover, timeout=LEFTOVER_GRACE)
        pytest.fail(f"test left {len(leftover)} asyncio task(s) running: {_describe(leftover)}")


async def _tasks_still_pending(before: set[asyncio.Task[object]]) -> set[asyncio.Task[object]]:
    """New tasks still pending after a few event-loop iterations and up to LEFTOVER_GRACE."""
    deadline = time.monotonic() + LEFTOVER_GRACE
    this_fixture = asyncio.current_task()
    iterations = 0
    while True:
        new_tasks = asyncio.all_tasks() - before
        pending = {task for task in new_tasks if task is not this_fixture and not task.done()}
        if not pending or time.monotonic() > deadline:
            return pending
        # A few bare iterations first: most stragglers are one callback away from finishing.
        await asyncio.sleep(0 if iterations < 5 else 0.02)
        iterations += 1


def _describe(tasks: set[asyncio.Task[object]]) -> str:
    return ", ".join(f"{task.get_name()} ({task.get_coro()!r})" for task in tasks)


@pytest.fixture(autouse=True)
def no_leftover_child_processes() -> Iterator[None]:
    before = _running_children()
    yield
    leftover = _wait_for_children_to_exit(before)
    if leftover:
        commands = {pid: _command_line(pid) for pid in leftover}
        for pid in leftover:
            _kill(pid)
        pytest.fail(f"test left child process(es) running: {commands}")


def _wait_for_children_to_exit(before: set[int]) -> set[int]:
    deadline = time.monotonic() + LEFTOVER_GRACE
    while (leftover := _running_children() - before) and time.monotonic() < deadline:
        time.sleep(0.02)
    return leftover


def _running_children() -> set[int]:
    """Live (non-zombie) children of this process, except the test control plane's."""
    children = {pid for pid in _child_pids() if _state(pid) not in (None, "Z")}
    return children - control_plane_pids()


def _child_pids() -> set[int]:
    me = os.getpid()
    # /proc/<pid>/task/<tid>/children (CONFIG_PROC_CHILDREN) is one read per thread;
    # without it, every process's parent has to be looked up.
    per_thread = glob.glob(f"/proc/{me}/task/*/children")
    if per_thread:
        return {int(pid) for path in per_thread for pid in _read(path).split()}
    return {pid for pid in _all_pids() if _parent_pid(pid) == me}


def _all_pids() -> list[int]:
    return [int(entry) for entry in os.listdir("/proc") if entry.isdigit()]


def _stat_fields(pid: int) -> list[str]:
    # The command name in parentheses may itself contain spaces and parentheses.
    return _read(f"/proc/{pid}/stat").rpartition(")")[2].split()


def _state(pid: int) -> str | None:
    fields = _stat_fields(pid)
    return fields[0] if fields else None


def _parent_pid(pid: int) -> int | None:
    fields = _stat_fields(pid)
    return int(fields[1]) if len(fields) > 1 else None


def _command_line(pid: int) -> str:
    return _read(f"/proc/{pid}/cmdline").replace("\0", " ").strip()


def _read(path: str) -> str:
    try:
        return Path(path).read_text()
    except OSError:  # the process is already gone
        return ""


def _kill(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)


@pytest.fixture(scope="session")
def control_plane(pytestconfig: pytest.Config) -> Iterator[ControlPlane]:
    with (
        _sigterm_as_keyboard_interrupt(),
        ControlPlane(announce=_uncaptured_line_writer(pytestconfig)) as plane,
    ):
        yield plane


@contextlib.contextmanager
def _sigterm_as_keyboard_interrupt() -> Iterator[None]:
    """Let `kill <pytest>` unwind like Ctrl-C, through the fixture teardowns that stop the
    control plane, instead of exiting on the spot and leaving it running."""
    if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        yield  # someone else handles SIGTERM; leave it to them
        return
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


@pytest.fixture(scope="session")
async def kube_client(control_plane: ControlPlane) -> AsyncIterator[client.ApiClient]:
    """An API client authenticated as cluster admin (group system:masters)."""
    api_client = await config.new_client_from_config(
        config_file=str(control_plane.kubeconfig), persist_config=False
    )
    async with api_client:
        yield api_client


@pytest.fixture(scope="session")
async def service_client(control_plane: ControlPlane) -> AsyncIterator[KubeClient]:
    """Our own client (kube/client.py), as the services make one, authenticated as cluster
    admin: for the services' classes under test (informers, leader election, events)."""
    async with await new_kube_client(str(control_plane.kubeconfig)) as api_client:
        yield api_client


@pytest.fixture
async def namespace(
    kube_client: client.ApiClient, request: pytest.FixtureRequest
) -> AsyncIterator[str]:
    """A new namespace named after the test; deleted afterwards without waiting for the
    namespace controller to empty it (the name is never reused)."""
    name = unique_namespace_name(request.node.name)
    core = client.CoreV1Api(kube_client)
    await core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    await _default_service_account(core, name)
    yield name
    await core.delete_namespace(name)


async def _default_service_account(core: client.CoreV1Api, namespace: str) -> None:
    """Until the controller manager has made the namespace's `default` ServiceAccount: the
    apiserver refuses pods in the namespace before that (and it can lag, after an apiserver
    restart for one)."""

    async def made() -> bool:
        try:
            await core.read_namespaced_service_account("default", namespace)
        except client.ApiException as error:
            if error.status != 404:
                raise
            return False
        return True

    await eventually(made, f"the default ServiceAccount of {namespace}")


def unique_namespace_name(test_name: str) -> str:
    """`t-<test name as a DNS label>-<random>`, at most 63 characters."""
    suffix = secrets.token_hex(3)
    room = DNS_LABEL_MAX - len("t--") - len(suffix)
    slug = re.sub(r"[^a-z0-9]+", "-", test_name.lower()).strip("-")[:room].rstrip("-")
    return "-".join(part for part in ("t", slug, suffix) if part)


def _uncaptured_line_writer(pytestconfig: pytest.Config) -> Callable[[str], None]:
    """Writes a line to the terminal whether or not pytest captures output (-s or not)."""
    plugins = pytestconfig.pluginmanager
    capture, reporter = plugins.get_plugin("capturemanager"), plugins.get_plugin("terminalreporter")
    if capture is None or reporter is None:
        return write_to_stderr

    def write_line(line: str) -> None:
        with capture.global_and_fixture_disabled():
            reporter.write_line(line)

    return write_line


@pytest.fixture(scope="session")
def crd(control_plane: ControlPlane) -> None:
    """The generated CRDs, installed with plain client-side `kubectl apply` and Established."""
    install_crds(control_plane)
    # Refresh kubectl's discovery cache so `ptj` resolves in every later kubectl call.
    control_plane.kubectl("api-resources", "--api-group=batch.tensorstack.dev")
    # The apiserver publishes a new CRD's OpenAPI schema a moment after it is Established.
    eventually_sync(
        lambda: control_plane.kubectl("explain", "ptj", check=False).returncode == 0,
        "the CRD's OpenAPI schema published",
        timeout=60,
        interval=0.2,
    )


@pytest.fixture(scope="session")
def node(pytestconfig: pytest.Config) -> Iterator[Node]:
    """The real node of hack/node.sh with the chart installed. A node that was up before the
    session is used and left up; one the session brings up is taken down at its end."""
    announce = _uncaptured_line_writer(pytestconfig)
    started_here = not node_is_up()
    log = Path(tempfile.gettempdir()) / "torchjob-node.log"
    if started_here:
        announce(f"bringing the real node up (hack/node.sh up; its output in {log})")
        run_node_script("up", log)
    try:
        yield Node.locate()
    finally:
        if started_here:
            run_node_script("down", log)


@pytest.fixture
def node_namespace(node: Node, request: pytest.FixtureRequest) -> Iterator[str]:
    """A new namespace on the real node, named after the test; deleted without waiting."""
    name = unique_namespace_name(request.node.name)
    node.kubectl("create", "namespace", name)
    yield name
    node.kubectl("delete", "namespace", name, "--wait=false")
    release_claims(node, name)
