"""docs/settings.md is what tools/settings_doc.py writes from the declarations, and every setting
says what it means."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).parents[2]


def test_the_settings_reference_is_current() -> None:
    spec = importlib.util.spec_from_file_location(
        "settings_doc", ROOT / "tools" / "settings_doc.py"
    )
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    written = (ROOT / "docs" / "settings.md").read_text()
    assert written == module.document(), "docs/settings.md is stale: run `make generate`"
    for line in written.splitlines():
        if line.startswith("| `--"):
            assert not line.rstrip().endswith("|  |"), f"a setting without its meaning: {line}"
