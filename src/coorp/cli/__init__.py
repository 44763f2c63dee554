"""The ``coorp`` command line.

Each sub-command lives in its own module that defines ``register(app)``; this module only
collects them and turns :class:`~coorp.CoorpError` into a one-paragraph message and exit
code 2 (usage/scenario errors) or 1 (anything else Coorp reports), never a traceback.
"""

from __future__ import annotations

import importlib
import sys

import typer

from coorp._errors import CoorpError, UsageError

__all__ = ["app", "main"]

app = typer.Typer(
    name="coorp",
    help="Coordinated preemption for robot teams sharing one WiFi channel.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

#: Modules that contribute commands; each defines ``register(app: typer.Typer) -> None``.
COMMAND_MODULES = (
    "coorp.cli._simulate",
    "coorp.cli._compare",
    "coorp.cli._sweep",
    "coorp.cli._bench",
    "coorp.cli._runtime",
    "coorp.cli._model",
)

for _name in COMMAND_MODULES:
    importlib.import_module(_name).register(app)


def main(argv: list[str] | None = None) -> None:
    """Entry point of the ``coorp`` script."""
    try:
        app(args=argv, standalone_mode=True)
    except CoorpError as exc:
        typer.echo(f"error: {exc}", err=True)
        sys.exit(2 if isinstance(exc, UsageError) else 1)
