"""The console's job creation page in a real Chromium on the real control plane, signed in with a
tenant's token: a job created from the form's one command line is the job the form showed; the
webhook's and the apiserver's refusals, found by the dry run made as the user on every change, are
shown beside the field they name and nothing is created; the YAML view round-trips with the form,
without a front-end error; an existing job is cloned into the form or the YAML view; the PVC
field lists the namespace's claims with their phase; the page fits a phone's width."""

from __future__ import annotations

import json
from typing import Any

from playwright.async_api import Browser, Page, expect
from support import ControlPlane
from support.console import Console, screenshot_path, signed_in, tenant_token
from support.eventually import eventually_sync
from support.processes import ServiceProcess

from torchjob.views.console.job_form import JobForm, manifest_of

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


def front_end_errors(page: Page) -> list[str]:
    """The errors the page's scripts (htmx among them) and Chromium report, as they come."""
    errors: list[str] = []
    page.on(
        "console", lambda message: errors.append(message.text) if message.type == "error" else None
    )
    page.on("pageerror", lambda error: errors.append(str(error)))
    return errors


def create_with_kubectl(control_plane: ControlPlane, namespace: str, form: JobForm) -> None:
    manifest = json.dumps(manifest_of(form))
    control_plane.kubectl("create", "-n", namespace, "-f", "-", input=manifest)


