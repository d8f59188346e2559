"""What a reconcile is asked about and what it answers, in controller-runtime's shape
(`pkg/reconcile/reconcile.go`): the key of the job to reconcile, the result of a reconcile that
went well, and the error of one that no retry can fix."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Hashable
from dataclasses import dataclass
from typing import Any, TypeVar


@dataclass(frozen=True, slots=True, order=True)
class JobKey:
    """A job's namespace and name; written `namespace/name` in logs and messages."""

    namespace: str
    name: str

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"

    @classmethod
    def parse(cls, text: str) -> JobKey:
        """The key written `namespace/name`."""
        namespace, _, name = text.partition("/")
        return cls(namespace, name)

    @classmethod
    def of(cls, obj: dict[str, Any]) -> JobKey:
        """The key of the object `obj` (its own namespace and name)."""
        meta = obj.get("metadata") or {}
        return cls(str(meta.get("namespace")), str(meta.get("name")))


@dataclass(frozen=True)
class Result:
    """What a successful reconcile asks for: nothing, or another run after `requeue_after`
    seconds (a deadline, a timed check) even if no event arrives."""

    requeue_after: float | None = None


class TerminalError(Exception):
    """A reconcile failure that retrying cannot fix (an invalid object, a refused request)."""


K = TypeVar("K", bound=Hashable)

Reconcile = Callable[[K], Awaitable[Result]]
