"""What each service's `/metrics` exports: its own families only. Every metric of the package
is defined at import time in prometheus_client's default registry, and a service imports modules
whose metrics another service fills (the webhook's settings import the controllers' scaffold);
so each service names the families it owns and its `/metrics` serves those, with the process and
Python collectors. `_created` series are switched off: they double every counter and histogram,
and nothing here needs a creation time (a counter reset is seen by `rate()` and `increase()`)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import prometheus_client
from prometheus_client import REGISTRY, generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

prometheus_client.disable_created_metrics()  # type: ignore[no-untyped-call]

# Families every process exports (prometheus_client's own collectors).
PROCESS_PREFIXES = ("process_", "python_")

KUBE_CLIENT = frozenset(
    {"torchjob_kube_client_requests", "torchjob_kube_client_rate_limiter_wait_seconds"}
)
INFORMER = frozenset({"torchjob_informer_lists"})
# The leader-elected controllers' scaffold (runtime/service.py, kube/controller.py, kube/leader.py).
CONTROLLER = frozenset(
    {
        "torchjob_reconcile",
        "torchjob_reconcile_duration_seconds",
        "torchjob_workqueue_depth",
        "torchjob_leader_election_is_leader",
    }
)


class Families(Collector):
    """The default registry's families named in `names` (and the process's own)."""

    def __init__(self, names: Iterable[str]) -> None:
        self.names = frozenset(names)

    def collect(self) -> Iterator[Metric]:
        for family in REGISTRY.collect():
            if family.name in self.names or family.name.startswith(PROCESS_PREFIXES):
                yield family

    def exposition(self) -> bytes:
        return generate_latest(self)
