"""Pieces every command shares: progress bars, output directories, option parsing."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from coorp._errors import UsageError

__all__ = ["console", "duration_ns_option", "progress_bar", "require_out_dir"]

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
