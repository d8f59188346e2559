"""The console in a real Chromium on the real control plane, signed in with a tenant's token: the
list and a job's page update themselves on a status change, and pause, resume and delete act as
the user."""

from __future__ import annotations

import json
from typing import Any

from playwright.async_api import Browser, expect
from support import ControlPlane
from support.console import (
    Console,
    create_job,
    patch_status,
    screenshot_path,
    signed_in,
    tenant_token,
)
from support.kubelet_logs import log_kubelet
from support.processes import ServiceProcess

LIVE = 10_000  # ms: a change reaches an open page within seconds, without a reload


async def test_list_and_job_page_follow_status_and_buttons_act_as_the_user(
    control_plane: ControlPlane,
    admitted_namespace: str,
    webhook_server: ServiceProcess,
    console: Console,
    browser: Browser,
) -> None:
    namespace = admitted_namespace
    token = tenant_token(control_plane, namespace, "edit")
    context, page = await signed_in(browser, console, token)
    await page.goto(f"/ns/{namespace}/jobs")
    await expect(page.get_by_text("No training jobs")).to_be_visible()

    create_job(control_plane, namespace, "live")
    row = page.get_by_role("row", name="live")
    await expect(row).to_be_visible(timeout=LIVE)
    patch_status(
        control_plane, namespace, "live", {"phase": "Running", "aggregate": {"running": 2}}
    )
    await expect(row.get_by_text("Running")).to_be_visible(timeout=LIVE)
    await page.screenshot(path=screenshot_path("console-jobs.png"))

    await page.get_by_role("link", name="live").click()
    await expect(page.locator("#job-phase")).to_have_text("Running")
    patch_status(control_plane, namespace, "live", {"trainerStatus": {"progressPercentage": 40}})
    await expect(page.get_by_text("40%")).to_be_visible(timeout=LIVE)
    await page.screenshot(path=screenshot_path("console-job.png"), full_page=True)

    await page.get_by_role("button", name="Pause").click()
    await expect(page.get_by_text("(pausing)")).to_be_visible(timeout=LIVE)
    spec = json.loads(
        control_plane.kubectl(
            "get", "pytorchtrainingjob", "live", "-n", namespace, "-o", "json"
        ).stdout
    )["spec"]
    assert spec["runMode"]["pause"]["enabled"] is True
    await page.get_by_role("button", name="Resume").click()
    await expect(page.get_by_role("button", name="Pause")).to_be_visible(timeout=LIVE)

    await page.get_by_text("Delete…").click()
    await page.get_by_role("button", name="Delete live").click()
    await page.wait_for_url(f"**/ns/{namespace}/jobs")
    await expect(page.get_by_text("No training jobs")).to_be_visible(timeout=LIVE)
    await context.close()


# Every control of a page has a name a screen reader says (its label), and every page has one
# main landmark and one top-level heading.
UNNAMED_CONTROLS = """() => [...document.querySelectorAll(
        'input:not([type=hidden]), select, textarea, button')]
    .filter((e) => !(e.labels && e.labels.length) && !e.getAttribute('aria-label')
                   && !(e.tagName === 'BUTTON' && e.textContent.trim()))
    .map((e) => e.outerHTML.slice(0, 120))"""


async def test_every_page_names_its_controls_and_has_one_main_heading(
    control_plane: ControlPlane,
    admitted_namespace: str,
    webhook_server: ServiceProcess,
    console: Console,
    browser: Browser,
) -> None:
    namespace = admitted_namespace
    create_job(control_plane, namespace, "named")
    context, page = await signed_in(
        browser, console, tenant_token(control_plane, namespace, "edit")
    )
    for path in (
        "/",
        f"/ns/{namespace}/jobs",
        f"/ns/{namespace}/jobs/new",
        f"/ns/{namespace}/jobs/named",
        f"/ns/{namespace}/jobs/named/replicas",
        f"/ns/{namespace}/jobs/named/resources",
    ):
        await page.goto(path)
        assert await page.evaluate(UNNAMED_CONTROLS) == [], path
        await expect(page.get_by_role("main")).to_have_count(1)
        await expect(page.get_by_role("heading", level=1)).to_have_count(1)
    await context.close()


async def test_a_log_streams_into_the_page_until_its_container_exits(
    control_plane: ControlPlane, namespace: str, console: Console, browser: Browser
) -> None:
    node = f"logs-{namespace[-6:]}"
    async with log_kubelet(control_plane, node) as kubelet:
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "trainer"},
            "spec": {"nodeName": node, "containers": [{"name": "pytorch", "image": "trainer:1"}]},
        }
        control_plane.kubectl("create", "-n", namespace, "-f", "-", input=json.dumps(pod))
        running = {"state": {"running": {"startedAt": "2026-01-01T00:00:00Z"}}}
        set_container(control_plane, namespace, "Running", running)
        log = kubelet.log(namespace, "trainer", "pytorch")
        await log.write("epoch 1 loss 2.30")

        viewer = tenant_token(control_plane, namespace, "view")
        context, page = await signed_in(browser, console, viewer)
        await page.goto(f"/ns/{namespace}/pods/trainer/log")
        shown = page.locator("pre.log")
        await expect(shown).to_contain_text("epoch 1 loss 2.30", timeout=LIVE)
        for epoch in (2, 3):
            await log.write(f"epoch {epoch} loss <{epoch}>")  # escaped, not markup
            await expect(shown).to_contain_text(f"epoch {epoch} loss <{epoch}>", timeout=LIVE)
        ended = {"state": {"terminated": {"exitCode": 0, "reason": "Completed"}}}
        set_container(control_plane, namespace, "Succeeded", ended)
        await log.stop()
        await expect(page.get_by_text("exited")).to_be_visible(timeout=LIVE)
        await expect(page.get_by_text("Completed")).to_be_visible()
        await context.close()


def set_container(
    control_plane: ControlPlane, namespace: str, phase: str, state: dict[str, Any]
) -> None:
    status = {"phase": phase, "containerStatuses": [{"name": "pytorch", "ready": True, **state}]}
    control_plane.kubectl(
        "patch",
        "pod",
        "trainer",
        "-n",
        namespace,
        "--subresource=status",
        "--type=merge",
        "-p",
        json.dumps({"status": status}),
    )
