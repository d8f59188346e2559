"""The webhook's own metrics: admission requests by endpoint and outcome, and how long each answer
took. Every admission records one; it records it on the event loop, as plain numbers added to,
where prometheus_client's Counter and Histogram would take a lock for each number (four per
admission). The collector reads the numbers when /metrics is scraped, from the probes' thread; a
scrape that runs while an admission records may see its count before its latency."""

from __future__ import annotations

import bisect
from collections.abc import Iterator

from prometheus_client.metrics_core import CounterMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

REQUESTS = "torchjob_admission_requests"
DURATION = "torchjob_admission_duration_seconds"
LABELS = ("endpoint", "outcome")
BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0)
# Each bucket's `le` label, as prometheus_client writes it.
_BOUNDS: tuple[str, ...] = tuple(
    floatToGoString(bound)  # type: ignore[no-untyped-call]
    for bound in (*BUCKETS, float("inf"))
)


class _Series:
    """The numbers of one endpoint and outcome: requests, and the answers' latencies."""

    __slots__ = ("answered", "count", "seconds")

    def __init__(self) -> None:
        self.count = 0
        # How many answers fell in each bucket, the last beyond every bound (+Inf).
        self.answered = [0] * (len(BUCKETS) + 1)
        self.seconds = 0.0


class AdmissionTally(Collector):
    """Admission requests (`torchjob_admission_requests_total`) and the latency of those answered
    with a review (`torchjob_admission_duration_seconds`), by endpoint and outcome."""

    def __init__(self) -> None:
        self._series: dict[tuple[str, str], _Series] = {}

    def count(self, endpoint: str, outcome: str) -> None:
        """A request turned away before it was answered with a review."""
        self._of(endpoint, outcome).count += 1

    def answered(self, endpoint: str, outcome: str, seconds: float) -> None:
        series = self._of(endpoint, outcome)
        series.count += 1
        series.answered[bisect.bisect_left(BUCKETS, seconds)] += 1
        series.seconds += seconds

    def _of(self, endpoint: str, outcome: str) -> _Series:
        key = (endpoint, outcome)
        series = self._series.get(key)
        if series is None:
            series = self._series[key] = _Series()
        return series

    def collect(self) -> Iterator[Metric]:
        requests = CounterMetricFamily(REQUESTS, "Admission requests answered", labels=LABELS)
        duration = HistogramMetricFamily(
            DURATION, "Time to answer an admission request", labels=LABELS
        )
        for (endpoint, outcome), series in list(self._series.items()):
            requests.add_metric([endpoint, outcome], series.count)
            answered = list(series.answered)
            if not any(answered):
                continue
            cumulative, buckets = 0, []
            for bound, count in zip(_BOUNDS, answered, strict=True):
                cumulative += count
                buckets.append((bound, float(cumulative)))
            duration.add_metric([endpoint, outcome], buckets, series.seconds)
        yield requests
        yield duration
