"""What a reconcile is asked about and what it answers, in controller-runtime's shape
(`pkg/reconcile/reconcile.go`): the key of the job to reconcile, the result of a reconcile that
went well, and the error of one that no retry can fix."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Hashable
from dataclasses import dataclass
from typing import Any, TypeVar

from torchjob.api.job_api import TRAINING_JOB, JobApi, api_named, api_of


@dataclass(frozen=True, slots=True, order=True)
class JobKey:
    """A job's namespace and name, and its kind when it is not a PyTorchTrainingJob; written
    `namespace/name` in logs and messages (`PyTorchJob:namespace/name` for Kubeflow's kind)."""

    namespace: str
    name: str
    kind: str = TRAINING_JOB.kind

    def __str__(self) -> str:
        prefix = "" if self.kind == TRAINING_JOB.kind else f"{self.kind}:"
        return f"{prefix}{self.namespace}/{self.name}"

    @property
    def api(self) -> JobApi:
        return api_named(self.kind)

    @classmethod
    def parse(cls, text: str) -> JobKey:
        """The key as `str` writes it."""
        kind, _, rest = text.rpartition(":")
        namespace, _, name = rest.partition("/")
        return cls(namespace, name, kind or TRAINING_JOB.kind)

    @classmethod
    def of(cls, obj: dict[str, Any]) -> JobKey:
        """The key of the object `obj` (its own namespace, name and kind)."""
        meta = obj.get("metadata") or {}
        return cls(str(meta.get("namespace")), str(meta.get("name")), api_of(obj).kind)


@dataclass(frozen=True)
class Result:
    """What a successful reconcile asks for: nothing, or another run after `requeue_after`
    seconds (a deadline, a timed check) even if no event arrives."""

    requeue_after: float | None = None


class TerminalError(Exception):
    """A reconcile failure that retrying cannot fix (an invalid object, a refused request)."""


K = TypeVar("K", bound=Hashable)

Reconcile = Callable[[K], Awaitable[Result]]
