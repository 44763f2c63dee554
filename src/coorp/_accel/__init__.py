"""Which hot modules run: the mypyc-compiled build (when fresh) or the plain Python ones.

The modules in :data:`MODULES` — the simulator's, the control algorithms' and the
gated policies' driver hooks — are plain, fully typed Python that mypyc compiles to C
extensions without any change: the compiled code is the same code, so it computes
exactly the same results (``tests/sim/test_golden_equivalence.py`` and
``tests/policies/test_golden_policies.py`` run both), only several times faster. They
compile as one group (one shared library, :data:`NATIVE`, and one thin extension per
module next to its source), so that calls between them — a policy's hooks asking the
gate, the gate asking the completion-time table — are native calls.

:func:`load` (called by each package's ``__init__``) decides which modules run: the
compiled ones only if all of them exist, the sources in :data:`MODULES` are the ones
they were built from (their SHA-256 is in :data:`MANIFEST`) and the shared library
loads; otherwise, and with ``COORP_PURE=1`` (or its older name ``COORP_SIM_PURE=1``),
the plain Python modules. The choice is made once per process and is the same for every
package: a compiled module never runs against a plain one it was compiled with.

``python -m coorp._accel build|ensure|clean|status`` builds them (``make`` runs
``ensure``); the install's build hook (``_build_hook``) compiles them too.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.machinery
import importlib.util
import json
import os
import sys
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

__all__ = [
    "BUILD_ERROR",
    "MANIFEST",
    "MODULES",
    "NATIVE",
    "build_error",
    "compiled",
    "describe",
    "load",
    "mypyc_attr",
    "status",
]

#: The compiled modules per package, each package's in import order (a module imports
#: only earlier ones of its own package's list); keep in step with
#: ``_mypyc_build.MODULES``. ``coorp.policies`` needs the other two compiled as well.
MODULES: dict[str, tuple[str, ...]] = {
    "coorp.sim": (
        "events", "timing", "links", "packets", "station", "congestion", "sack", "tcp", "mac",
        "engine",
    ),
    "coorp.control": (
        "_interval", "_ctt", "_residuals", "_linefit", "_timemodel", "_windows", "_gate_types",
        "_gate", "_permits", "_schedwifi", "_cells",
    ),
    "coorp.policies": ("_hooks",),
    "coorp.workload": ("_fleetloop",),
    "coorp.emulate": ("_ip", "_lag", "_air", "_gro", "_pump"),
}  # fmt: skip
#: mypyc's shared library for all of them, in this package (the modules are thin shims).
NATIVE = "_native__mypyc"
#: Written by the build, in this package: the SHA-256 of each source it compiled.
MANIFEST = "_native_manifest.json"
#: Written by the install's build hook when compiling failed: the reason, one line.
BUILD_ERROR = "_native_build_error.txt"

_ACCEL_DIR = Path(__file__).resolve().parent
_ROOT = _ACCEL_DIR.parent  # the ``coorp`` package
_SRC_DIR = _ROOT.parent  # the directory holding it
#: Packages whose compiled modules call into these (loaded first, same choice).
_REQUIRES = {
    "coorp.policies": ("coorp.sim", "coorp.control"),
    "coorp.workload": ("coorp.sim", "coorp.control", "coorp.policies"),
    "coorp.emulate": ("coorp.sim",),
}
#: The one process-wide choice: None until the first :func:`load`.
_CHOICE: bool | None = None

_T = TypeVar("_T")

try:
    from mypy_extensions import mypyc_attr
except ImportError:  # pragma: no cover - a plain install without mypy

    def mypyc_attr(*attrs: str, **kwattrs: object) -> Callable[[_T], _T]:
        """No-op stand-in for ``mypy_extensions.mypyc_attr`` (nothing is compiled)."""

        def keep(cls: _T) -> _T:
            return cls

        return keep


def source(module: str) -> Path:
    """The source file of a compiled module (``coorp.sim.mac`` -> ``.../sim/mac.py``)."""
    parts = module.split(".")
    return _ROOT.joinpath(*parts[1:-1], parts[-1] + ".py")


def compiled_modules() -> list[str]:
    """Every compiled module's full name, package by package."""
    return [f"{pkg}.{name}" for pkg, names in MODULES.items() for name in names]


def _extensions(stem: Path) -> list[Path]:
    return [
        p
        for suffix in importlib.machinery.EXTENSION_SUFFIXES
        if (p := stem.with_name(stem.name + suffix)).exists()
    ]


