"""`torchjob diagnose` (cli/diagnose.py) and the diagnosis line of `torchjob get`
(views/cli/description.py), their pure parts: the lines of one diagnosis in a restart agent's
log, the summary, what is said when no answer came, the record read where the job's kind keeps
it, and the verb as the parser takes it."""

from __future__ import annotations

import copy
from datetime import UTC, datetime
from typing import Any

import pytest
from support.jobs import JobBuilder
from support.kubeflow import pytorchjob

from torchjob.api.constants import DIAGNOSIS_REQUESTED, REASON_NO_PROGRESS
from torchjob.api.kubeflow import STATUS_RECORD
from torchjob.cli.completion import bash_script
from torchjob.cli.diagnose import (
    DEFAULT_TIMEOUT,
    diagnosis_lines,
    missing_answer,
    pods_in_order,
    summary_line,
)
from torchjob.cli.main import main, parser
from torchjob.render.agent.restart_agent import REPORT_PREFIX
from torchjob.views.cli.description import describe
from torchjob.views.summary import diagnosis_record

NOW = datetime(2026, 12, 6, 20, 42, tzinfo=UTC)
COLLECTED: dict[str, Any] = {
    "number": 2,
    "reason": REASON_NO_PROGRESS,
    "request": "2026-12-06T20:40:57.123456Z",
    "askedTime": "2026-12-06T20:40:57Z",
    "collectedTime": "2026-12-06T20:41:07Z",
    "pods": 2,
    "message": "rank 1 (worker-1 on node-a) did not answer (stopped, or holding Python's lock); "
    "rank 0 (worker-0 on node-a) waits in _distributed_broadcast_coalesced (gloo) at "
    "hf_trainer.py:78 in main",
}


def block(number: int, pid: int, rank: int, frame: str) -> list[str]:
    """One process's stacks as the restart agent prints them."""
    return [
        f"=== torchjob diagnosis {number}: pid {pid} rank {rank} (python train.py) ===",
        "Current thread 0x00007f01 (most recent call first): [MainThread]",
        f'  File "/workspace/train.py", line 78 in {frame}',
    ]


def report(number: int) -> str:
    return REPORT_PREFIX + '{"number":' + str(number) + ',"processes":[]}'


# -- the lines of one diagnosis in an agent's log ----------------------------------------------


def test_the_lines_of_one_diagnosis_without_its_report_line() -> None:
    first = block(1, 10, 0, "step") + block(1, 11, 1, "step")
    second = block(2, 10, 0, "all_reduce") + block(2, 11, 1, "backward")
    log = "\n".join(["restart agent started", *first, report(1), *second, report(2), "later line"])
    assert diagnosis_lines(log, 2) == second
    assert diagnosis_lines(log, 1) == first
    assert diagnosis_lines(log, 3) == []


def test_a_process_that_did_not_answer_is_kept_in_its_block() -> None:
    silent = [
        "=== torchjob diagnosis 4: pid 12 rank 1 (python train.py) ===",
        "did not answer within 3s: stopped, or holding Python's lock",
    ]
    log = "\n".join([*block(4, 10, 0, "step"), *silent, report(4)])
    assert diagnosis_lines(log, 4) == [*block(4, 10, 0, "step"), *silent]


def test_diagnosis_1_is_not_diagnosis_12_and_the_latest_run_wins() -> None:
    twelve, old, new = block(12, 10, 0, "twelve"), block(1, 10, 0, "old"), block(1, 10, 0, "new")
    log = "\n".join([*twelve, report(12), *old, report(1), *new, report(1)])
    assert diagnosis_lines(log, 1) == block(1, 10, 0, "new")
    assert diagnosis_lines(log, 12) == block(12, 10, 0, "twelve")


def test_a_block_cut_short_by_another_diagnosis_still_counts() -> None:
    log = "\n".join([*block(5, 10, 0, "cut"), *block(6, 10, 0, "next"), report(6)])
    assert diagnosis_lines(log, 5) == block(5, 10, 0, "cut")
    assert diagnosis_lines(log, 6) == block(6, 10, 0, "next")
    assert diagnosis_lines("", 1) == []


# -- the summary, and what no answer says ------------------------------------------------------


def test_the_summary_line() -> None:
    assert summary_line(COLLECTED) == (
        "Diagnosis 2 (NoProgress) at 2026-12-06T20:41:07Z: " + COLLECTED["message"]
    )
    bare = {k: v for k, v in COLLECTED.items() if k != "message"}
    assert summary_line(bare) == "Diagnosis 2 (NoProgress) at 2026-12-06T20:41:07Z"


