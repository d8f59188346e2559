"""docs/settings.md is what tools/settings_doc.py writes from the declarations, and every setting
says what it means."""

from __future__ import annotations

from pathlib import Path

from support.tools import load_tool

ROOT = Path(__file__).parents[2]


def test_the_settings_reference_is_current() -> None:
    module = load_tool("settings_doc")
    written = (ROOT / "docs" / "settings.md").read_text()
    assert written == module.document(), "docs/settings.md is stale: run `make generate`"
    for line in written.splitlines():
        if line.startswith("| `--"):
            assert not line.rstrip().endswith("|  |"), f"a setting without its meaning: {line}"
