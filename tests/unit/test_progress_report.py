"""What a progress report may say (lifecycle/progress.py): the bodies Hugging Face's
KubeflowCallback and the Kubeflow SDK send are read as they are; anything else is refused naming
the field at fault, never with another error; each report replaces the last in status; and the
time since the last report is read off the status alone."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest

from torchjob.api.jsoncopy import merge_patched
from torchjob.api.progress import MAX_METRIC_TEXT, MAX_METRICS
from torchjob.lifecycle.progress import (
    Progress,
    ReportError,
    read_report,
    seconds_since_report,
    supersedes,
)

RECEIVED = datetime(2026, 11, 28, 10, 30, 47, 654321, tzinfo=UTC)

# As transformers' KubeflowCallback sends it: every field, the reporter's time in isoformat().
HUGGING_FACE = {
    "trainerStatus": {
        "progressPercentage": 45,
        "estimatedRemainingSeconds": 120,
        "metrics": [{"name": "loss", "value": "0.25"}],
        "lastUpdatedTime": "2026-11-28T10:30:45.123456+00:00",
    }
}


def report(**fields: Any) -> dict[str, Any]:
    return {"trainerStatus": fields}


def refused(body: Any) -> ReportError:
    with pytest.raises(ReportError) as caught:
        read_report(body)
    return caught.value


# -- what the clients send -----------------------------------------------------------------------


def test_the_hugging_face_callbacks_report_is_read_whole() -> None:
    progress = read_report(json.loads(json.dumps(HUGGING_FACE)))
    assert progress == Progress(45, 120, (("loss", "0.25"),))


@pytest.mark.parametrize(
    "fields",
    [
        # The Kubeflow SDK sends only what the caller gave, its time with a literal Z.
        {"progressPercentage": 10, "lastUpdatedTime": "2026-11-28T10:30:45Z"},
        {"metrics": [{"name": "accuracy", "value": "0.9"}]},
        {},
    ],
)
def test_a_partial_report_is_read(fields: dict[str, Any]) -> None:
    progress = read_report(report(**fields))
    assert progress.percentage == fields.get("progressPercentage")
    assert progress.remaining_seconds is None
    assert [{"name": n, "value": v} for n, v in progress.metrics] == fields.get("metrics", [])


def test_a_fractional_eta_is_cut_to_its_whole_seconds() -> None:
    assert read_report(report(estimatedRemainingSeconds=119.9)).remaining_seconds == 119
    assert read_report(report(progressPercentage=45.0)).percentage == 45


def test_a_number_as_a_metric_value_is_written_as_a_string() -> None:
    metrics = [{"name": "loss", "value": 0.25}, {"name": "step", "value": 40}]
    assert read_report(report(metrics=metrics)).metrics == (("loss", "0.25"), ("step", "40"))


def test_the_bounds_are_accepted() -> None:
    metrics = [{"name": "n" * MAX_METRIC_TEXT, "value": "v" * MAX_METRIC_TEXT}] * MAX_METRICS
    progress = read_report(
        report(progressPercentage=100, estimatedRemainingSeconds=2**31 - 1, metrics=metrics)
    )
    assert (progress.percentage, progress.remaining_seconds) == (100, 2**31 - 1)
    assert len(progress.metrics) == MAX_METRICS
    assert read_report(report(progressPercentage=0, estimatedRemainingSeconds=0)).percentage == 0


# -- what is refused -----------------------------------------------------------------------------


@pytest.mark.parametrize("body", [[HUGGING_FACE], "trainerStatus", 45, None])
def test_a_body_that_is_no_object_is_refused(body: Any) -> None:
    assert refused(body).field == "body"


@pytest.mark.parametrize("body", [{}, {"progressPercentage": 45}, {"trainerStatus": [1]}])
def test_a_body_without_a_trainer_status_is_refused(body: Any) -> None:
    assert refused(body).field == "trainerStatus"


@pytest.mark.parametrize(
    ("key", "value", "said"),
    [
        ("progressPercentage", 101, "from 0 to 100, not 101"),
        ("progressPercentage", -1, "from 0 to 100, not -1"),
        ("progressPercentage", 100.5, "from 0 to 100"),
        ("estimatedRemainingSeconds", -5, f"from 0 to {2**31 - 1}, not -5"),
        ("estimatedRemainingSeconds", 2**31, f"from 0 to {2**31 - 1}"),
        ("estimatedRemainingSeconds", 1e300, f"from 0 to {2**31 - 1}"),
        # An integer too large for a float, as JSON may carry it.
        pytest.param(
            "estimatedRemainingSeconds", 10**400, f"from 0 to {2**31 - 1}", id="a-401-digit-eta"
        ),
        ("progressPercentage", True, "a number, not True"),
        ("estimatedRemainingSeconds", False, "a number, not False"),
        ("progressPercentage", "45", "a number, not '45'"),
        ("progressPercentage", float("nan"), "a number"),
        ("estimatedRemainingSeconds", float("inf"), "a number"),
        ("progressPercentage", [45], "a number"),
    ],
)
def test_a_number_out_of_its_range_or_no_number_is_refused_naming_it(
    key: str, value: Any, said: str
) -> None:
    error = refused(report(**{key: value}))
    assert error.field == f"trainerStatus.{key}"
    assert said in str(error)
    assert str(error).startswith(f"trainerStatus.{key}: ")
    assert len(str(error)) < 200


def test_more_metrics_than_the_bound_are_refused() -> None:
    metrics = [{"name": f"m{i}", "value": "1"} for i in range(MAX_METRICS + 1)]
    error = refused(report(metrics=metrics))
    assert error.field == "trainerStatus.metrics"
    assert f"at most {MAX_METRICS} metrics, not {MAX_METRICS + 1}" in str(error)


@pytest.mark.parametrize(
    ("metric", "field"),
    [
        ({"name": "n" * (MAX_METRIC_TEXT + 1), "value": "1"}, "trainerStatus.metrics[1].name"),
        ({"name": "loss", "value": "v" * (MAX_METRIC_TEXT + 1)}, "trainerStatus.metrics[1].value"),
        ({"name": "", "value": "1"}, "trainerStatus.metrics[1].name"),
        ({"value": "1"}, "trainerStatus.metrics[1].name"),
        ({"name": "loss"}, "trainerStatus.metrics[1].value"),
        ({"name": "loss", "value": None}, "trainerStatus.metrics[1].value"),
        ({"name": True, "value": "1"}, "trainerStatus.metrics[1].name"),
        ({"name": "loss", "value": {"x": 1}}, "trainerStatus.metrics[1].value"),
        ("loss=0.25", "trainerStatus.metrics[1]"),
    ],
)
def test_a_metric_out_of_shape_is_refused_naming_it(metric: Any, field: str) -> None:
    metrics = [{"name": "accuracy", "value": "0.9"}, metric]
    assert refused(report(metrics=metrics)).field == field


def test_metrics_that_are_no_list_are_refused() -> None:
    assert refused(report(metrics={"loss": "0.25"})).field == "trainerStatus.metrics"


@pytest.mark.parametrize(
    "moment",
    [
        "2026-11-28T10:30:45",
        "2026-11-28T10:30:45.123456",
        "2026-11-28",
        "yesterday",
        "",
        1764325845,
    ],
)
def test_a_reporters_time_without_a_zone_is_refused(moment: Any) -> None:
    assert refused(report(lastUpdatedTime=moment)).field == "trainerStatus.lastUpdatedTime"


def test_a_reporters_time_in_any_zone_is_read() -> None:
    for moment in ("2026-11-28T10:30:45Z", "2026-11-28T12:30:45+02:00", "2026-11-28T10:30:45.1Z"):
        assert read_report(report(lastUpdatedTime=moment)) == Progress(None, None, ())


# -- what status shows ---------------------------------------------------------------------------


def test_the_status_is_the_report_stamped_when_it_was_received() -> None:
    status = read_report(HUGGING_FACE).status(RECEIVED)
    assert status == {
        "progressPercentage": 45,
        "estimatedRemainingSeconds": 120,
        "metrics": [{"name": "loss", "value": "0.25"}],
        # The endpoint's clock, not the reporter's (10:30:45.123456), to the microsecond.
        "lastUpdatedTime": "2026-11-28T10:30:47.654321Z",
    }


def test_a_report_replaces_the_last_clearing_what_it_leaves_out() -> None:
    """Status writes are JSON merge patches: None removes a field the last report had."""
    first = read_report(HUGGING_FACE).status(RECEIVED)
    second = read_report(report(progressPercentage=50)).status(RECEIVED + timedelta(seconds=5))
    assert second["estimatedRemainingSeconds"] is None
    assert second["metrics"] is None
    assert merge_patched({"trainerStatus": first}, {"trainerStatus": second}) == {
        "trainerStatus": {
            "progressPercentage": 50,
            "lastUpdatedTime": "2026-11-28T10:30:52.654321Z",
        }
    }


def test_the_status_is_written_in_utc_whatever_the_zone_of_the_clock() -> None:
    received = RECEIVED.astimezone(timezone(timedelta(hours=8)))
    stamped = read_report(report()).status(received)["lastUpdatedTime"]
    assert stamped == "2026-11-28T10:30:47.654321Z"


# -- the time since the last report ---------------------------------------------------------------


def test_seconds_since_the_last_report_come_from_the_status_alone() -> None:
    status = {"phase": "Running", "trainerStatus": read_report(HUGGING_FACE).status(RECEIVED)}
    now = datetime(2026, 11, 28, 10, 31, 0, tzinfo=UTC)
    assert seconds_since_report(status, now) == 12.345679
    # A clock behind the endpoint's says no time has passed, never a negative time.
    assert seconds_since_report(status, now - timedelta(minutes=5)) == 0.0


@pytest.mark.parametrize(
    "status",
    [
        {},
        {"trainerStatus": None},
        {"trainerStatus": {"progressPercentage": 45}},
        {"trainerStatus": {"lastUpdatedTime": "not a time"}},
        {"trainerStatus": {"lastUpdatedTime": "2026-11-28T10:30:47"}},
    ],
)
def test_no_report_time_means_no_seconds(status: dict[str, Any]) -> None:
    assert seconds_since_report(status, RECEIVED) is None


# -- the later of two reports is the one status keeps ---------------------------------------------


def test_a_report_supersedes_an_earlier_one_only() -> None:
    """Two endpoint replicas each write their own latest report: one received earlier, written
    later, must not replace a later one."""
    earlier = read_report(HUGGING_FACE).status(RECEIVED)
    later = read_report(report(progressPercentage=100)).status(RECEIVED + timedelta(microseconds=1))
    assert supersedes(later, earlier)
    assert not supersedes(earlier, later)
    assert not supersedes(later, later)
    assert supersedes(earlier, None)
    assert supersedes(earlier, {})
    # What a reporter wrote with its own clock, or nothing sensible, does not hold a report back.
    assert supersedes(earlier, {"lastUpdatedTime": "not a time"})
    assert supersedes(earlier, {"lastUpdatedTime": "2030-01-01T00:00:00"})
    # A time without fractions (an older write) compares as that whole second.
    assert supersedes(earlier, {"lastUpdatedTime": "2026-11-28T10:30:47Z"})
    assert not supersedes(earlier, {"lastUpdatedTime": "2026-11-28T10:30:48Z"})


def test_only_a_report_of_100_percent_is_final() -> None:
    assert read_report(report(progressPercentage=100)).final
    assert not read_report(report(progressPercentage=99)).final
    assert not read_report({"trainerStatus": {}}).final
