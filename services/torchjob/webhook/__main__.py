"""`python -m torchjob.webhook`: the admission webhook server."""

from __future__ import annotations

import uvloop
from aiohttp import web

from torchjob.runtime import logging as runtime_logging
from torchjob.webhook.app import init_app
from torchjob.webhook.certificates.tls import TLS
from torchjob.webhook.settings import parse


def main(argv: list[str] | None = None) -> None:
    settings = parse(argv)
    runtime_logging.configure("webhook", settings.log_level)
    app = init_app(settings)
    web.run_app(
        app,
        # uvloop's transports and TLS are compiled: about a tenth less CPU per admission.
        loop=uvloop.new_event_loop(),
        host=settings.host,
        port=settings.port,
        ssl_context=app[TLS].context,
        access_log=None,
        print=None,
        shutdown_timeout=5,
        # A request refused before its body was read (too large, too many, too slow) closes its
        # connection at once instead of reading and discarding the rest for up to 10s.
        lingering_time=0,
    )


if __name__ == "__main__":
    main()
