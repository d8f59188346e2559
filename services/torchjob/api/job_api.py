"""The APIs a job may be written in: torchjob's own PyTorchTrainingJob and, opt-in, Kubeflow's
PyTorchJob (docs/kubeflow.md) and Kubeflow Trainer's TrainJob (docs/trainjob.md). All run
through the same lifecycle; what differs is named here, so the rest of the code asks a job's
`JobApi`, and its kind (render/job_kinds.py), instead of testing which API it is."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from torchjob.api import kubeflow_types, trainer_types, types


@dataclass(frozen=True, slots=True)
class JobApi:
    """A job resource: where it is served and what its objects are called."""

    group: str
    version: str
    kind: str
    plural: str

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}"


TRAINING_JOB: Final = JobApi(types.GROUP, types.VERSION, types.KIND, types.PLURAL)
KUBEFLOW_JOB: Final = JobApi(
    kubeflow_types.GROUP, kubeflow_types.VERSION, kubeflow_types.KIND, kubeflow_types.PLURAL
)
TRAIN_JOB: Final = JobApi(
    trainer_types.GROUP, trainer_types.VERSION, trainer_types.KIND, trainer_types.PLURAL
)
JOB_APIS: Final = (TRAINING_JOB, KUBEFLOW_JOB, TRAIN_JOB)


def api_named(kind: str) -> JobApi:
    """The API of a job `kind` (PyTorchTrainingJob's for a kind no API has)."""
    return next((api for api in JOB_APIS if api.kind == kind), TRAINING_JOB)


def api_of(obj: Mapping[str, Any]) -> JobApi:
    """The API an object (a job, or an owner reference) is written in, by its apiVersion
    (PyTorchTrainingJob's for an apiVersion no API has)."""
    version = obj.get("apiVersion")
    return next((api for api in JOB_APIS if api.api_version == version), TRAINING_JOB)
