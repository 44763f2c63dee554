"""The ``coorp`` command line.

Each sub-command lives in its own module that defines ``register(app)``; the options
several commands share are declared once in :mod:`coorp.cli._options`. This module
only collects the commands and turns :class:`~coorp.CoorpError` into a one-paragraph
message and exit code 2 (usage/scenario errors) or 1 (anything else Coorp reports), and
a file that cannot be written into one line naming it: never a traceback.

Help is click's plain layout (``rich_markup_mode=None``): it wraps at any width without
cutting defaults or option names, which rich's option tables did at 80 columns. Every
command's docstring starts with a one-line summary (what ``coorp --help`` lists).
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Annotated

import typer

from coorp._errors import CoorpError, UsageError
from coorp.cli._lazy import LazyGroup, modules_for, register

__all__ = ["app", "main", "version_text"]


def _new_app() -> typer.Typer:
    return typer.Typer(
        name="coorp",
        help="Coordinated preemption for robot teams sharing one WiFi channel.",
        no_args_is_help=True,
        add_completion=False,
        pretty_exceptions_enable=False,
        rich_markup_mode=None,
        cls=LazyGroup,
    )


# Commands are registered when a command line needs them (coorp.cli._lazy); ``app``
# (the attribute) has all of them.
_app = _new_app()
_loaded: set[str] = set()

#: Modules that contribute commands; each defines ``register(app: typer.Typer) -> None``.
COMMAND_MODULES = (
    "coorp.cli._simulate",
    "coorp.cli._compare",
    "coorp.cli._sweep",
    "coorp.cli._bench",
    "coorp.cli._runtime._daemons",
    "coorp.cli._runtime._watch",
    "coorp.cli._model",
    "coorp.cli._cosim",
    "coorp.cli._learn",
    "coorp.cli._emulate",
)


if TYPE_CHECKING:
    app: typer.Typer


def __getattr__(name: str) -> object:
    if name == "app":  # the whole command line, every command registered
        register(_app, COMMAND_MODULES, _loaded)
        return _app
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def version_text() -> str:
    """``coorp 0.1.0 (simulator, control, policy hooks, emulator: compiled (mypyc); ...)``: the
    package version and which hot modules run (mypyc-compiled, or plain Python and why;
    see ``coorp._accel``), decided without importing them."""
    from coorp import __version__
    from coorp._accel import describe

    hot = describe()
    py = sys.version.split()[0]
    return f"coorp {__version__} (simulator, control, policy hooks, emulator: {hot}; Python {py})"


def _print_version(value: bool) -> None:
    if value:
        typer.echo(version_text())
        raise typer.Exit()


@_app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option(
            "--version",
            help="Print the version and whether the compiled (mypyc) modules are in use.",
            callback=_print_version,
            is_eager=True,
        ),
    ] = False,
) -> None:
    """Coordinated preemption for robot teams sharing one WiFi channel."""


def _note_skipped_parquet() -> None:
    tables = sys.modules.get("coorp._tables")  # loaded only by a command that wrote tables
    note = None if tables is None else tables.parquet_note()
    if note is not None:
        typer.echo(f"note: {note}", err=True)


def main(argv: list[str] | None = None) -> None:
    """Entry point of the ``coorp`` script."""
    args = sys.argv[1:] if argv is None else list(argv)
    if not args:  # the help on stdout, exit 0 (click would print it as a usage error)
        args = ["--help"]
    try:
        register(_app, modules_for(args, COMMAND_MODULES), _loaded)
        _app(args=args, prog_name="coorp", standalone_mode=True)
    except SystemExit:
        _note_skipped_parquet()
        raise
    except CoorpError as exc:
        typer.echo(f"error: {exc}", err=True)
        sys.exit(2 if isinstance(exc, UsageError) else 1)
    except OSError as exc:
        # Output paths are checked before any work (coorp.cli._options); this is what
        # the system refused later (a full disk, a folder removed meanwhile).
        if exc.filename is None:
            raise
        typer.echo(f"error: {exc.filename}: {exc.strerror or exc}", err=True)
        sys.exit(1)
