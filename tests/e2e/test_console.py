"""The console in a real Chromium on the real control plane, signed in with a tenant's token: the
list and a job's page update themselves on a status change, and pause, resume and delete act as
the user."""

from __future__ import annotations

import datetime
import json
import re
from typing import Any

from playwright.async_api import Browser, Locator, expect
from support import ControlPlane
from support.console import (
    Console,
    create_job,
    job_spec,
    patch_status,
    screenshot_path,
    signed_in,
    tenant_token,
)
from support.eventually import eventually
from support.kubelet_logs import log_kubelet
from support.pods import bare_pod
from support.processes import ServiceProcess

from torchjob.api.constants import LABEL_JOB_NAME, LABEL_REPLICA_INDEX, LABEL_REPLICA_TYPE
from torchjob.lifecycle.times import format_time

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
    started = datetime.datetime.now(datetime.UTC) - datetime.timedelta(minutes=12)
    running = {"phase": "Running", "aggregate": {"running": 2}, "startTime": format_time(started)}
    patch_status(control_plane, namespace, "live", running)
    await expect(row.get_by_text("Running")).to_be_visible(timeout=LIVE)
    await expect(row).to_contain_text(re.compile(r"\d+m ago"))
    await page.screenshot(path=screenshot_path("console-jobs.png"))

    await page.get_by_role("link", name="live").click()
    await expect(page.locator("#job-phase")).to_have_text("Running")
    report = {"progressPercentage": 40, "estimatedRemainingSeconds": 1080}
    patch_status(control_plane, namespace, "live", {"trainerStatus": report})
    await expect(page.get_by_text("40%")).to_be_visible(timeout=LIVE)
    await expect(page.locator("#job-eta")).to_have_text("18m left")
    await page.screenshot(path=screenshot_path("console-job.png"), full_page=True)

    await page.get_by_role("button", name="Pause…").click()
    dialog = page.get_by_role("dialog", name="Pause live?")
    await expect(dialog).to_contain_text("deletes the job's 4 replica pods")
    await expect(dialog).to_contain_text("its progress")
    await expect(dialog).to_contain_text("Resume")
    await dialog.get_by_role("button", name="Cancel").click()
    await expect(dialog).to_be_hidden()
    pause = (job_spec(control_plane, namespace, "live").get("runMode") or {}).get("pause") or {}
    assert not pause.get("enabled")  # cancelled: nothing asked
    await page.get_by_role("button", name="Pause…").click()
    await dialog.get_by_role("button", name="Pause live").click()
    await expect(page.get_by_text("(pausing)")).to_be_visible(timeout=LIVE)
    spec = json.loads(
        control_plane.kubectl(
            "get", "pytorchtrainingjob", "live", "-n", namespace, "-o", "json"
        ).stdout
    )["spec"]
    assert spec["runMode"]["pause"]["enabled"] is True
    await page.get_by_role("button", name="Resume").click()
    await expect(page.get_by_role("button", name="Pause…")).to_be_visible(timeout=LIVE)

    await page.get_by_text("Delete…").click()
    await page.get_by_role("button", name="Delete live").click()
    await page.wait_for_url(f"**/ns/{namespace}/jobs")
    await expect(page.get_by_text("No training jobs")).to_be_visible(timeout=LIVE)
    await context.close()


