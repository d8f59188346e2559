"""Sessions and what every answer carries, end to end: the security headers, the whole
Content-Security-Policy included, on every answer (pages, live streams, a log download, redirects,
errors, a path naming `tensorboard`); live views that end at sign-out and when the cluster revokes
the token they were opened with; one session per browser; and an Authorization header that speaks
for its own request only, never signing the browser out or switching its user."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import aiohttp
from playwright.async_api import Browser, BrowserContext, expect
from support import ControlPlane
from support.console import Console, create_job, signed_in, tenant_token
from support.eventually import TIMEOUT
from support.kubelet_logs import LogKubelet, log_kubelet
from support.pods import bare_pod

from torchjob.console.security import HEADERS
from torchjob.console.sessions import COOKIE
from torchjob.console.sse import SIGNED_OUT

JOB = "watched"
LOG = "/pods/trainer/log"


async def cookie_of(context: BrowserContext) -> str:
    [value] = [c["value"] for c in await context.cookies() if c["name"] == COOKIE]
    return f"{COOKIE}={value}"


@asynccontextmanager
async def opened(
    console: Console, path: str, cookie: str = "", **headers: str
) -> AsyncIterator[aiohttp.ClientResponse]:
    """The answer to GET `path` as its headers arrive, its body (a stream's, say) still open."""
    async with aiohttp.ClientSession() as client:
        sent = {**headers, **({"Cookie": cookie} if cookie else {})}
        async with client.get(console.url + path, headers=sent, allow_redirects=False) as answer:
            yield answer


async def ended(stream: aiohttp.ClientResponse) -> bytes:
    """The rest of a stream, once it has ended (a stream that never ends fails the test)."""
    return await asyncio.wait_for(stream.content.read(), timeout=TIMEOUT)


@asynccontextmanager
async def running_pod(control_plane: ControlPlane, namespace: str) -> AsyncIterator[LogKubelet]:
    """The pod `trainer`, its container running on a kubelet of the test's, one line in its log
    and more to come."""
    node = f"logs-{namespace[-6:]}"
    async with log_kubelet(control_plane, node) as kubelet:
        await _create_running_pod(control_plane, namespace, node)
        await kubelet.log(namespace, "trainer", "pytorch").write("epoch 1 loss 2.30")
        yield kubelet


async def _create_running_pod(control_plane: ControlPlane, namespace: str, node: str) -> None:
    pod = bare_pod("trainer", node=node)
    control_plane.kubectl("create", "-n", namespace, "-f", "-", input=json.dumps(pod))
    running = {"state": {"running": {"startedAt": "2026-01-01T00:00:00Z"}}}
    status = {
        "phase": "Running",
        "containerStatuses": [{"name": "pytorch", "ready": True, **running}],
    }
    control_plane.kubectl(
        "patch", "pod", "trainer", "-n", namespace, "--subresource=status", "--type=merge",
        "-p", json.dumps({"status": status}),
    )  # fmt: skip


async def test_every_answer_carries_the_headers_and_the_whole_policy(
    control_plane: ControlPlane,
    admitted_namespace: str,
    console: Console,
    browser: Browser,
) -> None:
    namespace = admitted_namespace
    create_job(control_plane, namespace, JOB)
    async with running_pod(control_plane, namespace):
        context, page = await signed_in(
            browser, console, tenant_token(control_plane, namespace, "edit")
        )
        shown = await page.goto(f"/ns/{namespace}/jobs")
        assert (
            shown is not None
            and shown.headers["content-security-policy"] == (HEADERS["Content-Security-Policy"])
        )
        cookie = await cookie_of(context)
        ns, log = f"/ns/{namespace}", f"/ns/{namespace}{LOG}"
        answers = {
            (f"{ns}/jobs", cookie): 200,
            (f"{ns}/jobs/stream", cookie): 200,  # a live view
            (f"{ns}/jobs/{JOB}/stream", cookie): 200,
            (f"{log}/stream?container=pytorch", cookie): 200,  # a followed log
            (f"{log}/download?container=pytorch", cookie): 200,  # streamed as it is read
            ("/go?namespace=", cookie): 303,  # a redirect raised by a page
            ("/", ""): 303,  # a redirect to sign in, raised before any page
            (f"{ns}/jobs/stream", ""): 303,
            ("/sign-in", ""): 200,
            ("/static/console.css", ""): 200,
            # A path naming `tensorboard` exempts nothing from the policy.
            ("/ns/tensorboard/jobs/tensorboard/tensorboard/", cookie): (403, 404),
            ("/no/such/page", cookie): 404,
        }
        for (path, sent_cookie), status in answers.items():
            async with opened(console, path, sent_cookie) as answer:
                expected = status if isinstance(status, tuple) else (status,)
                assert answer.status in expected, (path, answer.status)
                for name, value in HEADERS.items():
                    assert answer.headers.get(name) == value, (path, name, answer.headers)
                if not path.startswith("/static/"):
                    assert answer.headers.get("Cache-Control") == "no-store", path
        await context.close()


async def test_live_views_end_at_sign_out(
    control_plane: ControlPlane,
    admitted_namespace: str,
    console: Console,
    browser: Browser,
) -> None:
    namespace = admitted_namespace
    create_job(control_plane, namespace, JOB)
    context, page = await signed_in(
        browser, console, tenant_token(control_plane, namespace, "view")
    )
    await page.goto(f"/ns/{namespace}/jobs/{JOB}")
    await expect(page.locator("#job-phase")).to_be_visible()
    async with opened(console, f"/ns/{namespace}/jobs/stream", await cookie_of(context)) as stream:
        assert stream.status == 200
        other = await context.new_page()
        await other.goto("/")
        await other.get_by_role("button", name="Sign out").click()
        await other.wait_for_url(f"{console.url}/sign-in")
        rest = await ended(stream)
        assert f"event: stream-error\ndata: {SIGNED_OUT}".encode() in rest
    await expect(page.get_by_text(SIGNED_OUT)).to_be_visible()
    await context.close()


async def test_a_followed_log_stops_when_its_token_is_revoked(
    control_plane: ControlPlane,
    admitted_namespace: str,
    console: Console,
    browser: Browser,
) -> None:
    namespace = admitted_namespace
    create_job(control_plane, namespace, JOB)
    async with running_pod(control_plane, namespace):
        token = tenant_token(control_plane, namespace, "view", name="revoked")
        context, page = await signed_in(browser, console, token)
        cookie = await cookie_of(context)
        await page.goto(f"/ns/{namespace}/jobs/{JOB}")
        await expect(page.locator("#job-phase")).to_be_visible()
        path = f"/ns/{namespace}{LOG}/stream?container=pytorch"
        async with opened(console, path, cookie) as stream:
            assert b"epoch 1 loss 2.30" in await stream.content.readuntil(b"\n\n")
            control_plane.kubectl("delete", "serviceaccount", "revoked", "-n", namespace)
            # The log never ends by itself: only the revoked token's session can end it.
            rest = await ended(stream)
            assert f"event: stream-error\ndata: {SIGNED_OUT}".encode() in rest, rest
        await expect(page.get_by_text(SIGNED_OUT)).to_be_visible(timeout=TIMEOUT * 1000)
        async with opened(console, f"/ns/{namespace}/jobs", cookie) as answer:
            assert answer.status == 303 and answer.headers["Location"].startswith("/sign-in")
        await context.close()


async def test_signing_in_again_ends_the_browsers_earlier_session(
    control_plane: ControlPlane, namespace: str, console: Console, browser: Browser
) -> None:
    context, page = await signed_in(
        browser, console, tenant_token(control_plane, namespace, "view")
    )
    first = await cookie_of(context)
    await page.goto("/sign-in")
    await page.get_by_label("Token").fill(tenant_token(control_plane, namespace, "edit"))
    await page.get_by_role("button", name="Sign in").click()
    await page.wait_for_url(f"{console.url}/")
    second = await cookie_of(context)
    assert second != first
    async with opened(console, f"/ns/{namespace}/jobs", first) as answer:
        assert answer.status == 303, "the first session outlived the second sign-in"
    async with opened(console, f"/ns/{namespace}/jobs", second) as answer:
        assert answer.status == 200
    await context.close()


async def test_an_authorization_header_leaves_the_browsers_session_alone(
    control_plane: ControlPlane, namespace: str, console: Console, browser: Browser
) -> None:
    other = f"{namespace[:50]}-bearer"
    control_plane.kubectl("create", "namespace", other)
    theirs = tenant_token(control_plane, other, "view")
    context, page = await signed_in(
        browser, console, tenant_token(control_plane, namespace, "view")
    )
    mine = page.get_by_role("link", name=namespace)
    await expect(mine).to_be_visible()

    refused = await context.request.get("/", headers={"Authorization": "Bearer forged"})
    assert refused.status == 401 and refused.headers.get("www-authenticate") == "Bearer"
    assert "set-cookie" not in refused.headers
    await page.reload()
    await expect(mine).to_be_visible()  # still signed in, as before

    answered = await context.request.get("/", headers={"Authorization": f"Bearer {theirs}"})
    assert answered.status == 200 and other in await answered.text()
    assert "set-cookie" not in answered.headers
    await page.reload()
    await expect(mine).to_be_visible()  # still the browser's own user
    await expect(page.get_by_role("link", name=other)).to_have_count(0)
    await context.close()
