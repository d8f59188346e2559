"""One capped-doubling rule (`lifecycle/times.doubled_delay`) for every wait that doubles: the
workqueue's per-key retries, the informer's relists, refused creations tried again and replica
restarts. A second one written anywhere in the services fails here."""

from __future__ import annotations

import ast
from pathlib import Path

from torchjob.lifecycle.backoff import RestartBackoff
from torchjob.lifecycle.failures import RETRY_BASE, RETRY_CAP, retry_delay
from torchjob.lifecycle.times import doubled_delay

PACKAGE = Path(__file__).parents[2] / "services" / "torchjob"
HOME = "lifecycle/times.py"


def doublings_in(source: str) -> list[int]:
    """The lines of `source` that double a wait: `2 ** n` for a computed n, or `x * 2` within a
    `min(...)`."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        if (
            isinstance(node, ast.BinOp)
            and isinstance(node.op, ast.Pow)
            and _is_two(node.left)
            and not isinstance(node.right, ast.Constant)
        ):
            lines.append(node.lineno)
        if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "min":
            lines.extend(
                inner.lineno
                for inner in ast.walk(node)
                if isinstance(inner, ast.BinOp)
                and isinstance(inner.op, ast.Mult)
                and (_is_two(inner.left) or _is_two(inner.right))
            )
    return sorted(set(lines))


def _is_two(node: ast.expr) -> bool:
    return isinstance(node, ast.Constant) and node.value in (2, 2.0)


def test_the_finder_finds_a_doubling() -> None:
    source = "a = min(cap, base * 2.0 ** n)\nb = min(cap, delay * 2)\nc = 2**20\nd = size * 2\n"
    assert doublings_in(source) == [1, 2]


def test_no_module_doubles_a_wait_but_the_rule() -> None:
    found = [
        f"{relative}:{line}"
        for path in sorted(PACKAGE.rglob("*.py"))
        if (relative := path.relative_to(PACKAGE).as_posix()) != HOME
        for line in doublings_in(path.read_text())
    ]
    assert found == []


def test_the_rule_doubles_up_to_its_cap() -> None:
    assert [doubled_delay(10.0, 360.0, n) for n in range(-1, 7)] == [
        10.0, 10.0, 20.0, 40.0, 80.0, 160.0, 320.0, 360.0,
    ]  # fmt: skip
    assert doubled_delay(1.0, 300.0, 10**9) == 300.0
    assert doubled_delay(0.0, 300.0, 5) == 0.0


def test_the_users_wait_as_the_rule_says() -> None:
    assert [retry_delay(n) for n in (1, 2, 11)] == [RETRY_BASE, 2 * RETRY_BASE, RETRY_CAP]
    restarts = RestartBackoff(base=10.0, cap=360.0)
    assert [restarts.delay(n) for n in (1, 2, 7, 100)] == [10.0, 20.0, 360.0, 360.0]
