"""A job as the cluster commands name it, kubectl-style: `NAME`, a PyTorchTrainingJob, or
`KIND/NAME` for a job of any API a job may be written in (api/job_api.py), KIND being its kind's
name, singular, plural or short name in any case, with its group after a dot if you like, as
`kubectl get -o name` writes it (`trainjob/mnist`, `TrainJobs/mnist`, `ptj/mnist`,
`trainjob.trainer.kubeflow.org/mnist`). `shown` writes a job back the shortest way that names it
again, which is what `torchjob list` shows, to be copied into the other commands. Pure."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from torchjob.api import kubeflow_types, trainer_types, types
from torchjob.api.job_api import JOB_APIS, TRAINING_JOB, JobApi

# What a NAME alone names: the API the commands served before the others were added.
BARE_NAME_API: Final = TRAINING_JOB
# The short names each generated model declares (as its CRD does), by the apiVersion it models:
# a JobApi has none of its own.
SHORT_NAMES: Final = {
    model.API_VERSION: tuple(model.SHORT_NAMES) for model in (types, kubeflow_types, trainer_types)
}


class UnknownJobKind(ValueError):
    """A KIND/NAME whose KIND no job API answers to (or without a name)."""


@dataclass(frozen=True, slots=True)
class JobRef:
    """A job named on the command line: its API and its name."""

    api: JobApi
    name: str

    def __str__(self) -> str:
        return shown(self.api, self.name)

    @property
    def resource(self) -> str:
        """As kubectl names the object it acted on: `trainjob.trainer.kubeflow.org/mnist`."""
        return f"{self.api.kind.lower()}.{self.api.group}/{self.name}"


def kind_words(api: JobApi) -> tuple[str, ...]:
    """What KIND may be for jobs of `api`, lower case: the kind (which is its singular too), its
    plural and its short names."""
    return (api.kind.lower(), api.plural, *SHORT_NAMES.get(api.api_version, ()))


def job_reference(text: str) -> JobRef:
    """The job `text` names: `NAME` or `KIND[.GROUP]/NAME`; UnknownJobKind naming the kinds
    known when KIND is none of them."""
    written, slash, name = text.partition("/")
    if not slash:
        return JobRef(BARE_NAME_API, text)
    word, _, group = written.lower().partition(".")
    api = next(
        (a for a in JOB_APIS if word in kind_words(a) and group in ("", a.group)),
        None,
    )
    if api is None:
        raise UnknownJobKind(f"{text}: unknown kind {written!r}; {known_kinds()}")
    if not name or "/" in name:
        raise UnknownJobKind(f"{text}: write KIND/NAME, one name after the kind")
    return JobRef(api, name)


def known_kinds() -> str:
    """What a job argument may be, for the error that says it."""
    kinds = ", ".join(
        api.kind.lower() + "".join(f" ({short})" for short in SHORT_NAMES.get(api.api_version, ()))
        for api in JOB_APIS
    )
    return f"a job is NAME (a {BARE_NAME_API.kind}) or KIND/NAME, KIND one of {kinds}, or a plural"


def shown(api: JobApi, name: str) -> str:
    """How the job is written for the user to copy: its name alone where that names it (the
    kind a bare name means), else `kind/name`."""
    return name if api is BARE_NAME_API else f"{api.kind.lower()}/{name}"
