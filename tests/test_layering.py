"""Layers import downward only, and only through another package's public modules.

The order is DESIGN.md's "Layers" (and README's "Layout" line), read from the code's own
imports with :mod:`ast` — every ``import`` and ``from ... import`` of ``src/coorp``,
lazy ones inside functions and ``TYPE_CHECKING`` ones included:

* a package imports only packages on floors below its own (peers on one floor do not
  import each other; where DESIGN.md puts two packages on one floor and one builds on
  the other, they are two floors here, in DESIGN.md's order);
* a private module (a name part starting with ``_`` inside a package, like
  ``coorp.report._plots``) is imported only from inside its own package. The ground
  floor's modules (``coorp._errors``, ``coorp.stats``, ...) belong to ``coorp`` itself,
  so every package may use them.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

import coorp

SRC = Path(coorp.__file__).parent

#: Top to bottom. Each tuple is one floor; a package may import the floors below it.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("cli",),
    ("bench",),
    ("sweep",),
    ("report",),
    ("cosim", "emulate", "learn", "teambench", "analysis", "testing"),
    ("workload",),
    ("policies",),
    ("sim", "runtime", "flow"),
    ("control", "transport"),
    ("scenario",),
    ("phy", "units"),
    # The ground floor: errors, statistics, seed parsing, figure style, manifests,
    # tables, namespaces, optional dependencies, the compiled build (and the ``coorp``
    # package itself).
    ("coorp", "_errors", "_manifest", "_tables", "_netns", "_optional", "_accel", "stats",
     "seeds", "figures"),
)  # fmt: skip
FLOOR = {pkg: i for i, floor in enumerate(LAYERS) for pkg in floor}


@dataclass(frozen=True)
class Import:
    source: str  # the importing module, ``coorp.sweep._plots``
    target: str  # the imported module, ``coorp.report._compare``
    line: int

    @property
    def where(self) -> str:
        return f"{self.source}:{self.line} imports {self.target}"


def module_name(path: Path, src: Path = SRC) -> str:
    parts = list(path.relative_to(src.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_module(name: str, src: Path) -> bool:
    p = src.parent.joinpath(*name.split("."))
    return p.with_suffix(".py").exists() or (p / "__init__.py").exists()


def imports_of(path: Path, src: Path = SRC) -> list[Import]:
    """Every ``coorp`` module ``path`` imports (relative imports resolved; ``from m import
    x`` counts ``m.x`` when ``x`` is a module, else ``m``)."""
    source = module_name(path, src)
    package = source if path.name == "__init__.py" else source.rpartition(".")[0]
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    out: list[Import] = []
    for node in ast.walk(tree):
        names: set[str] = set()
        if isinstance(node, ast.Import):
            names = {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                mod = ".".join([*base, node.module] if node.module else base)
            else:
                mod = node.module or ""
            for alias in node.names:
                sub = f"{mod}.{alias.name}"
                names.add(sub if _is_module(sub, src) else mod)
        out += [Import(source, n, node.lineno) for n in sorted(names) if n.split(".")[0] == "coorp"]
    return out


def owner(module: str) -> str:
    """The package a module belongs to: ``coorp.sim.mac`` -> ``sim``, ``coorp.stats`` ->
    ``stats``, ``coorp`` -> ``coorp``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "coorp"


def private_to(module: str) -> str | None:
    """The package a private module is private to (``None``: a public module).
    ``coorp.report._plots`` -> ``coorp.report``; ``coorp._errors`` -> ``coorp``."""
    parts = module.split(".")
    for i in range(1, len(parts)):
        if parts[i].startswith("_") and not parts[i].startswith("__"):
            return ".".join(parts[:i])
    return None


GROUND = len(LAYERS) - 1

#: Inside a package with wings (sub-packages by role), top to bottom, the same rule one
#: level down: a wing imports only wings on floors below its own. A wing is a
#: sub-package or one of the package's own modules (``_config``); the package's
#: ``__init__`` is its front door and may use every wing.
WINGS: dict[str, tuple[tuple[str, ...], ...]] = {
    "runtime": (
        ("transparent",),
        ("robot",),
        ("leader", "inbox"),
        ("_config",),  # the team file
        ("_selectors", "_fleet"),  # its [transparent] and [fleet] sections
        ("wire",),
        ("_errors", "_counters", "_priority"),
    ),
}


