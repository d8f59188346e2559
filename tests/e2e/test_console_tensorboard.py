"""A job's TensorBoard, opened from the console, on the real control plane with the housekeeper:
its pages run on a host of their own, so a board whose owner serves a script of theirs reads and
changes nothing of the viewer's on the console; a ticket opens one job's board only; and a
TensorBoard Service pointed elsewhere is put back.

There is no kubelet: the test plays it, giving the TensorBoard's pod a loopback address where a
stand-in board of the tenant's listens on TensorBoard's port. Chromium resolves the boards' hosts
(`<label>.tb.localhost`) to the console's loopback address."""

from __future__ import annotations

import json
import secrets
from collections.abc import AsyncIterator, Iterator
from typing import Any
from urllib.parse import urlsplit

import aiohttp
import pytest
from aiohttp import web
from kubernetes_asyncio import client
from playwright.async_api import Browser, async_playwright, expect
from support import ControlPlane
from support.cluster import Cluster
from support.console import (
    CHROMIUM,
    CHROMIUM_FLAGS,
    Console,
    create_job,
    grant_job_roles,
    signed_in,
    start_console,
    tenant_token,
)
from support.controlplane import free_port
from support.eventually import eventually
from support.operator import (
    OPT_IN_LABEL,
    housekeeper_kubeconfig,
    start_housekeeper,
    wait_until_admitting,
)
from support.processes import ServiceProcess
from support.scenarios import TB_IMAGE, restricted_job

from torchjob.api import constants
from torchjob.render.tensorboard import PORT

BOARD_DOMAIN = "tb.localhost"
# The tenant's TensorBoard: a page whose script tries the viewer's console with the viewer's
# browser, and writes what came of each try.
HIJACKED_PAGE = """<!doctype html><title>board</title><pre id="out">running</pre><script>
(async () => {
  const console_ = CONSOLE, namespace = NAMESPACE, out = {};
  try {
    const answer = await fetch(`${console_}/ns/${namespace}/jobs`, {credentials: "include"});
    out.read = `${answer.status}:${(await answer.text()).includes("victim")}`;
  } catch (error) { out.read = "refused"; }
  try {
    await fetch(`${console_}/ns/${namespace}/jobs/victim/delete`, {
      method: "POST", mode: "no-cors", credentials: "include",
      headers: {"Content-Type": "application/x-www-form-urlencoded"}, body: "confirm=victim"});
    out.delete = "sent";
  } catch (error) { out.delete = "refused"; }
  const here = await fetch(`/ns/${namespace}/jobs`);
  out.here = here.status;
  out.cookies = document.cookie;
  document.getElementById("out").textContent = JSON.stringify(out);
})();
</script>"""


@pytest.fixture(scope="module")
def housekeeper(control_plane: ControlPlane, crd: None) -> Iterator[ServiceProcess]:
    process = start_housekeeper(housekeeper_kubeconfig(control_plane))
    yield process
    process.close()


@pytest.fixture(scope="module")
def board_console(control_plane: ControlPlane, crd: None) -> Iterator[Console]:
    """A console whose TensorBoards are served at http://<label>.tb.localhost:<its port>."""
    grant_job_roles(control_plane)
    port = free_port()
    started = start_console(
        control_plane, "--tensorboard-url", f"http://{BOARD_DOMAIN}:{port}", port=port
    )
    yield started
    started.process.close()


@pytest.fixture(scope="module")
async def board_browser() -> AsyncIterator[Browser]:
    """Chromium, with every TensorBoard host on the console's loopback address."""
    rules = f"--host-resolver-rules=MAP *.{BOARD_DOMAIN} 127.0.0.1"
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(
            executable_path=CHROMIUM, args=[*CHROMIUM_FLAGS, rules]
        )
        try:
            yield browser
        finally:
            await browser.close()


class StandInBoard:
    """The tenant's TensorBoard, listening where the test's kubelet says its pod is."""

    def __init__(self, page: str) -> None:
        self.address = f"127.{secrets.randbelow(200) + 20}.{secrets.randbelow(250)}.1"
        self.page = page
        self.requests: list[tuple[str, dict[str, str]]] = []

    async def answer(self, request: web.Request) -> web.Response:
        self.requests.append((request.path, dict(request.headers)))
        if request.path == "/":
            return web.Response(text=self.page, content_type="text/html")
        return web.Response(status=404, text="not the console")


