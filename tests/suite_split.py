"""Suite-wide collection rules: which tests `make test` runs in its second pass.

`make test` runs the suite in two passes, each with pytest-xdist (``-n``: one worker per
core): first every test not marked ``realtime``, then the ``realtime`` ones. Those time
real programs on real sockets (loopback or network namespaces: a loop's deadline misses,
who held the permit when); beside the first pass's CPU-bound simulator workers they
would see that CPU as load, which is not what they test, while two of them at once
mostly wait on their own sockets (the second pass took 3.3 min on 2 workers where the
whole realtime set took 5.7 min on one, all passing, on a quiet 2-core machine). This
module gives them the marker (tests/conftest.py installs its hook; a module of its own
because every folder's conftest is named ``conftest``).
"""

from __future__ import annotations

from pathlib import Path

import pytest

#: Folders (under tests/) whose tests all join the ``realtime`` pass, and files elsewhere
#: that time loopback sockets or real processes without the ``netns`` marker (which puts a
#: test in that pass wherever it is). Unit tests of the runtime (wire, fuzz, selectors,
#: rules) run in the parallel pass.
_REALTIME_DIRS = ("transport",)
_REALTIME_FILES = (
    "runtime/test_runtime_loopback.py",
    "runtime/test_runtime_members.py",
    "runtime/test_runtime_member_bounds.py",
    "runtime/test_runtime_lease.py",
    "runtime/test_runtime_faults.py",
    "runtime/test_runtime_cli.py",
    "runtime/test_fleet_loopback.py",
    "teambench/test_netns_run.py",
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
