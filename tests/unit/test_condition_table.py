"""The table of conditions (lifecycle/conditions.py): one row for every condition type of the
API, each reason it can give documented in docs/api.md and declared in api/constants.py, the
Kubeflow conditions each the counterpart of one row; and the rules, run over rounds of every kind,
give only the reasons their row declares."""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any, Literal

import pytest
from support.planning import META, NOW, gone, replica_pod, services, spec

from torchjob.api import constants
from torchjob.api.objects import PodPhase
from torchjob.api.types import CONDITION_TYPE_VALUES, PyTorchTrainingJobSpec
from torchjob.lifecycle.conditions import CONDITIONS, ConditionRow
from torchjob.lifecycle.finishing import recorded_outcome
from torchjob.lifecycle.observe import CannotStart, ContainerView, GroupView, PodView, Refusal
from torchjob.lifecycle.plan import plan
from torchjob.lifecycle.round import Observed
from torchjob.lifecycle.status import is_terminal
from torchjob.lifecycle.times import format_time
from torchjob.render import kubeflow
from torchjob.render.scheduling import KUEUE_GATE, Gang, GangUnavailable

API_DOC = Path(__file__).parents[2] / "docs" / "api.md"
ROWS: dict[str, ConditionRow] = {row.type: row for row in CONDITIONS}


def documented_reasons() -> dict[str, set[str]]:
    """docs/api.md's table of condition reasons: the reasons of each condition type. A cell
    that says "the reason of `Completed`" takes that condition's reasons."""
    text = API_DOC.read_text().split("## Condition reasons", 1)[1]
    reasons: dict[str, set[str]] = {}
    borrowed: dict[str, set[str]] = {}
    for line in text.splitlines():
        if not line.startswith("| `"):
            continue
        kind, _, cell = (c.strip() for c in line.strip("|").split("|"))
        own, _, of = cell.partition("the reason of")
        reasons.setdefault(kind.strip("`"), set()).update(re.findall(r"`(\w+)`", own))
        borrowed.setdefault(kind.strip("`"), set()).update(re.findall(r"`(\w+)`", of))
    for kind, others in borrowed.items():
        for other in others:
            reasons[kind] |= reasons[other]
    return reasons


def test_every_condition_type_of_the_api_has_exactly_one_row() -> None:
    kinds = [row.type for row in CONDITIONS]
    assert sorted(kinds) == sorted(CONDITION_TYPE_VALUES)
    assert len(set(kinds)) == len(kinds)


@pytest.mark.parametrize("row", CONDITIONS, ids=lambda row: row.type)
def test_a_rows_reasons_are_the_documented_closed_set_of_its_type(row: ConditionRow) -> None:
    assert row.reasons == documented_reasons()[row.type]
    declared = {v for k, v in vars(constants).items() if k.startswith("REASON_")}
    assert row.reasons <= declared
    shown = {row.cleared[1]} if row.cleared else set()
    events = {r for e in row.events for r in e.reasons or ()}
    assert shown | events <= row.reasons


def test_every_kubeflow_condition_is_the_counterpart_of_one_row() -> None:
    counterparts = [row.kubeflow for row in CONDITIONS if row.kubeflow is not None]
    assert sorted(c.type for c in counterparts) == sorted(
        c.type for c in kubeflow.KUBEFLOW_CONDITIONS
    )


def test_kubeflow_shows_only_the_conditions_of_the_table() -> None:
    known = {(c.type, c.reason) for c in kubeflow.KUBEFLOW_CONDITIONS} | {
        (c.type, c.false_reason) for c in kubeflow.KUBEFLOW_CONDITIONS if c.false_reason
    }
    before: dict[str, Any] = {"conditions": [{"type": "Running", "status": "True"}]}
    for phase in ("Pending", "Running", "Paused", "Succeeded", "Failed"):
        record = {"phase": phase, "conditions": [{"type": "Failed", "reason": "MasterFailed"}]}
        for wanted in kubeflow.wanted_conditions("j", record, before, {}):
            assert (wanted["type"], wanted["reason"]) in known
        before = {"conditions": [{"type": "Suspended", "status": "True"}]}


