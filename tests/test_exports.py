"""Public API hygiene: ``__all__`` is complete and every name in it exists."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from types import ModuleType

import pytest

#: The ground floor (coorp.stats, coorp.seeds, coorp.figures) and the plain-data core.
CORE = ["coorp", "coorp.stats", "coorp.seeds", "coorp.figures", "coorp.sim", "coorp.scenario"]
OPTIONAL = [
    "coorp.control", "coorp.runtime", "coorp.runtime.wire", "coorp.runtime.leader",
    "coorp.runtime.inbox", "coorp.runtime.robot", "coorp.runtime.transparent",
    "coorp.transport", "coorp.analysis",
    "coorp.policies", "coorp.workload", "coorp.testing", "coorp.sweep", "coorp.cosim",
    "coorp.flow", "coorp.learn", "coorp.report", "coorp.teambench", "coorp.bench",
    "coorp.emulate",
]  # fmt: skip


def _import(name: str, *, optional: bool) -> ModuleType:
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        if optional:
            pytest.skip(f"{name} is not importable here: {exc}")
        raise


def _all(module: ModuleType) -> list[str]:
    names = getattr(module, "__all__", None)
    if names is None:
        pytest.skip(f"{module.__name__} has no __all__ yet")
    return list(names)


def _defined_here(module: ModuleType) -> list[str]:
    """Public classes and functions in the package namespace that the package defines."""
    prefix = module.__name__
    out = []
    for name, value in vars(module).items():
        if name.startswith("_") or not (inspect.isclass(value) or inspect.isfunction(value)):
            continue
        owner = getattr(value, "__module__", "") or ""
        if owner == prefix or owner.startswith(prefix + "."):
            out.append(name)
    return out


@pytest.mark.parametrize(
    ("name", "optional"), [(n, False) for n in CORE] + [(n, True) for n in OPTIONAL]
)
def test_all_names_exist_and_public_definitions_are_exported(name: str, optional: bool) -> None:
    module = _import(name, optional=optional)
    exported = _all(module)
    assert len(exported) == len(set(exported)), f"duplicates in {name}.__all__"
    missing = [n for n in exported if not hasattr(module, n)]
    assert not missing, f"{name}.__all__ names missing attributes: {missing}"
    unexported = sorted(set(_defined_here(module)) - set(exported))
    assert not unexported, f"public names of {name} not in __all__: {unexported}"


@pytest.mark.parametrize(
    ("name", "optional"), [(n, False) for n in CORE] + [(n, True) for n in OPTIONAL]
)
def test_star_import_gives_exactly_all(name: str, optional: bool) -> None:
    module = _import(name, optional=optional)
    exported = _all(module)
    namespace: dict[str, object] = {}
    exec(f"from {name} import *", namespace)
    assert set(namespace) - {"__builtins__"} == set(exported)


def _submodules(package: str) -> list[str]:
    pkg = importlib.import_module(package)
    return [f"{package}.{m.name}" for m in pkgutil.iter_modules(pkg.__path__)]


@pytest.mark.parametrize(
    "name",
    ["coorp.phy", "coorp.units", *_submodules("coorp.sim"), *_submodules("coorp.scenario")],
)
def test_module_all_names_exist(name: str) -> None:
    module = importlib.import_module(name)
    exported = getattr(module, "__all__", [])
    missing = [n for n in exported if not hasattr(module, n)]
    assert not missing, f"{name}.__all__ names missing attributes: {missing}"


def test_version_is_exported() -> None:
    import coorp

    assert "__version__" in coorp.__all__
    assert isinstance(coorp.__version__, str) and coorp.__version__.count(".") >= 1
