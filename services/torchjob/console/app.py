"""The console: aiohttp, wired together.

`init_app` puts what the pages read into the application (`keys`), and what runs beside them into
its cleanup contexts: the probes on a port of their own, and the sweep that ends idle sessions.
Every page's Kubernetes request is made with its session's client (`user_api`); the console
holds no client of its own that reads anything."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import structlog
from aiohttp import web

from torchjob.console import (
    auth,
    create,
    jobs,
    logs,
    namespaces,
    replicas,
    resources,
    route_names,
    security,
    tensorboard,
    yaml_input,
)
from torchjob.console.identity import ApiServer, locate
from torchjob.console.keys import API_SERVER, PAGES, SESSIONS, SETTINGS
from torchjob.console.sessions import Sessions
from torchjob.console.settings import AUTH_PROXY, Settings
from torchjob.console.templating import STATIC, Pages
from torchjob.runtime.probes import probe_app

log = structlog.get_logger("torchjob.console")

# How soon an ended session's streams stop: a revoked token, an idle or expired session.
SWEEP_SECONDS = 15.0
# The routes of each job API (jobs.ROUTE_APIS), as one segment's pattern.
KIND = "{kind:" + "|".join(jobs.ROUTE_APIS) + "}"
JOB = f"/ns/{{namespace}}/{KIND}/{{name}}"
NEW_JOB = "/ns/{namespace}/jobs/new"


def init_app(settings: Settings, api_server: ApiServer | None = None) -> web.Application:
    app = web.Application(
        client_max_size=settings.max_body_bytes,
        middlewares=[
            # First: a TensorBoard host's request never meets the console's own middlewares.
            tensorboard.board_host,
            security.show_errors,
            security.check_origin,
            route_names.check_route_names,
            yaml_input.refuse_unsafe_yaml,
            auth.require_session,
        ],
    )
    # A signal, not a middleware: it also sees streamed answers and raised redirects.
    app.on_response_prepare.append(security.secure_headers)
    app[SETTINGS] = settings
    app[API_SERVER] = api_server or locate(
        settings.kubeconfig, own_token=settings.auth_mode == AUTH_PROXY
    )
    app[SESSIONS] = Sessions(
        idle=settings.session_idle_seconds, max_age=settings.session_max_seconds
    )
    app[PAGES] = Pages()
    app.cleanup_ctx.append(_probes)
    app.cleanup_ctx.append(_sessions)
    app.cleanup_ctx.append(tensorboard.tensorboard_sessions)
    add_routes(app)
    return app


def add_routes(app: web.Application) -> None:
    router = app.router
    router.add_get("/sign-in", auth.sign_in_page)
    router.add_post("/sign-in", auth.sign_in)
    router.add_post("/sign-out", auth.sign_out)
    router.add_static("/static/", STATIC, append_version=False)
    router.add_get("/", namespaces.namespaces_page)
    router.add_get("/go", namespaces.go_to_namespace)
    router.add_get(f"/ns/{{namespace}}/{KIND}", jobs.job_list)
    router.add_get(f"/ns/{{namespace}}/{KIND}/stream", jobs.job_list_stream)
    # Before the job's own routes, whose {name} would take `new`.
    router.add_get(NEW_JOB, create.create_page)
    router.add_post(NEW_JOB, create.create)
    router.add_post(f"{NEW_JOB}/yaml", create.to_yaml)
    router.add_post(f"{NEW_JOB}/form", create.to_form)
    router.add_post(f"{NEW_JOB}/check", create.check)
    router.add_get(JOB, jobs.job_page)
    router.add_get(f"{JOB}/stream", jobs.job_stream)
    router.add_post(f"{JOB}/{{action:pause|resume|delete}}", jobs.job_action)
    router.add_post(f"{JOB}/diagnose", jobs.diagnose)
    router.add_get(f"{JOB}/replicas", replicas.replicas_page)
    router.add_get(f"{JOB}/replicas/stream", replicas.replicas_stream)
    router.add_get("/ns/{namespace}/pods/{pod}/log", logs.log_page)
    router.add_get("/ns/{namespace}/pods/{pod}/log/stream", logs.log_stream)
    router.add_get("/ns/{namespace}/pods/{pod}/log/download", logs.log_download)
    router.add_get(f"{JOB}/resources", resources.resources_page)
    router.add_get(f"{JOB}/resources/stream", resources.resources_stream)
    router.add_get(f"{JOB}/resources/series", resources.resources_series)
    router.add_get(f"{JOB}/tensorboard", tensorboard.open_tensorboard)


async def _probes(app: web.Application) -> AsyncIterator[None]:
    settings = app[SETTINGS]
    runner = web.AppRunner(probe_app(lambda: None), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, settings.host, settings.probe_port)
    await site.start()
    yield
    await runner.cleanup()


async def _sessions(app: web.Application) -> AsyncIterator[None]:
    sessions = app[SESSIONS]

    async def sweep() -> None:
        while True:
            await asyncio.sleep(SWEEP_SECONDS)
            if ended := sessions.sweep() + await sessions.check_streaming():
                log.info("sessions ended", count=ended)

    task = asyncio.create_task(sweep())
    yield
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    await sessions.close_all()
