"""Crafted URLs and YAML, end to end, as a tenant with `edit` in its namespace: every route the
console registers, given a namespace, job or pod that is no Kubernetes name (an encoded slash that
walks to another object, `..`, a backslash, upper case, too long, a NUL), answers 404 before any
Kubernetes request, and nothing it could have reached is read or deleted; a kilobyte of YAML
aliases (a "billion laughs") posted to the creation form is refused with 400 while the console's
memory stays where it was."""

from __future__ import annotations

import asyncio
import http.client
import itertools
import json
import re
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import unquote, urlencode

from aiohttp import web
from playwright.async_api import Browser, BrowserContext, expect
from support import ControlPlane
from support.console import Console, create_job, job_spec, signed_in, tenant_token

from torchjob.console.app import add_routes
from torchjob.console.route_names import RULES
from torchjob.console.yaml_input import MAX_NODES

# What the crafted segments would reach: an object of another kind, and the job of the routes.
CONFIG_MAP, JOB = "kept-config", "kept"
# Each as it travels (percent-encoded where a browser would keep it so); `{ns}` is the namespace.
CRAFTED = [
    "x%2F..%2F..%2F..%2F..%2F..%2F..%2F..%2Fapi%2Fv1%2Fnamespaces%2F{ns}%2Fconfigmaps%2F"
    + CONFIG_MAP,
    "..",
    "%2E%2E",
    "x%5C..%5C..%5Cconfigmaps%5C" + CONFIG_MAP,
    "Kept",
    "a" * 254,
    "kept%00",
    "kept..config",
    "kept%3Fwatch%3Dtrue",
    "kept%2F",
]
# A valid value of each route variable that a pattern holds: each of its choices, or the one
# given here where the pattern admits more than a list of words.
FREE_PATTERNS = {"path": ""}
# What growing the bomb would take is gigabytes; the console's peak may grow by far less.
MEMORY_BOUND_BYTES = 64 * 2**20


def routes() -> Iterator[tuple[str, str, dict[str, list[str]]]]:
    """Every route of the console that carries a variable: its method, its formatter, and the
    valid choices of each variable no name rule checks."""
    app = web.Application()
    add_routes(app)
    for resource in app.router.resources():
        info = resource.get_info()
        formatter = info.get("formatter")
        if not formatter:
            continue  # a fixed path, or the static files' folder
        pattern = info["pattern"].pattern
        choices = {
            variable: patterned_choices(pattern, variable)
            for variable in re.findall(r"\{(\w+)\}", formatter)
            if variable not in RULES
        }
        for route in resource:
            yield route.method, formatter, choices


def patterned_choices(pattern: str, variable: str) -> list[str]:
    group = re.search(rf"\(\?P<{variable}>([^()]*)\)", pattern)
    assert group, (pattern, variable)
    body = group.group(1)
    if re.fullmatch(r"[\w-]+(\|[\w-]+)*", body):
        return body.split("|")
    assert variable in FREE_PATTERNS, f"give the route variable {variable!r} a valid value"
    return [FREE_PATTERNS[variable]]


def crafted_requests(namespace: str) -> Iterator[tuple[str, str, str]]:
    """(method, path, the crafted segment decoded) for each route, variable and crafted value;
    the route's other names are the real namespace, job and a pod's name."""
    valid = {"namespace": namespace, "name": JOB, "pod": f"{JOB}-worker-0"}
    for method, formatter, choices in routes():
        named = [v for v in re.findall(r"\{(\w+)\}", formatter) if v in RULES]
        for variable, raw in itertools.product(named, CRAFTED):
            segment = raw.format(ns=namespace)
            for picked in itertools.product(*choices.values()):
                parts = {**valid, **dict(zip(choices, picked, strict=True)), variable: segment}
                yield method, formatter.format(**parts), unquote(segment)


def send(console: Console, method: str, path: str, cookie: str, form: str) -> tuple[int, str]:
    """One request exactly as written: a browser's URL parser would resolve `..` and `%2E%2E`."""
    connection = http.client.HTTPConnection("127.0.0.1", console.port, timeout=30)
    headers = {"Cookie": cookie, "Origin": console.url}
    body = None
    if method == "POST":
        headers["Content-Type"] = "application/x-www-form-urlencoded"
        body = form
    try:
        connection.request(method, path, body=body, headers=headers)
        answer = connection.getresponse()
        return answer.status, answer.read().decode(errors="replace")
    finally:
        connection.close()


async def cookie_header(context: BrowserContext) -> str:
    return "; ".join(f"{c['name']}={c['value']}" for c in await context.cookies())


def create_config_map(control_plane: ControlPlane, namespace: str) -> None:
    control_plane.kubectl(
        "create", "configmap", CONFIG_MAP, "-n", namespace, "--from-literal=kept=yes"
    )


