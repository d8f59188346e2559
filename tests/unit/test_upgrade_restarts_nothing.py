"""An upgrade restarts no running job. The pods in tests/data/recorded/pod_events.json were
rendered by an earlier release and returned by a real kube-apiserver (record_pod_events.py, on
2026-11-24); the current planner must read them as the job's running replicas, through the
reconciler's cache as well, and so create and delete no pod of a job that runs after `helm
upgrade` hands it to a new reconciler. A change to what the planner needs of a pod (a label it
reads, an annotation it requires) that pods already running lack fails here: after an upgrade it
would recreate every replica of every running job. The stored job decodes with today's model,
as the CRD's schema must still admit it (tests/e2e/test_crd.py)."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from support.planning import NOW

from torchjob.api.types import PyTorchTrainingJobSpec
from torchjob.kube.slim import slim_pod
from torchjob.lifecycle.observe import view_pod
from torchjob.lifecycle.plan import Plan, plan
from torchjob.lifecycle.round import Observed
from torchjob.render.topology import replica_name, replicas_of

RECORDED: dict[str, Any] = json.loads(
    (Path(__file__).parents[1] / "data" / "recorded" / "pod_events.json").read_text()
)
LATER = NOW + timedelta(minutes=1)  # the pods started at NOW


def running_pods() -> list[dict[str, Any]]:
    """Every pod of the job as it was once all of them ran (the recording goes on to their
    ends)."""
    latest: dict[str, dict[str, Any]] = {}
    for event in RECORDED["events"]:
        pod = event["object"]
        latest[pod["metadata"]["name"]] = pod
        phases = [(p.get("status") or {}).get("phase") for p in latest.values()]
        if phases == ["Running"] * 3:
            return list(latest.values())
    raise AssertionError("the recording never shows every pod Running")


def round_of(cache: Callable[[Any], Any], status: dict[str, Any]) -> Plan:
    job = RECORDED["job"]
    spec = PyTorchTrainingJobSpec.from_dict(job["spec"], "spec")
    pods = [view_pod(cache(pod)) for pod in running_pods()]
    assert None not in pods, "a pod of the earlier release is no replica to the planner"
    name = job["metadata"]["name"]
    services = frozenset(replica_name(name, r.type, r.index) for r in replicas_of(spec))
    seen = [p for p in pods if p is not None]
    return plan(Observed.of_json(job["metadata"], spec, status, seen, services, LATER))


@pytest.mark.parametrize("cache", [lambda pod: pod, slim_pod], ids=["full", "cached"])
def test_a_new_reconciler_restarts_none_of_the_replicas_an_earlier_release_made(
    cache: Callable[[Any], Any],
) -> None:
    first = round_of(cache, {})  # a status the earlier release wrote is rebuilt from the pods
    again = round_of(cache, first.status)
    for result in (first, again):
        assert result.create_pods == [] and result.delete_pods == []
        assert result.release_workload is None and not result.delete_group
    assert again.status["phase"] == "Running"
    assert again.status.get("backoffCount", 0) == 0
