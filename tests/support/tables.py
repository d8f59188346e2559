"""Tables as kubectl prints them, read by column: a column's cells start where its heading does,
so an empty cell (kubectl prints nothing for a printer column without a value) stays empty
instead of shifting the cells after it."""

from __future__ import annotations

import re


def printed_rows(output: str) -> list[dict[str, str]]:
    """Each row of a `kubectl get` table, by column heading; an empty cell is ''."""
    header, *lines = output.splitlines()
    starts = [match.start() for match in re.finditer(r"\S+", header)]
    names = header.split()
    ends = [*starts[1:], None]
    return [
        {
            name: line[start:end].strip()
            for name, start, end in zip(names, starts, ends, strict=True)
        }
        for line in lines
        if line.strip()
    ]
