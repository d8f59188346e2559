"""What the creation page says and reads back of each job kind, beyond rendering its form: every
kind renders the form's recipe itself (`JobKind.recipe_spec`, through `kind_manifest_of`), so a
kind without a row here is still offered, by its kind's name, with the YAML view for a clone.
A row adds its name and help on the page, the defaults a clone leaves out, the form a manifest of
the kind makes back (`form_of`, else the YAML view says why) and the form field an error about
its fields names. Pure."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from torchjob.api.defaults import default_job
from torchjob.api.job_api import KUBEFLOW_JOB, TRAIN_JOB, TRAINING_JOB, JobApi
from torchjob.api.kubeflow_admission import default_pytorchjob
from torchjob.api.trainer_admission import default_trainjob
from torchjob.views.console.job_clone import Defaulting
from torchjob.views.console.job_form import JobForm, NotShown, field_of_path, form_of
from torchjob.views.console.kubeflow_form import kubeflow_field_of_path, kubeflow_form_of


def _as_given(manifest: dict[str, Any]) -> tuple[dict[str, Any], None]:
    return manifest, None


def _no_form(manifest: Any) -> JobForm | NotShown:
    return NotShown(("the form does not read this kind back: its YAML is the source",))


def _no_field(path: str) -> str | None:
    return None


@dataclass(frozen=True)
class KindForm:
    """The creation page's words and readings for one job kind."""

    label: str
    help: str = ""
    # Fills in the kind's defaults, as its webhook does, so a clone leaves them out.
    defaulting: Defaulting = _as_given
    form_of: Callable[[Any], JobForm | NotShown] = _no_form
    field_of_path: Callable[[str], str | None] = _no_field
    # What a clone keeps even where it is the default, to be shown in the form.
    kept_in_clones: frozenset[str] = frozenset()


KIND_FORMS: Final[Mapping[JobApi, KindForm]] = {
    TRAINING_JOB: KindForm(
        "PyTorchTrainingJob",
        "torchjob's own job: its replicas all run the same pod; with torchrun on, torchrun starts "
        "the command line on each of them and connects them. It can have a TensorBoard and a T9k "
        "Scheduler queue.",
        default_job,
        form_of,
        field_of_path,
    ),
    KUBEFLOW_JOB: KindForm(
        "Kubeflow PyTorchJob",
        "A PyTorchJob runs as Kubeflow runs it: a Master and Workers, each running the same pod; "
        "with torchrun on, its container's command is torchrun. It has no TensorBoard and no T9k "
        "Scheduler queue.",
        default_pytorchjob,
        kubeflow_form_of,
        kubeflow_field_of_path,
        # A PyTorchJob's replica counts, which the form writes for a Master with Workers.
        frozenset({"replicas"}),
    ),
    TRAIN_JOB: KindForm(
        "Kubeflow TrainJob",
        "A TrainJob of the torch-distributed runtime: its nodes all run the runtime's pod with "
        "the form's image, command and resources; with torchrun on, its command is torchrun. "
        "Volumes, code and placement belong to its runtime.",
        default_trainjob,
    ),
}


def kind_form(api: JobApi) -> KindForm:
    """The creation page's row for `api`, or what it shows of a kind without one."""
    return KIND_FORMS.get(api) or KindForm(api.kind)
