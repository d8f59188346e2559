"""Tenancy and bad input, end to end: the console acts as the signed-in user, so what the apiserver
refuses them the console refuses too, whatever URL they type or request they forge; a token the
cluster does not accept signs no one in; a change from anywhere but the console's own pages is
refused; and the console's own ServiceAccount can read nothing."""

from __future__ import annotations

import ssl
import urllib.error
import urllib.request
from typing import Any

from playwright.async_api import Browser, BrowserContext, expect
from support import ControlPlane
from support.console import (
    CONSOLE_ACCOUNT,
    Console,
    create_job,
    grant_impersonation,
    grant_job_roles,
    job_spec,
    new_context,
    signed_in,
    start_console,
    tenant_token,
)
from support.operator import OPT_IN_LABEL, SYSTEM_NAMESPACE, wait_until_admitting
from support.processes import ServiceProcess
from support.tokens import expired_copy


def other_namespace(control_plane: ControlPlane, namespace: str) -> str:
    """A second tenant's namespace, with a job in it."""
    other = f"{namespace[:50]}-other"
    control_plane.kubectl("create", "namespace", other)
    control_plane.kubectl("label", "namespace", other, f"{OPT_IN_LABEL}=on")
    wait_until_admitting(control_plane, other)
    create_job(control_plane, other, "secret-job")
    return other


async def status_and_text(context: BrowserContext, path: str, **options: Any) -> tuple[int, str]:
    method = options.pop("method", "GET")
    answer = await context.request.fetch(path, method=method, max_redirects=0, **options)
    return answer.status, await answer.text()


async def test_a_tenant_reaches_nothing_of_another_namespace(
    control_plane: ControlPlane,
    admitted_namespace: str,
    webhook_server: ServiceProcess,
    console: Console,
    browser: Browser,
) -> None:
    mine = admitted_namespace
    theirs = other_namespace(control_plane, mine)
    context, page = await signed_in(browser, console, tenant_token(control_plane, mine, "edit"))
    origin = {"Origin": console.url}

    await expect(page.get_by_role("link", name=mine)).to_be_visible()
    await expect(page.get_by_role("link", name=theirs)).to_have_count(0)
    for path in (
        f"/ns/{theirs}/jobs",
        f"/ns/{theirs}/jobs/secret-job",
        f"/ns/{theirs}/jobs/stream",
        f"/ns/{theirs}/jobs/secret-job/stream",
    ):
        status, text = await status_and_text(context, path)
        assert status == 403 and "forbidden" in text.lower(), (path, status, text)
    await page.goto(f"/ns/{theirs}/jobs/secret-job")
    await expect(page.get_by_role("heading", name="403 Forbidden")).to_be_visible()

    for action in ("pause", "delete"):
        status, _ = await status_and_text(
            context,
            f"/ns/{theirs}/jobs/secret-job/{action}",
            method="POST",
            form={"confirm": "secret-job"},
            headers={**origin, "Impersonate-User": "system:admin"},
        )
        assert status == 403, action
    assert "pause" not in job_spec(control_plane, theirs, "secret-job").get("runMode", {})
    await context.close()


async def test_a_viewer_sees_no_buttons_and_a_forged_change_is_refused(
    control_plane: ControlPlane,
    admitted_namespace: str,
    webhook_server: ServiceProcess,
    console: Console,
    browser: Browser,
) -> None:
    namespace = admitted_namespace
    create_job(control_plane, namespace, "watched")
    context, page = await signed_in(
        browser, console, tenant_token(control_plane, namespace, "view")
    )
    await page.goto(f"/ns/{namespace}/jobs")
    await expect(page.get_by_role("link", name="watched")).to_be_visible()
    await expect(page.get_by_role("link", name="Create job")).to_have_count(0)
    await page.get_by_role("link", name="watched").click()
    await expect(page.locator("#job-phase")).to_be_visible()
    for name in ("Pause", "Resume"):
        await expect(page.get_by_role("button", name=name)).to_have_count(0)
    await expect(page.get_by_text("Delete…")).to_have_count(0)

    status, text = await status_and_text(
        context,
        f"/ns/{namespace}/jobs/watched/pause",
        method="POST",
        headers={"Origin": console.url},
        form={},
    )
    assert status == 403 and "cannot patch" in text, text
    assert "pause" not in job_spec(control_plane, namespace, "watched").get("runMode", {})
    await context.close()


