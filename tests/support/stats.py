"""Figures the benches print: one percentile rule for all of them."""

from __future__ import annotations

import math


def percentile(values: list[float], percent: float) -> float:
    """The `percent`-th percentile (0 to 100) of `values`, by linear interpolation between the
    two nearest ranks: numpy's default, and `statistics.quantiles(method="inclusive")`.

    Interpolation (rather than nearest rank) keeps a p99 of a few hundred samples from jumping
    to the single slowest one, so two runs' figures compare. One sample is its own percentile;
    none gives NaN, which prints as `nan` in a report instead of failing it."""
    if not 0 <= percent <= 100:
        raise ValueError(f"a percentile is between 0 and 100, not {percent}")
    if not values:
        return math.nan
    ordered = sorted(values)
    position = (len(ordered) - 1) * percent / 100
    below = math.floor(position)
    above = min(below + 1, len(ordered) - 1)
    return ordered[below] + (ordered[above] - ordered[below]) * (position - below)
