"""The console's job creation page in a real Chromium on the real control plane, signed in with a
tenant's token: a job created from the form is the job the form showed; the webhook's and the
apiserver's refusals, found by the dry run made as the user on every change, are shown beside the
field they name and nothing is created; the YAML view round-trips with the form."""

from __future__ import annotations

import json
from typing import Any

from playwright.async_api import Browser, Page, expect
from support import ControlPlane
from support.console import Console, screenshot_path, signed_in, tenant_token
from support.processes import ServiceProcess

CHECKED = 15_000  # ms: the dry run follows a change after half a second
IMAGE = "pytorch/pytorch:2.3.1-cuda12.1-cudnn8-runtime"


def jobs_in(control_plane: ControlPlane, namespace: str) -> list[dict[str, Any]]:
    got = control_plane.kubectl("get", "pytorchtrainingjobs", "-n", namespace, "-o", "json")
    items: list[dict[str, Any]] = json.loads(got.stdout)["items"]
    return items


async def open_form(page: Page, namespace: str) -> None:
    await page.goto(f"/ns/{namespace}/jobs")
    await page.get_by_role("link", name="Create job").click()
    await page.wait_for_url(f"**/ns/{namespace}/jobs/new")


async def fill(page: Page, values: dict[str, str]) -> None:
    for label, value in values.items():
        await page.get_by_label(label, exact=True).fill(value)


async def test_a_tenant_creates_a_job_from_the_form_and_lands_on_its_page(
    control_plane: ControlPlane,
    admitted_namespace: str,
    webhook_server: ServiceProcess,
    console: Console,
    browser: Browser,
) -> None:
    namespace = admitted_namespace
    token = tenant_token(control_plane, namespace, "edit")
    context, page = await signed_in(browser, console, token)
    await open_form(page, namespace)
    torchrun = page.get_by_label("Start the training with torchrun")
    await expect(torchrun).to_be_checked()
    await fill(
        page,
        {
            "Name": "mnist",
            "Image": IMAGE,
            "Arguments": "train.py --epochs 3 --note 'two words'",
            "Replicas": "2",
            "Processes per node": "2",
            "CPU request": "2",
            "Memory limit": "8Gi",
        },
    )
    await expect(page.locator("#accepted")).to_be_visible(timeout=CHECKED)
    await page.screenshot(path=screenshot_path("console-create.png"), full_page=True)

    await page.get_by_role("button", name="Create", exact=True).click()
    await page.wait_for_url(f"**/ns/{namespace}/jobs/mnist")
    await expect(page.get_by_role("heading", name="mnist", exact=True)).to_be_visible()
    (job,) = jobs_in(control_plane, namespace)
    spec = job["spec"]
    assert spec["torchrunConfig"]["enabled"] is True
    assert spec["torchrunConfig"]["procPerNode"] == "2"
    (replica,) = spec["replicaSpecs"]
    assert replica["type"] == "worker" and replica["replicas"] == 2
    container = replica["template"]["spec"]["containers"][0]
    assert container["image"] == IMAGE
    assert container["args"] == ["train.py", "--epochs", "3", "--note", "two words"]
    assert container["resources"] == {"requests": {"cpu": "2"}, "limits": {"memory": "8Gi"}}
    assert {"name": "dshm", "emptyDir": {"medium": "Memory"}} in replica["template"]["spec"][
        "volumes"
    ]
    await context.close()


async def test_a_viewer_is_told_they_may_not_create_jobs(
    control_plane: ControlPlane, namespace: str, console: Console, browser: Browser
) -> None:
    token = tenant_token(control_plane, namespace, "view")
    context, page = await signed_in(browser, console, token)
    answer = await page.goto(f"/ns/{namespace}/jobs/new")
    assert answer is not None and answer.status == 403
    await expect(page.get_by_text("may not create training jobs")).to_be_visible()
    await expect(page.get_by_label("Name", exact=True)).to_have_count(0)
    await context.close()


