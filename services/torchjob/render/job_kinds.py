"""How a job runs in each of the APIs a job may be written in (api/job_api.py names them):
torchjob's PyTorchTrainingJob, Kubeflow's PyTorchJob and Kubeflow Trainer's TrainJob. Each is a
`JobKind`; the code that renders, admits and writes a job asks its job's kind (`kind_of`) what
differs instead of testing which API it is. All run through the same lifecycle, on the
PyTorchTrainingJob a job stands for. As kueue's `GenericJob`, a kind says whether a stored job
is paused and how to pause it, its phase and outcome as its API shows them, and the children it
has beside pods and services (optional: `autoscaler` is None for a kind without), and the spec of
its job a recipe describes (`recipe_spec`, render/recipe.py). A new kind is a class meeting
`JobKind` and its row in `KINDS` (CONTRIBUTING.md, "a job kind"). Pure."""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any, Final, Protocol

from torchjob.api import constants
from torchjob.api.admission import Request, Response, mutate_job, validate_job
from torchjob.api.defaults import default_job
from torchjob.api.field_errors import Result
from torchjob.api.job_api import JOB_APIS, KUBEFLOW_JOB, TRAIN_JOB, TRAINING_JOB, JobApi
from torchjob.api.jsoncopy import merge_patched
from torchjob.api.kubeflow import (
    DEFAULT_CONTAINER,
    KUBEFLOW_SPEC,
    KUBEFLOW_STATUS,
    STATUS_RECORD,
    as_training_job,
    managed_elsewhere,
)
from torchjob.api.kubeflow_admission import (
    default_pytorchjob,
    mutate_pytorchjob,
    validate_pytorchjob,
    validate_pytorchjob_request,
)
from torchjob.api.progress import ProgressEndpoint
from torchjob.api.trainer import (
    NODE,
    RUNTIME_RECORD,
    RuntimeRef,
    copied_runtime,
    runtime_to_copy,
)
from torchjob.api.trainer import as_training_job as as_trainjob_training_job
from torchjob.api.trainer import managed_elsewhere as trainer_managed_elsewhere
from torchjob.api.trainer_admission import (
    default_trainjob,
    mutate_trainjob,
    validate_trainjob,
    validate_trainjob_request,
    validate_trainjob_unresolved,
)
from torchjob.api.types import JOB_PHASE_VALUES
from torchjob.api.validation import validate
from torchjob.render.kubeflow import (
    CREATED,
    FINISHED_CONDITIONS,
    KUBEFLOW_CONDITIONS,
    SUCCEEDED,
    kubeflow_labels,
    kubeflow_status,
    render_autoscaler,
)
from torchjob.render.kubeflow_recipe import kubeflow_recipe_spec
from torchjob.render.pod_rewrite import (
    PreparedJob,
    Rewrite,
    rewrite_kubeflow_pod,
    rewrite_pod,
    rewrite_trainjob_pod,
)
from torchjob.render.recipe import JobRecipe
from torchjob.render.topology import Replica
from torchjob.render.trainer import COMPLETE as TRAINER_COMPLETE
from torchjob.render.trainer import FAILED as TRAINER_FAILED
from torchjob.render.trainer import TRAINER_CONDITIONS, trainer_labels, trainer_status
from torchjob.render.trainer_recipe import trainer_recipe_spec
from torchjob.render.training_recipe import training_recipe_spec

Object = dict[str, Any]


@dataclass(frozen=True, slots=True)
class Admission:
    """A kind's admission webhooks: the routes `/mutate/<plural>` and `/validate/<plural>`, named
    `mutate-<endpoint>` and `validate-<endpoint>` (the admission metrics' label), and the
    handlers of their AdmissionReview requests."""

    endpoint: str
    mutate: Callable[[Request], Response]
    validate: Callable[[Request], Response]
    # For a kind whose jobs are made from a template (a TrainJob's runtime): validation given the
    # template the job names, which the webhook looks up first (None: not found), in place of
    # `validate`.
    validate_with_template: Callable[[Request, Mapping[str, Any] | None], Response] | None = None


