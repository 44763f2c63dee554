"""Options several commands share, declared once: their flag, metavar, help and parser.

A command spells a shared option as ``name: SeedOption = None``. Where only the meaning
of an unset flag differs from command to command (``--seeds``, ``--policies``,
``--duration``), a factory takes that default's description:
``seeds: Annotated[str | None, seeds_opt("1")] = None``. Choices are enums (typer
lists them in ``--help`` and refuses anything else, naming the flag and the allowed
values). Output paths are checked here too, the same way everywhere:

* ``--out DIR`` is created (with its parents) when missing, after every other argument
  was checked; a path that exists and is not a directory, or that cannot be created or
  written, is refused naming the flag, the path and why.
* A file flag (``--json FILE``, ``--trace FILE``) needs its directory to exist, as
  shell redirection does: a typo never scatters directories, and the check runs before
  any work, so nothing computed is lost. A default path chosen by Coorp itself (under
  ``results/``) is created, and the command prints where it wrote.

This module imports only typer: the lazy command line (``coorp.cli._lazy``) loads it
with any command.
"""

from __future__ import annotations

import errno
import os
import tempfile
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import typer

from coorp._errors import UsageError

__all__ = [
    "ConfigOption",
    "ControlOption",
    "FormatOption",
    "JsonFileOption",
    "JsonFlagOption",
    "LeaderOption",
    "LogLevel",
    "LogLevelOption",
    "OutOption",
    "PolicyModuleOption",
    "QuietOption",
    "RobotOption",
    "ScenarioArg",
    "SeedOption",
    "check_out_dir",
    "check_out_file",
    "duration_opt",
    "ensure_out_dir",
    "parse_list",
    "parse_names",
    "policies_opt",
    "seeds_opt",
]


class LogLevel(StrEnum):
    """``--log-level`` of the daemons."""

    DEBUG = "debug"
    INFO = "info"
    WARNING = "warning"
    ERROR = "error"


# -- scenarios, seeds, policies, figures ------------------------------------------------------

#: The scenario argument: a file or a built-in name.
ScenarioArg = Annotated[
    str,
    typer.Argument(
        metavar="SCENARIO",
        help="A scenario TOML file, or a built-in name such as crl-5 (docs/scenarios.md).",
        show_default=False,
    ),
]

#: ``--seed N``: one run's RNG seed.
SeedOption = Annotated[
    int | None,
    typer.Option("--seed", metavar="N", help="RNG seed (default: the scenario's)."),
]


def seeds_opt(default: str) -> Any:
    """``--seeds 1-5``: several seeds, results as mean ± 95% CI over them; ``default``
    says what an unset flag means for this command."""
    return typer.Option(
        "--seeds",
        metavar="SEEDS",
        help=f"Seeds such as 1-5, 1,3,5 or 1-3,7; mean ± 95% CI over them (default: {default}).",
    )


def policies_opt(default: str) -> Any:
    """``--policies edca,coorp``: registered policy names (docs/policies.md)."""
    return typer.Option(
        "--policies",
        metavar="LIST",
        help=f"Policy names, comma-separated (default: {default}).",
    )


def duration_opt(what: str = "Simulated seconds", default: str = "the scenario's") -> Any:
    """``--duration SECONDS``."""
    return typer.Option("--duration", metavar="SECONDS", help=f"{what} (default: {default}).")


#: ``--policy-module FILE.py`` (repeatable): a file that registers policies.
PolicyModuleOption = Annotated[
    list[Path] | None,
    typer.Option(
        "--policy-module",
        metavar="FILE.py",
        help="A Python file registering your own policies with @register_policy "
        "(repeatable; docs/policies.md). Installed 'coorp.policies' entry points load too.",
    ),
]

#: ``--format png,pdf,svg``: the formats figures are written in.
FormatOption = Annotated[
    str,
    typer.Option(
        "--format", metavar="LIST", help="Figure formats, comma-separated: png, pdf, svg."
    ),
]

#: ``--quiet``: errors only.
QuietOption = Annotated[bool, typer.Option("--quiet", help="No table, no progress; only errors.")]

# -- outputs ----------------------------------------------------------------------------------

#: ``--out DIR``: where a command writes its results.
OutOption = Annotated[
    Path | None,
    typer.Option(
        "--out",
        metavar="DIR",
        help="Directory for the results: JSON, tables, figures, manifest (created if missing).",
    ),
]

#: ``--json FILE``: the results as one JSON file.
JsonFileOption = Annotated[
    Path | None,
    typer.Option(
        "--json",
        metavar="FILE",
        help="Also write the results as JSON to FILE (its folder must exist).",
    ),
]

#: ``--json`` as a switch: print JSON instead of a table (``coorp top``, ``coorp doctor``).
JsonFlagOption = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]

# -- the team (runtime commands) --------------------------------------------------------------

#: ``--config team.toml``: the team file.
ConfigOption = Annotated[
    Path,
    typer.Option("--config", "-c", metavar="TEAM.toml", help="The team file (docs/runtime.md)."),
]

#: ``--robot NAME``: this machine's robot of the team.
RobotOption = Annotated[
    str,
    typer.Option("--robot", "-r", metavar="NAME", help="This robot's name in team.robots."),
]

