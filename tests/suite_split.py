"""Suite-wide collection rules: which tests share a worker when the suite runs in parallel.

`make test` runs the suite in two passes: every test not marked ``realtime`` with
pytest-xdist (``-n`` workers: a 2-core machine runs the simulator's tests on both
cores), then the ``realtime`` tests one at a time on a machine left to them. Those time
real programs on real sockets (loopback or network namespaces: a loop's deadline misses,
who held the permit when); beside a busy worker they would see its CPU as load, which
is not what they test. This module gives them the marker (tests/conftest.py installs
its hook; a module of its own because every folder's conftest is named ``conftest``).
"""

from __future__ import annotations

from pathlib import Path

import pytest

#: Folders (under tests/) and files whose tests all join the "real-time" group.
_REALTIME_DIRS = ("runtime", "emulate", "transport", "teambench")
_REALTIME_FILES = (
    "test_learn_team_netns.py",
    "test_examples.py",
    "learn/test_runtime_learn.py",
    "learn/test_team_learn.py",
    "cli/test_agent_ls.py",
)
_ROOT = Path(__file__).parent


def realtime(path: Path) -> bool:
    """Whether the test file at ``path`` belongs to the one-at-a-time group."""
    try:
        rel = path.resolve().relative_to(_ROOT)
    except ValueError:
        return False
    return rel.parts[0] in _REALTIME_DIRS or rel.as_posix() in _REALTIME_FILES


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects by marker
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.get_closest_marker("netns") is not None or realtime(item.path):
            item.add_marker(pytest.mark.realtime)
