"""Pieces every command shares: progress bars, output directories, option parsing.

Options several commands take are defined once here as ``Annotated`` types
(:data:`PolicyModuleOption`, :data:`FormatOption`) with the function that applies them
(:func:`load_policy_options`, :func:`figure_formats`), so every command spells and
checks them the same way.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from coorp._errors import UsageError
from coorp.scenario import Scenario, load_scenario, resolve_scenario

__all__ = [
    "FormatOption",
    "PolicyModuleOption",
    "console",
    "duration_ns_option",
    "figure_formats",
    "load_policy_options",
    "load_scenario_arg",
    "progress_bar",
    "require_out_dir",
]

#: ``--policy-module FILE.py`` (repeatable): a file that registers policies.
PolicyModuleOption = Annotated[
    list[Path] | None,
    typer.Option(
        "--policy-module",
        help="A Python file registering your own policies with @register_policy "
        "(repeatable; see docs/policies.md). Installed 'coorp.policies' entry points "
        "load too.",
        metavar="FILE.py",
    ),
]

#: ``--format png,pdf,svg``: the formats figures are written in.
FormatOption = Annotated[
    str,
    typer.Option("--format", help="Figure formats, comma-separated: png, pdf, svg."),
]

# Wide enough for result tables when output goes to a file or pipe (rich defaults to 80).
console = Console(highlight=False, width=None if sys.stdout.isatty() else 160)


@contextmanager
def progress_bar(label: str, total_ns: int) -> Iterator[Callable[[int], None] | None]:
    """A progress bar in simulated time when stdout is a terminal; ``None`` otherwise."""
    if not sys.stdout.isatty():
        yield None
        return
    with Progress(
        TextColumn("[bold]{task.description}"), BarColumn(),
        TextColumn("{task.fields[sim]:.2f} s simulated"), TimeElapsedColumn(),
        TimeRemainingColumn(), console=console, transient=True,
    ) as progress:  # fmt: skip
        task = progress.add_task(label, total=total_ns, sim=0.0)

        def update(t_ns: int) -> None:
            progress.update(task, completed=t_ns, sim=t_ns / 1e9)

        yield update


def duration_ns_option(duration_s: float | None) -> int | None:
    if duration_s is None:
        return None
    if not duration_s > 0:
        raise UsageError(f"--duration must be > 0 seconds, got {duration_s}")
    return round(duration_s * 1e9)


def require_out_dir(path: Path) -> Path:
    if path.exists() and not path.is_dir():
        raise UsageError(f"--out {path} exists and is not a directory")
    path.mkdir(parents=True, exist_ok=True)
    return path


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
