"""The command line loads only what a command uses (``coorp.cli._lazy``).

Speed itself is measured in ``benchmarks/`` (``coorp --version`` and ``--help`` take a
tenth of what they did); these tests pin the mechanism: which modules a command line
imports, and that the root help listed without importing the commands is the one typer
shows with every command loaded.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from coorp.cli import COMMAND_MODULES, _new_app
from coorp.cli._lazy import COMMANDS, command_table

#: Imported by every command module or by what they run, never by --version or --help.
HEAVY = ("numpy", "pydantic", "matplotlib", "pyarrow", "coorp.sim", "coorp.scenario")

_PROBE = """
import json, sys
sys.argv[0] = "coorp"
from coorp.cli import main
try:
    main(sys.argv[1:])
except SystemExit as exit:
    print(exit.code)
print(json.dumps(sorted(m for m in sys.modules if m.split(".")[0] in
      {"coorp", "numpy", "pydantic", "matplotlib", "pyarrow"})), file=sys.stderr)
"""


def _coorp(*args: str, code: str = _PROBE) -> tuple[str, list[str]]:
    """``coorp <args>`` in a fresh interpreter: (stdout, modules it imported)."""
    env = {**os.environ, "COLUMNS": "100", "TERM": "dumb"}
    env.pop("FORCE_COLOR", None)
    out = subprocess.run(
        [sys.executable, "-c", code, *args], env=env, capture_output=True, text=True, check=True
    )
    modules: list[str] = json.loads(out.stderr.strip().splitlines()[-1])
    return out.stdout, modules


def test_the_command_table_lists_what_the_modules_register() -> None:
    actual = command_table(_new_app, COMMAND_MODULES)
    assert actual == COMMANDS, (
        "coorp.cli._lazy.COMMANDS is out of date (a command was added, renamed or its "
        "help changed); replace it with:\n" + json.dumps(actual, indent=4)
    )


@pytest.mark.parametrize("args", [("--version",), ("--help",), ()])
def test_version_and_help_import_no_command(args: tuple[str, ...]) -> None:
    stdout, modules = _coorp(*args)
    assert stdout.startswith("coorp ") or "Usage" in stdout
    assert not [m for m in modules if m in COMMAND_MODULES]
    assert not [m for m in modules if m.split(".")[0] in HEAVY or m.startswith(HEAVY)]


def test_the_root_help_is_the_one_with_every_command_loaded() -> None:
    lazy, _ = _coorp("--help")
    full_code = _PROBE.replace("from coorp.cli import main", "from coorp.cli import app as main")
    full, full_modules = _coorp("--help", code=full_code)
    assert set(COMMAND_MODULES) <= set(full_modules)  # the reference loaded them all
    assert lazy == full
    for name in COMMANDS:
        assert f" {name} " in lazy


def test_a_command_imports_only_its_own_module() -> None:
    stdout, modules = _coorp("simulate", "--help")
    assert "Usage: coorp simulate" in stdout
    assert [m for m in modules if m in COMMAND_MODULES] == ["coorp.cli._simulate"]


def test_an_unknown_command_is_the_usual_error_with_suggestions() -> None:
    code = _PROBE.replace(
        "except SystemExit:\n    pass", "except SystemExit as e:\n    print(e.code)"
    )
    env = {**os.environ, "COLUMNS": "100", "TERM": "dumb"}
    out = subprocess.run(
        [sys.executable, "-c", code, "compar"], env=env, capture_output=True, text=True
    )
    assert out.stdout.strip() == "2"
    assert "No such command" in out.stderr and "compare" in out.stderr


def test_the_package_attribute_app_has_every_command() -> None:
    code = (
        "import typer; from coorp.cli import app; "
        "print(sorted(typer.main.get_command(app).commands))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert eval(out.stdout) == sorted(COMMANDS)


def test_the_table_names_existing_modules() -> None:
    root = Path(__file__).resolve().parents[2] / "src"
    for modules, _ in COMMANDS.values():
        for m in modules:
            assert m in COMMAND_MODULES
            path = root.joinpath(*m.split("."))
            assert path.with_suffix(".py").is_file() or (path / "__init__.py").is_file(), m
