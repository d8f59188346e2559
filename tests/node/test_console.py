"""The console on the real node, reached as a user reaches it (`torchjob console` forwarding a
local port): the example job created from the form by a tenant with `edit`, trained to Succeeded
while its worker's log streams in the page and the Resources tab draws CPU and memory from
metrics-server; then its TensorBoard opens from the job's page. And a data scientist's path with
no terminal: the example from one command line with torchrun on and a claim picked from the list,
a typo'd image fixed with Clone, the clone trained and its TensorBoard opened."""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterator

import pytest
from playwright.async_api import BrowserContext, Page, expect
from support.cli import TORCHJOB
from support.console import chromium, screenshot_path
from support.node import Node, host_path_claim, wait_until

JOB = "mnist-console"
CLAIM = "console-runs"
# Long enough for metrics-server to sample the replicas (twice, 15 s apart) and the page to draw
# them while they train: with its default batch the example's epoch takes under a second here.
TRAINING_ARGUMENTS = "--epochs 20 --batch_size 2"
TRAINING = 15 * 60_000  # ms: the example's epochs on two cores, with room
SAMPLES = 120_000  # ms: metrics-server's first samples of new pods, then two of the page's
DRAWN_PODS = f"{JOB}-worker-0 {JOB}-worker-1"
MISSING_IMAGE = "localhost/torchjob/no-such-image:0"  # no registry is reachable either


