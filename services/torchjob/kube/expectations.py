"""What a reconcile has asked the apiserver to create or delete and the informer has not yet
reported. While anything is outstanding for a job, its cache view is known to lag behind its own
writes, so the reconciler must not act on it (or it would create the same pod twice).

Every method is synchronous, so within one event loop each call is atomic and no lock is needed.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import structlog

log = structlog.get_logger("torchjob.kube.expectations")

# A creation whose watch event was never seen (created and deleted within a re-list, say) would
# otherwise block its job forever; after this long the cache is trusted again.
DEFAULT_TTL = 300.0


@dataclass
class _Pending:
    creations: set[str] = field(default_factory=set)
    deletions: set[str] = field(default_factory=set)
    deadline: float = 0.0

    def empty(self) -> bool:
        return not self.creations and not self.deletions


class Expectations:
    """Per job key, the names still expected to appear in (or vanish from) the cache."""

    def __init__(self, ttl: float = DEFAULT_TTL, clock: Callable[[], float] = time.monotonic):
        self._ttl = ttl
        self._clock = clock
        self._pending: dict[str, _Pending] = {}

    def expect_creations(self, key: str, names: Iterable[str]) -> None:
        self._expect(key).creations.update(names)

    def expect_deletions(self, key: str, names: Iterable[str]) -> None:
        self._expect(key).deletions.update(names)

    def observed_creation(self, key: str, name: str) -> None:
        """The informer saw `name` appear (or the create failed, so it never will)."""
        pending = self._pending.get(key)
        if pending is not None:
            pending.creations.discard(name)

    def observed_deletion(self, key: str, name: str) -> None:
        """The informer saw `name` vanish (or the delete failed, so it never will)."""
        pending = self._pending.get(key)
        if pending is not None:
            pending.deletions.discard(name)

    def satisfied(self, key: str) -> bool:
        """Whether the cache has caught up with every write made for `key`."""
        pending = self._pending.get(key)
        if pending is None:
            return True
        if pending.empty():
            del self._pending[key]
            return True
        if self._clock() >= pending.deadline:
            log.warning(
                "expectations expired; trusting the cache",
                key=key,
                creations=sorted(pending.creations),
                deletions=sorted(pending.deletions),
            )
            del self._pending[key]
            return True
        return False

    def forget(self, key: str) -> None:
        self._pending.pop(key, None)

    def _expect(self, key: str) -> _Pending:
        pending = self._pending.setdefault(key, _Pending())
        pending.deadline = self._clock() + self._ttl
        return pending
