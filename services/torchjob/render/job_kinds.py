"""How a job runs in each of the two APIs a job may be written in (api/job_api.py names them):
torchjob's PyTorchTrainingJob and Kubeflow's PyTorchJob. Each is a `JobKind`; the code that
renders, admits and writes a job asks its job's kind (`kind_of`) what differs instead of testing
which API it is. Both run through the same lifecycle, on the PyTorchTrainingJob a job stands for.
Pure."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final, Protocol

from torchjob.api import constants
from torchjob.api.job_api import KUBEFLOW_JOB, TRAINING_JOB, JobApi
from torchjob.api.jsoncopy import merge_patched
from torchjob.api.kubeflow import KUBEFLOW_SPEC, KUBEFLOW_STATUS, as_training_job
from torchjob.api.progress import ProgressEndpoint
from torchjob.render.kubeflow import kubeflow_labels, kubeflow_status
from torchjob.render.pod_rewrite import PreparedJob, Rewrite, rewrite_kubeflow_pod, rewrite_pod
from torchjob.render.topology import Replica


class JobKind(Protocol):
    api: JobApi

    def training_job(self, job: dict[str, Any]) -> dict[str, Any]:
        """The PyTorchTrainingJob the stored job stands for, which the lifecycle runs."""
        ...

    def own_labels(self, job_name: str, replica: Replica) -> dict[str, str]:
        """The API's own labels on a replica's Pod and Service, beside torchjob's."""
        ...

    def rewrite_pod(
        self,
        job: PreparedJob,
        own_spec: Mapping[str, Any],
        pod: dict[str, Any],
        progress: ProgressEndpoint | None = None,
    ) -> Rewrite:
        """A replica's pod rewritten at admission; `own_spec` is the stored job's spec,
        `progress` where its training processes report progress (None: nowhere)."""
        ...

    def shown_status(self, job: dict[str, Any], record: dict[str, Any], now: str) -> dict[str, Any]:
        """What is written to the status of `job` (as `training_job` made it) for the
        lifecycle's `record`, as a merge patch; `now` stamps what changes."""
        ...

    def remember_shown(self, job: dict[str, Any], written: dict[str, Any]) -> None:
        """`job` (as `training_job` made it) moved on to the status just written, for a second
        write in the same round."""
        ...

    def pause_patch(self, paused: bool) -> dict[str, Any]:
        """The merge patch of a job's spec that pauses it (`paused`) or resumes it."""
        ...


class TrainingJobKind:
    api: JobApi = TRAINING_JOB

    def training_job(self, job: dict[str, Any]) -> dict[str, Any]:
        return job

    def own_labels(self, job_name: str, replica: Replica) -> dict[str, str]:
        return {constants.LABEL_T9K_OWNER: job_name}

    def rewrite_pod(
        self,
        job: PreparedJob,
        own_spec: Mapping[str, Any],
        pod: dict[str, Any],
        progress: ProgressEndpoint | None = None,
    ) -> Rewrite:
        return rewrite_pod(job, pod, progress)

    def shown_status(self, job: dict[str, Any], record: dict[str, Any], now: str) -> dict[str, Any]:
        return record

    def remember_shown(self, job: dict[str, Any], written: dict[str, Any]) -> None:
        return None  # the lifecycle's record is the status itself

    def pause_patch(self, paused: bool) -> dict[str, Any]:
        return {"spec": {"runMode": {"pause": {"enabled": paused}}}}


class KubeflowJobKind:
    """Kubeflow's PyTorchJob: run as the PyTorchTrainingJob `as_training_job` makes of it, its
    pods labelled and rewritten as Kubeflow's training-operator makes them, its status Kubeflow's
    (with the lifecycle's record kept in it)."""

    api: JobApi = KUBEFLOW_JOB

    def training_job(self, job: dict[str, Any]) -> dict[str, Any]:
        return as_training_job(job)

    def own_labels(self, job_name: str, replica: Replica) -> dict[str, str]:
        return kubeflow_labels(job_name, replica)

    def rewrite_pod(
        self,
        job: PreparedJob,
        own_spec: Mapping[str, Any],
        pod: dict[str, Any],
        progress: ProgressEndpoint | None = None,
    ) -> Rewrite:
        return rewrite_kubeflow_pod(job, own_spec, pod, progress)

    def shown_status(self, job: dict[str, Any], record: dict[str, Any], now: str) -> dict[str, Any]:
        stored = job.get(KUBEFLOW_STATUS) or {}
        spec = job.get(KUBEFLOW_SPEC) or {}
        return kubeflow_status(job["metadata"]["name"], stored, record, now, spec)

    def remember_shown(self, job: dict[str, Any], written: dict[str, Any]) -> None:
        job[KUBEFLOW_STATUS] = merge_patched(job.get(KUBEFLOW_STATUS) or {}, written)

    def pause_patch(self, paused: bool) -> dict[str, Any]:
        return {"spec": {"runPolicy": {"suspend": paused}}}  # `training_spec` reads it as a pause


KINDS: Final[Mapping[JobApi, JobKind]] = {
    TRAINING_JOB: TrainingJobKind(),
    KUBEFLOW_JOB: KubeflowJobKind(),
}


def kind_of(api: JobApi) -> JobKind:
    return KINDS[api]
