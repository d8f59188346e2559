"""The pod admission handler: only torchjob's reconciler may create a pod carrying the job label,
and such a pod is rewritten into its replica. Pure: the webhook looks the job up and passes it.

The job is a PyTorchTrainingJob, or a Kubeflow PyTorchJob (the pod's controller says which,
`job_api_of_pod`): a PyTorchJob's pod is rewritten as Kubeflow's training-operator makes it, from
the PyTorchTrainingJob that runs it (api/kubeflow.py)."""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import Any

from torchjob.api import constants
from torchjob.api.admission import Request, Response, refuse
from torchjob.api.job_api import TRAINING_JOB, JobApi, api_of
from torchjob.api.model import ModelError
from torchjob.api.progress import ProgressEndpoint
from torchjob.api.types import PyTorchTrainingJob
from torchjob.render.job_kinds import kind_of
from torchjob.render.pod_rewrite import PodRewriteError, PreparedJob


def job_name_of(pod: Any) -> str | None:
    """The job a pod claims to belong to, from its label."""
    metadata = pod.get("metadata") if isinstance(pod, dict) else None
    labels = metadata.get("labels") if isinstance(metadata, dict) else None
    name = labels.get(constants.LABEL_JOB_NAME) if isinstance(labels, dict) else None
    return name if isinstance(name, str) and name else None


def job_api_of_pod(pod: Any) -> JobApi:
    """The API of the job a pod belongs to: the one whose apiVersion and kind its controlling
    owner reference names, else a PyTorchTrainingJob's."""
    ref = _controller_ref(pod)
    api = api_of(ref) if ref is not None else TRAINING_JOB
    return api if ref is not None and ref.get("kind") == api.kind else TRAINING_JOB


def decode_job(job: dict[str, Any]) -> PreparedJob:
    """The typed job a pod is rendered from, prepared for rendering its replicas: the job
    itself, or for a Kubeflow PyTorchJob the PyTorchTrainingJob that runs it."""
    api = api_of(job)
    return PreparedJob(PyTorchTrainingJob.from_dict(kind_of(api).training_job(job)), api)


JobDecoder = Callable[[dict[str, Any]], PreparedJob]


def mutate_pod(
    request: Request,
    job: dict[str, Any] | None,
    creators: Collection[str],
    decode: JobDecoder = decode_job,
    progress: ProgressEndpoint | None = None,
    in_place: bool = False,
) -> Response:
    """Rewrite a replica's pod; refuse a job-labelled pod from anyone but `creators`.

    `job` is the job the pod's controller names (`job_api_of_pod`), looked up by the job label.
    `decode` turns the job into its typed model, prepared for rendering (`decode_job`); the
    webhook passes one that remembers the result, since every replica of a job is admitted
    against the same stored object. `progress` is where the pod's training processes report
    their progress (None: nowhere, the chart turned reporting off); a job's annotation
    (api/progress.py) may turn it off for its own pods. `in_place`: the pod is made to restart
    in place (render/in_place.py) unless its job says not to."""
    if request.operation != "CREATE" or job_name_of(request.object) is None:
        return Response(request.uid, True)
    if request.username not in creators:
        return refuse(
            request.uid,
            f"pods labelled {constants.LABEL_JOB_NAME} are created by torchjob only; "
            f"{request.username or 'this user'} may not create them",
            code=403,
            reason="Forbidden",
        )
    if job is None:
        name = job_name_of(request.object)
        kind = job_api_of_pod(request.object).kind
        return refuse(request.uid, f"{kind} {request.namespace}/{name} not found", 404, "NotFound")
    return _rewrite(request, job, decode, progress, in_place)


def _rewrite(
    request: Request,
    job_obj: dict[str, Any],
    decode: JobDecoder,
    progress: ProgressEndpoint | None,
    in_place: bool,
) -> Response:
    pod: dict[str, Any] = request.object
    job_uid = (job_obj.get("metadata") or {}).get("uid")
    if _controller_uid(pod) != job_uid:
        return refuse(request.uid, "the pod is not controlled by its job", 403, "Forbidden")
    try:
        own_spec = job_obj.get("spec") or {}
        kind = kind_of(api_of(job_obj))
        rewrite = kind.rewrite_pod(decode(job_obj), own_spec, pod, progress, in_place)
    except (ModelError, PodRewriteError) as error:
        return refuse(request.uid, f"cannot render the replica: {error}", 422, "Invalid")
    return Response(request.uid, True, patch=rewrite.patch)


def _controller_uid(pod: dict[str, Any]) -> str | None:
    ref = _controller_ref(pod)
    uid = ref.get("uid") if ref is not None else None
    return uid if isinstance(uid, str) else None


def _controller_ref(pod: Any) -> dict[str, Any] | None:
    metadata = pod.get("metadata") if isinstance(pod, dict) else None
    refs = metadata.get("ownerReferences") if isinstance(metadata, dict) else None
    for ref in refs if isinstance(refs, list) else []:
        if isinstance(ref, dict) and ref.get("controller"):
            return ref
    return None
