"""The benches' percentile: linear interpolation between the nearest ranks."""

from __future__ import annotations

import math
import random
import statistics

import pytest
from support.stats import percentile


def test_percentiles_interpolate_between_the_nearest_ranks() -> None:
    values = [4.0, 1.0, 3.0, 2.0]  # unsorted on purpose
    assert percentile(values, 0) == 1.0
    assert percentile(values, 50) == 2.5
    assert percentile(values, 100) == 4.0
    assert percentile(values, 90) == pytest.approx(3.7)


def test_percentiles_agree_with_the_inclusive_quantiles() -> None:
    rng = random.Random(7)
    values = [rng.expovariate(1.0) for _ in range(301)]
    cut_points = statistics.quantiles(values, n=100, method="inclusive")
    for percent in (1, 50, 95, 99):
        assert percentile(values, percent) == pytest.approx(cut_points[percent - 1])


def test_one_sample_is_its_own_percentile_and_none_is_nan() -> None:
    assert percentile([0.25], 99) == 0.25
    assert math.isnan(percentile([], 50))


def test_a_percent_outside_0_to_100_is_refused() -> None:
    with pytest.raises(ValueError, match="between 0 and 100"):
        percentile([1.0], 99.5 * 2)