def config_map_exists(control_plane: ControlPlane, namespace: str) -> bool:
    got = control_plane.kubectl("get", "configmap", CONFIG_MAP, "-n", namespace, check=False)
    return got.returncode == 0


async def test_every_route_refuses_a_crafted_name_and_reaches_nothing(
    control_plane: ControlPlane, namespace: str, console: Console, browser: Browser
) -> None:
    create_config_map(control_plane, namespace)
    create_job(control_plane, namespace, JOB)
    context, page = await signed_in(
        browser, console, tenant_token(control_plane, namespace, "edit")
    )
    cookie = await cookie_header(context)

    refused = 0
    for method, path, decoded in crafted_requests(namespace):
        form = urlencode({"confirm": decoded, "view": "form"})
        status, text = await asyncio.to_thread(send, console, method, path, cookie, form)
        assert status == 404, (method, path, status, text[:300])
        assert method == "HEAD" or "is not a" in text, (method, path, text[:300])
        refused += 1
    assert refused > 500  # every route, variable and crafted value

    assert config_map_exists(control_plane, namespace)
    spec = job_spec(control_plane, namespace, JOB)
    assert not (spec.get("runMode") or {}).get("pause"), spec
    # As Chromium sends it: the encoded slashes stay encoded, and the page says what it refused.
    crafted = CRAFTED[0].format(ns=namespace)
    await page.goto(f"/ns/{namespace}/jobs/{crafted}")
    await expect(page.get_by_role("heading", name="404")).to_be_visible()
    await expect(page.locator("main")).to_contain_text("is not a job's name")
    await page.goto(f"/go?namespace={'..%2Fkube-system'}")
    assert page.url.rstrip("/") == console.url
    await context.close()


def alias_bomb(levels: int = 9) -> str:
    """About a kilobyte that reads as 9**9 (387 million) strings where aliases are followed."""
    lines = ['l0: &l0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for level in range(1, levels):
        lines.append(f"l{level}: &l{level} [{','.join([f'*l{level - 1}'] * 9)}]")
    return "\n".join(lines) + "\n"


def memory_of(pid: int) -> dict[str, int]:
    """The process's resident memory now (VmRSS) and at its peak (VmHWM), in bytes."""
    status = Path(f"/proc/{pid}/status").read_text()
    found = dict(re.findall(r"^(VmRSS|VmHWM):\s+(\d+) kB$", status, re.MULTILINE))
    return {key: int(value) * 1024 for key, value in found.items()}


async def test_the_alias_bomb_is_refused_and_the_consoles_memory_stays_flat(
    control_plane: ControlPlane, namespace: str, console: Console, browser: Browser
) -> None:
    context, _ = await signed_in(browser, console, tenant_token(control_plane, namespace, "edit"))
    started = console.process.process
    assert started is not None
    pid = started.pid
    before = memory_of(pid)
    bomb = alias_bomb()
    assert len(bomb) < 1024
    new = f"/ns/{namespace}/jobs/new"
    origin = {"Origin": console.url}
    # The editor checks on every keystroke: the same bomb, many times, on every YAML route.
    for path in [f"{new}/check"] * 10 + [f"{new}/yaml", f"{new}/form", new]:
        for htmx in ({"HX-Request": "true"}, {}):
            answer = await context.request.post(
                path, form={"view": "yaml", "yaml": bomb}, headers={**origin, **htmx}
            )
            text = await answer.text()
            assert answer.status == 400, (path, answer.status, text[:300])
            assert "anchors and aliases are not accepted" in text, text[:300]
    wide = "[" + ",".join(["1"] * (MAX_NODES + 1)) + "]"
    answer = await context.request.post(
        f"{new}/check", form={"view": "yaml", "yaml": wide}, headers=origin
    )
    assert answer.status == 400 and f"more than {MAX_NODES}" in await answer.text()

    after = memory_of(pid)
    assert after["VmHWM"] - max(before["VmHWM"], before["VmRSS"]) < MEMORY_BOUND_BYTES, (
        before,
        after,
    )
    listed = control_plane.kubectl("get", "pytorchtrainingjobs", "-n", namespace, "-o", "json")
    assert json.loads(listed.stdout)["items"] == []  # the create POST made nothing
    await context.close()


async def test_a_form_of_many_parts_is_held_to_the_body_limit(
    control_plane: ControlPlane, namespace: str, console: Console, browser: Browser
) -> None:
    context, _ = await signed_in(browser, console, tenant_token(control_plane, namespace, "edit"))
    answer = await context.request.post(
        f"/ns/{namespace}/jobs/new/check",
        multipart={"view": "yaml", "yaml": "x: " + "y" * 300_000},
        headers={"Origin": console.url},
    )
    assert answer.status == 413 and "larger than the console accepts" in await answer.text()
    await context.close()