def wing(module: str) -> str | None:
    """``coorp.runtime.robot._bulk`` -> ``robot``; the package itself -> None."""
    parts = module.split(".")
    return parts[2] if len(parts) > 2 else None


def upward_in_wings(imp: Import) -> bool:
    """Whether ``imp`` runs between two wings of one package to the same floor or up."""
    pkg = owner(imp.source)
    if pkg not in WINGS or owner(imp.target) != pkg:
        return False
    src, dst = wing(imp.source), wing(imp.target)
    if src is None or dst is None or src == dst:
        return False
    floor = {w: i for i, f in enumerate(WINGS[pkg]) for w in f}
    return floor[dst] <= floor[src]


def upward(imp: Import) -> bool:
    """Whether ``imp`` goes to the same floor or above (modules of the ground floor may
    use each other: they all belong to the ``coorp`` package itself)."""
    src, dst = owner(imp.source), owner(imp.target)
    return src != dst and FLOOR[dst] <= FLOOR[src] and FLOOR[src] != GROUND


def private_breach(imp: Import) -> bool:
    home = private_to(imp.target)
    return home is not None and not (imp.source == home or imp.source.startswith(home + "."))


def all_imports(src: Path = SRC) -> list[Import]:
    return [i for p in sorted(src.rglob("*.py")) for i in imports_of(p, src)]


IMPORTS = all_imports()


def test_the_scan_sees_the_code() -> None:
    assert len(IMPORTS) > 500
    assert any(i.target == "coorp.control" for i in IMPORTS if owner(i.source) == "policies")


def test_every_package_and_top_level_module_has_a_floor() -> None:
    found = {
        p.stem if p.is_file() else p.name
        for p in SRC.iterdir()
        if (p.suffix == ".py" and p.name != "__init__.py") or (p / "__init__.py").exists()
    }
    assert found - set(FLOOR) == set(), "give these a floor in LAYERS (and README, DESIGN.md)"
    assert set(FLOOR) - found - {"coorp"} == set(), "LAYERS names what src/coorp lacks"


def test_no_upward_or_sideways_imports() -> None:
    bad = [
        f"{i.where} ({owner(i.source)} is on floor {FLOOR[owner(i.source)]}, "
        f"{owner(i.target)} on {FLOOR[owner(i.target)]})"
        for i in IMPORTS
        if upward(i)
    ]
    assert bad == []


def test_every_wing_has_a_floor() -> None:
    for pkg, floors in WINGS.items():
        found = {p.stem if p.is_file() else p.name for p in (SRC / pkg).iterdir()
                 if p.suffix == ".py" or (p / "__init__.py").exists()} - {"__init__"}  # fmt: skip
        named = {w for f in floors for w in f}
        assert found == named, f"{pkg}: give these a wing floor: {found ^ named}"


def test_no_upward_imports_between_wings() -> None:
    assert [i.where for i in IMPORTS if upward_in_wings(i)] == []


def test_no_imports_of_another_packages_private_modules() -> None:
    bad = [i.where for i in IMPORTS if private_breach(i)]
    assert bad == []


def test_readme_states_the_same_order() -> None:
    readme = (SRC.parents[1] / "README.md").read_text(encoding="utf-8")
    line = next(ln for ln in readme.split("\n\n") if "layers depend downward only" in ln)
    floors = [f.strip() for f in " ".join(line.split()).split("→")]
    # The last floor is described in words; every named package must be on the same floor.
    for floor, packages in zip(floors, LAYERS[:-1], strict=False):
        for pkg in packages:
            assert f"`{pkg}`" in floor, f"README's layering line: {pkg} belongs on {floor!r}"
    assert len(floors) == len(LAYERS), floors


# -- the rules themselves, on a tree made for them ----------------------------------------


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    files = {
        "__init__.py": "",
        "_errors.py": "",
        "stats.py": "",
        "sim/__init__.py": "from ._mac import Channel\n",
        "sim/_mac.py": "from coorp import _errors\nfrom ..stats import mean_ci\n",
        "sim/engine.py": "from coorp.workload import run\n",
        "workload/__init__.py": "from coorp.sim._mac import Channel\nimport coorp.sim\n",
        "control/__init__.py": "def f():\n    from coorp.sim import engine\n",
    }
    for name, text in files.items():
        (tmp_path / "coorp" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "coorp" / name).write_text(text)
    return tmp_path / "coorp"


