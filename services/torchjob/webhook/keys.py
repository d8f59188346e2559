"""What the webhook's application holds, by key: set by `app.init_app` (or, for the API client
and the job caches, by its cleanup contexts as the server starts) and read by the routes. Apart
from the wiring, so that the routes read them without importing it."""

from __future__ import annotations

import structlog
from aiohttp import web

from torchjob.api.job_api import JobApi
from torchjob.kube.client import KubeClient
from torchjob.kube.informer import Informer
from torchjob.webhook.bounds import Admissions
from torchjob.webhook.job_cache import DecodedJobs
from torchjob.webhook.progress_target import ProgressTarget
from torchjob.webhook.settings import Settings
from torchjob.webhook.tls import ServingCertificate

SETTINGS = web.AppKey("settings", Settings)
API = web.AppKey("api", KubeClient)
# The jobs of each API the webhook serves (render/job_kinds.served_apis), cached.
JOB_CACHES: web.AppKey[dict[JobApi, Informer]] = web.AppKey("job_caches")
TLS = web.AppKey("tls", ServingCertificate)
DECODED_JOBS = web.AppKey("decoded_jobs", DecodedJobs)
ADMISSIONS_BOUND = web.AppKey("admissions", Admissions)
# The module's logger is a lazy proxy that resolves itself on every call (five times the cost of a
# filtered-out debug line); admissions log through one resolved once logging is configured.
ADMISSION_LOG = web.AppKey("admission_log", structlog.typing.FilteringBoundLogger)
# Where training processes report progress (its `current` endpoint is handed to the pod rewrite);
# absent when the chart turns reporting off.
PROGRESS = web.AppKey("progress", ProgressTarget)