def extension_files() -> list[Path]:
    """The compiled files present: each module's extension and the shared library."""
    stems = [source(m).with_suffix("") for m in compiled_modules()] + [_ACCEL_DIR / NATIVE]
    return [p for stem in stems for p in _extensions(stem)]


def status() -> str:
    """``"compiled"``, ``"stale"`` (built from other sources than the current ones, or
    incomplete) or ``"plain"`` (nothing compiled)."""
    stems = [source(m).with_suffix("") for m in compiled_modules()] + [_ACCEL_DIR / NATIVE]
    found = [bool(_extensions(stem)) for stem in stems]
    manifest = _ACCEL_DIR / MANIFEST
    if not any(found) and not manifest.exists():
        return "plain"
    if not all(found) or not manifest.exists():
        return "stale"
    try:
        built = json.loads(manifest.read_text())["sources"]
    except (OSError, ValueError, KeyError):
        return "stale"
    current = {m: hashlib.sha256(source(m).read_bytes()).hexdigest() for m in compiled_modules()}
    return "compiled" if built == current else "stale"


def build_error() -> str | None:
    """Why the install could not compile, if it tried and failed."""
    try:
        return (_ACCEL_DIR / BUILD_ERROR).read_text().strip() or "unknown error"
    except OSError:
        return None


def _forced_pure() -> str | None:
    for var in ("COORP_PURE", "COORP_SIM_PURE"):
        if os.environ.get(var) == "1":
            return var
    return None


def compiled() -> bool:
    """Whether the compiled modules are (or, once loaded, will be) in use in this
    process. Decides without importing any of them, only the shared library."""
    global _CHOICE
    if _CHOICE is not None:
        return _CHOICE
    state = status()
    forced = _forced_pure()
    if state == "compiled" and forced is None:
        try:
            importlib.import_module(f"{__name__}.{NATIVE}")
            _CHOICE = True
            return True
        except ImportError as exc:  # e.g. built for another interpreter
            state = f"unusable ({exc})"
    if state != "plain" and forced is None:
        warnings.warn(
            "coorp: the compiled modules (simulator, control, policy hooks, emulator) are "
            f"{state}; running the plain Python ones (same results, slower). Rebuild with "
            "'make' or 'python -m coorp._accel build', or remove them with '... clean'.",
            RuntimeWarning,
            stacklevel=4,
        )
    _CHOICE = False
    return False


def describe(in_use: bool | None = None) -> str:
    """Which modules run, for ``coorp --version``: ``compiled (mypyc)`` or ``plain
    Python (why)``. ``in_use`` defaults to :func:`compiled`."""
    if in_use is None:
        in_use = compiled()
    if in_use:
        return "compiled (mypyc)"
    rebuild = "make or python -m coorp._accel build"
    forced = _forced_pure()
    if forced is not None:
        return f"plain Python ({forced}=1)"
    state = status()
    if state == "stale":
        return f"plain Python (the compiled build is stale: sources edited since; {rebuild})"
    if state == "compiled":
        return "plain Python (the compiled build does not load for this interpreter)"
    error = build_error()
    if error is not None:
        return f"plain Python (compiling failed at install: {error})"
    return f"plain Python (not compiled; {rebuild})"


def _load_plain(package: str) -> None:
    """Import the package's plain-Python modules even where compiled ones sit next to
    them."""
    pkg = sys.modules[package]
    for name in MODULES[package]:
        full = f"{package}.{name}"
        spec = importlib.util.spec_from_file_location(full, source(full))
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[full] = module
        spec.loader.exec_module(module)
        setattr(pkg, name, module)


def load(package: str) -> bool:
    """Import ``package``'s modules of :data:`MODULES`, compiled when usable (called by
    the package's ``__init__`` before it imports them); True if compiled."""
    if compiled():
        for dep in _REQUIRES.get(package, ()):
            importlib.import_module(dep)
        try:
            for name in MODULES[package]:
                importlib.import_module(f"{package}.{name}")
            return True
        except ImportError as exc:  # pragma: no cover - the shared library loaded
            for name in MODULES[package]:
                sys.modules.pop(f"{package}.{name}", None)
            warnings.warn(
                f"{package}: a compiled module does not import ({exc}); running the plain "
                "Python ones",
                RuntimeWarning,
                stacklevel=2,
            )
    _load_plain(package)
    return False