async def test_pause_waits_for_running_replicas_and_times_and_eta_say_only_what_holds(
    control_plane: ControlPlane,
    admitted_namespace: str,
    webhook_server: ServiceProcess,
    console: Console,
    browser: Browser,
) -> None:
    namespace = admitted_namespace
    token = tenant_token(control_plane, namespace, "edit")
    create_job(control_plane, namespace, "early")
    context, page = await signed_in(browser, console, token)
    await page.goto(f"/ns/{namespace}/jobs/early")
    await expect(page.locator("#job-phase")).to_have_text("Pending")
    await expect(page.locator("#job-started")).to_have_text("not yet")
    # Never started: pausing would keep nothing and stop nothing.
    await expect(page.get_by_role("button", name="Pause…")).to_have_count(0)
    for link, query in (("Clone", ""), ("Edit as YAML", "&as=yaml")):
        href = await page.get_by_role("link", name=link).get_attribute("href")
        assert href == f"/ns/{namespace}/jobs/new?from=jobs/early{query}", href

    running = {
        "phase": "Running",
        "startTime": "2026-01-01T00:00:00Z",
        "trainerStatus": {"progressPercentage": 40, "estimatedRemainingSeconds": 130},
    }
    patch_status(control_plane, namespace, "early", running)
    await expect(page.get_by_role("button", name="Pause…")).to_be_visible(timeout=LIVE)
    await expect(page.locator("#job-eta")).to_have_text("2m10s left")
    await expect(page.locator("#job-started")).to_contain_text("ago")
    await expect(page.locator("#job-duration")).not_to_be_empty()

    control_plane.kubectl(
        "patch", "pytorchtrainingjob", "early", "-n", namespace, "--type=merge",
        "-p", json.dumps({"spec": {"runMode": {"pause": {"enabled": True}}}}),
    )  # fmt: skip
    patch_status(control_plane, namespace, "early", {"phase": "Paused"})
    await expect(page.get_by_role("button", name="Resume")).to_be_visible(timeout=LIVE)
    await expect(page.locator("#job-phase")).to_have_text("Paused")
    await expect(page.locator("#job-eta")).to_have_count(0)  # no time passes while paused
    await expect(page.get_by_role("button", name="Pause…")).to_have_count(0)

    control_plane.kubectl(
        "patch", "pytorchtrainingjob", "early", "-n", namespace, "--type=merge",
        "-p", json.dumps({"spec": {"runMode": {"pause": {"enabled": False}}}}),
    )  # fmt: skip
    finishing = {"progressPercentage": 100, "estimatedRemainingSeconds": 0}
    patch_status(
        control_plane, namespace, "early", {"phase": "Running", "trainerStatus": finishing}
    )
    await expect(page.get_by_role("button", name="Pause…")).to_be_visible(timeout=LIVE)
    await expect(page.locator("#job-status")).to_contain_text("100%")
    await expect(page.locator("#job-eta")).to_have_count(0)  # not "100 % · 0 s left"

    done = {"phase": "Succeeded", "completionTime": "2026-01-01T01:05:00Z"}
    patch_status(control_plane, namespace, "early", done)
    await expect(page.locator("#job-duration")).to_have_text("1h5m", timeout=LIVE)
    await expect(page.locator("#job-finished")).to_contain_text("ago")
    await page.goto(f"/ns/{namespace}/jobs/early/resources")
    await expect(page.locator("#resources-status")).to_contain_text(
        "This job has finished (Succeeded"
    )
    await expect(page.locator("#resources-status")).to_contain_text("no longer collected")

    await page.goto(f"/ns/{namespace}/jobs?phase=ImagePullFailed")
    phases = await page.locator("#phase option").all_inner_texts()
    assert {"ImagePullFailed", "Unschedulable", "Paused", "Succeeded"} <= set(phases), phases
    await page.goto(f"/ns/{namespace}/jobs")
    row = page.get_by_role("row", name="early")
    cells = row.get_by_role("cell")
    header = await page.locator("table.jobs thead th").all_inner_texts()
    assert await cells.nth(header.index("Duration") - 1).inner_text() == "1h5m"
    assert "ago" in await cells.nth(header.index("Started") - 1).inner_text()
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
        pod = bare_pod("trainer", node=node)
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
    control_plane: ControlPlane,
    namespace: str,
    phase: str,
    state: dict[str, Any],
    pod: str = "trainer",
) -> None:
    status = {"phase": phase, "containerStatuses": [{"name": "pytorch", "ready": True, **state}]}
    control_plane.kubectl(
        "patch",
        "pod",
        pod,
        "-n",
        namespace,
        "--subresource=status",
        "--type=merge",
        "-p",
        json.dumps({"status": status}),
    )


