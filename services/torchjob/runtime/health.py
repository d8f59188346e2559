"""What a leader-elected service's probes report.

Readiness: a standby is ready. It has nothing to sync, and a rolling update waits for each new
pod to be ready while the old leader still holds the Lease, so an unready standby would stall the
update for good. The leader is ready once every cache has synced.

Liveness: fails once one of the leader's informers has stopped. They run until cancelled and stop
only on an error they cannot retry (a bug), after which the caches would never change again.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import structlog

from torchjob.kube.informer import Informer

log = structlog.get_logger("torchjob.runtime.health")


class InformerStopped(RuntimeError):
    pass


class Health:
    def __init__(self, is_leader: Callable[[], bool], informers: Sequence[Informer]) -> None:
        self._is_leader = is_leader
        self._informers = informers
        self._stopped: str | None = None

    def ready(self) -> str | None:
        if not self._is_leader():
            return None
        unsynced = [i.resource for i in self._informers if not i.synced.is_set()]
        return f"caches not synced yet: {', '.join(unsynced)}" if unsynced else None

    def healthy(self) -> str | None:
        return self._stopped

    async def run_informer(self, informer: Informer) -> None:
        """Run `informer`; if it ever stops without being cancelled, fail liveness and raise."""
        try:
            await informer.run()
        except Exception as error:
            self._stopped = f"the informer for {informer.resource} failed: {error!r}"
            log.error("informer stopped", resource=informer.resource, exc_info=True)
            raise InformerStopped(self._stopped) from error
        self._stopped = f"the informer for {informer.resource} stopped"
        raise InformerStopped(self._stopped)
