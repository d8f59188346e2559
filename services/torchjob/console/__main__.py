"""`python -m torchjob.console`: the browser console."""

from __future__ import annotations

import uvloop
from aiohttp import web

from torchjob.console.app import init_app
from torchjob.console.settings import parse
from torchjob.runtime import logging as runtime_logging


def main(argv: list[str] | None = None) -> None:
    settings = parse(argv)
    runtime_logging.configure("console", settings.log_level)
    web.run_app(
        init_app(settings),
        loop=uvloop.new_event_loop(),
        host=settings.host,
        port=settings.port,
        access_log=None,
        print=None,
        # An open event stream (a live page) ends at once rather than holding the shutdown.
        shutdown_timeout=2,
    )


if __name__ == "__main__":
    main()
