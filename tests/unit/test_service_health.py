"""The reconciler's probes: a standby is ready, the leader once its caches have synced, and
liveness fails once an informer has stopped."""

from __future__ import annotations

from typing import Any

import pytest

from torchjob.kube.informer import Informer, ResourceKind
from torchjob.runtime.health import Health, InformerStopped

PODS = ResourceKind("", "v1", "pods")
JOBS = ResourceKind("batch.tensorstack.dev", "v1beta1", "pytorchtrainingjobs")
NO_CLIENT: Any = None  # these informers are never run against an apiserver


class Broken(Informer):
    async def run(self) -> None:
        raise KeyError("a bug")


class Ended(Informer):
    async def run(self) -> None:
        return None


def test_a_standby_is_ready_and_the_leader_once_synced() -> None:
    leading = False
    informers = [Informer(NO_CLIENT, PODS), Informer(NO_CLIENT, JOBS)]
    health = Health(lambda: leading, informers)
    assert health.ready() is None
    leading = True
    assert health.ready() == (
        "caches not synced yet: /api/v1/pods, "
        "/apis/batch.tensorstack.dev/v1beta1/pytorchtrainingjobs"
    )
    informers[0].synced.set()
    assert health.ready() == (
        "caches not synced yet: /apis/batch.tensorstack.dev/v1beta1/pytorchtrainingjobs"
    )
    informers[1].synced.set()
    assert health.ready() is None
    assert health.healthy() is None


@pytest.mark.parametrize(
    ("informer", "reason"),
    [
        (Broken(NO_CLIENT, PODS), "the informer for /api/v1/pods failed: KeyError('a bug')"),
        (Ended(NO_CLIENT, PODS), "the informer for /api/v1/pods stopped"),
    ],
)
async def test_an_informer_that_stops_fails_liveness(informer: Informer, reason: str) -> None:
    health = Health(lambda: True, [informer])
    with pytest.raises(InformerStopped):
        await health.run_informer(informer)
    assert health.healthy() == reason
