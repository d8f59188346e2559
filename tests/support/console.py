"""The console as e2e tests run it, and the people who use it: a process started with a token of the
console's own ServiceAccount (which the chart grants nothing), tenants signing in with tokens of
ServiceAccounts bound to Kubernetes' own `edit` and `view` roles in one namespace, and Debian's
Chromium driven by Playwright."""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from playwright.async_api import Browser, BrowserContext, Page, async_playwright
from playwright.async_api import Error as PlaywrightError

from support.controlplane import ControlPlane, free_port
from support.jobs import job_manifest
from support.operator import SYSTEM_NAMESPACE, apply, install_rbac, rendered
from support.processes import ServiceProcess

CHROMIUM = "/usr/bin/chromium"
# Without the networking flags Chromium keeps trying to reach Google's hosts, which this machine
# refuses; a test must not depend on that.
CHROMIUM_FLAGS = [
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
]
CONSOLE_ACCOUNT = "torchjob-console"
# The docs' screenshots are the tests' own: `make screenshots` runs the browser tests with this
# set to docs/images; otherwise they are written to a scratch folder.
SCREENSHOTS = "TORCHJOB_SCREENSHOTS"


def screenshot_path(name: str) -> Path:
    """Where the screenshot `name` (e.g. console-jobs.png) is written."""
    folder = Path(
        os.environ.get(SCREENSHOTS) or Path(tempfile.gettempdir()) / "torchjob-screenshots"
    )
    folder.mkdir(parents=True, exist_ok=True)
    return folder / name


@dataclass
class Console:
    process: ServiceProcess
    port: int

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


def start_console(control_plane: ControlPlane, *extra_args: str, port: int = 0) -> Console:
    """The console as a process, with a token of its own ServiceAccount (which can read nothing)
    in its kubeconfig: only the apiserver's address and CA are used of it in token mode. On
    `port` when given (a setting that names the console's own address needs it first)."""
    install_rbac(control_plane)
    control_plane.kubectl(
        "create", "serviceaccount", CONSOLE_ACCOUNT, "-n", SYSTEM_NAMESPACE, check=False
    )
    kubeconfig = control_plane.issue_service_account_kubeconfig(SYSTEM_NAMESPACE, CONSOLE_ACCOUNT)
    port, probe_port = port or free_port(), free_port()
    args = [
        *("--host", "127.0.0.1", "--port", str(port), "--probe-port", str(probe_port)),
        *("--kubeconfig", str(kubeconfig), "--log-level", "DEBUG", *extra_args),
    ]
    process = ServiceProcess("torchjob.console", args, probe_port)
    try:
        process.start().wait_ready()
    except BaseException:
        process.close()
        raise
    return Console(process, port)


def grant_job_roles(control_plane: ControlPlane) -> None:
    """The chart's aggregated ClusterRoles, which add training jobs to `edit` and `view`."""
    apply(
        control_plane,
        [m for m in rendered() if m["kind"] == "ClusterRole" and "aggregate-to" in json.dumps(m)],
    )


def grant_impersonation(control_plane: ControlPlane, users: list[str], groups: list[str]) -> None:
    """What the chart grants the console in proxy mode: impersonating these users and groups."""
    role = f"{CONSOLE_ACCOUNT}-impersonate"
    rbac = "rbac.authorization.k8s.io"
    rules = [
        {"apiGroups": [""], "resources": [kind], "verbs": ["impersonate"], "resourceNames": names}
        for kind, names in (("users", users), ("groups", groups))
    ]
    account = {"kind": "ServiceAccount", "name": CONSOLE_ACCOUNT, "namespace": SYSTEM_NAMESPACE}
    cluster_role = {
        "apiVersion": f"{rbac}/v1",
        "kind": "ClusterRole",
        "metadata": {"name": role},
        "rules": rules,
    }
    binding = {
        "apiVersion": f"{rbac}/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": role},
        "roleRef": {"apiGroup": rbac, "kind": "ClusterRole", "name": role},
        "subjects": [account],
    }
    apply(control_plane, [cluster_role, binding])


def tenant_token(control_plane: ControlPlane, namespace: str, role: str, name: str = "") -> str:
    """A token of a ServiceAccount bound to the ClusterRole `role` (edit, view) in `namespace`
    only: a tenant as a platform team would make one."""
    account = name or f"{role}-user"
    control_plane.kubectl("create", "serviceaccount", account, "-n", namespace, check=False)
    control_plane.kubectl(
        "create",
        "rolebinding",
        f"{account}-{role}",
        f"--clusterrole={role}",
        f"--serviceaccount={namespace}:{account}",
        "-n",
        namespace,
        check=False,
    )
    return control_plane.kubectl("create", "token", account, "-n", namespace).stdout.strip()


@asynccontextmanager
async def chromium() -> AsyncIterator[Browser]:
    """Debian's Chromium, headless (Playwright's async API: the tests' event loop is its)."""
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_FLAGS)
        try:
            yield browser
        finally:
            await browser.close()


async def new_context(browser: Browser, console: Console) -> BrowserContext:
    """A browser context of its own: its own cookies, a laptop's screen."""
    context = await browser.new_context(
        base_url=console.url, viewport={"width": 1366, "height": 800}
    )
    context.set_default_timeout(15_000)
    return context


async def signed_in(browser: Browser, console: Console, token: str) -> tuple[BrowserContext, Page]:
    """A browser context of its own signed in with `token`, on the namespaces page."""
    context = await new_context(browser, console)
    page = await context.new_page()
    await page.goto("/sign-in")
    await page.get_by_label("Token").fill(token)
    await page.get_by_role("button", name="Sign in").click()
    try:
        await page.wait_for_url(f"{console.url}/")
    except PlaywrightError as error:
        text = await page.locator("main").inner_text()
        raise AssertionError(
            f"not signed in: {page.url}: {text}\n{console.process.log_tail()}"
        ) from error
    return context, page


def create_job(control_plane: ControlPlane, namespace: str, name: str) -> None:
    manifest = job_manifest("basic", name)
    control_plane.kubectl("create", "-n", namespace, "-f", "-", input=json.dumps(manifest))


def job_spec(control_plane: ControlPlane, namespace: str, name: str) -> dict[str, Any]:
    got = control_plane.kubectl("get", "pytorchtrainingjob", name, "-n", namespace, "-o", "json")
    spec: dict[str, Any] = json.loads(got.stdout)["spec"]
    return spec


def patch_status(
    control_plane: ControlPlane, namespace: str, name: str, status: dict[str, Any]
) -> None:
    control_plane.kubectl(
        "patch",
        "pytorchtrainingjob",
        name,
        "-n",
        namespace,
        "--subresource=status",
        "--type=merge",
        "-p",
        json.dumps({"status": status}),
    )
