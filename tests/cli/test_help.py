"""``--help`` of every command reads well at 80 columns (a new user's terminal).

Help is click's plain layout (``coorp.cli``): these tests pin what a rich option table
once did wrong there (defaults and option names cut with an ellipsis, sentences broken
by the docstrings' line ends, every flag shown as ``<bool>``, ``[workload]`` swallowed
as markup) and that each command's first docstring paragraph is a one-line summary.
"""

from __future__ import annotations

import re
import subprocess
import sys
from typing import Any

import pytest
import typer

from coorp.cli import app

WIDTH = 80


def _commands(cmd: Any, path: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], Any]]:
    """Every command and group under ``cmd``, as (argv, command)."""
    out = [(path, cmd)]
    for name, sub in sorted((getattr(cmd, "commands", None) or {}).items()):
        out += _commands(sub, (*path, name))
    return out


ROOT = typer.main.get_command(app)
COMMANDS = _commands(ROOT)


def _help(*argv: str, width: int = WIDTH) -> str:
    """``coorp ARGV --help`` as a user's terminal of ``width`` columns shows it."""
    env = {"COLUMNS": str(width), "TERM": "dumb", "PATH": "/usr/bin:/bin"}
    proc = subprocess.run(
        [sys.executable, "-c", "from coorp.cli import main; main()", *argv, "--help"],
        capture_output=True, text=True, env=env, timeout=60, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_the_walk_reaches_every_command() -> None:
    names = {" ".join(p) for p, _ in COMMANDS}
    assert {"simulate", "compare", "learn", "agent", "top", "doctor", "bench rl",
            "bench team", "bench broadcast"} <= names  # fmt: skip


@pytest.mark.parametrize("argv", [p for p, _ in COMMANDS], ids=lambda p: " ".join(p) or "coorp")
def test_help_fits_80_columns_and_cuts_nothing(argv: tuple[str, ...]) -> None:
    text = _help(*argv)
    assert text.startswith("Usage: ")
    too_long = [line for line in text.splitlines() if len(line) > WIDTH]
    assert too_long == []
    assert "…" not in text and "..." not in text.replace("[ARGS]...", "")
    # An option's metavar says what to give (LIST, SECONDS, FILE); a switch shows none.
    options = text.partition("\nOptions:\n")[2]
    assert not re.search(r"<(bool|str|int|float|path)>", options), options


def test_a_summary_is_one_line_and_listed_whole() -> None:
    for argv, cmd in COMMANDS:
        if not argv:
            continue
        first = (cmd.help or "").split("\n\n")[0]
        assert "\n" not in first.strip(), (argv, first)
        assert first.strip().endswith("."), (argv, first)
    listing = _help() + _help("bench")
    for argv, cmd in COMMANDS:
        if argv:
            summary = (cmd.help or "").split("\n\n")[0].strip()
            assert summary in listing, summary


def test_paragraphs_are_rewrapped_not_broken_at_the_source_lines() -> None:
    text = _help("agent", width=200)
    # The docstring breaks this sentence across source lines; the help does not.
    assert "With --transparent, unmodified programs' LS traffic is marked and observed" in text


@pytest.mark.parametrize(
    ("argv", "literal"),
    [(("simulate",), "[workload]"), (("simulate",), "[[flows]]"), (("compare",), "[workload]"),
     (("sweep",), "pip install 'coorp[ray]'"), (("agent",), "[transparent] selectors"),
     (("cosim",), "[cosim] section")],
)  # fmt: skip
def test_brackets_are_shown_as_written(argv: tuple[str, ...], literal: str) -> None:
    assert literal in " ".join(_help(*argv, width=200).split())


def test_choices_are_listed_and_checked() -> None:
    text = " ".join(_help("learn", width=200).split())
    assert "--sync <bsp|ssp|asp>" in text and "--physics <points|mujoco>" in text
    proc = subprocess.run(
        [sys.executable, "-c", "from coorp.cli import main; main()", "leader", "--config",
         "t.toml", "--log-level", "loud"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert proc.returncode == 2
    assert "'--log-level'" in proc.stderr and "'debug', 'info', 'warning', 'error'" in proc.stderr
