"""The ``coorp`` command line.

Each sub-command lives in its own module that defines ``register(app)``; this module only
collects them and turns :class:`~coorp.CoorpError` into a one-paragraph message and exit
code 2 (usage/scenario errors) or 1 (anything else Coorp reports), never a traceback.
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
    "coorp.cli._runtime",
    "coorp.cli._watch",
    "coorp.cli._model",
    "coorp.cli._cosim",
    "coorp.cli._learn",
)


if TYPE_CHECKING:
    app: typer.Typer


def __getattr__(name: str) -> object:
    if name == "app":  # the whole command line, every command registered
        register(_app, COMMAND_MODULES, _loaded)
        return _app
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def version_text() -> str:
    """``coorp 0.1.0 (simulator, control, policy hooks: compiled (mypyc); ...)``: the
    package version and which hot modules run (mypyc-compiled, or plain Python and why;
    see ``coorp._accel``), decided without importing them."""
    from coorp import __version__
    from coorp._accel import describe

    hot = describe()
    py = sys.version.split()[0]
    return f"coorp {__version__} (simulator, control, policy hooks: {hot}; Python {py})"


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


def main(argv: list[str] | None = None) -> None:
    """Entry point of the ``coorp`` script."""
    args = sys.argv[1:] if argv is None else list(argv)
    try:
        register(_app, modules_for(args, COMMAND_MODULES), _loaded)
        _app(args=args, standalone_mode=True)
    except CoorpError as exc:
        typer.echo(f"error: {exc}", err=True)
        sys.exit(2 if isinstance(exc, UsageError) else 1)