def test_imports_are_resolved(tree: Path) -> None:
    got = {(i.source, i.target) for i in all_imports(tree)}
    assert got == {
        ("coorp.sim", "coorp.sim._mac"),
        ("coorp.sim._mac", "coorp._errors"),
        ("coorp.sim._mac", "coorp.stats"),
        ("coorp.sim.engine", "coorp.workload"),
        ("coorp.workload", "coorp.sim._mac"),
        ("coorp.workload", "coorp.sim"),
        ("coorp.control", "coorp.sim.engine"),
    }


def test_the_rules_catch_what_they_forbid(tree: Path) -> None:
    imps = all_imports(tree)
    assert sorted(i.where for i in imps if upward(i)) == [
        "coorp.control:2 imports coorp.sim.engine",  # lazy, inside a function
        "coorp.sim.engine:1 imports coorp.workload",
    ]
    assert [i.where for i in imps if private_breach(i)] == [
        "coorp.workload:1 imports coorp.sim._mac"
    ]


def test_the_wing_rule_catches_what_it_forbids() -> None:
    def imp(src: str, dst: str) -> Import:
        return Import(src, dst, 1)

    assert upward_in_wings(imp("coorp.runtime.wire._framing", "coorp.runtime.robot"))
    assert upward_in_wings(imp("coorp.runtime.leader._service", "coorp.runtime.inbox"))  # peers
    assert not upward_in_wings(imp("coorp.runtime.robot._bulk", "coorp.runtime.wire"))
    assert not upward_in_wings(imp("coorp.runtime.robot._bulk", "coorp.runtime.robot._pacing"))
    assert not upward_in_wings(imp("coorp.runtime", "coorp.runtime.transparent"))  # the door
    assert not upward_in_wings(imp("coorp.sim.mac", "coorp.sim.station"))  # no wings there


# -- import circles -----------------------------------------------------------------------

#: The circles kept on purpose; each module of one says so in its docstring.
KEPT_CIRCLES = {
    frozenset(
        {
            "coorp.sim._ungated",
            "coorp.sim.mac",
            "coorp.sim.packets",
            "coorp.sim.station",
            "coorp.sim.tcp",
            "coorp.sim.congestion",
            "coorp.sim.sack",
            "coorp.sim._txq",
        }
    ),
}
CIRCLE_NOTE = "import circle kept on purpose"


def circles(imports: list[Import]) -> list[frozenset[str]]:
    """The strongly connected components (of two modules or more) of the module graph;
    an import of a package's ``__init__`` (its front door) is not an edge."""
    packages = {i.source for i in imports} | {i.target for i in imports}
    doors = {m for m in packages if (SRC.parent / m.replace(".", "/") / "__init__.py").exists()}
    graph: dict[str, set[str]] = {}
    for i in imports:
        if i.target not in doors and i.source not in doors and i.source != i.target:
            graph.setdefault(i.source, set()).add(i.target)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out: list[frozenset[str]] = []

    def visit(v: str) -> None:  # Tarjan's algorithm
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = set()
            while True:
                w = stack.pop()
                comp.add(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(frozenset(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_no_import_circles_but_the_kept_ones() -> None:
    found = set(circles(IMPORTS))
    assert found - KEPT_CIRCLES == set(), "open these circles (or keep one and say why)"
    assert len(KEPT_CIRCLES) <= 1


def test_each_kept_circle_says_why_in_its_modules() -> None:
    for circle in KEPT_CIRCLES:
        for mod in circle:
            doc = ast.get_docstring(
                ast.parse((SRC.parent / f"{mod.replace('.', '/')}.py").read_text())
            )
            assert CIRCLE_NOTE in " ".join((doc or "").split()).lower(), mod


def test_the_circle_finder_finds_one() -> None:
    imps = [Import("coorp.a.x", "coorp.a.y", 1), Import("coorp.a.y", "coorp.a.z", 1),
            Import("coorp.a.z", "coorp.a.x", 1), Import("coorp.a.z", "coorp.b.w", 1)]  # fmt: skip
    assert circles(imps) == [frozenset({"coorp.a.x", "coorp.a.y", "coorp.a.z"})]