async def test_changes_come_only_from_the_consoles_own_pages(
    control_plane: ControlPlane,
    admitted_namespace: str,
    webhook_server: ServiceProcess,
    console: Console,
    browser: Browser,
) -> None:
    namespace = admitted_namespace
    create_job(control_plane, namespace, "kept")
    context, _ = await signed_in(browser, console, tenant_token(control_plane, namespace, "edit"))
    delete = f"/ns/{namespace}/jobs/kept/delete"
    for headers in ({}, {"Origin": "https://evil.example"}, {"Origin": "null"}):
        status, text = await status_and_text(
            context, delete, method="POST", form={"confirm": "kept"}, headers=headers
        )
        assert (status == 403 and "Origin" in text) or "not from this console" in text, text
    big = {"Origin": console.url}
    status, text = await status_and_text(
        context, delete, method="POST", headers=big, form={"confirm": "x" * 300_000}
    )
    assert status == 413 and "larger than the console accepts" in text
    assert job_spec(control_plane, namespace, "kept")  # still there
    await context.close()


async def test_a_token_the_cluster_refuses_signs_no_one_in(
    control_plane: ControlPlane, namespace: str, console: Console, browser: Browser
) -> None:
    real = tenant_token(control_plane, namespace, "edit")
    expired = expired_copy(real, (control_plane.ca_file.parent / "sa.key").read_bytes())
    forged = real[: real.rindex(".")] + ".AAAA"
    for token in (forged, expired, "not-a-token"):
        context = await new_context(browser, console)
        page = await context.new_page()
        await page.goto("/sign-in")
        await page.get_by_label("Token").fill(token)
        await page.get_by_role("button", name="Sign in").click()
        await expect(page.get_by_role("alert")).to_contain_text("does not accept this token")
        assert token not in await page.content()
        assert not [c for c in await context.cookies() if c["name"].startswith("torchjob")]
        status, _ = await status_and_text(context, f"/ns/{namespace}/jobs")
        assert status == 303  # to sign in
        await context.close()


def test_the_consoles_own_account_can_read_nothing(
    control_plane: ControlPlane, console: Console
) -> None:
    token = control_plane.kubectl(
        "create", "token", CONSOLE_ACCOUNT, "-n", SYSTEM_NAMESPACE
    ).stdout.strip()
    tls = ssl.create_default_context(cafile=str(control_plane.ca_file))
    for path in (
        "/api/v1/pods",
        "/api/v1/secrets",
        "/api/v1/namespaces",
        "/api/v1/events",
        "/apis/batch.tensorstack.dev/v1beta1/pytorchtrainingjobs",
    ):
        request = urllib.request.Request(
            control_plane.server + path, headers={"Authorization": f"Bearer {token}"}
        )
        try:
            urllib.request.urlopen(request, context=tls, timeout=10)
        except urllib.error.HTTPError as refused:
            assert refused.code == 403, (path, refused.code)
        else:
            raise AssertionError(f"the console's own account read {path}")


async def test_behind_a_trusted_proxy_the_console_impersonates_the_named_user(
    control_plane: ControlPlane,
    admitted_namespace: str,
    webhook_server: ServiceProcess,
    browser: Browser,
) -> None:
    namespace = admitted_namespace
    create_job(control_plane, namespace, "alices")
    grant_job_roles(control_plane)
    grant_impersonation(control_plane, users=["alice"], groups=["tenants"])
    control_plane.kubectl(
        "create", "rolebinding", "alice-edit", "--clusterrole=edit", "--user=alice", "-n", namespace
    )
    proxied = start_console(control_plane, "--auth-mode", "proxy")
    try:
        alice = await browser.new_context(
            base_url=proxied.url,
            extra_http_headers={
                "X-Forwarded-User": "alice",
                "X-Forwarded-Groups": "tenants",
                # What a browser sends is never passed on: only the proxy's headers count.
                "Impersonate-User": "system:admin",
            },
        )
        page = await alice.new_page()
        await page.goto(f"/ns/{namespace}/jobs")
        await expect(page.get_by_role("link", name="alices")).to_be_visible()
        await expect(page.locator("header")).to_contain_text("alice")
        status, _ = await status_and_text(alice, "/ns/kube-system/jobs")
        assert status == 403

        anonymous = await browser.new_context(base_url=proxied.url)
        status, text = await status_and_text(anonymous, f"/ns/{namespace}/jobs")
        assert status == 401 and "named no user" in text
        mallory = await browser.new_context(
            base_url=proxied.url, extra_http_headers={"X-Forwarded-User": "mallory"}
        )
        status, text = await status_and_text(mallory, f"/ns/{namespace}/jobs")
        assert status == 403 and "impersonate" in text, text
        for context in (alice, anonymous, mallory):
            await context.close()
    finally:
        proxied.process.close()
