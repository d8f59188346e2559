"""Fixtures for end-to-end tests: the webhook registered for opted-in namespaces. The control plane,
the admin API client, the CRD and the per-test namespace come from tests/conftest.py."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from playwright.async_api import Browser
from support import ControlPlane
from support.console import Console, chromium, grant_job_roles, start_console
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


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # This hook sees every collected item of the session, not only those under this directory.
    for item in items:
        if item.path.is_relative_to(E2E_DIR):
            item.add_marker(pytest.mark.e2e)
    # Tests that run Kueue come last: `make test` builds Kueue in the background meanwhile
    # (hack/build-kueue.sh start), and they wait for it (support.kueue.KueueBuild.locate).
    items.sort(key=lambda item: "kueue" in getattr(item, "fixturenames", ()))


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
    """The reconciler as a process, for the tests of one module; it runs Kubeflow Trainer's
    TrainJobs too, as the chart's `trainer.enabled` runs it (tests/e2e/test_kueue.py)."""
    process = start_reconciler(
        control_plane, reconciler_kubeconfig(control_plane), "r1", "--trainer"
    )
    yield process
    process.close()


@pytest.fixture(scope="session")
def console(control_plane: ControlPlane, crd: None) -> Iterator[Console]:
    """The console as a process, in token mode; tenants' ClusterRoles cover training jobs."""
    grant_job_roles(control_plane)
    started = start_console(control_plane)
    yield started
    started.process.close()


@pytest.fixture(scope="session")
async def browser() -> AsyncIterator[Browser]:
    """Debian's Chromium; each test opens a context of its own (support.console.signed_in)."""
    async with chromium() as launched:
        yield launched
