"""The fields of the generated API classes by path, as `torchjob convert`'s tables name them
(cli/convert_fields.py): every field of a spec, the row that says what becomes of one, and what a
manifest holds at one."""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator, Mapping
from typing import Any

from torchjob.cli.convert_fields import Fate


def generated_fields(model: Any, prefix: str = "spec") -> Iterator[tuple[str, bool]]:
    """The path of every field of the generated class `model` and of the messages inside it (an
    item of a list written `[]`, a value of a map `*`), and whether it is a message."""
    module = sys.modules[model.__module__]
    for info in model.FIELDS:
        path = f"{prefix}.{info.key}"
        yield path, info.kind == "message"
        if info.kind == "message":
            inner = path + ("[]" if info.repeated else "") + (".*" if info.map else "")
            yield from generated_fields(getattr(module, info.ref), inner)


def row_of(path: str, fates: Mapping[str, Fate]) -> str | None:
    """The row that says what becomes of `path`: its own, or the row of a message around it."""
    for row in fates:
        if path == row or path.startswith((f"{row}.", f"{row}[]")):
            return row
    return None


def values_at(document: Any, path: str) -> list[Any]:
    """What `document` holds at `path` (every item at `[]`, every value at `*`)."""
    found = [document]
    for step in re.findall(r"[^.\[\]]+|\[\]", path):
        if step == "[]":
            found = [item for value in found if isinstance(value, list) for item in value]
        elif step == "*":
            found = [item for value in found if isinstance(value, dict) for item in value.values()]
        else:
            found = [value[step] for value in found if isinstance(value, dict) and step in value]
    return [value for value in found if value is not None]