def test_no_answer_names_what_is_missing() -> None:
    request = "2026-12-06T20:50:00.000001Z"
    untaken = missing_answer("train", request, COLLECTED, 60.0)
    assert "the reconciler did not take up the request" in untaken
    assert request in untaken and COLLECTED["request"] in untaken
    assert "Is the job running" in untaken
    assert "answered none" in missing_answer("train", request, {}, 5.0)
    under_way = {**COLLECTED, "request": request, "number": 3}
    del under_way["collectedTime"]
    uncollected = missing_answer("train", request, under_way, 60.0)
    assert "diagnosis 3 of job train" in uncollected and "not collected within 60s" in uncollected


def test_the_pods_in_replica_order_then_the_others() -> None:
    job = JobBuilder("train").replicas("master", 1).replicas("worker", 2).build()
    named = ["train-worker-1", "train-stray", "train-master-0", "train-worker-0"]
    pods = [{"metadata": {"name": name}} for name in named]
    ordered = [p["metadata"]["name"] for p in pods_in_order(job, pods)]
    assert ordered == ["train-master-0", "train-worker-0", "train-worker-1", "train-stray"]


# -- `torchjob get` ----------------------------------------------------------------------------


def training_job(record: dict[str, Any] | None) -> dict[str, Any]:
    job = JobBuilder("train").replicas("worker", 1).build()
    job["metadata"] |= {"namespace": "team", "creationTimestamp": "2026-12-06T20:00:00Z"}
    job["status"] = {"phase": "Running", **({"diagnosis": record} if record else {})}
    return job


def described(job: dict[str, Any]) -> list[str]:
    return describe(job, [], [], NOW).splitlines()


def test_get_shows_the_latest_diagnosis_wrapped_under_its_start() -> None:
    lines = described(training_job(COLLECTED))
    at = next(i for i, line in enumerate(lines) if line.startswith("Diagnosis:"))
    shown = lines[at : at + 3]
    assert shown[0].startswith(
        "Diagnosis:   2 (NoProgress, 2026-12-06T20:41:07Z): rank 1 (worker-1 on node-a)"
    )
    assert all(line.startswith(" " * 13) and line[13] != " " for line in shown[1:])
    assert all(len(line) <= 100 for line in shown)
    words = " ".join(line.strip() for line in shown).split("Z): ", 1)[1]
    assert words == COLLECTED["message"]


def test_get_says_a_diagnosis_under_way_and_nothing_before_the_first() -> None:
    under_way = {k: v for k, v in COLLECTED.items() if k not in ("collectedTime", "message")}
    under_way["reason"] = DIAGNOSIS_REQUESTED
    lines = described(training_job(under_way))
    assert "Diagnosis:   2 (Requested, under way): 2 pod(s) asked at 2026-12-06T20:40:57Z" in lines
    assert not any(line.startswith("Diagnosis:") for line in described(training_job(None)))


def test_a_pytorchjobs_diagnosis_is_read_where_its_kind_keeps_the_record() -> None:
    job = pytorchjob("hf", workers=2)
    job["metadata"]["namespace"] = "team"
    job["status"] = {"conditions": [], STATUS_RECORD: {"diagnosis": copy.deepcopy(COLLECTED)}}
    assert diagnosis_record(job) == COLLECTED
    assert diagnosis_record(training_job(COLLECTED)) == COLLECTED
    assert diagnosis_record(pytorchjob("none")) == {}
    # A PyTorchJob's own status.diagnosis is no record of ours.
    assert diagnosis_record({**pytorchjob("own"), "status": {"diagnosis": COLLECTED}}) == {}


# -- the verb ----------------------------------------------------------------------------------


def test_the_parser_takes_the_verb() -> None:
    args = parser().parse_args(["diagnose", "train", "-n", "team", "--timeout", "90", "--summary"])
    assert (args.command, args.job.name, args.namespace) == ("diagnose", "train", "team")
    assert parser().parse_args(["diagnose", "trainjob/t"]).job.api.kind == "TrainJob"
    assert (args.timeout, args.summary) == (90.0, True)
    defaults = parser().parse_args(["-n", "team", "diagnose", "train", "--timeout", "2m"])
    assert (defaults.namespace, defaults.timeout, defaults.summary) == ("team", 120.0, False)
    assert parser().parse_args(["diagnose", "train"]).timeout == DEFAULT_TIMEOUT
    assert callable(args.run)


@pytest.mark.parametrize(
    "argv", [["diagnose"], ["-A", "diagnose", "t"], ["diagnose", "t", "--timeout", "0"]]
)
def test_the_parser_refuses(argv: list[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 2


def test_completion_offers_the_verb_and_its_flags() -> None:
    script = bash_script(parser())
    assert "diagnose" in script and "--summary" in script
