"""Pieces every command shares: consoles, progress, option values.

The options themselves are declared in :mod:`coorp.cli._options`; this module holds
what applying them needs (scenarios, policies, figure formats) and the progress shown
while a long command runs: a rich bar on a terminal, nothing otherwise.
"""

from __future__ import annotations

import os
import resource
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from coorp._errors import UsageError
from coorp.scenario import Scenario, load_scenario, resolve_scenario

__all__ = [
    "console",
    "cpu_seconds",
    "duration_ns_option",
    "figure_formats",
    "load_average",
    "load_policy_options",
    "load_scenario_arg",
    "progress_bar",
    "step_progress",
    "wall_note",
]

# Wide enough for result tables when output goes to a file or pipe (rich defaults to 80).
console = Console(highlight=False, width=None if sys.stdout.isatty() else 160)


@contextmanager
def progress_bar(label: str, total_ns: int) -> Iterator[Callable[[int], None] | None]:
    """A progress bar in simulated time on stderr when it is a terminal; ``None``
    otherwise."""
    err = Console(stderr=True, highlight=False)
    if not err.is_terminal:
        yield None
        return
    with Progress(
        TextColumn("[bold]{task.description}"), BarColumn(),
        TextColumn("{task.fields[sim]:.2f} s simulated"), TimeElapsedColumn(),
        TimeRemainingColumn(), console=err, transient=True,
    ) as progress:  # fmt: skip
        task = progress.add_task(label, total=total_ns, sim=0.0)

        def update(t_ns: int) -> None:
            progress.update(task, completed=t_ns, sim=t_ns / 1e9)

        yield update


@contextmanager
def step_progress(label: str, total: int | None = None) -> Iterator[Callable[[str], None]]:
    """Progress of a command made of steps (runs, benchmark phases), on stderr when it is
    a terminal, nothing otherwise (a pipe or a log file gets only the results).

    Yields ``step(what)``: call it as each step starts; the bar counts the steps before
    it as done and shows ``what``, the elapsed time and, with a ``total``, the ETA."""
    err = Console(stderr=True, highlight=False)
    if not err.is_terminal:
        yield lambda what: None
        return
    columns = [SpinnerColumn(), TextColumn(f"[bold]{label}"), BarColumn()]
    if total is not None:
        columns += [MofNCompleteColumn(), TimeElapsedColumn(), TextColumn("ETA"),
                    TimeRemainingColumn()]  # fmt: skip
    else:
        columns += [TextColumn("step {task.completed:.0f}"), TimeElapsedColumn()]
    columns.append(TextColumn("{task.fields[what]}"))
    with Progress(*columns, console=err, transient=True) as progress:
        task = progress.add_task(label, total=total, what="")
        started = 0

        def step(what: str) -> None:
            nonlocal started
            progress.update(task, completed=started, what=what)
            started += 1

        yield step


def load_average() -> float:
    """The 1-minute load average (0 where the platform has none)."""
    try:
        return os.getloadavg()[0]
    except OSError:
        return 0.0


def wall_note(wall_s: float, load_before: float) -> str:
    """``41.2 s wall (63.0 s CPU) on 2 cores, 1-min load 3.1 -> 3.8``: a time and what it
    ran on. On a shared machine the load moves the wall time several-fold; the CPU time
    (this process and its finished worker processes, imports included) moves far less,
    so it is what a user can expect to pay."""
    return (
        f"{wall_s:.1f} s wall ({cpu_seconds():.1f} s CPU) on {os.cpu_count()} cores, "
        f"1-min load {load_before:.1f} -> {load_average():.1f}"
    )


def cpu_seconds() -> float:
    """User + system CPU seconds of this process and of its children that ended."""
    own, kids = (
        resource.getrusage(resource.RUSAGE_SELF),
        resource.getrusage(resource.RUSAGE_CHILDREN),
    )
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def duration_ns_option(duration_s: float | None) -> int | None:
    if duration_s is None:
        return None
    if not duration_s > 0:
        raise UsageError(f"--duration must be > 0 seconds, got {duration_s}")
    return round(duration_s * 1e9)


def load_policy_options(modules: list[Path] | None) -> list[str]:
    """Load installed ``coorp.policies`` entry points and each ``--policy-module`` file;
    return the names the files registered (:class:`UsageError` on a bad file)."""
    from coorp.policies import load_entry_point_policies, load_policy_module

    load_entry_point_policies()
    names: list[str] = []
    for m in modules or []:
        names += load_policy_module(m)
    return names


def figure_formats(value: str) -> tuple[str, ...]:
    """Parse ``--format`` (``png,pdf``); :class:`UsageError` names what is allowed."""
    from coorp.figures import parse_formats

    return parse_formats(value)


def load_scenario_arg(name_or_path: str | Path) -> tuple[Path, Scenario]:
    """A scenario argument: a file, or a built-in name from any directory (``crl-10``)."""
    path = resolve_scenario(name_or_path)
    return path, load_scenario(path)
