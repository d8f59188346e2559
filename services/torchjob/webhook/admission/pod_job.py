"""The pod route's first step: the job a pod under admission claims, from the cache of its kind
(the informers `app.init_app` runs), else read from the apiserver, a bounded number at a time."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from torchjob.api.job_api import JobApi
from torchjob.kube import resources
from torchjob.kube.errors import NotFound
from torchjob.kube.informer import Informer
from torchjob.kube.rest import Resources
from torchjob.render.pod_admission_handler import job_api_of_pod, job_name_of
from torchjob.webhook.admission.bounds import MAX_JOB_LOOKUPS, Busy, Work
from torchjob.webhook.admission.keys import DECODED_JOBS
from torchjob.webhook.keys import API, JOB_CACHES


async def job_of_pod(app: web.Application, body: Any, work: Work) -> dict[str, Any] | None:
    """The job a pod under admission claims (a PyTorchTrainingJob, or a Kubeflow PyTorchJob when
    the pod's controller is one), from the cache of its kind, else read from the apiserver (None
    when absent, or when the pod claims none). A cached job is returned without waiting."""
    claimed = _claimed_job(body)
    if claimed is None:
        return None
    namespace, name, pod = claimed
    api = job_api_of_pod(pod)
    cache = _cache_of(app, api)
    cached = cache.get_json(namespace, name) if cache is not None else None
    if cached is not None:
        return app[DECODED_JOBS].parsed(namespace, name, cached)
    # Not cached yet (created a moment ago): ask the apiserver.
    return await _fetched(app, api, namespace, name, work)


async def _fetched(
    app: web.Application, api: JobApi, namespace: str, name: str, work: Work
) -> dict[str, Any] | None:
    admissions = work.admissions
    if admissions.lookups >= MAX_JOB_LOOKUPS:
        raise Busy(f"too many pods of jobs the webhook has not cached yet; retry ({name})")
    admissions.lookups += 1
    try:
        async with work.handler_timeout():
            job = await Resources(app[API]).get(resources.job_resource(api), namespace, name)
    except NotFound:
        return None
    finally:
        admissions.lookups -= 1
    return job if isinstance(job, dict) else None


def _claimed_job(body: Any) -> tuple[str, str, Any] | None:
    """The namespace and name of the job a pod under admission claims by its label, and the pod;
    None when it claims none."""
    request = body.get("request") if isinstance(body, dict) else None
    namespace = request.get("namespace") if isinstance(request, dict) else None
    pod = request.get("object") if isinstance(request, dict) else None
    name = job_name_of(pod)
    if not isinstance(namespace, str) or name is None:
        return None
    return namespace, name, pod


def _cache_of(app: web.Application, api: JobApi) -> Informer | None:
    """The cache of jobs of `api`: PyTorchJobs are cached only when the webhook serves them."""
    return app[JOB_CACHES].get(api)
