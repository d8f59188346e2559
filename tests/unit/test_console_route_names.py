"""A console route's names against Kubernetes' own rules, and the paths the client builds from
them: a segment that is no namespace or object name is refused before any handler runs, and a
name the client is given reaches that object and no other."""

from __future__ import annotations

import re
import socket
import ssl

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from yarl import URL

from torchjob.api.names import is_dns_1035_label, is_dns_1123_label, is_dns_1123_subdomain
from torchjob.console.app import add_routes, init_app
from torchjob.console.identity import ApiServer
from torchjob.console.route_names import RULES, refused_segment
from torchjob.console.settings import parse
from torchjob.kube.credentials import Credentials, StaticToken
from torchjob.kube.resources import JOBS, PODS

CRAFTED = [
    "",
    ".",
    "..",
    "a/../b",
    "../../api/v1/namespaces/ns/configmaps/kept",
    "a\\..\\b",
    "Upper",
    "kept\x00",
    "kept..config",
    "-kept",
    "kept-",
    "a b",
    "é",
    "kept.",
]
# Route variables held by a pattern of their own, not by a name rule.
PATTERNED = {"kind", "action", "path", "filename"}


@pytest.mark.parametrize("name", CRAFTED)
def test_no_crafted_segment_is_a_name(name: str) -> None:
    assert not is_dns_1123_label(name)
    assert not is_dns_1123_subdomain(name)
    for variable in RULES:
        assert refused_segment({variable: name}), variable


def test_kubernetes_names_pass() -> None:
    for name in ("a", "kept", "team-a", "0abc", "a" * 63):
        assert is_dns_1123_label(name), name
        assert refused_segment({"namespace": name, "name": name, "pod": name}) is None
    for name in ("resnet.v2", "kept-worker-0", "a.b.c", ".".join(["a" * 63] * 3) + ".a" * 30):
        assert is_dns_1123_subdomain(name), name
        assert refused_segment({"name": name, "pod": name}) is None
        assert "." not in name or not is_dns_1123_label(name)


def test_the_lengths_are_kubernetes_own() -> None:
    assert not is_dns_1123_label("a" * 64)
    assert is_dns_1123_subdomain("a" * 63 + ".b")
    assert is_dns_1123_subdomain(".".join(["a" * 63] * 4)[:253])
    assert not is_dns_1123_subdomain("a" * 63 + "." + "b" * 63 + "." + "c" * 63 + "." + "d" * 62)
    assert not is_dns_1035_label("0abc")
    assert is_dns_1035_label("abc-0")


def test_a_refusal_names_the_segment_and_the_rule() -> None:
    problem = refused_segment({"namespace": "ns", "name": "a/../b"})
    assert problem == "'a/../b' is not a job's name (a DNS-1123 subdomain)"
    assert refused_segment({"namespace": "x" * 500}) is not None
    assert len(str(refused_segment({"namespace": "x" * 500}))) < 200


def test_every_route_variable_is_checked_or_patterned() -> None:
    """A new route's namespace, job or pod is checked by its variable's name; any other variable
    must be held by a pattern, or be added to route_names.RULES."""
    app = web.Application()
    add_routes(app)
    seen: set[str] = set()
    for resource in app.router.resources():
        info = resource.get_info()
        formatter = str(info.get("formatter") or "")
        for variable in re.findall(r"\{(\w+)\}", formatter):
            seen.add(variable)
            assert variable in RULES or variable in PATTERNED, (formatter, variable)
            if variable in RULES:
                # The route's own pattern admits any segment: the rule is the check.
                pattern = info["pattern"].pattern
                assert f"(?P<{variable}>[^{{}}/]+)" in pattern, (formatter, pattern)
    assert {"namespace", "name", "pod"} <= seen


def test_every_segment_the_client_sends_is_quoted() -> None:
    assert JOBS.object_path("ns", "a/../b") == (
        "/apis/batch.tensorstack.dev/v1beta1/namespaces/ns/pytorchtrainingjobs/a%2F..%2Fb"
    )
    assert PODS.path("a/b") == "/api/v1/namespaces/a%2Fb/pods"
    assert (
        PODS.object_path("ns", "p?x=1#y", "log") == "/api/v1/namespaces/ns/pods/p%3Fx%3D1%23y/log"
    )
    assert PODS.object_path("ns", "a%2Fb") == "/api/v1/namespaces/ns/pods/a%252Fb"


@pytest.mark.parametrize("name", ["", ".", ".."])
def test_a_segment_that_walks_the_path_is_never_sent(name: str) -> None:
    with pytest.raises(ValueError, match="segment"):
        PODS.object_path("ns", name)
    if name:
        with pytest.raises(ValueError, match="segment"):
            PODS.path(name)


async def test_a_crafted_name_is_answered_before_any_request_or_session() -> None:
    """The console's own app, with an apiserver that cannot be reached: a request that got as
    far as the apiserver would fail otherwise, and one that got to the session would be sent to
    sign in."""
    nowhere = Credentials("https://127.0.0.1:9", ssl.create_default_context(), StaticToken(None))
    settings = parse(["--probe-port", str(unused_port()), "--host", "127.0.0.1"])
    app = init_app(settings, ApiServer(nowhere))
    async with TestClient(TestServer(app)) as client:
        for path in (
            "/ns/team/jobs/a%2F..%2F..%2Fconfigmaps%2Fkept",
            "/ns/team/pytorchjobs/%2E%2E/stream",
            "/ns/..%5C/jobs",
            "/ns/team/pods/Kept/log",
            "/ns/team/jobs/kept%00/resources/series",
        ):
            # As written: yarl would resolve '%2E%2E' before sending it.
            exact = URL(f"http://127.0.0.1:{client.port}{path}", encoded=True)
            answer = await client.session.get(exact, allow_redirects=False)
            assert answer.status == 404, path
            assert "is not a" in await answer.text(), path


def unused_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])