class JobKind(Protocol):
    api: JobApi
    admission: Admission
    # The setting that has the operator serve it (`kubeflow`: --kubeflow, `trainer`: --trainer);
    # None: always served.
    opt_in: str | None
    # Its jobs may ask for a HorizontalPodAutoscaler (`autoscaler`), which is then watched.
    autoscaled: bool
    # What `phase` can say of a job of this kind.
    phases: tuple[str, ...]
    # The name of a replica's training container in this API (None: torchjob's own choice,
    # `python` else the first).
    training_container: str | None

    def run(self, job: Object) -> Object | None:
        """The PyTorchTrainingJob the lifecycle runs for a stored job; None where another
        controller manages it."""
        ...

    def runtime_to_copy(self, job: Object) -> RuntimeRef | None:
        """The template a stored job is made from (a TrainJob's training runtime), which the
        reconciler copies into the job's status before `run` runs it, so that a later change to
        the template never touches the job; None when there is none to copy (now)."""
        ...

    def rendered_from(self, job: Object) -> Object:
        """What of the stored job's status its pods are rendered from (a TrainJob's copy of its
        runtime), as a status to keep where a cache drops the rest; empty for a kind whose pods
        are rendered from its spec alone."""
        ...

    def paused(self, job: Object) -> bool:
        """The stored job's spec asks for a pause (whether or not its replicas are gone yet)."""
        ...

    def phase(self, job: Object) -> str:
        """Where the stored job is, as its API's printer column shows it."""
        ...

    def outcome(self, job: Object) -> str | None:
        """How the stored job ended, Succeeded or Failed; None while it runs."""
        ...

    def autoscaler(self, job: Object, owner: Mapping[str, Any]) -> Object | None:
        """The HorizontalPodAutoscaler the job (as `training_job` made it) asks for while it
        runs, owned by `owner`; None when it asks for none or its kind has none."""
        ...

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
        in_place: bool = False,
    ) -> Rewrite:
        """A replica's pod rewritten at admission; `own_spec` is the stored job's spec,
        `progress` where its training processes report progress (None: nowhere), `in_place`
        whether it is made to restart in place where its job allows (render/in_place.py)."""
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

    def default(self, job: Object) -> Object:
        """A copy of `job` with its API's defaults filled in, as its mutating webhook fills
        them (`torchjob run` admits a file so)."""
        ...

    def validate(self, job: Object) -> Result:
        """The defaulted `job` checked by its API's rules, as its validating webhook checks it,
        and by what its CRD's schema says where a kind checks that too (nothing has checked a
        file before `torchjob run`)."""
        ...

    def recipe_spec(self, recipe: JobRecipe) -> dict[str, Any]:
        """The spec of this kind's job a recipe describes (`render_job` of render/recipe.py
        writes the rest); NoPlace naming the recipe's fields this kind has no place for."""
        ...


class TrainingJobKind:
    api: JobApi = TRAINING_JOB
    admission = Admission("jobs", mutate_job, validate_job)
    opt_in: str | None = None
    autoscaled = False
    phases: tuple[str, ...] = JOB_PHASE_VALUES
    training_container: str | None = None

    def run(self, job: Object) -> Object | None:
        return job

    def runtime_to_copy(self, job: Object) -> RuntimeRef | None:
        return None

    def rendered_from(self, job: Object) -> Object:
        return {}

    def paused(self, job: Object) -> bool:
        pause = ((job.get("spec") or {}).get("runMode") or {}).get("pause") or {}
        return bool(pause.get("enabled"))

    def phase(self, job: Object) -> str:
        return str((job.get("status") or {}).get("phase") or "Pending")

    def outcome(self, job: Object) -> str | None:
        phase = (job.get("status") or {}).get("phase")
        return str(phase) if phase in constants.FINISHED_JOB_PHASES else None

    def autoscaler(self, job: Object, owner: Mapping[str, Any]) -> Object | None:
        return None  # elastic jobs of this API are scaled by their own spec

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
        in_place: bool = False,
    ) -> Rewrite:
        return rewrite_pod(job, pod, progress, in_place)

    def shown_status(self, job: dict[str, Any], record: dict[str, Any], now: str) -> dict[str, Any]:
        return record

    def remember_shown(self, job: dict[str, Any], written: dict[str, Any]) -> None:
        return None  # the lifecycle's record is the status itself

    def pause_patch(self, paused: bool) -> dict[str, Any]:
        return {"spec": {"runMode": {"pause": {"enabled": paused}}}}

    def default(self, job: Object) -> Object:
        return default_job(job)[0]

    def validate(self, job: Object) -> Result:
        return validate(job, schema=True)

    def recipe_spec(self, recipe: JobRecipe) -> dict[str, Any]:
        return training_recipe_spec(recipe)


