"""kubectl's tables read by column, an empty cell included."""

from __future__ import annotations

from support.tables import printed_rows

TABLE = """\
NAME        PHASE     START             RUNNING   PROGRESS   AGE
mnist-ddp   Running                     2         45         3m
typo        Pending   ImagePullFailed   0         <none>     1m
"""


def test_an_empty_cell_stays_empty_and_shifts_nothing() -> None:
    rows = printed_rows(TABLE)
    assert rows[0] == {
        "NAME": "mnist-ddp",
        "PHASE": "Running",
        "START": "",
        "RUNNING": "2",
        "PROGRESS": "45",
        "AGE": "3m",
    }
    assert rows[1]["START"] == "ImagePullFailed"
    assert rows[1]["PROGRESS"] == "<none>"
