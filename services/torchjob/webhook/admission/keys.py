"""What the admission routes read from the application, by key, beside the slots every part
shares (`webhook/keys.py`): set by `app.init_app` and read by the routes."""

from __future__ import annotations

import structlog
from aiohttp import web

from torchjob.webhook.admission.bounds import Admissions
from torchjob.webhook.admission.job_cache import DecodedJobs

DECODED_JOBS = web.AppKey("decoded_jobs", DecodedJobs)
ADMISSIONS_BOUND = web.AppKey("admissions", Admissions)
# The module's logger is a lazy proxy that resolves itself on every call (five times the cost of a
# filtered-out debug line); admissions log through one resolved once logging is configured.
ADMISSION_LOG = web.AppKey("admission_log", structlog.typing.FilteringBoundLogger)