async def test_the_webhooks_refusal_is_shown_beside_its_field_and_nothing_is_created(
    control_plane: ControlPlane,
    admitted_namespace: str,
    webhook_server: ServiceProcess,
    console: Console,
    browser: Browser,
) -> None:
    """procPerNode `gpu` passes the CRD's schema; our webhook refuses it without a GPU limit."""
    namespace = admitted_namespace
    context, page = await signed_in(
        browser, console, tenant_token(control_plane, namespace, "edit")
    )
    await open_form(page, namespace)
    await fill(
        page,
        {"Name": "typo", "Image": IMAGE, "Arguments": "train.py", "Processes per node": "gpu"},
    )
    beside_gpus = page.locator("#error-gpus")
    webhook_says = 'procPerNode "gpu" needs a GPU limit'
    await expect(beside_gpus).to_contain_text(webhook_says, timeout=CHECKED)
    described_by = await page.get_by_label("GPUs", exact=True).get_attribute("aria-describedby")
    assert "error-gpus" in (described_by or "").split()
    await expect(page.get_by_text("The cluster refuses this job")).to_be_visible()

    await page.get_by_role("button", name="Create", exact=True).click()
    await expect(page.locator("#error-gpus")).to_contain_text(webhook_says)
    assert page.url.endswith(f"/ns/{namespace}/jobs/new")
    assert jobs_in(control_plane, namespace) == []

    await page.get_by_label("GPUs", exact=True).fill("1")
    await expect(page.locator("#accepted")).to_be_visible(timeout=CHECKED)
    await expect(beside_gpus).to_be_empty()
    await context.close()


async def test_a_name_the_apiserver_refuses_is_shown_beside_the_name_and_nothing_is_created(
    control_plane: ControlPlane,
    admitted_namespace: str,
    webhook_server: ServiceProcess,
    console: Console,
    browser: Browser,
) -> None:
    namespace = admitted_namespace
    context, page = await signed_in(
        browser, console, tenant_token(control_plane, namespace, "edit")
    )
    await open_form(page, namespace)
    await fill(page, {"Name": "Bad_Name", "Image": IMAGE, "Arguments": "train.py"})
    beside_name = page.locator("#error-name")
    await expect(beside_name).to_contain_text("RFC 1123", timeout=CHECKED)

    await page.get_by_role("button", name="Create", exact=True).click()
    await expect(page.locator("#error-name")).to_contain_text("Bad_Name")
    await expect(page.get_by_label("Name", exact=True)).to_have_value("Bad_Name")
    assert jobs_in(control_plane, namespace) == []
    await context.close()


async def test_the_yaml_view_round_trips_with_the_form(
    control_plane: ControlPlane,
    admitted_namespace: str,
    webhook_server: ServiceProcess,
    console: Console,
    browser: Browser,
) -> None:
    namespace = admitted_namespace
    context, page = await signed_in(
        browser, console, tenant_token(control_plane, namespace, "edit")
    )
    await open_form(page, namespace)
    await fill(page, {"Name": "round", "Image": "old/image:1", "Arguments": "train.py"})
    # By keyboard alone: the view switches, and the keyboard stays on the switch.
    await page.get_by_role("button", name="YAML").focus()
    await page.keyboard.press("Enter")
    manifest = page.get_by_label("Manifest (YAML)")
    await expect(manifest).to_contain_text("image: old/image:1")
    await expect(page.get_by_role("button", name="YAML")).to_be_focused()
    await expect(page.get_by_role("button", name="YAML")).to_have_attribute("aria-pressed", "true")
    text = await manifest.input_value()
    await manifest.fill(text.replace("old/image:1", "new/image:2"))
    await page.get_by_role("button", name="Form").click()
    await expect(page.get_by_label("Image", exact=True)).to_have_value("new/image:2")
    await expect(page.get_by_label("Name", exact=True)).to_have_value("round")

    # A second container: the form cannot show it, and the YAML stays the source.
    await page.get_by_role("button", name="YAML").click()
    text = await manifest.input_value()
    sidecar = "      - name: proxy\n        image: envoy:1\n      volumes:"
    await manifest.fill(text.replace("      volumes:", sidecar, 1))
    await page.get_by_role("button", name="Form").click()
    await expect(page.locator("#not-shown")).to_contain_text("one container")
    await expect(manifest).to_contain_text("envoy:1")
    await manifest.fill("spec: [unclosed")
    await page.get_by_role("button", name="Form").click()
    await expect(page.locator("#error-yaml")).not_to_be_empty()
    await context.close()