class KubeflowJobKind:
    """Kubeflow's PyTorchJob: run as the PyTorchTrainingJob `as_training_job` makes of it, its
    pods labelled and rewritten as Kubeflow's training-operator makes them, its status Kubeflow's
    (with the lifecycle's record kept in it)."""

    api: JobApi = KUBEFLOW_JOB
    admission = Admission("kubeflow-jobs", mutate_pytorchjob, validate_pytorchjob_request)
    opt_in: str | None = "kubeflow"
    autoscaled = True
    phases: tuple[str, ...] = tuple(c.type for c in KUBEFLOW_CONDITIONS)
    training_container: str | None = DEFAULT_CONTAINER

    def run(self, job: Object) -> Object | None:
        return None if managed_elsewhere(job) else as_training_job(job)

    def runtime_to_copy(self, job: Object) -> RuntimeRef | None:
        return None

    def rendered_from(self, job: Object) -> Object:
        return {}

    def paused(self, job: Object) -> bool:
        return bool(((job.get("spec") or {}).get("runPolicy") or {}).get("suspend"))

    def phase(self, job: Object) -> str:
        """A PyTorchJob has no phase: its last condition is its state (`set_condition` appends
        each change), as its printer column shows it; Created before it has one."""
        conditions = _conditions(job)
        return str(conditions[-1].get("type")) if conditions else CREATED.type

    def outcome(self, job: Object) -> str | None:
        held = {
            c.get("type")
            for c in _conditions(job)
            if c.get("type") in FINISHED_CONDITIONS and c.get("status") == "True"
        }
        return ("Succeeded" if SUCCEEDED.type in held else "Failed") if held else None

    def autoscaler(self, job: Object, owner: Mapping[str, Any]) -> Object | None:
        return render_autoscaler(job["metadata"], job.get(KUBEFLOW_SPEC) or {}, owner)

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
        in_place: bool = False,
    ) -> Rewrite:
        return rewrite_kubeflow_pod(job, own_spec, pod, progress, in_place)

    def shown_status(self, job: dict[str, Any], record: dict[str, Any], now: str) -> dict[str, Any]:
        stored = job.get(KUBEFLOW_STATUS) or {}
        spec = job.get(KUBEFLOW_SPEC) or {}
        return kubeflow_status(job["metadata"]["name"], stored, record, now, spec)

    def remember_shown(self, job: dict[str, Any], written: dict[str, Any]) -> None:
        remember_own_status(job, written)

    def pause_patch(self, paused: bool) -> dict[str, Any]:
        return {"spec": {"runPolicy": {"suspend": paused}}}  # `training_spec` reads it as a pause

    def default(self, job: Object) -> Object:
        return default_pytorchjob(job)[0]

    def validate(self, job: Object) -> Result:
        return validate_pytorchjob(job)  # Kubeflow's rules, then torchjob's on the job it runs

    def recipe_spec(self, recipe: JobRecipe) -> dict[str, Any]:
        return kubeflow_recipe_spec(recipe)


