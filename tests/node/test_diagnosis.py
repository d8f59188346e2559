"""A hang says where, on real pods (tests/support/frozen_rank.py runs the job): the diagnosis a
user asks for names every rank; once one rank's processes are frozen, the job's silence passes
its progress deadline, and before its restart the diagnosis names the frozen rank and the
collective the other waits in, readable in the status, through `torchjob` and in the agents'
logs; then the gang restarts in place and the job succeeds."""

from __future__ import annotations

import re

from support.frozen_rank import FrozenRankRun

from torchjob.api import constants


def test_a_frozen_rank_is_named_before_the_restart_in_place(frozen_rank: FrozenRankRun) -> None:
    seen = frozen_rank.result()
    asked = seen["asked"]
    assert asked.startswith("Diagnosis 1 (Requested)"), asked
    assert "rank 0 (worker-0 on " in asked and "rank 1 (worker-1 on " in asked, asked

    found = seen["found"]
    assert found["reason"] == "NoProgress", found
    message = found["message"]
    assert re.search(r"rank 1 \(worker-1 on \S+\) did not answer", message), message
    assert re.search(r"rank 0 \(worker-0 on \S+\) waits in \w+", message), message
    assert message.index("rank 1") < message.index("rank 0"), "the one the other waits for first"
    said = [
        e["message"]
        for e in seen["diagnosed_events"]
        if e.get("reason") == constants.REASON_DIAGNOSED
    ]
    assert any(m.startswith("diagnosis 2 (NoProgress): rank 1") for m in said), said

    job = seen["job"]
    assert job["status"]["phase"] == "Succeeded", job["status"]
    assert job["status"]["gangRestarts"] == 1, job["status"]
    restarted = [e["message"] for e in seen["events"]]
    assert any("where each rank was: diagnosis 2" in m for m in restarted), restarted
    for replica, pod in seen["before"].items():
        now = seen["after"][replica]
        same = (now["metadata"]["uid"], now["spec"]["nodeName"])
        assert same == (pod["metadata"]["uid"], pod["spec"]["nodeName"]), "restarted in place"
    # The stacks stay in the agent's log (printed again after its restart): pods/log readers
    # read them.
    stacks = seen["stacks"]
    assert "=== torchjob diagnosis 2: pid" in stacks and "[MainThread]" in stacks, stacks[-2000:]
    assert "Diagnosis:   2 (NoProgress" in seen["described"], seen["described"]