def pod(
    kind: str,
    index: int,
    phase: PodPhase = "Running",
    exit_code: int | None = None,
    **fields: Any,
) -> PodView:
    ended = (ContainerView("python", "terminated", exit_code or 0),)
    finished = phase in ("Succeeded", "Failed")
    return replica_pod(
        kind, index, phase, exit_code=exit_code, containers=ended if finished else (), **fields
    )


def pods(master: PodPhase = "Running", worker: PodPhase = "Running", **fields: Any) -> list[Any]:
    """A master and two workers, the second of them in phase `worker` with `fields`."""
    debug = fields.get("debug", False)
    return [
        pod("master", 0, master, 1 if master == "Failed" else None, debug=debug),
        pod("worker", 0, debug=debug),
        pod("worker", 1, worker, 1 if worker == "Failed" else None, **fields),
    ]


Round = tuple[PyTorchTrainingJobSpec, list[PodView], dict[str, Any]]
RefusedKind = Literal["pod", "service", "podgroup"]


def rounds() -> Iterator[Round]:
    """(spec, pods, other observations) of rounds of every kind the rules tell apart."""
    plain, never = spec(workers=2), spec(policy="Never", workers=2)
    paused = spec(workers=2, runMode={"pause": {"enabled": True}})
    debug = spec(workers=2, runMode={"debug": {"enabled": True}})
    gang, kueue = Gang("native", "j", 3, 3), Gang("kueue", "j", 3, 3, queue="q")
    yield plain, [], {}
    yield plain, pods(), {}
    yield plain, pods(worker="Failed", finished_at=NOW), {}
    yield plain, pods(worker="Failed"), {"status": {"backoffCount": 3}}
    yield never, pods(worker="Failed"), {}
    yield never, pods(master="Failed"), {}
    yield plain, pods(master="Succeeded"), {}
    yield debug, pods(debug=True), {}
    yield paused, pods(), {"gang": gang}
    yield plain, pods(), {"gang": GangUnavailable("no PodGroup API")}
    yield plain, pods(), {"gang": gang}
    yield plain, pods(worker="Pending"), {"gang": gang}
    yield plain, pods(worker="Pending", unschedulable="0/3 nodes"), {"gang": gang}
    yield plain, pods(worker="Pending", gates=(KUEUE_GATE,)), {"gang": kueue}
    yield plain, pods(worker="Pending", gates=("other",)), {"gang": gang}
    yield plain, pods(preempted="Evicted"), {"gang": kueue}
    group = GroupView("j", 3, False, False, "too big")
    yield plain, pods(worker="Pending"), {"gang": gang, "group": group}
    # Replicas that cannot start, then past their start deadline.
    long_ago = {
        "type": "StartFailure",
        "status": "True",
        "lastTransitionTime": "2025-01-01T00:00:00Z",
    }
    for said, reason in (
        ("ErrImagePull", "ImagePullFailed"),
        ("CreateContainerError", "ContainerConfigInvalid"),
    ):
        why = CannotStart("python", reason, said, "")
        yield plain, pods(worker="Pending", cannot_start=why), {}
        yield (
            plain,
            pods(worker="Pending", cannot_start=why),
            {"status": {"conditions": [long_ago]}},
        )
    yield (
        plain,
        pods(worker="Pending", unschedulable="0/3 nodes"),
        {"status": {"conditions": [long_ago]}},
    )
    yield from gang_rounds(plain, never)
    kinds: tuple[RefusedKind, ...] = ("pod", "service", "podgroup")
    for kind, status in itertools.product(kinds, (403, 422)):
        refused = (Refusal(kind, "j" if kind == "podgroup" else "j-worker-1", "no", status),)
        other = {"refusals": refused, "svcs": frozenset({"j-master-0", "j-worker-0"})}
        yield plain, pods()[:2], {**other, "gang": gang} if kind == "podgroup" else other


