"""Load only the command modules a command line uses.

Each command module imports what its commands need (the simulator, pydantic models,
matplotlib, ...): about a second before anything runs. ``coorp <command>`` imports
the modules that define ``<command>`` only; ``coorp --version``, ``coorp --help`` and
``coorp`` alone import none of them: the root help lists every command from
:data:`COMMANDS`, the name and one-line summary of each (the first paragraph of its
help, what the root help shows), without importing it.

:data:`COMMANDS` must list what the modules register; ``tests/cli/test_lazy_cli.py``
checks it against the modules (and prints the table to paste when a command changed).
A module of ``COMMAND_MODULES`` that the table does not mention is simply imported for
the root help too (slower, never wrong); an unknown command name imports every module,
so typer's error and suggestions are the usual ones.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable, Sequence
from typing import Any

import typer
from typer.core import TyperCommand, TyperGroup

from coorp._errors import UsageError

__all__ = ["COMMANDS", "LazyGroup", "command_table", "modules_for", "register"]

#: Every command in the order ``coorp --help`` lists it: name -> (the modules that
#: register it, in load order; its one-line summary). Keep in step with the modules
#: (the test says how).
COMMANDS: dict[str, tuple[tuple[str, ...], str]] = {
    "simulate": (("coorp.cli._simulate",), "Simulate one scenario and print its results."),
    "schema": (("coorp.cli._simulate",), "Print the JSON Schema of scenario files."),
    "compare": (
        ("coorp.cli._compare",),
        "Run every policy on one scenario; compare control and learning.",
    ),
    "sweep": (
        ("coorp.cli._sweep",),
        "Run scenarios × policies × seeds × overrides; mean and 95% CI.",
    ),
    "plot": (("coorp.cli._sweep",), "Draw a saved sweep's figures again, without simulating."),
    "leader": (
        ("coorp.cli._runtime._daemons",),
        "Run the team's permit service (the global controller).",
    ),
    "agent": (
        ("coorp.cli._runtime._daemons",),
        "Join a team as one robot: receive, send, generate LS traffic.",
    ),
    "keys": (("coorp.cli._runtime._daemons",), "Write the team key and one key per robot."),
    "send": (("coorp.cli._runtime._daemons",), "Send a file through this robot's running agent."),
    "top": (("coorp.cli._runtime._watch",), "Watch a running team live, from its leader."),
    "doctor": (
        ("coorp.cli._runtime._watch",),
        "Check what this host does to LS packets, and how to fix it.",
    ),
    "model": (
        ("coorp.cli._model",),
        "The paper's analytical model: reaction, misses, bandwidth vs N.",
    ),
    "cosim": (
        ("coorp.cli._cosim",),
        "Co-simulate moving robots (MuJoCo) and the channel, per policy.",
    ),
    "learn": (
        ("coorp.cli._learn",),
        "Real PPO over the team's network; reward vs time per policy.",
    ),
    "bench": (("coorp.cli._bench",), "Benchmarks: Coorp's transport, team capacity, flow vs Ray."),
    "emulate": (
        ("coorp.cli._emulate",),
        "Real programs on the simulated WiFi channel, in real time.",
    ),
}


def register(app: typer.Typer, modules: Iterable[str], done: set[str]) -> None:
    """Import each module of ``modules`` not in ``done`` and let it register its
    commands on ``app`` (``module.register(app)``); record it in ``done``."""
    for name in modules:
        if name not in done:
            done.add(name)
            importlib.import_module(name).register(app)


def modules_for(args: Sequence[str], command_modules: Sequence[str]) -> list[str]:
    """The command modules a command line needs, in ``command_modules`` order."""
    name = next((a for a in args if not a.startswith("-")), None)
    if name is None:  # --help, --version, nothing: the root help lists every command
        covered = {m for mods, _ in COMMANDS.values() for m in mods}
        return [m for m in command_modules if m not in covered]
    entry = COMMANDS.get(name)
    if entry is None:
        return list(command_modules)
    return [m for m in command_modules if m in entry[0]]


class LazyGroup(TyperGroup):
    """The root command: commands not loaded are listed from :data:`COMMANDS`."""

    def list_commands(self, ctx: Any) -> list[str]:
        loaded = super().list_commands(ctx)
        listed = [n for n in COMMANDS if n in loaded or n not in self.commands]
        return listed + [n for n in loaded if n not in COMMANDS]

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        command = super().get_command(ctx, cmd_name)
        if command is None and cmd_name in COMMANDS:
            return _Unloaded(cmd_name, COMMANDS[cmd_name][1])
        return command


class _Unloaded(TyperCommand):
    """A command listed for help only (``coorp.cli.main`` loads a command before it
    runs it; this stands in only where nothing runs)."""

    def __init__(self, name: str, help_text: str) -> None:
        super().__init__(name, help=help_text, callback=self._refuse)

    def _refuse(self, *args: Any, **kwargs: Any) -> None:
        raise UsageError(f"command {self.name!r} was not loaded (run it through `coorp`)")


def command_table(app_factory: Any, command_modules: Sequence[str]) -> dict[str, Any]:
    """What the modules register, as :data:`COMMANDS` has it: the modules are loaded in
    turn into a fresh app built by ``app_factory()``; a module owns a command it adds,
    or a group it adds commands to; the help texts are typer's."""
    app = app_factory()
    done: set[str] = set()
    owners: dict[str, list[str]] = {}
    before: dict[str, object] = {}
    for module in command_modules:
        register(app, [module], done)
        now = _snapshot(app)
        for name, shape in now.items():
            if before.get(name, _NOTHING) != shape:
                owners.setdefault(name, []).append(module)
        before = now
    group: Any = typer.main.get_command(app)
    ctx = group.context_class(group)
    table: dict[str, Any] = {}
    for name in group.list_commands(ctx):
        cmd = group.get_command(ctx, name)
        if cmd is None or cmd.hidden or isinstance(cmd, _Unloaded):
            continue
        table[name] = (tuple(owners[name]), summary(cmd.short_help or cmd.help or ""))
    return table


def summary(help_text: str) -> str:
    """The first paragraph of a help text on one line: what the root help lists."""
    import inspect

    first = inspect.cleandoc(help_text).split("\n\n")[0]
    return " ".join(first.split())


_NOTHING = object()


def _snapshot(app: typer.Typer) -> dict[str, object]:
    """Each command of ``app`` and, for a group, its sub-commands."""
    group: Any = typer.main.get_command(app)
    ctx = group.context_class(group)
    out: dict[str, object] = {}
    for name in group.list_commands(ctx):
        cmd = group.get_command(ctx, name)
        if cmd is None or isinstance(cmd, _Unloaded):
            continue
        subs = getattr(cmd, "list_commands", None)
        out[name] = tuple(subs(ctx)) if subs is not None else None
    return out
