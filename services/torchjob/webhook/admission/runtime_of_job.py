"""The TrainJob route's first step: the training runtime the job under admission names, read from
the apiserver as the webhook (None when there is none, or the job names none), for its validation
(api/trainer_admission.py). TrainJobs are created a few at a time, not per pod: no cache."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from torchjob.api.trainer import RUNTIME_PLURALS, runtime_ref
from torchjob.api.trainer_types import GROUP, VERSION
from torchjob.kube.errors import NotFound
from torchjob.kube.informer import ResourceKind
from torchjob.kube.rest import Resources
from torchjob.webhook.admission.bounds import Work
from torchjob.webhook.keys import API


async def runtime_of_job(app: web.Application, body: Any, work: Work) -> dict[str, Any] | None:
    request = body.get("request") if isinstance(body, dict) else None
    if not isinstance(request, dict):
        return None
    job = request.get("object")
    if not isinstance(job, dict) or request.get("operation") not in ("CREATE", "UPDATE"):
        return None
    namespace = request.get("namespace")
    meta = {**(job.get("metadata") or {}), "namespace": namespace}
    ref = runtime_ref({**job, "metadata": meta})
    if ref.kind not in RUNTIME_PLURALS or not ref.name or not isinstance(namespace, str):
        return None  # refused by the rules, naming the field
    kind = ResourceKind(GROUP, VERSION, ref.plural)
    try:
        async with work.handler_timeout():
            runtime = await Resources(app[API]).get(kind, ref.namespace or "", ref.name)
    except (NotFound, ValueError):  # ValueError: a name that is no path segment
        return None
    return runtime if isinstance(runtime, dict) else None
