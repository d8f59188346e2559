"""A progress report's bounds are the proto's: both protos give TrainerStatus the same ones, and
`lifecycle/progress.read_report` (the endpoint's and `torchjob run`'s rule) accepts a report at
each bound and refuses one a step past it, so that no report it accepts is one the apiserver's
schema refuses, and none the schema keeps is refused. The bounds here are read from the generated
models, not from `api/progress.py`."""

from __future__ import annotations

from typing import Any

import pytest

from torchjob.api import kubeflow_types, types
from torchjob.api.model import INT_BOUNDS, Model
from torchjob.api.progress import limits_of
from torchjob.lifecycle.progress import ReportError, read_report

STATUS_KEYS = ("progressPercentage", "estimatedRemainingSeconds", "metrics", "lastUpdatedTime")
METRIC_KEYS = ("name", "value")


def reads(**fields: Any) -> bool:
    try:
        read_report({"trainerStatus": fields})
    except ReportError:
        return False
    return True


@pytest.mark.parametrize(
    ("ours", "kubeflows", "keys"),
    [
        (types.TrainerStatus, kubeflow_types.TrainerStatus, STATUS_KEYS),
        (types.Metric, kubeflow_types.Metric, METRIC_KEYS),
    ],
)
def test_both_protos_bound_a_report_alike(
    ours: type[Model], kubeflows: type[Model], keys: tuple[str, ...]
) -> None:
    assert [info.key for info in ours.FIELDS] == list(keys)
    assert [limits_of(ours, k) for k in keys] == [limits_of(kubeflows, k) for k in keys]


@pytest.mark.parametrize("key", ["progressPercentage", "estimatedRemainingSeconds"])
def test_a_number_is_read_within_the_protos_bounds_only(key: str) -> None:
    limits = limits_of(types.TrainerStatus, key)
    assert limits.minimum is not None
    high = limits.maximum if limits.maximum is not None else INT_BOUNDS["int32"][1]
    assert reads(**{key: limits.minimum}) and reads(**{key: high})
    assert not reads(**{key: limits.minimum - 1})
    assert not reads(**{key: high + 1})


def test_as_many_metrics_as_the_proto_allows_are_read_and_no_more() -> None:
    most = limits_of(types.TrainerStatus, "metrics").max_items
    assert most is not None
    metrics = [{"name": f"m{i}", "value": "1"} for i in range(most + 1)]
    assert reads(metrics=metrics[:most])
    assert not reads(metrics=metrics)


@pytest.mark.parametrize("key", METRIC_KEYS)
def test_a_metrics_text_is_read_within_the_protos_lengths_only(key: str) -> None:
    limits = limits_of(types.Metric, key)
    assert limits.required and limits.min_length is not None and limits.max_length is not None

    def metric(text: str | None) -> dict[str, str]:
        shaped = {"name": "loss", "value": "1"}
        if text is None:
            del shaped[key]
        else:
            shaped[key] = text
        return shaped

    assert reads(metrics=[metric("x" * limits.min_length)])
    assert reads(metrics=[metric("x" * limits.max_length)])
    assert not reads(metrics=[metric("x" * (limits.min_length - 1))])
    assert not reads(metrics=[metric("x" * (limits.max_length + 1))])
    assert not reads(metrics=[metric(None)])
