"""A script under tools/ imported as a module, for the tests of what it writes or checks."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

TOOLS = Path(__file__).parents[2] / "tools"


def load_tool(name: str) -> ModuleType:
    """tools/<name>.py as the module `name` (registered, as its dataclasses look it up)."""
    spec = importlib.util.spec_from_file_location(name, TOOLS / f"{name}.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
