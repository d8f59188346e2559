"""What the webhook's application holds for more than one of its parts, by key: set by
`app.init_app` (or, for the API client and the job caches, by its cleanup contexts as the server
starts) and read by the admission routes and the progress endpoint. Apart from the wiring, so that
they read them without importing it. A slot only one part reads is that part's: the admission
routes' in `admission/keys.py`, the serving certificate's `TLS` in `certificates/tls.py`, the
progress target's `PROGRESS` in `progress/target.py`."""

from __future__ import annotations

from aiohttp import web

from torchjob.api.job_api import JobApi
from torchjob.kube.client import KubeClient
from torchjob.kube.informer import Informer
from torchjob.webhook.settings import Settings

SETTINGS = web.AppKey("settings", Settings)
API = web.AppKey("api", KubeClient)
# The jobs of each API the webhook serves (render/job_kinds.served_apis), cached.
JOB_CACHES: web.AppKey[dict[JobApi, Informer]] = web.AppKey("job_caches")