@pytest.fixture
async def stand_in(board_console: Console) -> AsyncIterator[StandInBoard]:
    board = StandInBoard("")
    app = web.Application()
    app.router.add_route("*", "/{path:.*}", board.answer)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, board.address, PORT).start()
    yield board
    await runner.cleanup()


def make_namespace(control_plane: ControlPlane, name: str) -> str:
    control_plane.kubectl("create", "namespace", name)
    control_plane.kubectl("label", "namespace", name, f"{OPT_IN_LABEL}=on")
    wait_until_admitting(control_plane, name)
    return name


def create_board_job(control_plane: ControlPlane, namespace: str, name: str) -> None:
    tensorboard = {"image": TB_IMAGE, "trainingLogFilesets": ["t9k://pvc/claim/logs"]}
    manifest = restricted_job(name).spec(tensorboardSpec=tensorboard).build()
    control_plane.kubectl("create", "-n", namespace, "-f", "-", input=json.dumps(manifest))


def viewer_token(control_plane: ControlPlane, own: str, tenants: str) -> str:
    """A person with `admin` in their own namespace and `edit` in the tenant's."""
    token = tenant_token(control_plane, own, "admin", "viewer")
    control_plane.kubectl(
        "create",
        "rolebinding",
        "viewer-edit",
        "--clusterrole=edit",
        f"--serviceaccount={own}:viewer",
        "-n",
        tenants,
    )
    return token


async def board_pod_runs_at(
    kube_client: client.ApiClient, namespace: str, job: str, address: str
) -> None:
    """Plays the kubelet: the TensorBoard's pod is Ready at `address`."""
    cluster = Cluster(kube_client, namespace)
    [pod] = await eventually(lambda: cluster.tensorboard_pods(job), "the TensorBoard's pod")
    ready = [{"type": t, "status": "True"} for t in ("PodScheduled", "ContainersReady", "Ready")]
    status = {"phase": "Running", "podIP": address, "conditions": ready}
    await client.CoreV1Api(kube_client).patch_namespaced_pod_status(
        pod.metadata.name, namespace, {"status": status}
    )


def ticket_url(location: str, console: Console) -> str:
    url = urlsplit(location)
    assert url.hostname and url.hostname.endswith(f".{BOARD_DOMAIN}"), location
    assert url.port == console.port and url.path == "/.torchjob/open", location
    return location


async def test_a_hijacked_tensorboard_reaches_nothing_of_its_viewer(
    control_plane: ControlPlane,
    kube_client: client.ApiClient,
    admitted_namespace: str,
    housekeeper: ServiceProcess,
    board_console: Console,
    board_browser: Browser,
    stand_in: StandInBoard,
) -> None:
    tenants = admitted_namespace
    own = make_namespace(control_plane, f"{tenants[:50]}-viewer")
    create_job(control_plane, own, "victim")
    create_board_job(control_plane, tenants, "board")
    stand_in.page = HIJACKED_PAGE.replace("CONSOLE", json.dumps(board_console.url)).replace(
        "NAMESPACE", json.dumps(own)
    )
    await board_pod_runs_at(kube_client, tenants, "board", stand_in.address)
    token = viewer_token(control_plane, own, tenants)
    context, page = await signed_in(board_browser, board_console, token)

    await page.goto(f"/ns/{tenants}/jobs/board")
    async with context.expect_page() as opened:
        await page.get_by_role("link", name="TensorBoard", exact=True).click()
    board = await opened.value
    await expect(board.locator("#out")).not_to_have_text("running")
    assert urlsplit(board.url).hostname != urlsplit(board_console.url).hostname
    outcome = json.loads(await board.locator("#out").inner_text())
    assert outcome["read"] == "refused", outcome  # no CORS answer: the console is not readable
    assert outcome["here"] == 404 and outcome["cookies"] == "", outcome
    # The request the page made on its own host went to the board, never to the console, and
    # no cookie ever reached the board.
    assert f"/ns/{own}/jobs" in [path for path, _ in stand_in.requests]
    assert all("Cookie" not in headers for _, headers in stand_in.requests)
    got = control_plane.kubectl("get", "pytorchtrainingjob", "victim", "-n", own, check=False)
    assert got.returncode == 0, "the viewer's job was deleted by the board's script"
    await page.goto(f"/ns/{own}/jobs")
    await expect(page.get_by_role("link", name="victim")).to_be_visible()
    await context.close()


