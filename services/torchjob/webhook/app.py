"""The admission webhook: aiohttp over TLS, wired together from its three parts.

`init_app` puts what the routes read into the application (`keys`), and what runs beside them
into its cleanup contexts, started in order before the server accepts a connection and stopped in
reverse: the probes, the worker thread for large bodies, the Kubernetes API client, the job
caches the pod route reads, the serving certificate (`certificates/tls.py`), and the progress
endpoint on a port of its own (`progress/endpoint.py`). The routes and the request path they
share are in `admission/routes.py`, what a request may cost in `admission/bounds.py`.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import structlog
from aiohttp import web
from prometheus_client import Gauge

from torchjob.kube import resources
from torchjob.kube.client import new_kube_client
from torchjob.kube.informer import Informer
from torchjob.render.job_kinds import opted_in_settings, served_apis
from torchjob.runtime import metrics as runtime_metrics
from torchjob.runtime.probes import Heartbeat, serve_threaded_probes
from torchjob.webhook.admission import metrics as admission_metrics
from torchjob.webhook.admission.bounds import Admissions
from torchjob.webhook.admission.job_cache import DecodedJobs
from torchjob.webhook.admission.keys import ADMISSION_LOG, ADMISSIONS_BOUND, DECODED_JOBS
from torchjob.webhook.admission.routes import add_admission_routes
from torchjob.webhook.certificates import tls
from torchjob.webhook.certificates.tls import TLS
from torchjob.webhook.keys import API, JOB_CACHES, SETTINGS
from torchjob.webhook.progress import endpoint as progress_endpoint
from torchjob.webhook.settings import Settings

log = structlog.get_logger("torchjob.webhook")

INFLIGHT = Gauge(
    "torchjob_admission_inflight_bytes", "Bytes of admission bodies being read or answered"
)

# What the webhook's /metrics exports: its own families, not the controllers' it imports.
FAMILIES = runtime_metrics.Families(
    {
        admission_metrics.REQUESTS,
        admission_metrics.DURATION,
        "torchjob_admission_inflight_bytes",
    }
    | progress_endpoint.FAMILIES
    | runtime_metrics.KUBE_CLIENT
    | runtime_metrics.INFORMER
)


def init_app(settings: Settings) -> web.Application:
    limits = settings.limits
    app = web.Application(client_max_size=limits.max_body_bytes)
    app[SETTINGS] = settings
    app[TLS] = tls.ServingCertificate()
    app[DECODED_JOBS] = DecodedJobs()
    admissions = app[ADMISSIONS_BOUND] = Admissions(limits)
    # Read when /metrics is scraped, rather than set on every admission.
    INFLIGHT.set_function(lambda: admissions.inflight)
    app.on_startup.append(_resolve_logger)
    # The probes first: they report a stalled loop from the start, and stop last.
    heartbeat = Heartbeat(stall_after=limits.loop_stall_seconds)
    app.cleanup_ctx.append(
        serve_threaded_probes(
            settings.host, settings.probe_port, app[TLS].problem, heartbeat, FAMILIES.exposition
        )
    )
    app.cleanup_ctx.append(_admission_worker)
    app.cleanup_ctx.append(_api_client)
    app.cleanup_ctx.append(_job_cache)
    app.cleanup_ctx.append(_keep_certificate)
    app.cleanup_ctx.append(progress_endpoint.serve_progress)
    add_admission_routes(app)
    return app


async def _resolve_logger(app: web.Application) -> None:
    app[ADMISSION_LOG] = log.bind()


async def _admission_worker(app: web.Application) -> AsyncIterator[None]:
    yield
    app[ADMISSIONS_BOUND].close()


async def _api_client(app: web.Application) -> AsyncIterator[None]:
    app[API] = await new_kube_client(app[SETTINGS].kubeconfig)
    yield
    await app[API].close()


async def _job_cache(app: web.Application) -> AsyncIterator[None]:
    """Jobs from a watch, so a pod admission reads its job from memory instead of a GET, and the
    progress endpoint whether a job has finished."""
    transform = progress_endpoint.job_with_outcome
    app[JOB_CACHES] = {
        api: Informer(app[API], resources.job_resource(api), transform=transform)
        for api in served_apis(opted_in_settings(app[SETTINGS]))
    }
    tasks = [
        asyncio.create_task(jobs.run(), name=f"{api.plural}-informer")
        for api, jobs in app[JOB_CACHES].items()
    ]
    yield
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


async def _keep_certificate(app: web.Application) -> AsyncIterator[None]:
    """Load the certificate before serving, then re-check it periodically in the background."""
    settings, serving = app[SETTINGS], app[TLS]
    refresh = tls.refresher(settings, serving, app[API])
    await refresh()
    task = asyncio.create_task(
        tls.refresh_periodically(refresh, settings.rotate_check_seconds),
        name="certificate-refresh",
    )
    yield
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    serving.close()