class TrainJobKind:
    """Kubeflow Trainer's TrainJob: run as the PyTorchTrainingJob `as_training_job` makes of it
    from the runtime copied into its status, its pods labelled as JobSet labels them and
    rewritten as Trainer's torch plugin makes them, its status Trainer's (with the lifecycle's
    record kept in it)."""

    api: JobApi = TRAIN_JOB
    admission = Admission(
        "trainjobs",
        mutate_trainjob,
        validate_trainjob_unresolved,
        validate_with_template=validate_trainjob_request,
    )
    opt_in: str | None = "trainer"
    autoscaled = False
    phases: tuple[str, ...] = TRAINER_CONDITIONS
    training_container: str | None = NODE

    def run(self, job: Object) -> Object | None:
        if trainer_managed_elsewhere(job) or copied_runtime(job) is None:
            return None  # the reconciler copies the runtime in first (`runtime_to_copy`)
        return as_trainjob_training_job(job)

    def runtime_to_copy(self, job: Object) -> RuntimeRef | None:
        return runtime_to_copy(job)

    def rendered_from(self, job: Object) -> Object:
        runtime = copied_runtime(job)
        return {} if runtime is None else {STATUS_RECORD: {RUNTIME_RECORD: runtime}}

    def paused(self, job: Object) -> bool:
        return bool((job.get("spec") or {}).get("suspend"))

    def phase(self, job: Object) -> str:
        """A TrainJob has no phase: its last condition is its state, as its printer column
        shows it; Created before it has one, as the Kubeflow SDK says."""
        conditions = _conditions(job)
        return str(conditions[-1].get("type")) if conditions else CREATED.type

    def outcome(self, job: Object) -> str | None:
        held = {c.get("type") for c in _conditions(job) if c.get("status") == "True"}
        if TRAINER_COMPLETE in held:
            return "Succeeded"
        return "Failed" if TRAINER_FAILED in held else None

    def autoscaler(self, job: Object, owner: Mapping[str, Any]) -> Object | None:
        return None  # a TrainJob's nodes are its spec.trainer.numNodes

    def training_job(self, job: dict[str, Any]) -> dict[str, Any]:
        return as_trainjob_training_job(job)

    def own_labels(self, job_name: str, replica: Replica) -> dict[str, str]:
        return trainer_labels(job_name, replica)

    def rewrite_pod(
        self,
        job: PreparedJob,
        own_spec: Mapping[str, Any],
        pod: dict[str, Any],
        progress: ProgressEndpoint | None = None,
        in_place: bool = False,
    ) -> Rewrite:
        return rewrite_trainjob_pod(job, own_spec, pod, progress, in_place)

    def shown_status(self, job: dict[str, Any], record: dict[str, Any], now: str) -> dict[str, Any]:
        generation = job["metadata"].get("generation")
        stored = job.get(KUBEFLOW_STATUS) or {}
        return trainer_status(
            stored, record, now, generation if isinstance(generation, int) else None
        )

    def remember_shown(self, job: dict[str, Any], written: dict[str, Any]) -> None:
        remember_own_status(job, written)

    def pause_patch(self, paused: bool) -> dict[str, Any]:
        return {"spec": {"suspend": paused}}

    def default(self, job: Object) -> Object:
        return default_trainjob(job)[0]

    def validate(self, job: Object) -> Result:
        """Trainer's rules and torchjob's, against the runtime copied into the job's status
        (`torchjob run` copies the one its file holds); without one, Trainer's rules alone: the
        cluster's webhook judges the job against the runtime the cluster has."""
        runtime = copied_runtime(job)
        return validate_trainjob(job, None, runtime, resolved=runtime is not None)

    def recipe_spec(self, recipe: JobRecipe) -> dict[str, Any]:
        return trainer_recipe_spec(recipe)


KINDS: Final[Mapping[JobApi, JobKind]] = {
    TRAINING_JOB: TrainingJobKind(),
    KUBEFLOW_JOB: KubeflowJobKind(),
    TRAIN_JOB: TrainJobKind(),
}


def kind_of(api: JobApi) -> JobKind:
    return KINDS[api]


def written_api(document: Mapping[str, Any]) -> JobApi:
    """The API a manifest is written in: the one its apiVersion or its kind names, an opt-in one
    before the others (a manifest naming two is then refused by that API's rules, naming the
    field that is not its own); torchjob's own where it names none."""
    named = [
        api
        for api in JOB_APIS
        if document.get("apiVersion") == api.api_version or document.get("kind") == api.kind
    ]
    return next((api for api in named if KINDS[api].opt_in), named[0] if named else TRAINING_JOB)


def served_apis(opted_in: Collection[str]) -> tuple[JobApi, ...]:
    """The job APIs the operator serves: those not opt-in, and those whose setting is among
    `opted_in` (`opted_in_settings`)."""
    return tuple(api for api in JOB_APIS if KINDS[api].opt_in in (None, *opted_in))


# Every opt-in setting: what a caller that must read a manifest of any kind serves.
EVERY_OPT_IN: Final = frozenset(kind.opt_in for kind in KINDS.values() if kind.opt_in is not None)


def opted_in_settings(settings: object) -> frozenset[str]:
    """The opt-in settings (`JobKind.opt_in`) a service's settings turn on."""
    return frozenset(name for name in EVERY_OPT_IN if getattr(settings, name, False))


def remember_own_status(job: dict[str, Any], written: dict[str, Any]) -> None:
    """A job of another API (as its kind's `training_job` made it) moved on to the status of
    its own API just written, which it carries beside the lifecycle's record."""
    job[KUBEFLOW_STATUS] = merge_patched(job.get(KUBEFLOW_STATUS) or {}, written)


def _conditions(job: Object) -> list[Object]:
    status = job.get("status")
    conditions = status.get("conditions") if isinstance(status, dict) else None
    return [c for c in conditions or () if isinstance(c, dict)]
