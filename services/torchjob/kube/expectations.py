"""What a reconcile has asked the apiserver to create, patch or delete, and the job status it
wrote, that the informers have not yet reported. While anything is outstanding for a job, its cache
view is known to lag behind its own writes, so the reconciler must not act on it (or it would
create the same pod twice, or count a restart twice from a status that does not show the restart
it recorded: the status is the restart ledger).

Every method is synchronous, so within one event loop each call is atomic and no lock is needed.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import NamedTuple

import structlog

from torchjob.kube.reconcile import JobKey

log = structlog.get_logger("torchjob.kube.expectations")

# A creation whose watch event was never seen (created and deleted within a re-list, say) would
# otherwise block its job forever; after this long the cache is trusted again.
DEFAULT_TTL = 300.0


class ObjectRef(NamedTuple):
    """An object a job owns, by its lower-case kind and its name: `pod/j-worker-0`."""

    kind: str
    name: str

    def __str__(self) -> str:
        return f"{self.kind}/{self.name}"


@dataclass
class _Pending:
    creations: set[ObjectRef] = field(default_factory=set)
    deletions: set[ObjectRef] = field(default_factory=set)
    status_version: str = ""  # the job's resourceVersion after our status write
    # Objects patched: the version the patch left (None while it is sent), and the latest
    # version the informer showed meanwhile.
    updates: dict[ObjectRef, str | None] = field(default_factory=dict)
    seen: dict[ObjectRef, str] = field(default_factory=dict)
    deadline: float = 0.0

    def empty(self) -> bool:
        return (
            not self.creations
            and not self.deletions
            and not self.status_version
            and not self.updates
        )


class Expectations:
    """Per job, the objects still expected to appear in (or vanish from) the cache."""

    def __init__(self, ttl: float = DEFAULT_TTL, clock: Callable[[], float] = time.monotonic):
        self._ttl = ttl
        self._clock = clock
        self._pending: dict[JobKey, _Pending] = {}

    def expect_creations(self, key: JobKey, refs: Iterable[ObjectRef]) -> None:
        self._expect(key).creations.update(refs)

    def expect_deletions(self, key: JobKey, refs: Iterable[ObjectRef]) -> None:
        self._expect(key).deletions.update(refs)

    def observed_creation(self, key: JobKey, ref: ObjectRef) -> None:
        """The informer saw `ref` appear (or the create failed, so it never will)."""
        pending = self._pending.get(key)
        if pending is not None:
            pending.creations.discard(ref)

    def observed_deletion(self, key: JobKey, ref: ObjectRef) -> None:
        """The informer saw `ref` vanish (or the delete failed, so it never will); a patch of it
        awaited is not any more."""
        pending = self._pending.get(key)
        if pending is not None:
            pending.deletions.discard(ref)
            pending.updates.pop(ref, None)

    def expect_update(self, key: JobKey, ref: ObjectRef) -> None:
        """A patch of `ref` is about to be sent (`patched` says what version it left)."""
        pending = self._expect(key)
        pending.updates[ref] = None
        pending.seen.pop(ref, None)

    def patched(self, key: JobKey, ref: ObjectRef, resource_version: str | None) -> None:
        """The patch of `ref` left it at `resource_version` (None: it failed, nothing to wait
        for); done at once when the informer showed that version already."""
        pending = self._pending.get(key)
        if pending is None or ref not in pending.updates:
            return
        seen = pending.seen.get(ref, "")
        if not resource_version or (seen and _not_older(seen, resource_version)):
            pending.updates.pop(ref)
            pending.seen.pop(ref, None)
        else:
            pending.updates[ref] = resource_version

    def observed_update(self, key: JobKey, ref: ObjectRef, resource_version: str) -> None:
        """The informer shows `ref` at `resource_version`."""
        pending = self._pending.get(key)
        if pending is None or ref not in pending.updates:
            return
        written = pending.updates[ref]
        if written is None:
            pending.seen[ref] = resource_version
        elif _not_older(resource_version, written):
            pending.updates.pop(ref)

    def expect_status(self, key: JobKey, resource_version: str) -> None:
        """A status write that left the job at `resource_version`."""
        if resource_version:
            self._expect(key).status_version = resource_version

    def observed_job(self, key: JobKey, resource_version: str) -> bool:
        """The informer shows the job at `resource_version`; True when that was the last thing
        expected for it (its reconcile, skipped while waiting, is due now)."""
        pending = self._pending.get(key)
        if pending is None or not pending.status_version:
            return False
        if not _not_older(resource_version, pending.status_version):
            return False
        pending.status_version = ""
        return pending.empty()

    def satisfied(self, key: JobKey) -> bool:
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
                key=str(key),
                creations=sorted(map(str, pending.creations)),
                deletions=sorted(map(str, pending.deletions)),
                updates=sorted(map(str, pending.updates)),
                status_version=pending.status_version,
            )
            del self._pending[key]
            return True
        return False

    def forget(self, key: JobKey) -> None:
        self._pending.pop(key, None)

    def _expect(self, key: JobKey) -> _Pending:
        pending = self._pending.setdefault(key, _Pending())
        pending.deadline = self._clock() + self._ttl
        return pending


def _not_older(seen: str, written: str) -> bool:
    """Whether the version `seen` is the `written` one or a later one. Versions are etcd
    revisions, so they compare as numbers; one that is not a number (another storage) is only
    known to be ours when it is equal."""
    if seen.isdigit() and written.isdigit():
        return int(seen) >= int(written)
    return seen == written