def replica_pod(node: str, job: str, index: int) -> dict[str, Any]:
    labels = {LABEL_JOB_NAME: job, LABEL_REPLICA_TYPE: "worker", LABEL_REPLICA_INDEX: str(index)}
    return bare_pod(f"{job}-worker-{index}", labels=labels, node=node)


AT_END = "(log) => log.scrollHeight - log.scrollTop - log.clientHeight < 4"


async def test_a_log_stays_at_its_end_has_times_a_search_and_a_choice_of_replica(
    control_plane: ControlPlane, namespace: str, console: Console, browser: Browser
) -> None:
    node = f"ranks-{namespace[-6:]}"
    async with log_kubelet(control_plane, node) as kubelet:
        for index in (0, 1):
            pod = replica_pod(node, "ranked", index)
            control_plane.kubectl("create", "-n", namespace, "-f", "-", input=json.dumps(pod))
            running = {"state": {"running": {"startedAt": "2026-01-01T00:00:00Z"}}}
            set_container(control_plane, namespace, "Running", running, f"ranked-worker-{index}")
        first = kubelet.log(namespace, "ranked-worker-0", "pytorch")
        for step in range(200):
            await first.write(f"rank 0 step {step}")
        await kubelet.log(namespace, "ranked-worker-1", "pytorch").write("rank 1 says hello")

        viewer = tenant_token(control_plane, namespace, "view")
        context, page = await signed_in(browser, console, viewer)
        await page.goto(f"/ns/{namespace}/pods/ranked-worker-0/log")
        shown = page.locator("pre.log")
        await expect(shown).to_contain_text("rank 0 step 199", timeout=LIVE)
        await expect(shown.locator(".ln")).to_have_count(200)
        await eventually_at_end(shown)
        # Each line has its time, from the apiserver (timestamps=true), in the reader's time zone.
        stamp = shown.locator("time.stamp").first
        assert (await stamp.get_attribute("datetime") or "").endswith("Z")
        await expect(stamp).to_have_text(re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}$"))
        await page.get_by_label("Timestamps").uncheck()
        await expect(stamp).to_be_hidden()

        await first.write("rank 0 step 200")
        await expect(shown).to_contain_text("rank 0 step 200", timeout=LIVE)
        await eventually_at_end(shown)
        # Scrolled up, the reader stays where they are while lines come.
        await shown.evaluate("(log) => { log.scrollTop = 0; }")
        await expect(page.get_by_label("Keep at the newest line")).not_to_be_checked()
        await first.write("rank 0 step 201")
        await expect(shown).to_contain_text("rank 0 step 201", timeout=LIVE)
        assert await shown.evaluate("(log) => log.scrollTop") == 0

        await page.get_by_label("Search").fill("step 19")
        await expect(shown.locator(".ln:not(.hidden)")).to_have_count(11)  # 19, 190-199
        await expect(page.locator("#log-matches")).to_have_text("11 of 202 lines")
        await expect(shown.locator("mark").first).to_have_text("step 19")
        await first.write("rank 0 step 1900")
        await first.write("rank 0 step 2000")
        await expect(shown).to_contain_text("step 2000", timeout=LIVE)
        await expect(shown.locator(".ln:not(.hidden)")).to_have_count(12)

        await page.get_by_label("Replica").select_option(label="worker-1")
        await page.wait_for_url(f"**/ns/{namespace}/pods/ranked-worker-1/log")
        await expect(page.locator("pre.log")).to_contain_text("rank 1 says hello", timeout=LIVE)
        await expect(page.get_by_label("Replica")).to_have_value("ranked-worker-1")
        await context.close()


async def eventually_at_end(log: Locator) -> None:
    async def at_end() -> bool:
        return bool(await log.evaluate(AT_END))

    await eventually(at_end, "the log scrolled to its newest line")
