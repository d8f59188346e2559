"""Server-rendered pages: Jinja2 templates, escaped by default, and the filters they share."""

from __future__ import annotations

import datetime
from pathlib import Path
from typing import Any

import jinja2
from aiohttp import web

from torchjob.api.constants import REASON_DIAGNOSED
from torchjob.console.reporters import reporter_of

TEMPLATES = Path(__file__).parent / "templates"
STATIC = Path(__file__).parent / "static"
HTML = "text/html"


def age(timestamp: str | None, now: datetime.datetime | None = None) -> str:
    """How long ago an RFC 3339 time was, as kubectl shows it (45s, 12m, 3h, 2d)."""
    if not timestamp:
        return ""
    try:
        then = datetime.datetime.fromisoformat(timestamp.replace("Z", "+00:00"))
    except ValueError:
        return ""
    now = now or datetime.datetime.now(datetime.UTC)
    seconds = max(0, int((now - then).total_seconds()))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


class Pages:
    def __init__(self, directory: Path = TEMPLATES) -> None:
        self.environment = jinja2.Environment(
            loader=jinja2.FileSystemLoader(directory),
            autoescape=True,
            undefined=jinja2.ChainableUndefined,
            trim_blocks=True,
            lstrip_blocks=True,
        )
        self.environment.filters["age"] = age
        self.environment.filters["reporter"] = reporter_of
        # An Event whose message carries a diagnosis: the job's own words (job_events.html).
        self.environment.globals["DIAGNOSED"] = REASON_DIAGNOSED

    def text(self, template: str, **context: Any) -> str:
        return self.environment.get_template(template).render(**context)

    def response(self, template: str, status: int = 200, **context: Any) -> web.Response:
        return web.Response(
            text=self.text(template, **context), status=status, content_type=HTML, charset="utf-8"
        )
