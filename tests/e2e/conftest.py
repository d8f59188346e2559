"""Fixtures for end-to-end tests: one real control plane per session, an admin API client, and a
fresh namespace per test."""

from __future__ import annotations

import contextlib
import re
import secrets
import signal
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import pytest
from kubernetes_asyncio import client, config
from support import ControlPlane
from support.controlplane import write_to_stderr
from support.operator import (
    OPT_IN_LABEL,
    reconciler_kubeconfig,
    start_reconciler,
    start_webhook,
    stop_webhook,
    wait_until_admitting,
)
from support.processes import ServiceProcess

E2E_DIR = Path(__file__).parent
DNS_LABEL_MAX = 63


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # This hook sees every collected item of the session, not only those under this directory.
    for item in items:
        if item.path.is_relative_to(E2E_DIR):
            item.add_marker(pytest.mark.e2e)


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


@pytest.fixture
async def namespace(
    kube_client: client.ApiClient, request: pytest.FixtureRequest
) -> AsyncIterator[str]:
    """A new namespace named after the test; deleted afterwards without waiting for the
    namespace controller to empty it (the name is never reused)."""
    name = unique_namespace_name(request.node.name)
    core = client.CoreV1Api(kube_client)
    await core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    yield name
    await core.delete_namespace(name)


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


REPO_ROOT = E2E_DIR.parents[1]
CRD_FILES = sorted((REPO_ROOT / "crds").glob("*.yaml"))


@pytest.fixture(scope="session")
def crd(control_plane: ControlPlane) -> None:
    """The generated CRDs, installed with plain client-side `kubectl apply` and Established."""
    for path in CRD_FILES:
        control_plane.kubectl("apply", "-f", str(path))
    control_plane.kubectl("wait", "--for=condition=Established", "--timeout=60s", "crd", "--all")
    # Refresh kubectl's discovery cache so `ptj` resolves in every later kubectl call.
    control_plane.kubectl("api-resources", "--api-group=batch.tensorstack.dev")
    # The apiserver publishes a new CRD's OpenAPI schema a moment after it is Established.
    deadline = time.monotonic() + 60
    while control_plane.kubectl("explain", "ptj", check=False).returncode != 0:
        assert time.monotonic() < deadline, "the CRD's OpenAPI schema was never published"
        time.sleep(0.2)


@pytest.fixture(scope="session")
def webhook_server(control_plane: ControlPlane, crd: None) -> Iterator[ServiceProcess]:
    """The webhook as a process, registered for namespaces labelled to opt in."""
    server = start_webhook(control_plane)
    yield server
    stop_webhook(control_plane, server)


@pytest.fixture
def admitted_namespace(
    control_plane: ControlPlane, namespace: str, webhook_server: ServiceProcess
) -> str:
    """A fresh namespace whose jobs and pods go through the webhook."""
    control_plane.kubectl("label", "namespace", namespace, f"{OPT_IN_LABEL}=on")
    wait_until_admitting(control_plane, namespace)
    return namespace


@pytest.fixture(scope="module")
def reconciler(
    control_plane: ControlPlane, webhook_server: ServiceProcess
) -> Iterator[ServiceProcess]:
    """The reconciler as a process, one per test module that asks for it."""
    process = start_reconciler(control_plane, reconciler_kubeconfig(control_plane))
    yield process
    process.close()
