"""The console and Kubeflow Trainer's TrainJob, in a real Chromium on the real control plane: with
`--trainer` the creation form offers the kind, a tenant with `edit` creates a TrainJob of the
torch-distributed runtime from it (read back with kubectl) and lands on the job's page, which
the list shows on its own tab; what a TrainJob keeps in its runtime instead is refused beside its
field."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from playwright.async_api import Browser, expect
from support import ControlPlane
from support.console import Console, grant_job_roles, signed_in, start_console, tenant_token
from support.processes import ServiceProcess
from support.trainer import TORCH_RUNTIME

CHECKED = 15_000  # ms: the dry run follows a change after half a second
IMAGE = "pytorch/pytorch:2.13.0-cuda13.0-cudnn9-runtime"
TRAINJOB = "Kubeflow TrainJob"


@pytest.fixture(scope="module")
def trainer_console(control_plane: ControlPlane, crd: None) -> Iterator[Console]:
    """The console serving TrainJobs too, and Trainer's torch-distributed runtime installed as
    the chart installs it."""
    grant_job_roles(control_plane)
    control_plane.kubectl("apply", "-f", "-", input=json.dumps(TORCH_RUNTIME))
    started = start_console(control_plane, "--trainer")
    yield started
    started.process.close()


def trainjobs_in(control_plane: ControlPlane, namespace: str) -> list[dict[str, Any]]:
    got = control_plane.kubectl("get", "trainjobs", "-n", namespace, "-o", "json")
    items: list[dict[str, Any]] = json.loads(got.stdout)["items"]
    return items


async def test_a_tenant_creates_a_trainjob_from_the_form_and_lands_on_its_page(
    control_plane: ControlPlane,
    admitted_namespace: str,
    webhook_server: ServiceProcess,
    trainer_console: Console,
    browser: Browser,
) -> None:
    namespace = admitted_namespace
    token = tenant_token(control_plane, namespace, "edit")
    context, page = await signed_in(browser, trainer_console, token)
    await page.goto(f"/ns/{namespace}/jobs/new")
    await page.get_by_label("Kind", exact=True).select_option(label=TRAINJOB)
    await expect(page.locator("#hint-kind")).to_contain_text("torch-distributed runtime")
    values = {
        "Name": "mnist-tj",
        "Image": IMAGE,
        "Command line": "python train.py --epochs 3",
        "Replicas": "2",
        "Processes per node": "2",
    }
    for label, value in values.items():
        await page.get_by_label(label, exact=True).fill(value)
    # The memory volume is a pod's: a TrainJob takes it from its runtime, and says so.
    refusal = page.get_by_text("a TrainJob takes this from its runtime's pod template")
    await expect(refusal.first).to_be_visible(timeout=CHECKED)
    await page.get_by_label("Mount a memory volume at /dev/shm", exact=True).uncheck()
    await expect(page.locator("#accepted")).to_be_visible(timeout=CHECKED)
    await page.get_by_role("button", name="Create", exact=True).click()
    await page.wait_for_url(f"**/ns/{namespace}/trainjobs/mnist-tj")
    await expect(page.get_by_role("heading", name="mnist-tj", exact=True)).to_be_visible()
    (job,) = trainjobs_in(control_plane, namespace)
    assert job["spec"]["runtimeRef"]["name"] == "torch-distributed"
    trainer = job["spec"]["trainer"]
    assert (trainer["numNodes"], trainer["numProcPerNode"]) == (2, 2)
    assert (trainer["command"], trainer["args"]) == (["torchrun"], ["train.py", "--epochs", "3"])
    await page.goto(f"/ns/{namespace}/trainjobs")
    await expect(page.get_by_role("link", name="mnist-tj", exact=True)).to_be_visible()
    await context.close()
