"""coorp.control must stay pure: no clocks, sockets, threads, randomness or I/O."""

from __future__ import annotations

import ast
import pkgutil
from pathlib import Path

import pytest

import coorp.control

FORBIDDEN_MODULES = {
    "asyncio",
    "datetime",
    "os",
    "random",
    "select",
    "selectors",
    "socket",
    "subprocess",
    "threading",
    "time",
}
FORBIDDEN_CALLS = {"open", "print", "input", "exec", "eval", "__import__"}

PACKAGE_DIR = Path(coorp.control.__file__).parent
MODULES = sorted(PACKAGE_DIR.rglob("*.py"))


def test_the_scan_sees_every_module() -> None:
    names = {m.name for m in pkgutil.iter_modules([str(PACKAGE_DIR)])}
    assert names <= {p.stem for p in MODULES}
    assert len(MODULES) >= 8


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.name)
def test_module_imports_nothing_impure(path: Path) -> None:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            roots = {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            roots = {(node.module or "").split(".")[0]}
            if node.module == "numpy":
                roots |= {alias.name for alias in node.names}  # from numpy import random
        else:
            continue
        assert not roots & FORBIDDEN_MODULES, f"{path.name}:{node.lineno} imports {roots}"


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.name)
def test_module_calls_no_io_builtins(path: Path) -> None:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            assert node.func.id not in FORBIDDEN_CALLS, f"{path.name}:{node.lineno}"
        if isinstance(node, ast.Attribute) and node.attr == "random":
            raise AssertionError(f"{path.name}:{node.lineno} uses .random")


def test_public_api_is_curated() -> None:
    exported = set(coorp.control.__all__)
    assert len(exported) == len(coorp.control.__all__)
    for name in exported:
        obj = getattr(coorp.control, name)
        assert getattr(obj, "__module__", "coorp.control").startswith("coorp.control")
    public_modules = [m.name for m in pkgutil.iter_modules([str(PACKAGE_DIR)])]
    assert all(name.startswith("_") for name in public_modules)
