"""Layering: coorp.policies may use coorp.control; coorp.control uses neither the
simulator nor the policies (it is shared with the real runtime)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import coorp.control
import coorp.policies

CONTROL = Path(coorp.control.__file__).parent
POLICIES = Path(coorp.policies.__file__).parent


def imported_modules(path: Path, package: str) -> set[str]:
    """Absolute names of every module ``path`` imports (relative imports resolved)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                mod = ".".join([*base, node.module] if node.module else base)
            else:
                mod = node.module or ""
            out.add(mod)
            out.update(f"{mod}.{alias.name}" for alias in node.names)
    return out


def under(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


def test_relative_imports_are_resolved(tmp_path: Path) -> None:
    p = tmp_path / "probe.py"
    p.write_text("from ..sim import engine\nfrom ._gate import Gate\nimport coorp.units\n")
    names = imported_modules(p, "coorp.control")
    assert "coorp.sim" in names and "coorp.control._gate" in names and "coorp.units" in names


@pytest.mark.parametrize("path", sorted(CONTROL.rglob("*.py")), ids=lambda p: p.name)
def test_control_imports_neither_sim_nor_policies(path: Path) -> None:
    for name in imported_modules(path, "coorp.control"):
        for above in ("coorp.sim", "coorp.policies", "coorp.workload", "coorp.runtime"):
            assert not under(name, above), f"coorp.control/{path.name} imports {name}"


def test_policies_build_on_control_and_not_on_layers_above() -> None:
    names: set[str] = set()
    for path in POLICIES.rglob("*.py"):
        mine = imported_modules(path, "coorp.policies")
        for above in ("coorp.workload", "coorp.cli", "coorp.runtime"):
            assert not any(under(n, above) for n in mine), f"{path.name} imports {above}"
        names |= mine
    assert any(under(n, "coorp.control") for n in names)
