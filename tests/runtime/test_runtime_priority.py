"""The agent's CPU share (issue 34, item 4): the setting, what it does, what the host
allows."""

from __future__ import annotations

import multiprocessing
from pathlib import Path

import pytest

from coorp.runtime import (
    Scheduling,
    TeamFileError,
    apply_scheduling,
    load_team_config,
    parse_scheduling,
)
from coorp.runtime._priority import scheduling_check


@pytest.mark.parametrize(
    ("text", "expect"),
    [
        ("none", Scheduling("none")),
        ("nice:-10", Scheduling("nice", -10)),
        (" rr : 20 ", Scheduling("rr", 20)),
        ("fifo:1", Scheduling("fifo", 1)),
    ],
)
def test_scheduling_forms(text: str, expect: Scheduling) -> None:
    assert parse_scheduling(text) == expect


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("nice", "expected none, nice:N"),
        ("none:3", "expected none, nice:N"),
        ("nice:-21", "-20..19"),
        ("rr:0", "1..99"),
        ("idle:1", "expected none"),
    ],
)
def test_bad_scheduling_says_what_is_allowed(text: str, why: str) -> None:
    with pytest.raises(ValueError, match=why):
        parse_scheduling(text)


def test_the_team_file_names_a_bad_scheduling_and_weight(tmp_path: Path) -> None:
    path = tmp_path / "t.toml"
    path.write_text('[team]\nrobots = ["a"]\n[agent]\nscheduling = "nice:-40"\n')
    with pytest.raises(TeamFileError, match=r"agent\.scheduling"):
        load_team_config(path)
    path.write_text('[team]\nrobots = ["a"]\n[leader]\nmax_weight = 0\n')
    with pytest.raises(TeamFileError, match=r"leader\.max_weight"):
        load_team_config(path)
    path.write_text('[team]\nrobots = ["a"]\n')
    cfg = load_team_config(path)
    assert cfg.agent.scheduling == "nice:-10" and cfg.leader.max_weight == 8


def _apply_in_child(text: str, out: multiprocessing.Queue[str]) -> None:
    try:
        out.put(apply_scheduling(parse_scheduling(text)))
    except PermissionError as exc:
        out.put(f"refused: {exc}")


def test_a_nice_value_is_applied_or_refused_with_what_would_allow_it() -> None:
    # In a child process: the test runner keeps its own priority.
    out: multiprocessing.Queue[str] = multiprocessing.Queue()
    p = multiprocessing.Process(target=_apply_in_child, args=("nice:5", out))
    p.start()
    p.join(30)
    assert out.get(timeout=5) == "nice 5"  # raising a nice value is always allowed
    nice_ok, _, detail = scheduling_check()
    p = multiprocessing.Process(target=_apply_in_child, args=("nice:-5", out))
    p.start()
    p.join(30)
    got = out.get(timeout=5)
    if nice_ok:
        assert got == "nice -5"
    else:
        assert got.startswith("refused: ") and "CAP_SYS_NICE or RLIMIT_NICE" in got
    assert "RLIMIT_NICE" in detail and "RLIMIT_RTPRIO" in detail
