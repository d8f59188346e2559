"""The tests on the real node share one node per session and a fresh namespace per test (the
`node` and `node_namespace` fixtures in tests/conftest.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from support.frozen_rank import FrozenRankRun

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


@pytest.fixture(scope="session", autouse=True)
def frozen_rank(request: pytest.FixtureRequest) -> Iterator[FrozenRankRun | None]:
    """The run tests/node/test_diagnosis.py reads, started with the session when that test is
    collected, so that its minutes of waiting pass beside the tests before it."""
    if not any(item.path.name == "test_diagnosis.py" for item in request.session.items):
        yield None
        return
    run = FrozenRankRun(request.getfixturevalue("node"))
    run.start()
    yield run
    run.stop()