#: ``--leader HOST:PORT``: where the permit service is, instead of agent.leader.
LeaderOption = Annotated[
    str | None,
    typer.Option(
        "--leader", metavar="HOST:PORT", help="The leader's address (default: agent.leader)."
    ),
]

#: ``--control PATH``: the local socket of a running agent (``coorp send``).
ControlOption = Annotated[
    Path | None,
    typer.Option(
        "--control",
        metavar="PATH",
        help="The agent's control socket for `coorp send` (default: one per team and robot).",
    ),
]

#: ``--log-level``: what the daemons log.
LogLevelOption = Annotated[
    LogLevel, typer.Option("--log-level", case_sensitive=False, help="What to log.")
]


# -- parsers and checks -----------------------------------------------------------------------


def parse_names(text: str | None) -> list[str] | None:
    """``"a, b,"`` -> ``["a", "b"]``; ``None`` stays ``None``."""
    return None if text is None else [p.strip() for p in text.split(",") if p.strip()]


def parse_list(flag: str, text: str, kind: type[int] | type[float]) -> list[Any]:
    """``"1,2,4"`` -> numbers; :class:`UsageError` naming the flag and the bad item."""
    out: list[Any] = []
    for item in parse_names(text) or []:
        try:
            out.append(kind(item))
        except ValueError:
            what = "an integer" if kind is int else "a number"
            raise UsageError(f"{flag} {text!r}: {item!r} is not {what}") from None
    if not out:
        raise UsageError(f"{flag} {text!r}: give at least one value")
    return out


def _why_not_writable(folder: Path) -> str | None:
    """Why no file can be written in ``folder`` (which exists); ``None`` if one can. A
    probe file is created and removed: permission bits say nothing for root, and
    nothing about /proc or a read-only mount."""
    try:
        fd, name = tempfile.mkstemp(dir=folder, prefix=".coorp-probe-")
    except OSError as exc:
        return _explain(exc, folder)
    os.close(fd)
    os.unlink(name)
    return None


def _explain(exc: OSError, folder: Path) -> str:
    """Why ``folder`` (which exists) refused a new file, in words a user can act on (the
    kernel's own message for an existing folder that takes no files, ENOENT on /proc or
    /sys, reads "No such file or directory")."""
    if exc.errno == errno.ENOENT:
        return "it takes no new files or folders: a virtual file system such as /proc or /sys"
    if exc.errno == errno.EROFS:
        return "a read-only file system"
    if exc.errno in (errno.EACCES, errno.EPERM):
        return "permission denied"
    return exc.strerror or str(exc)


def _nearest_existing(path: Path) -> Path:
    probe = path
    while not probe.exists() and probe.parent != probe:
        probe = probe.parent
    return probe


def check_out_dir(path: Path, flag: str = "--out") -> Path:
    """Refuse an output directory that cannot be used, before any work; nothing is
    created (:func:`ensure_out_dir` does that once every argument was checked)."""
    if path.exists() and not path.is_dir():
        raise UsageError(f"{flag} {path} exists and is not a directory")
    base = _nearest_existing(path)
    if not base.is_dir():
        raise UsageError(f"{flag} {path}: {base} is not a directory")
    why = _why_not_writable(base)
    if why is not None:
        what = f"cannot write in {base}" if base == path else f"cannot create it in {base}"
        raise UsageError(
            f"{flag} {path}: {what} ({why}); choose a folder on a writable disk, e.g. results/"
        )
    return path


def ensure_out_dir(path: Path, flag: str = "--out") -> Path:
    """:func:`check_out_dir`, then create the directory (and its parents)."""
    check_out_dir(path, flag)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        reason = _explain(exc, _nearest_existing(path))
        raise UsageError(f"{flag} {path}: cannot create the directory ({reason})") from None
    why = _why_not_writable(path)
    if why is not None:
        raise UsageError(f"{flag} {path}: cannot write there ({why})")
    return path


def check_out_file(
    path: Path, flag: str, *, create_dir: bool = False, made: Path | None = None
) -> Path:
    """Refuse an output file whose folder is missing or not writable (or that is a
    directory), before any work. With ``create_dir`` (a default path Coorp chose) the
    folder is created instead; ``made`` is a directory the command creates (its --out):
    a file in it or in one of its parents is fine (``--out results/x --json
    results/x.json``), as that folder will exist before anything is written."""
    if path.is_dir():
        raise UsageError(f"{flag} {path} is a directory; give a file name")
    parent = path.parent
    if create_dir:
        ensure_out_dir(parent, flag)
        return path
    if made is not None and not parent.is_dir():
        target = made.resolve()
        if parent.resolve() in (target, *target.parents):
            return path
    if not parent.is_dir():
        what = "is not a directory" if parent.exists() else "does not exist"
        raise UsageError(
            f"{flag} {path}: the folder {parent} {what}; create it first (mkdir -p {parent}) "
            "or give a file in an existing folder"
        )
    why = _why_not_writable(parent)
    if why is not None:
        raise UsageError(f"{flag} {path}: cannot write in {parent} ({why})")
    return path
