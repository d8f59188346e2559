"""The tests on the real node share one node per session and a fresh namespace per test (the
`node` and `node_namespace` fixtures in tests/conftest.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

NODE_TESTS = Path(__file__).parent
# Real pods take what the machine gives them: torch starting in four processes on two busy cores,
# and the first test also waits for the node to come up.
NODE_TEST_TIMEOUT = 1800


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # This hook sees every item of the session. The test that uninstalls the chart runs after
    # every other test, since they all use the chart as installed.
    last = [item for item in items if item.get_closest_marker("uninstalls_chart")]
    items[:] = [item for item in items if item not in last] + last
    for item in items:
        if item.path.is_relative_to(NODE_TESTS):
            item.add_marker(pytest.mark.node)
            item.add_marker(pytest.mark.timeout(NODE_TEST_TIMEOUT))