def gang_rounds(plain: PyTorchTrainingJobSpec, never: PyTorchTrainingJobSpec) -> Iterator[Round]:
    """Every replica restarted together, the gang restart limit reached, a silent job that may
    not be restarted."""
    ended = NOW - timedelta(minutes=1)
    yield plain, pods(worker="Failed", finished_at=ended), {}
    recent = [format_time(ended)] * 5
    yield plain, pods(worker="Failed", finished_at=ended), {"status": {"gangRestartTimes": recent}}
    since = NOW - timedelta(hours=2)
    running = [pod(kind, index, running_since=since) for kind, index in POD_KEYS]
    silent = {"trainerStatus": {"lastUpdatedTime": format_time(since)}}
    yield never, running, {"status": silent}


POD_KEYS = (("master", 0), ("worker", 0), ("worker", 1))


def played(
    job_spec: PyTorchTrainingJobSpec,
    status: dict[str, Any],
    seen: list[PodView],
    svcs: frozenset[str],
    other: dict[str, Any],
) -> list[dict[str, Any]]:
    """The status of the round that observes `seen`, and where it decided how the job ended
    and stops pods, the status of the round that sees them gone (the job says it ended)."""
    result = plan(Observed.of_json(META, job_spec, status, seen, svcs, NOW, **other))
    if recorded_outcome(result.status) is None or is_terminal(result.status):
        return [result.status]
    after = Observed.of_json(META, job_spec, result.status, gone(result, seen), svcs, NOW, **other)
    return [result.status, plan(after).status]


def statuses() -> Iterator[dict[str, Any]]:
    """The statuses of those rounds, and of the rounds after them: the pods of a job that ended
    gone, a job resumed, its debug mode switched off, its failure over, its deadline passed."""
    plain = spec(workers=2)
    later = spec(workers=2, runPolicy={"activeDeadlineSeconds": 1, "backoffLimit": 3})
    for job_spec, seen, other in rounds():
        status: dict[str, Any] = other.pop("status", {})
        svcs = other.pop("svcs", services(job_spec))
        steps: tuple[tuple[PyTorchTrainingJobSpec, list[PodView], frozenset[str]], ...] = (
            (job_spec, seen, svcs),
            (plain, [], services(plain)),
            (later, pods(), svcs),
        )
        for step_spec, step_pods, step_services in steps:
            seen_here = played(step_spec, status, step_pods, step_services, other)
            yield from seen_here
            status = seen_here[-1]
    started = {"startTime": "2025-01-01T00:00:00Z"}
    yield from played(later, started, pods(), frozenset(), {})


def test_the_rules_give_only_the_reasons_of_their_row() -> None:
    seen: dict[str, set[str]] = {}
    for status in statuses():
        for condition in status.get("conditions") or []:
            seen.setdefault(condition["type"], set()).add(condition["reason"])
    for kind, reasons in seen.items():
        assert reasons <= ROWS[kind].reasons, kind
    # The sweep reaches every reason of every row.
    assert seen == {row.type: set(row.reasons) for row in CONDITIONS}


def test_the_sweep_sees_every_ending_written_once_the_stopped_pods_are_gone() -> None:
    """Completed and Failed are written in the round that sees a job's stopped pods gone: the
    sweep reaches each of their reasons in such a round, right after the round that stopped
    them and showed the ending on Running alone."""
    swept = list(statuses())
    written: set[str] = set()
    for before, after in itertools.pairwise(swept):
        ending = recorded_outcome(before)
        if ending is None or is_terminal(before):
            continue
        assert before["phase"] not in ("Succeeded", "Failed")
        assert "completionTime" not in before
        ended = [c for c in after["conditions"] if c["type"] in ("Completed", "Failed")]
        assert [(c["status"], c["reason"]) for c in ended] == [("True", ending.reason)]
        written.add(ending.reason)
    assert written == ROWS["Completed"].reasons | ROWS["Failed"].reasons