async def test_a_ticket_opens_its_own_jobs_tensorboard_only(
    control_plane: ControlPlane,
    admitted_namespace: str,
    housekeeper: ServiceProcess,
    board_console: Console,
    board_browser: Browser,
) -> None:
    namespace = admitted_namespace
    for name in ("board-a", "board-b"):
        create_board_job(control_plane, namespace, name)
    context, _ = await signed_in(
        board_browser, board_console, tenant_token(control_plane, namespace, "edit")
    )

    async def ticket_of(job: str) -> str:
        answer = await context.request.get(
            f"/ns/{namespace}/jobs/{job}/tensorboard", max_redirects=0
        )
        assert answer.status == 303, await answer.text()
        return ticket_url(answer.headers["location"], board_console)

    a, b = await ticket_of("board-a"), await ticket_of("board-b")
    host_a, host_b = urlsplit(a).netloc, urlsplit(b).netloc
    assert host_a != host_b
    ticket_a = urlsplit(a).query
    async with aiohttp.ClientSession(cookie_jar=aiohttp.DummyCookieJar()) as http:

        async def board_status(host: str, path: str, **headers: str) -> int:
            async with http.get(
                f"{board_console.url}{path}",
                headers={"Host": host, **headers},
                allow_redirects=False,
            ) as answer:
                return answer.status

        assert await board_status(host_b, f"/.torchjob/open?{ticket_a}") == 401
        assert await board_status(host_a, f"/.torchjob/open?{ticket_a}") == 401  # spent
        fresh = await ticket_of("board-a")
        async with http.get(
            f"{board_console.url}{urlsplit(fresh).path}?{urlsplit(fresh).query}",
            headers={"Host": host_a},
            allow_redirects=False,
        ) as opened:
            assert opened.status == 303
            pass_a = opened.cookies["torchjob-tensorboard"].value
        cookie = f"torchjob-tensorboard={pass_a}"
        assert await board_status(host_b, "/", Cookie=cookie) == 401
        # On its own host the pass works: the board has no ready pod yet.
        assert await board_status(host_a, "/", Cookie=cookie) == 503
    await context.close()


async def test_a_changed_tensorboard_selector_is_put_back(
    control_plane: ControlPlane,
    kube_client: client.ApiClient,
    admitted_namespace: str,
    housekeeper: ServiceProcess,
) -> None:
    namespace = admitted_namespace
    create_board_job(control_plane, namespace, "steered")
    cluster = Cluster(kube_client, namespace)
    name = "steered-tensorboard"
    await eventually(lambda: _has(cluster.service_names(), name), "the Service")
    core = client.CoreV1Api(kube_client)
    await core.patch_namespaced_service(name, namespace, {"spec": {"selector": {"app": "mine"}}})

    async def put_back() -> bool:
        service = await core.read_namespaced_service(name, namespace)
        return service.spec.selector == {constants.LABEL_TENSORBOARD: "steered"}

    await eventually(put_back, "the selector put back")
    events = await eventually(
        lambda: cluster.events("steered", constants.REASON_TENSORBOARD_RESTORED), "an event"
    )
    assert "spec.selector" in events[0].message

    # Its label taken off, the Service is out of the housekeeper's sight: it is put back too.
    control_plane.kubectl(
        "label", "service", name, f"{constants.LABEL_TENSORBOARD}-", "-n", namespace
    )

    async def labelled() -> bool:
        service = await core.read_namespaced_service(name, namespace)
        return (service.metadata.labels or {}).get(constants.LABEL_TENSORBOARD) == "steered"

    await eventually(labelled, "the label put back")


async def _has(names_: Any, name: str) -> bool:
    return name in await names_
