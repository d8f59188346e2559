"""The webhook's admission metrics, as a scrape reads them: requests by endpoint and outcome, and a
latency histogram whose buckets count each answer at or under their bound, as Prometheus's do."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from torchjob.webhook.admission.metrics import BUCKETS, AdmissionTally


def _scraped(tally: AdmissionTally) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    registry = CollectorRegistry()
    registry.register(tally)
    text = generate_latest(registry).decode()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def _labels(endpoint: str, outcome: str, **more: str) -> tuple[tuple[str, str], ...]:
    return tuple(sorted({"endpoint": endpoint, "outcome": outcome, **more}.items()))


def test_requests_are_counted_by_endpoint_and_outcome_turned_away_or_answered() -> None:
    tally = AdmissionTally()
    tally.answered("mutate-pods", "patched", 0.002)
    tally.answered("mutate-pods", "patched", 0.003)
    tally.count("mutate-pods", "throttled")
    scraped = _scraped(tally)
    requests = "torchjob_admission_requests_total"
    assert scraped[(requests, _labels("mutate-pods", "patched"))] == 2
    assert scraped[(requests, _labels("mutate-pods", "throttled"))] == 1
    duration = "torchjob_admission_duration_seconds"
    # A request turned away has no latency to report.
    assert (f"{duration}_count", _labels("mutate-pods", "throttled")) not in scraped
    assert scraped[(f"{duration}_count", _labels("mutate-pods", "patched"))] == 2
    assert scraped[(f"{duration}_sum", _labels("mutate-pods", "patched"))] == 0.005


def test_an_answer_counts_in_every_bucket_at_or_above_it() -> None:
    tally = AdmissionTally()
    on_a_bound, between, beyond = BUCKETS[2], (BUCKETS[3] + BUCKETS[4]) / 2, BUCKETS[-1] * 2
    for seconds in (on_a_bound, between, beyond):
        tally.answered("validate-jobs", "allowed", seconds)
    scraped = _scraped(tally)

    def bucket(le: str) -> float:
        key = _labels("validate-jobs", "allowed", le=le)
        return scraped[("torchjob_admission_duration_seconds_bucket", key)]

    assert bucket(str(BUCKETS[1])) == 0
    assert bucket(str(BUCKETS[2])) == 1  # an answer on a bound is in its bucket
    assert bucket(str(BUCKETS[3])) == 1
    assert bucket(str(BUCKETS[4])) == 2
    assert bucket(str(BUCKETS[-1])) == 2
    assert bucket("+Inf") == 3
