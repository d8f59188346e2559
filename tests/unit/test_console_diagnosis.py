"""What a job's page shows of its diagnosis: the record where the job's kind keeps it, a request
not taken up yet, the restart agents' log pages; and that the job's own words stay text."""

from __future__ import annotations

from typing import Any

from torchjob.api import constants
from torchjob.console.templating import Pages
from torchjob.views.console.diagnosis import agent_logs, diagnosis_shown

RECORD: dict[str, Any] = {
    "number": 2,
    "reason": "Requested",
    "request": "2026-12-06T19:00:00Z",
    "askedTime": "2026-12-06T19:00:01Z",
    "pods": 2,
    "collectedTime": "2026-12-06T19:00:11Z",
    "message": "ranks 1-3 wait in all_reduce; rank 0 (worker-0 on n1) is in train.py:42",
}
CRAFTED = "<script>alert(1)</script> <img src=x onerror=alert(1)>"


def training_job(
    status: dict[str, Any], annotations: dict[str, str] | None = None
) -> dict[str, Any]:
    return {
        "apiVersion": "batch.tensorstack.dev/v1beta1",
        "kind": "PyTorchTrainingJob",
        "metadata": {"name": "j", "namespace": "ns", "annotations": annotations or {}},
        "spec": {"replicaSpecs": []},
        "status": status,
    }


def test_the_record_is_read_where_each_kind_keeps_it() -> None:
    shown = diagnosis_shown(training_job({"diagnosis": RECORD}))
    assert shown.latest is not None and shown.latest.number == 2
    assert shown.latest.collected == RECORD["collectedTime"]
    assert shown.latest.why == "asked for"
    kubeflow = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": "kf", "namespace": "ns"},
        "spec": {"pytorchReplicaSpecs": {}},
        "status": {"torchjob": {"diagnosis": RECORD}},
    }
    latest = diagnosis_shown(kubeflow).latest
    assert latest is not None and latest.message == RECORD["message"]
    assert diagnosis_shown(training_job({})) == diagnosis_shown(training_job({"diagnosis": {}}))
    assert diagnosis_shown(training_job({})).latest is None


def test_a_request_is_shown_until_the_reconciler_answers_it() -> None:
    asked = {constants.ANNOTATION_DIAGNOSE: "2026-12-06T19:05:00.123456Z"}
    assert diagnosis_shown(training_job({}, asked)).requested == "2026-12-06T19:05:00.123456Z"
    assert diagnosis_shown(training_job({"diagnosis": RECORD}, asked)).requested
    answered = {constants.ANNOTATION_DIAGNOSE: str(RECORD["request"])}
    assert diagnosis_shown(training_job({"diagnosis": RECORD}, answered)).requested == ""


def test_under_way_until_collected() -> None:
    record = {k: v for k, v in RECORD.items() if k not in ("collectedTime", "message")}
    latest = diagnosis_shown(training_job({"diagnosis": record})).latest
    assert latest is not None and latest.collected == "" and latest.message == ""


def test_only_pods_with_a_restart_agent_link_to_its_log() -> None:
    def pod(name: str, index: str, agent: bool) -> dict[str, Any]:
        labels = {constants.LABEL_REPLICA_TYPE: "worker", constants.LABEL_REPLICA_INDEX: index}
        init = [{"name": "restart-agent", "restartPolicy": "Always"}] if agent else []
        spec = {"containers": [{"name": "pytorch"}], "initContainers": init}
        return {"metadata": {"name": name, "labels": labels}, "spec": spec}

    pods = [pod("j-worker-1", "1", True), pod("j-worker-0", "0", True), pod("x", "2", False)]
    assert agent_logs("ns", pods) == [
        ("worker-0", "j-worker-0", "/ns/ns/pods/j-worker-0/log?container=restart-agent"),
        ("worker-1", "j-worker-1", "/ns/ns/pods/j-worker-1/log?container=restart-agent"),
    ]


def test_the_jobs_words_are_escaped_and_marked_as_its_report() -> None:
    job = training_job({"diagnosis": {**RECORD, "message": CRAFTED}})
    text = Pages().text(
        "fragments/job_diagnosis.html",
        diagnosis=diagnosis_shown(job),
        agent_logs=[("worker-0", "j-worker-0", "/ns/ns/pods/j-worker-0/log?container=x")],
    )
    assert "<script>" not in text and "<img" not in text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in text
    assert "&lt;img src=x onerror=alert(1)&gt;" in text
    figure = text[text.index('<figure class="job-report"') : text.index("</figure>")]
    assert "&lt;script&gt;" in figure and "The job's report" in figure


def test_a_diagnosed_events_message_is_marked_as_the_jobs_report() -> None:
    event = {
        "type": "Normal",
        "reason": constants.REASON_DIAGNOSED,
        "note": f"diagnosis 2 (Requested): {CRAFTED}",
        "metadata": {"creationTimestamp": "2026-12-06T19:00:11Z"},
    }
    text = Pages().text("fragments/job_events.html", events=[event])
    assert "<script>" not in text and "&lt;script&gt;" in text
    assert "their words, not torchjob" in text
