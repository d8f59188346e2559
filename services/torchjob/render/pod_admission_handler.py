"""The pod admission handler: only torchjob's reconciler may create a pod carrying the job label,
and such a pod is rewritten into its replica. Pure: the webhook looks the job up and passes it."""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import Any

from torchjob.api import constants
from torchjob.api.admission import Request, Response, refuse
from torchjob.api.model import ModelError
from torchjob.api.types import PyTorchTrainingJob
from torchjob.render.pod_rewrite import PodRewriteError, rewrite_pod


def job_name_of(pod: Any) -> str | None:
    """The job a pod claims to belong to, from its label."""
    metadata = pod.get("metadata") if isinstance(pod, dict) else None
    labels = metadata.get("labels") if isinstance(metadata, dict) else None
    name = labels.get(constants.LABEL_JOB_NAME) if isinstance(labels, dict) else None
    return name if isinstance(name, str) and name else None


JobDecoder = Callable[[dict[str, Any]], PyTorchTrainingJob]


def mutate_pod(
    request: Request,
    job: dict[str, Any] | None,
    creators: Collection[str],
    decode: JobDecoder = PyTorchTrainingJob.from_dict,
) -> Response:
    """Rewrite a replica's pod; refuse a job-labelled pod from anyone but `creators`.

    `decode` turns the job into its typed model; the webhook passes one that remembers the
    result, since every replica of a job is admitted against the same stored object."""
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
        return refuse(
            request.uid, f"PyTorchTrainingJob {request.namespace}/{name} not found", 404, "NotFound"
        )
    return _rewrite(request, job, decode)


def _rewrite(request: Request, job_obj: dict[str, Any], decode: JobDecoder) -> Response:
    pod: dict[str, Any] = request.object
    job_uid = (job_obj.get("metadata") or {}).get("uid")
    if _controller_uid(pod) != job_uid:
        return refuse(request.uid, "the pod is not controlled by its job", 403, "Forbidden")
    try:
        job = decode(job_obj)
        rewrite = rewrite_pod(job, pod)
    except (ModelError, PodRewriteError) as error:
        return refuse(request.uid, f"cannot render the replica: {error}", 422, "Invalid")
    return Response(request.uid, True, patch=rewrite.patch)


def _controller_uid(pod: dict[str, Any]) -> str | None:
    for ref in (pod.get("metadata") or {}).get("ownerReferences") or []:
        if isinstance(ref, dict) and ref.get("controller"):
            uid = ref.get("uid")
            return uid if isinstance(uid, str) else None
    return None
