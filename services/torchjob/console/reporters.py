"""Who reported an Event, as the page shows it: the controller that says it wrote it (the
events.k8s.io `reportingController` and `reportingInstance`, else the older `source`), and
whether that is one of our services. Anyone allowed to create Events can name any controller; the
chart's event policy refuses an Event naming ours from anyone but our ServiceAccounts, so with
it installed the mark can be trusted."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from torchjob.api.constants import OUR_REPORTERS


@dataclass(frozen=True)
class Reporter:
    name: str
    instance: str
    ours: bool


def reporter_of(event: dict[str, Any]) -> Reporter:
    source = event.get("deprecatedSource") or event.get("source") or {}
    name = str(
        event.get("reportingController")
        or event.get("reportingComponent")
        or source.get("component")
        or ""
    )
    instance = str(event.get("reportingInstance") or source.get("host") or "")
    return Reporter(name, instance, name in OUR_REPORTERS)
