"""Which simulator modules run: the mypyc-compiled ones (when fresh) or the plain ones.

The modules in :data:`MODULES` are plain, fully typed Python that mypyc compiles to C
extensions without any change: the compiled simulator is the same code, so it computes
exactly the same results (``tests/sim/test_golden_equivalence.py`` runs either way), only
several times faster. ``coorp.sim._accel`` builds them.

:func:`load_modules` (called by ``coorp.sim``) decides which modules run: the compiled
ones only if all of them exist and the sources in :data:`MODULES` are the ones they were
built from (their SHA-256 is in :data:`MANIFEST`); otherwise, and with
``COORP_SIM_PURE=1``, the plain Python modules.
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
from pathlib import Path

__all__ = [
    "BUILD_ERROR",
    "MANIFEST",
    "MODULES",
    "NATIVE",
    "build_error",
    "describe",
    "load_modules",
    "status",
]

#: The compiled modules, in import order (each imports only earlier ones of this list);
#: keep in step with ``_mypyc_build.MODULES``.
MODULES = ("events", "timing", "links", "packets", "station", "mac", "engine")
#: mypyc's shared library for them (the compiled code; the modules are thin shims).
NATIVE = "_native__mypyc"
#: Written by the build: the SHA-256 of each source it compiled.
MANIFEST = "_native_manifest.json"
#: Written by the install's build hook when compiling failed: the reason, one line.
BUILD_ERROR = "_native_build_error.txt"

_PKG_DIR = Path(__file__).resolve().parent
_SRC_DIR = _PKG_DIR.parent.parent  # the directory holding the ``coorp`` package


def _extensions(name: str) -> list[Path]:
    return [
        p
        for suffix in importlib.machinery.EXTENSION_SUFFIXES
        if (p := _PKG_DIR / f"{name}{suffix}").exists()
    ]


def status() -> str:
    """``"compiled"``, ``"stale"`` (built from other sources than the current ones, or
    incomplete) or ``"plain"`` (nothing compiled)."""
    found = {name: _extensions(name) for name in (*MODULES, NATIVE)}
    manifest = _PKG_DIR / MANIFEST
    if not any(found.values()) and not manifest.exists():
        return "plain"
    if not all(found.values()) or not manifest.exists():
        return "stale"
    try:
        built = json.loads(manifest.read_text())["sources"]
    except (OSError, ValueError, KeyError):
        return "stale"
    current = {
        name: hashlib.sha256((_PKG_DIR / f"{name}.py").read_bytes()).hexdigest() for name in MODULES
    }
    return "compiled" if built == current else "stale"


def build_error() -> str | None:
    """Why the install could not compile the simulator, if it tried and failed."""
    try:
        return (_PKG_DIR / BUILD_ERROR).read_text().strip() or "unknown error"
    except OSError:
        return None


def describe(compiled: bool) -> str:
    """Which simulator runs, for ``coorp --version``: ``compiled (mypyc)`` or
    ``plain Python (why)``."""
    if compiled:
        return "compiled (mypyc)"
    state = status()
    rebuild = "make or python -m coorp.sim._accel build"
    if os.environ.get("COORP_SIM_PURE") == "1":
        return "plain Python (COORP_SIM_PURE=1)"
    if state == "stale":
        return f"plain Python (the compiled build is stale: sources edited since; {rebuild})"
    if state == "compiled":
        return "plain Python (the compiled build does not load for this interpreter)"
    error = build_error()
    if error is not None:
        return f"plain Python (compiling failed at install: {error})"
    return f"plain Python (not compiled; {rebuild})"


def _load_plain() -> None:
    """Import the plain-Python modules even where compiled ones sit next to them."""
    pkg = sys.modules["coorp.sim"]
    for name in MODULES:
        full = f"coorp.sim.{name}"
        spec = importlib.util.spec_from_file_location(full, _PKG_DIR / f"{name}.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[full] = module
        spec.loader.exec_module(module)
        setattr(pkg, name, module)


def load_modules() -> bool:
    """Import the simulator modules, compiled when usable; True if compiled."""
    state = status()
    if state == "plain":
        return False
    forced = os.environ.get("COORP_SIM_PURE") == "1"
    if state == "compiled" and not forced:
        try:
            for name in MODULES:
                importlib.import_module(f"coorp.sim.{name}")
            return True
        except ImportError as exc:  # e.g. built for another interpreter
            for name in MODULES:
                sys.modules.pop(f"coorp.sim.{name}", None)
            state = f"unusable ({exc})"
    if state != "compiled" and not forced:
        warnings.warn(
            f"coorp.sim: the compiled simulator modules are {state}; running the plain "
            "Python ones (same results, slower). Rebuild with 'make' or "
            "'python -m coorp.sim._accel build', or remove them with '... clean'.",
            RuntimeWarning,
            stacklevel=3,
        )
    _load_plain()
    return False
