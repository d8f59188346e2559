"""The console's creation form for Kubeflow's PyTorchJob, in a real Chromium on the real control
plane: with `--kubeflow` the form offers the kind, a tenant with `edit` creates a PyTorchJob from
it (a Master and a Worker, read back with kubectl) and lands on the job's page; what a PyTorchJob
has no place for is refused beside its field and nothing is created; without `--kubeflow` there is
no choice to make."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from playwright.async_api import Browser, expect
from support import ControlPlane
from support.console import (
    Console,
    grant_job_roles,
    screenshot_path,
    signed_in,
    start_console,
    tenant_token,
)
from support.processes import ServiceProcess

CHECKED = 15_000  # ms: the dry run follows a change after half a second
IMAGE = "pytorch/pytorch:2.3.1-cuda12.1-cudnn8-runtime"
KUBEFLOW = "Kubeflow PyTorchJob"


@pytest.fixture(scope="module")
def kubeflow_console(control_plane: ControlPlane, crd: None) -> Iterator[Console]:
    """The console serving Kubeflow's PyTorchJobs too; the chart's roles (rendered with
    `kubeflow.enabled`, as the e2e suite renders it) add them to `edit` and `view`."""
    grant_job_roles(control_plane)
    started = start_console(control_plane, "--kubeflow")
    yield started
    started.process.close()


def pytorchjobs_in(control_plane: ControlPlane, namespace: str) -> list[dict[str, Any]]:
    got = control_plane.kubectl("get", "pytorchjobs", "-n", namespace, "-o", "json")
    items: list[dict[str, Any]] = json.loads(got.stdout)["items"]
    return items


async def test_a_tenant_creates_a_pytorchjob_from_the_form_and_lands_on_its_page(
    control_plane: ControlPlane,
    admitted_namespace: str,
    webhook_server: ServiceProcess,
    kubeflow_console: Console,
    browser: Browser,
) -> None:
    namespace = admitted_namespace
    token = tenant_token(control_plane, namespace, "edit")
    context, page = await signed_in(browser, kubeflow_console, token)
    await page.goto(f"/ns/{namespace}/jobs/new")
    help_text = page.locator("#hint-kind")
    await expect(help_text).to_contain_text("torchjob's own job")
    await page.get_by_label("Kind", exact=True).select_option(label=KUBEFLOW)
    # The help beside the choice says what the chosen kind is.
    await expect(help_text).to_contain_text("as Kubeflow runs it")
    values = {
        "Name": "mnist-kf",
        "Image": IMAGE,
        "Command line": "python train.py --epochs 3",
        "Replicas": "2",
        "Processes per node": "2",
    }
    for label, value in values.items():
        await page.get_by_label(label, exact=True).fill(value)
    await page.get_by_label("Clean-up policy", exact=True).select_option("Unfinished")
    await expect(page.locator("#accepted")).to_be_visible(timeout=CHECKED)
    await page.screenshot(path=screenshot_path("console-create-kubeflow.png"), full_page=True)
    # The YAML view shows the PyTorchJob, and the form comes back from it.
    await page.get_by_role("button", name="YAML").click()
    manifest = page.get_by_label("Manifest (YAML)")
    await expect(manifest).to_contain_text("kind: PyTorchJob")
    await expect(manifest).to_contain_text("pytorchReplicaSpecs:")
    await page.get_by_role("button", name="Form").click()
    await expect(page.get_by_label("Kind", exact=True)).to_have_value("PyTorchJob")
    await expect(page.get_by_label("Replicas", exact=True)).to_have_value("2")

    await page.get_by_role("button", name="Create", exact=True).click()
    await page.wait_for_url(f"**/ns/{namespace}/pytorchjobs/mnist-kf")
    await expect(page.get_by_role("heading", name="mnist-kf", exact=True)).to_be_visible()
    (job,) = pytorchjobs_in(control_plane, namespace)
    spec = job["spec"]
    master, worker = spec["pytorchReplicaSpecs"]["Master"], spec["pytorchReplicaSpecs"]["Worker"]
    assert (master["replicas"], worker["replicas"]) == (1, 1)
    assert spec["nprocPerNode"] == "2"
    assert spec["runPolicy"]["cleanPodPolicy"] == "Running"
    for replica in (master, worker):
        (container,) = replica["template"]["spec"]["containers"]
        assert container["name"] == "pytorch" and container["image"] == IMAGE
        assert container["command"] == ["torchrun"]
        assert container["args"] == ["train.py", "--epochs", "3"]
        volumes = replica["template"]["spec"]["volumes"]
        assert {"name": "dshm", "emptyDir": {"medium": "Memory"}} in volumes
    assert (
        control_plane.kubectl("get", "pytorchtrainingjobs", "-n", namespace, "-o", "name").stdout
        == ""
    )
    await context.close()


async def test_what_a_pytorchjob_has_no_place_for_is_refused_beside_its_field(
    control_plane: ControlPlane,
    admitted_namespace: str,
    webhook_server: ServiceProcess,
    kubeflow_console: Console,
    browser: Browser,
) -> None:
    namespace = admitted_namespace
    token = tenant_token(control_plane, namespace, "edit")
    context, page = await signed_in(browser, kubeflow_console, token)
    await page.goto(f"/ns/{namespace}/jobs/new?kind=PyTorchJob")
    await expect(page.get_by_label("Kind", exact=True)).to_have_value("PyTorchJob")
    await page.get_by_label("Name", exact=True).fill("with-queue")
    await page.get_by_label("Image", exact=True).fill(IMAGE)
    await page.get_by_label("Queue", exact=True).fill("research")
    await expect(page.locator("#error-queue")).to_contain_text(
        "no T9k Scheduler queue", timeout=CHECKED
    )

    await page.get_by_role("button", name="Create", exact=True).click()
    await expect(page.locator("#error-queue")).to_contain_text("no T9k Scheduler queue")
    assert page.url.endswith(f"/ns/{namespace}/jobs/new")
    assert pytorchjobs_in(control_plane, namespace) == []

    # The same form as a PyTorchTrainingJob has a place for the queue.
    await page.get_by_label("Kind", exact=True).select_option(label="PyTorchTrainingJob")
    await expect(page.locator("#error-queue")).to_be_empty(timeout=CHECKED)
    await context.close()


async def test_without_kubeflow_the_form_offers_no_kind(
    control_plane: ControlPlane, namespace: str, console: Console, browser: Browser
) -> None:
    context, page = await signed_in(
        browser, console, tenant_token(control_plane, namespace, "edit")
    )
    await page.goto(f"/ns/{namespace}/jobs/new?kind=PyTorchJob")
    await expect(page.get_by_label("Name", exact=True)).to_be_visible()
    await expect(page.get_by_label("Kind", exact=True)).to_have_count(0)
    await page.get_by_role("button", name="YAML").click()
    await expect(page.get_by_label("Manifest (YAML)")).to_contain_text("kind: PyTorchTrainingJob")
    await context.close()