@pytest.fixture
def console_url(node: Node) -> Iterator[str]:
    """`torchjob console` forwarding a local port to the chart's console Service."""
    forward = subprocess.Popen(
        [
            str(TORCHJOB),
            *("console", "--no-browser", f"--kubectl={node.kubectl_path}"),
            f"--kubeconfig={node.kubeconfig}",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert forward.stdout is not None
        line = forward.stdout.readline()
        match = re.search(r"(http://127\.0\.0\.1:\d+)/", line)
        assert match, line
        yield match[1]
    finally:
        forward.terminate()
        forward.wait(timeout=10)


def edit_token(node: Node, namespace: str) -> str:
    node.kubectl("create", "serviceaccount", "trainer", "-n", namespace)
    node.kubectl(
        "create",
        "rolebinding",
        "trainer-edit",
        "--clusterrole=edit",
        f"--serviceaccount={namespace}:trainer",
        "-n",
        namespace,
    )
    return node.kubectl("create", "token", "trainer", "-n", namespace).stdout.strip()


def tensorboard_ready(node: Node, namespace: str, job: str = JOB) -> bool:
    status = node.job(namespace, job).get("status") or {}
    return bool((status.get("tensorboard") or {}).get("ready"))


async def sign_in(context: BrowserContext, console_url: str, token: str) -> Page:
    page = await context.new_page()
    await page.goto("/sign-in")
    await page.get_by_label("Token").fill(token)
    await page.get_by_role("button", name="Sign in").click()
    await page.wait_for_url(f"{console_url}/")
    return page


async def create_from_form(page: Page, namespace: str, image: str) -> None:
    await page.goto(f"/ns/{namespace}/jobs/new")
    fields = {
        "Name": JOB,
        "Image": image,
        "Command line": f"python train.py {TRAINING_ARGUMENTS} --log_dir runs/{JOB}",
        "Working directory": "/workspace",
        "Replicas": "2",
        "Processes per node": "2",
        "CPU request": "500m",
        "CPU limit": "2",
        "Memory request": "1Gi",
        "Memory limit": "2Gi",
        "PVC claim name": CLAIM,
        "Mount path": "/workspace/runs",
    }
    for label, value in fields.items():
        await page.get_by_label(label, exact=True).fill(value)
    await page.get_by_label("Start a TensorBoard for the job").check()
    await page.get_by_label("TensorBoard image", exact=True).fill(image)
    await page.get_by_label("Log directory on the PVC", exact=True).fill(JOB)
    await expect(page.locator("#accepted")).to_be_visible(timeout=30_000)
    await page.get_by_role("button", name="Create", exact=True).click()
    await page.wait_for_url(f"**/ns/{namespace}/jobs/{JOB}")


async def test_the_example_from_the_form_trains_while_its_log_and_resources_show(
    node: Node, node_namespace: str, console_url: str
) -> None:
    namespace = node_namespace
    host_path_claim(node, namespace, CLAIM)
    token = edit_token(node, namespace)
    async with chromium() as browser:
        context = await browser.new_context(
            base_url=console_url, viewport={"width": 1366, "height": 800}
        )
        context.set_default_timeout(30_000)
        page = await sign_in(context, console_url, token)
        await create_from_form(page, namespace, node.example_image)
        await expect(page.locator("#job-phase")).to_have_text("Running", timeout=TRAINING)

        resources = await context.new_page()
        await resources.goto(f"/ns/{namespace}/jobs/{JOB}/resources")
        log = await context.new_page()
        await log.goto(f"/ns/{namespace}/pods/{JOB}-worker-0/log")
        await expect(log.locator("pre.log")).to_contain_text("epoch", timeout=TRAINING)

        for chart in ("cpu", "memory"):
            # Two samples (15 s apart) of both replicas: a line is drawn for each.
            drawn = resources.locator(f"#chart-{chart}")
            await expect(drawn).to_have_attribute("data-pods", DRAWN_PODS, timeout=SAMPLES)
            await expect(drawn.locator("canvas")).to_have_count(1)
            wait_points = f"#chart-{chart}:not([data-points='0']):not([data-points='1'])"
            await expect(resources.locator(wait_points)).to_have_count(1, timeout=SAMPLES)
        await resources.screenshot(path=screenshot_path("console-resources.png"), full_page=True)

        await expect(page.locator("#job-phase")).to_have_text("Succeeded", timeout=TRAINING)
        await expect(log.locator("pre.log")).to_contain_text("test accuracy", timeout=60_000)
        job = node.job(namespace, JOB)
        assert job["status"]["phase"] == "Succeeded"

        wait_until("the TensorBoard ready", lambda: tensorboard_ready(node, namespace))
        async with page.expect_popup() as opened:
            await page.get_by_role("link", name="TensorBoard", exact=True).click()
        board = await opened.value
        # The chart's console here has no TensorBoard domain: the tab says how to reach it.
        await expect(board.locator("#tensorboard-command")).to_contain_text(
            f"torchjob tensorboard {JOB}"
        )
        await context.close()


async def test_an_image_that_cannot_be_pulled_shows_why_and_the_job_can_be_deleted(
    node: Node, node_namespace: str, console_url: str
) -> None:
    """The kubelet's own words reach the page: the job's phase says ImagePullFailed, its page
    says why it waits, the replica's log page says its container has not started; then the user
    deletes it from the page."""
    namespace = node_namespace
    token = edit_token(node, namespace)
    async with chromium() as browser:
        context = await browser.new_context(base_url=console_url)
        context.set_default_timeout(30_000)
        page = await sign_in(context, console_url, token)
        await page.goto(f"/ns/{namespace}/jobs/new")
        fields = {"Name": "unpullable", "Image": MISSING_IMAGE, "Command line": "python train.py"}
        for label, value in fields.items():
            await page.get_by_label(label, exact=True).fill(value)
        await expect(page.locator("#accepted")).to_be_visible()
        await page.get_by_role("button", name="Create", exact=True).click()
        await page.wait_for_url(f"**/ns/{namespace}/jobs/unpullable")
        await expect(page.locator("#job-phase")).to_have_text("ImagePullFailed", timeout=120_000)
        await expect(page.locator(".pending")).to_contain_text("ImagePullFailed")

        log = await context.new_page()
        await log.goto(f"/ns/{namespace}/pods/unpullable-worker-0/log")
        await expect(log.get_by_text("Waiting for the container")).to_be_visible()

        await page.get_by_text("Delete…").click()
        await page.get_by_role("button", name="Delete unpullable").click()
        await page.wait_for_url(f"**/ns/{namespace}/jobs")
        wait_until("the job deleted", lambda: node.get("ptj", "unpullable", namespace) is None)
        await context.close()


SCIENTIST = "mnist-first"


def claim_bound(node: Node, namespace: str, claim: str) -> bool:
    got = node.kubectl("get", "pvc", claim, "-n", namespace, "-o", "jsonpath={.status.phase}")
    return got.stdout.strip() == "Bound"


async def test_a_data_scientist_trains_fixes_a_typo_with_clone_and_opens_tensorboard(
    node: Node, node_namespace: str, console_url: str
) -> None:
    namespace = node_namespace
    host_path_claim(node, namespace, CLAIM)
    wait_until("the claim bound", lambda: claim_bound(node, namespace, CLAIM))
    token = edit_token(node, namespace)
    async with chromium() as browser:
        context = await browser.new_context(base_url=console_url)
        context.set_default_timeout(30_000)
        page = await sign_in(context, console_url, token)
        await page.goto(f"/ns/{namespace}/jobs/new")
        # The claim is picked from the namespace's, with its phase.
        listed = page.locator(f'#claims option[value="{CLAIM}"]')
        await expect(listed).to_have_attribute("label", f"{CLAIM} · Bound")
        fields = {
            "Name": SCIENTIST,
            "Image": MISSING_IMAGE,  # the typo
            "Command line": f"python train.py --epochs 2 --log_dir runs/{SCIENTIST}",
            "Working directory": "/workspace",
            "PVC claim name": CLAIM,
            "Mount path": "/workspace/runs",
        }
        for label, value in fields.items():
            await page.get_by_label(label, exact=True).fill(value)
        await expect(page.get_by_label("Start the training with torchrun")).to_be_checked()
        await page.get_by_label("Start a TensorBoard for the job").check()
        await page.get_by_label("TensorBoard image", exact=True).fill(node.example_image)
        await page.get_by_label("Log directory on the PVC", exact=True).fill(SCIENTIST)
        await expect(page.locator("#accepted")).to_be_visible()
        await page.get_by_role("button", name="Create", exact=True).click()
        await page.wait_for_url(f"**/ns/{namespace}/jobs/{SCIENTIST}")
        await expect(page.locator("#job-phase")).to_have_text("ImagePullFailed", timeout=120_000)

        await page.get_by_role("link", name="Clone", exact=True).click()
        await page.wait_for_url(f"**/ns/{namespace}/jobs/new?from=jobs/{SCIENTIST}")
        await expect(page.get_by_label("Name", exact=True)).to_have_value(f"{SCIENTIST}-2")
        await page.get_by_label("Image", exact=True).fill(node.example_image)
        await expect(page.locator("#accepted")).to_be_visible()
        await page.get_by_role("button", name="Create", exact=True).click()
        await page.wait_for_url(f"**/ns/{namespace}/jobs/{SCIENTIST}-2")
        await expect(page.locator("#job-phase")).to_have_text("Succeeded", timeout=TRAINING)

        clone = f"{SCIENTIST}-2"
        wait_until("the TensorBoard ready", lambda: tensorboard_ready(node, namespace, clone))
        async with page.expect_popup() as opened:
            await page.get_by_role("link", name="TensorBoard", exact=True).click()
        board = await opened.value
        await expect(board).to_have_title(re.compile("TensorBoard"), timeout=60_000)
        await context.close()
