"""Where a job waiting for Kueue stands (views/queue.py), from what Kueue's visibility API
answers (a PendingWorkloadsSummary of v0.17); the e2e tier reads it from real Kueue
(tests/e2e/test_kueue.py)."""

from __future__ import annotations

from typing import Any

from torchjob.render.scheduling import KUEUE_GROUP_LABEL, KUEUE_QUEUE_LABEL
from torchjob.views.queue import Queued, position_text, queued, short_text

WAITING = {
    "status": {
        "conditions": [{"type": "Scheduled", "status": "False", "reason": "WaitingForAdmission"}]
    }
}
POD = {"metadata": {"labels": {KUEUE_QUEUE_LABEL: "training", KUEUE_GROUP_LABEL: "train"}}}


def pending(*names: str) -> dict[str, Any]:
    items = [
        {
            "metadata": {"name": name},
            "localQueueName": "training",
            "positionInLocalQueue": index,
            "positionInClusterQueue": index + 10,
        }
        for index, name in enumerate(names)
    ]
    return {"kind": "PendingWorkloadsSummary", "items": items}


def test_a_job_waits_in_the_queue_its_pods_name_only_while_kueue_has_not_admitted_it() -> None:
    assert queued(WAITING, [POD]) == Queued("training", "train")
    assert queued(WAITING, []) is None
    placed = {"status": {"conditions": [{"type": "Scheduled", "reason": "Scheduled"}]}}
    assert queued(placed, [POD]) is None


def test_the_place_is_counted_from_one_in_the_local_queue_and_the_cluster_queue() -> None:
    where = Queued("training", "train")
    said = position_text(where, pending("other", "train", "third"))
    assert said == "training, 2nd of 3 waiting in it (12th in its ClusterQueue)"
    assert short_text(where, pending("other", "train")) == "training (2nd)"
    many = pending(*(f"w{i}" for i in range(22)), "train")
    assert position_text(where, many).startswith("training, 23rd of 23")


def test_a_place_not_listed_or_not_read_says_so() -> None:
    where = Queued("training", "train")
    assert "not among the Workloads" in position_text(where, pending("other"))
    unread = position_text(where, None, "Kueue's visibility API: 403 Forbidden")
    assert unread == "training, position unknown (Kueue's visibility API: 403 Forbidden)"
    assert short_text(where, None) == "training"
