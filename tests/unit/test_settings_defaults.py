"""Each setting's default is written once: in its declaration (a `Setting`), or in the dataclass of
a pure layer the declaration reads (the webhook's `Limits`, render's `SchedulingSettings`). A
service's settings dataclass reads the declaration's default for a field it does not require, and
a service started with no flag or variable gets each of its dataclasses' defaults."""

from __future__ import annotations

import ast
import dataclasses
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from torchjob.housekeeper import settings as housekeeper
from torchjob.reconciler import settings as reconciler
from torchjob.webhook import settings as webhook

PACKAGE = Path(__file__).parents[2] / "services" / "torchjob"
# The services' settings dataclasses: their fields are settings, declared elsewhere.
SETTINGS_CLASSES = {
    "runtime/service.py": "Settings",
    "webhook/settings.py": "Settings",
    "reconciler/settings.py": "Settings",
    "console/settings.py": "Settings",
}
PARSERS: dict[str, Callable[[list[str]], object]] = {
    "webhook": webhook.parse,
    "reconciler": reconciler.parse,
    "housekeeper": housekeeper.parse,
}


def written_defaults(source: str, class_name: str) -> list[str]:
    """The fields of `class_name` whose default is a value written there (None, which says
    'not given', aside) rather than read from a declaration."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ClassDef) and node.name == class_name:
            return [
                ast.unparse(item.target)
                for item in node.body
                if isinstance(item, ast.AnnAssign)
                and item.value is not None
                and _is_written_value(item.value)
            ]
    raise AssertionError(f"no class {class_name}")


def _is_written_value(node: ast.expr) -> bool:
    if isinstance(node, ast.Constant):
        return node.value is not None
    if isinstance(node, ast.UnaryOp | ast.BinOp):
        return all(
            _is_written_value(n) for n in (getattr(node, "operand", None), *_sides(node)) if n
        )
    return False


def _sides(node: ast.expr) -> tuple[ast.expr, ...]:
    return (node.left, node.right) if isinstance(node, ast.BinOp) else ()


def test_the_finder_finds_a_written_default() -> None:
    source = (
        "class Settings:\n    a: int\n    b: int = 9444\n    c: float = -1.0\n"
        "    d: str | None = None\n    e: int = RESTARTS.default\n    f: bool = False\n"
    )
    assert written_defaults(source, "Settings") == ["b", "c", "f"]


@pytest.mark.parametrize("path", SETTINGS_CLASSES)
def test_a_settings_dataclass_reads_its_defaults(path: str) -> None:
    source = (PACKAGE / path).read_text()
    assert written_defaults(source, SETTINGS_CLASSES[path]) == []


@pytest.mark.parametrize("service", PARSERS)
def test_no_flag_and_no_variable_give_the_dataclass_defaults(
    service: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in [v for v in os.environ if v.startswith("TORCHJOB_") or v == "KUBECONFIG"]:
        monkeypatch.delenv(name)
    parsed = PARSERS[service]([])
    for field in dataclasses.fields(parsed):  # type: ignore[arg-type]
        if field.default is not dataclasses.MISSING:
            assert getattr(parsed, field.name) == field.default, field.name
        elif field.default_factory is not dataclasses.MISSING:
            assert getattr(parsed, field.name) == field.default_factory(), field.name