async def test_a_tenant_creates_a_job_from_one_command_line_and_lands_on_its_page(
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
            # As typed in a terminal, with torchrun on: the form makes it torchrun's arguments.
            "Command line": "python train.py --epochs 3 --note 'two words'",
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
    assert "command" not in container  # the webhook's torchrun starts the script
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
        {
            "Name": "typo",
            "Image": IMAGE,
            "Command line": "python train.py",
            "Processes per node": "gpu",
        },
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
    await fill(page, {"Name": "Bad_Name", "Image": IMAGE, "Command line": "python train.py"})
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
    await fill(page, {"Name": "round", "Image": "old/image:1", "Command line": "python train.py"})
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


TYPO = "pytorh/pytorch:2.3.1-cuda12.1-cudnn8-runtime"


async def test_a_job_with_a_typod_image_is_cloned_fixed_and_created(
    control_plane: ControlPlane,
    admitted_namespace: str,
    webhook_server: ServiceProcess,
    console: Console,
    browser: Browser,
) -> None:
    namespace = admitted_namespace
    typo = JobForm(name="mnist", image=TYPO, command_line="python train.py --epochs 3", gpus="")
    create_with_kubectl(control_plane, namespace, typo)
    context, page = await signed_in(
        browser, console, tenant_token(control_plane, namespace, "edit")
    )
    await page.goto(f"/ns/{namespace}/jobs/new?from=jobs/mnist")
    # The job as written, not as the webhook defaulted it, under a new name.
    await expect(page.get_by_label("Name", exact=True)).to_have_value("mnist-2")
    await expect(page.get_by_label("Image", exact=True)).to_have_value(TYPO)
    command_line = page.get_by_label("Command line", exact=True)
    await expect(command_line).to_have_value("python train.py --epochs 3")
    await expect(page.get_by_label("Replicas", exact=True)).to_have_value("")
    await page.get_by_label("Image", exact=True).fill(IMAGE)
    await expect(page.locator("#accepted")).to_be_visible(timeout=CHECKED)
    await page.get_by_role("button", name="Create", exact=True).click()
    await page.wait_for_url(f"**/ns/{namespace}/jobs/mnist-2")
    jobs = {job["metadata"]["name"]: job for job in jobs_in(control_plane, namespace)}
    container = jobs["mnist-2"]["spec"]["replicaSpecs"][0]["template"]["spec"]["containers"][0]
    assert container["image"] == IMAGE
    assert container["args"] == ["train.py", "--epochs", "3"]
    await context.close()


async def test_edit_as_yaml_opens_the_clone_in_the_yaml_view_and_creates_it(
    control_plane: ControlPlane,
    admitted_namespace: str,
    webhook_server: ServiceProcess,
    console: Console,
    browser: Browser,
) -> None:
    namespace = admitted_namespace
    create_with_kubectl(
        control_plane, namespace, JobForm(name="yml", image=TYPO, command_line="python t.py")
    )
    context, page = await signed_in(
        browser, console, tenant_token(control_plane, namespace, "edit")
    )
    await page.goto(f"/ns/{namespace}/jobs/new?from=jobs/yml&as=yaml")
    await expect(page.get_by_role("button", name="YAML")).to_have_attribute("aria-pressed", "true")
    manifest = page.get_by_label("Manifest (YAML)")
    text = await manifest.input_value()
    assert "name: yml-2" in text and TYPO in text
    assert "status" not in text and "uid" not in text and "resourceVersion" not in text
    await manifest.fill(text.replace(TYPO, IMAGE))
    await expect(page.locator("#accepted")).to_be_visible(timeout=CHECKED)
    await page.get_by_role("button", name="Create", exact=True).click()
    await page.wait_for_url(f"**/ns/{namespace}/jobs/yml-2")
    names = {job["metadata"]["name"] for job in jobs_in(control_plane, namespace)}
    assert names == {"yml", "yml-2"}
    await context.close()


async def test_a_clone_of_no_job_is_the_apiservers_404_and_a_crafted_from_is_refused(
    control_plane: ControlPlane, namespace: str, console: Console, browser: Browser
) -> None:
    context, page = await signed_in(
        browser, console, tenant_token(control_plane, namespace, "edit")
    )
    answer = await page.goto(f"/ns/{namespace}/jobs/new?from=jobs/missing")
    assert answer is not None and answer.status == 404
    await expect(page.get_by_text("not found")).to_be_visible()
    for crafted in ("configmaps/x", "jobs/..%2Fsecrets", "jobs/Upper", "jobs/a&as=html"):
        answer = await page.goto(f"/ns/{namespace}/jobs/new?from={crafted}")
        assert answer is not None and answer.status == 400, crafted
    await context.close()


async def test_switching_between_form_and_yaml_makes_no_front_end_error(
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
    errors = front_end_errors(page)
    await open_form(page, namespace)
    manifest = page.get_by_label("Manifest (YAML)")
    for turn in range(3):
        # Each switch follows a change, whose check is still under way.
        await fill(page, {"Name": f"switch-{turn}", "Image": IMAGE, "Command line": "python t.py"})
        await page.get_by_role("button", name="YAML").click()
        await expect(manifest).to_contain_text(f"name: switch-{turn}")
        text = await manifest.input_value()
        await manifest.fill(text.replace(IMAGE, f"other/image:{turn}"))
        await page.get_by_role("button", name="Form").click()
        await expect(page.get_by_label("Image", exact=True)).to_have_value(f"other/image:{turn}")
    await expect(page.locator("#accepted")).to_be_visible(timeout=CHECKED)
    assert errors == [], errors
    await context.close()


async def test_the_page_fits_a_phones_width(
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
    await page.set_viewport_size({"width": 390, "height": 844})
    await page.goto(f"/ns/{namespace}/jobs/new")
    # A refusal's messages beside the fields take room too.
    await fill(page, {"Name": "Bad_Name", "Image": IMAGE, "Processes per node": "gpu"})
    await expect(page.locator("#error-name")).not_to_be_empty(timeout=CHECKED)
    width = "[document.documentElement.scrollWidth, document.documentElement.clientWidth]"
    scroll_width, client_width = await page.evaluate(width)
    assert scroll_width <= client_width == 390
    await page.screenshot(path=screenshot_path("console-create-phone.png"), full_page=True)
    await page.get_by_role("button", name="YAML").click()
    await expect(page.get_by_label("Manifest (YAML)")).to_contain_text("Bad_Name")
    scroll_width, client_width = await page.evaluate(width)
    assert scroll_width <= client_width == 390
    await context.close()


def claim_phase(control_plane: ControlPlane, namespace: str, name: str) -> str:
    got = control_plane.kubectl(
        "get", "pvc", name, "-n", namespace, "-o", "jsonpath={.status.phase}"
    )
    return got.stdout.strip()


async def test_the_pvc_field_lists_the_namespaces_claims_with_their_phase(
    control_plane: ControlPlane,
    admitted_namespace: str,
    webhook_server: ServiceProcess,
    console: Console,
    browser: Browser,
) -> None:
    namespace = admitted_namespace
    claim = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": "data"},
        # No such class: the claim stays Pending.
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": "1Gi"}},
            "storageClassName": "none-such",
        },
    }
    control_plane.kubectl("create", "-n", namespace, "-f", "-", input=json.dumps(claim))
    eventually_sync(lambda: claim_phase(control_plane, namespace, "data"), "the claim's phase")
    phase = claim_phase(control_plane, namespace, "data")
    context, page = await signed_in(
        browser, console, tenant_token(control_plane, namespace, "edit")
    )
    await open_form(page, namespace)
    field = page.get_by_label("PVC claim name", exact=True)
    await expect(field).to_have_attribute("list", "claims")
    option = page.locator('#claims option[value="data"]')
    await expect(option).to_have_attribute("label", f"data · {phase}")
    await expect(page.locator("#hint-pvc_claim")).to_contain_text("pick one of the 1 listed")
    await field.fill("data")
    await expect(field).to_have_value("data")
    await context.close()


async def test_the_namespace_box_checks_what_is_typed(
    control_plane: ControlPlane, namespace: str, console: Console, browser: Browser
) -> None:
    context, page = await signed_in(
        browser, console, tenant_token(control_plane, namespace, "edit")
    )
    errors = front_end_errors(page)
    await page.reload()
    box = page.get_by_label("Open a namespace")
    await box.fill("Not_A_Namespace")
    assert await box.evaluate("box => box.validity.patternMismatch")
    await box.fill("a-namespace-1")
    assert await box.evaluate("box => box.validity.valid")
    assert errors == [], errors
    await context.close()
