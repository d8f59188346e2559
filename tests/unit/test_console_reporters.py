"""A job's Events say who reported them, through either Events API's fields, and ours are told
apart from anyone else's."""

from __future__ import annotations

from torchjob.api.constants import REPORTER_HOUSEKEEPER, REPORTER_RECONCILER
from torchjob.console.reporters import Reporter, reporter_of
from torchjob.console.templating import Pages


def test_the_reporter_is_read_from_either_api_and_ours_are_marked() -> None:
    assert reporter_of(
        {"reportingController": REPORTER_RECONCILER, "reportingInstance": "pod-a"}
    ) == Reporter(REPORTER_RECONCILER, "pod-a", ours=True)
    assert reporter_of(
        {"deprecatedSource": {"component": REPORTER_HOUSEKEEPER, "host": "node-1"}}
    ) == Reporter(REPORTER_HOUSEKEEPER, "node-1", ours=True)
    assert reporter_of({"source": {"component": "kubelet"}}) == Reporter("kubelet", "", False)
    assert reporter_of({"reportingController": "torchjob-reconciler-not"}).ours is False
    assert reporter_of({}) == Reporter("", "", False)


def test_the_events_table_marks_ours_and_not_a_tenants() -> None:
    meta = {"creationTimestamp": "2026-01-01T00:00:00Z"}
    events = [
        {"reason": "Ours", "reportingController": REPORTER_RECONCILER, "metadata": meta},
        {"reason": "Theirs", "reportingController": "tenant-tool", "metadata": meta},
        {"reason": "Nobody", "metadata": meta},
    ]
    text = Pages().text("fragments/job_events.html", events=events)
    rows = {row.split("</td>")[1]: row for row in text.split("<tr")[2:]}
    assert '<span class="ours"' in rows["<td>Ours"] and REPORTER_RECONCILER in rows["<td>Ours"]
    assert '<span class="ours"' not in rows["<td>Theirs"] and "tenant-tool" in rows["<td>Theirs"]
    assert "unknown" in rows["<td>Nobody"]
