"""A job's diagnosis in the console, on the real control plane: the Diagnose button asks for one
as the signed-in user (the job's diagnose annotation, set to the time) and the page says it was
asked; a user who may not patch the job gets the apiserver's 403 and changes nothing; and the
diagnosis the reconciler records (played here by the test, through the status subresource) is
shown with its message, the job's own words, escaped and marked as the job's report, beside the
links to each replica's restart-agent log. The crafted-name checks of every route, this one's
included, are tests/e2e/test_console_crafted.py's (it walks the routes the console registers)."""

from __future__ import annotations

import datetime
import json
from typing import Any

from playwright.async_api import Browser, Dialog, expect
from support import ControlPlane
from support.console import Console, create_job, patch_status, signed_in, tenant_token
from support.eventually import eventually
from support.processes import ServiceProcess

from torchjob.api.constants import (
    ANNOTATION_DIAGNOSE,
    LABEL_JOB_NAME,
    LABEL_REPLICA_INDEX,
    LABEL_REPLICA_TYPE,
)
from torchjob.lifecycle.times import format_time
from torchjob.render.in_place import AGENT

LIVE = 10_000  # ms: a change reaches an open page within seconds, without a reload
CRAFTED = "rank 1 <script>alert(1)</script> waits; <img src=x onerror=alert(1)> on node n1"


def job_annotations(control_plane: ControlPlane, namespace: str, name: str) -> dict[str, str]:
    got = control_plane.kubectl("get", "pytorchtrainingjob", name, "-n", namespace, "-o", "json")
    found: dict[str, str] = json.loads(got.stdout)["metadata"].get("annotations") or {}
    return found


def agent_pod(job: str, index: int) -> dict[str, Any]:
    """A replica pod of `job` with a restart agent, as the webhook makes one (left Pending)."""
    labels = {LABEL_JOB_NAME: job, LABEL_REPLICA_TYPE: "worker", LABEL_REPLICA_INDEX: str(index)}
    agent = {"name": AGENT, "image": "agent:1", "restartPolicy": "Always"}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"{job}-worker-{index}", "labels": labels},
        "spec": {"initContainers": [agent], "containers": [{"name": "pytorch", "image": "t:1"}]},
    }


async def test_diagnose_asks_as_the_user_and_a_user_who_may_not_patch_gets_the_403(
    control_plane: ControlPlane,
    admitted_namespace: str,
    webhook_server: ServiceProcess,
    console: Console,
    browser: Browser,
) -> None:
    namespace = admitted_namespace
    create_job(control_plane, namespace, "hung")
    running = {"phase": "Running", "aggregate": {"running": 2}}
    patch_status(control_plane, namespace, "hung", running)

    viewer, _ = await signed_in(browser, console, tenant_token(control_plane, namespace, "view"))
    page = await viewer.new_page()
    await page.goto(f"/ns/{namespace}/jobs/hung")
    await expect(page.locator("#job-phase")).to_have_text("Running")
    await expect(page.get_by_role("button", name="Diagnose")).to_have_count(0)
    path = f"/ns/{namespace}/jobs/hung/diagnose"
    for htmx in ({}, {"HX-Request": "true"}):
        answer = await viewer.request.post(
            path, form={}, headers={"Origin": console.url, **htmx}, max_redirects=0
        )
        text = await answer.text()
        assert answer.status == 403, (answer.status, text[:300])
        assert "403 Forbidden" in text and "cannot patch" in text, text[:500]
    # Not from the console's own pages: refused before the session is looked up.
    answer = await viewer.request.post(path, form={}, max_redirects=0)
    assert answer.status == 403 and "Origin" in await answer.text()
    assert ANNOTATION_DIAGNOSE not in job_annotations(control_plane, namespace, "hung")
    await viewer.close()

    editor, page = await signed_in(browser, console, tenant_token(control_plane, namespace, "edit"))
    await page.goto(f"/ns/{namespace}/jobs/hung")
    await expect(page.locator("#job-diagnosis")).to_have_count(0)
    before = datetime.datetime.now(datetime.UTC)
    await page.get_by_role("button", name="Diagnose").click()
    await expect(page.locator("#diagnosis-requested")).to_contain_text(
        "A diagnosis was asked", timeout=LIVE
    )

    def asked() -> str:
        return job_annotations(control_plane, namespace, "hung").get(ANNOTATION_DIAGNOSE, "")

    value: str = await eventually(asked, "the diagnose annotation")
    when = datetime.datetime.fromisoformat(value.replace("Z", "+00:00"))
    assert before - datetime.timedelta(seconds=1) <= when <= datetime.datetime.now(datetime.UTC)
    assert value.endswith("Z")

    # The reconciler takes it up: the request is answered, the diagnosis is under way.
    record = {
        "number": 1,
        "reason": "Requested",
        "request": value,
        "askedTime": format_time(datetime.datetime.now(datetime.UTC)),
        "pods": 2,
    }
    patch_status(control_plane, namespace, "hung", {"diagnosis": record})
    await expect(page.locator("#diagnosis-collected")).to_have_text("under way", timeout=LIVE)
    await expect(page.locator("#diagnosis-requested")).to_have_count(0)
    await expect(page.locator("#diagnosis-number")).to_have_text("1")
    await editor.close()


async def test_the_jobs_report_is_escaped_and_marked_with_links_to_the_agents_logs(
    control_plane: ControlPlane, namespace: str, console: Console, browser: Browser
) -> None:
    create_job(control_plane, namespace, "stuck")
    for index in (1, 0):
        pod = json.dumps(agent_pod("stuck", index))
        control_plane.kubectl("create", "-n", namespace, "-f", "-", input=pod)
    context, page = await signed_in(
        browser, console, tenant_token(control_plane, namespace, "view")
    )
    dialogs: list[str] = []

    async def dismissed(dialog: Dialog) -> None:
        dialogs.append(dialog.message)
        await dialog.dismiss()

    page.on("dialog", dismissed)
    await page.goto(f"/ns/{namespace}/jobs/stuck")
    await expect(page.locator("#job-phase")).to_be_visible()

    now = datetime.datetime.now(datetime.UTC)
    record = {
        "number": 3,
        "reason": "NoProgress",
        "askedTime": format_time(now - datetime.timedelta(seconds=12)),
        "pods": 2,
        "collectedTime": format_time(now),
        "message": CRAFTED,
    }
    patch_status(control_plane, namespace, "stuck", {"phase": "Running", "diagnosis": record})
    shown = page.locator("#diagnosis-message")
    await expect(shown.locator("pre")).to_have_text(CRAFTED, timeout=LIVE)
    await expect(shown.locator("figcaption")).to_contain_text("The job's report")
    await expect(page.locator("#job-diagnosis img")).to_have_count(0)
    await expect(page.locator("#job-diagnosis script")).to_have_count(0)
    await expect(page.locator("#diagnosis-reason")).to_contain_text("NoProgress")
    await expect(page.locator("#diagnosis-collected")).to_contain_text("ago")
    logs = page.locator("#diagnosis-logs a")
    await expect(logs).to_have_count(2)
    hrefs = [await link.get_attribute("href") for link in await logs.all()]
    assert hrefs == [
        f"/ns/{namespace}/pods/stuck-worker-{index}/log?container={AGENT}" for index in (0, 1)
    ], hrefs
    # Read again, not only as the live part sent it.
    await page.reload()
    await expect(page.locator("#diagnosis-message pre")).to_have_text(CRAFTED)
    await expect(page.locator("main img")).to_have_count(0)
    assert "<script>alert(1)</script>" not in await page.content()
    assert dialogs == []
    await context.close()
