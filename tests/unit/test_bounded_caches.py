"""The services' bounded caches are cachetools' (LRUCache, TTLCache, TLRUCache): a least recently
used order kept by hand (an OrderedDict moved to its end and popped from its front) fails here."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).parents[2] / "services" / "torchjob"


def hand_kept_orders(source: str) -> list[int]:
    """The lines of `source` that name OrderedDict or call move_to_end or popitem(last=...)."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        named = (isinstance(node, ast.Name) and node.id == "OrderedDict") or (
            isinstance(node, ast.Attribute) and node.attr in ("OrderedDict", "move_to_end")
        )
        popped = (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "popitem"
            and any(keyword.arg == "last" for keyword in node.keywords)
        )
        if isinstance(node, ast.expr) and (named or popped):
            lines.append(node.lineno)
    return sorted(set(lines))


def test_the_finder_finds_an_order_kept_by_hand() -> None:
    source = (
        "import collections\nfrom collections import OrderedDict\n"
        "kept = collections.OrderedDict()\nkept.move_to_end(1)\nkept.popitem(last=False)\n"
        "other = {}\nother.popitem()\n"
    )
    assert hand_kept_orders(source) == [3, 4, 5]


def test_no_service_keeps_an_lru_order_by_hand() -> None:
    found = [
        f"{path.relative_to(PACKAGE)}:{line}"
        for path in sorted(PACKAGE.rglob("*.py"))
        for line in hand_kept_orders(path.read_text())
    ]
    assert found == []
