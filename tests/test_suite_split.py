"""`make test`'s two passes: which tests run alone (tests/suite_split.py), and the Makefile."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from suite_split import pytest_collection_modifyitems, realtime

TESTS = Path(__file__).parent


def test_socket_timing_tests_run_alone_and_simulator_tests_in_parallel() -> None:
    assert not realtime(TESTS / "emulate" / "test_air.py")
    assert realtime(TESTS / "runtime" / "test_runtime_loopback.py")
    assert not realtime(TESTS / "runtime" / "test_runtime_wire.py")
    assert realtime(TESTS / "learn" / "test_team_learn.py")
    assert not realtime(TESTS / "learn" / "test_ppo_flow.py")
    assert not realtime(TESTS / "sim" / "test_determinism.py")
    assert not realtime(Path("/elsewhere/runtime/test_x.py"))


class _Item:
    """What the hook reads and writes of a collected test."""

    def __init__(self, path: Path, *, netns: bool = False) -> None:
        self.path = path
        self.markers = ["netns"] if netns else []

    def get_closest_marker(self, name: str) -> object | None:
        return name if name in self.markers else None

    def add_marker(self, marker: pytest.MarkDecorator) -> None:
        self.markers.append(marker.name)


def test_the_hook_marks_socket_timing_tests_and_netns_tests_anywhere() -> None:
    items = [
        _Item(TESTS / "runtime" / "test_runtime_members.py"),
        _Item(TESTS / "test_phy.py"),
        _Item(TESTS / "sim" / "test_somewhere.py", netns=True),
    ]
    pytest_collection_modifyitems(items)  # type: ignore[arg-type]
    assert ["realtime" in item.markers for item in items] == [True, False, True]


def test_make_test_runs_both_passes() -> None:
    make = (TESTS.parent / "Makefile").read_text()
    recipe = re.search(r"^test:.*?(?=^\S|\Z)", make, re.S | re.M)
    assert recipe is not None
    assert "-n $(JOBS) -m 'not realtime'" in recipe.group(0)
    assert "-m realtime" in recipe.group(0)
