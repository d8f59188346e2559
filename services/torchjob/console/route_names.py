"""The names a console route carries, checked against Kubernetes' own rules before any handler
runs: a namespace is a DNS-1123 label, a job's or a pod's name a DNS-1123 subdomain. aiohttp
decodes a segment after matching it, so `a%2F..%2Fconfigmaps%2Fx` matches `{name}` and would read
as a path to another object; a segment that is no such name is answered 404 and reaches nothing.

A route's other segments are held by their own pattern (`{kind:jobs|pytorchjobs}`); a new route
variable is either a row of `RULES` or has a pattern (tests/unit/test_console_route_names.py
walks the routes)."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from aiohttp import web

from torchjob.api.names import is_dns_1123_label, is_dns_1123_subdomain
from torchjob.console.security import Handler, refusal

# A route variable, the rule its value keeps, and what that rule is called on the page.
RULES: dict[str, tuple[Callable[[str], bool], str]] = {
    "namespace": (is_dns_1123_label, "a namespace's name (a DNS-1123 label)"),
    "name": (is_dns_1123_subdomain, "a job's name (a DNS-1123 subdomain)"),
    "pod": (is_dns_1123_subdomain, "a pod's name (a DNS-1123 subdomain)"),
}


def refused_segment(match_info: Mapping[str, str]) -> str | None:
    """Why the route's segments name nothing in Kubernetes, or None when they are names."""
    for variable, value in match_info.items():
        if variable in RULES:
            is_valid, called = RULES[variable]
            if not is_valid(value):
                return f"{value[:80]!r} is not {called}"
    return None


@web.middleware
async def check_route_names(request: web.Request, handler: Handler) -> web.StreamResponse:
    problem = refused_segment(request.match_info)
    if problem:
        return refusal(request, 404, "Not found", problem)
    return await handler(request)
