"""The compiled modules are used only while they are exactly the source: the staleness rule.

An editable install compiles the simulator, the control algorithms and the policies'
hooks next to their sources (``src/coorp/**/*.so``). After a source edit those extensions
would shadow the edited ``.py`` silently; instead ``coorp._accel`` compares the sources'
SHA-256 with the build's manifest and, on a mismatch, loads the plain modules (all of
them: one choice per process) with one warning. Each case runs in a subprocess on a
private copy of the package (the shared tree is never touched).
"""

from __future__ import annotations

import hashlib
import importlib.machinery
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import coorp
import coorp._accel as loader
from coorp.sim import COMPILED

PKG = Path(coorp.__file__).resolve().parent
BUILD_SCRIPT = PKG / "_accel" / "_mypyc_build.py"

_PROBE = """
import json, warnings
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    import coorp.sim as sim
    import coorp.control._gate as gate
    import coorp.policies._hooks as hooks
    import coorp._accel as _accel
    from coorp.cli import version_text
print(json.dumps({
    "compiled": sim.COMPILED,
    "status": _accel.status(),
    "mac_file": getattr(sim.mac, "__file__", ""),
    "gate_file": getattr(gate, "__file__", ""),
    "hooks_file": getattr(hooks, "__file__", ""),
    "edited": getattr(sim.mac, "EDITED_FOR_TEST", False),
    "warnings": [str(w.message) for w in caught if w.category is RuntimeWarning],
    "version": version_text(),
}))
"""


def _copy(tmp: Path, *, native: bool) -> Path:
    """A private copy of the ``coorp`` package under ``tmp/src``, with or without the
    compiled files."""
    src = tmp / "src"
    keep = () if native else ("*.so", "*.pyd", loader.MANIFEST)
    shutil.copytree(
        PKG,
        src / "coorp",
        ignore=shutil.ignore_patterns("__pycache__", loader.BUILD_ERROR, *keep),
    )
    return src


def _probe(src: Path, **env: str) -> dict[str, object]:
    environ = {k: v for k, v in os.environ.items() if k not in ("COORP_PURE", "COORP_SIM_PURE")}
    environ.update(PYTHONPATH=str(src), **env)
    out = subprocess.run(
        [sys.executable, "-c", _PROBE], env=environ, capture_output=True, text=True, check=True
    )
    result: dict[str, object] = json.loads(out.stdout)
    return result


def _edit(src: Path, module: str = "coorp.sim.mac") -> None:
    path = src.joinpath(*module.split(".")).with_suffix(".py")
    path.write_text(path.read_text() + "\nEDITED_FOR_TEST = True\n")


def test_nothing_compiled_runs_plain_without_a_warning(tmp_path: Path) -> None:
    r = _probe(_copy(tmp_path, native=False))
    assert (r["compiled"], r["status"], r["warnings"]) == (False, "plain", [])
    assert "plain Python (not compiled" in str(r["version"])


def test_a_failed_install_build_is_reported_by_version(tmp_path: Path) -> None:
    src = _copy(tmp_path, native=False)
    (src / "coorp" / "_accel" / loader.BUILD_ERROR).write_text("no C compiler found\n")
    r = _probe(src)
    assert (r["compiled"], r["warnings"]) == (False, [])
    assert "compiling failed at install: no C compiler found" in str(r["version"])


def _module_path(src: Path, module: str) -> Path:
    return src.joinpath(*module.split("."))


def _fake_build(src: Path, manifest_sources: dict[str, str]) -> None:
    """Extension files that are not loadable, and a manifest."""
    suffix = importlib.machinery.EXTENSION_SUFFIXES[0]
    for module in [*loader.compiled_modules(), f"coorp._accel.{loader.NATIVE}"]:
        stem = _module_path(src, module)
        stem.with_name(stem.name + suffix).write_bytes(b"not an extension")
    (src / "coorp" / "_accel" / loader.MANIFEST).write_text(
        json.dumps({"sources": manifest_sources})
    )


def _hashes(src: Path) -> dict[str, str]:
    return {
        module: hashlib.sha256(
            _module_path(src, module).with_suffix(".py").read_bytes()
        ).hexdigest()
        for module in loader.compiled_modules()
    }


def test_stale_manifest_falls_back_to_the_edited_source_with_one_warning(
    tmp_path: Path,
) -> None:
    src = _copy(tmp_path, native=False)
    _fake_build(src, _hashes(src))
    _edit(src)  # after the build: the manifest no longer matches mac.py
    r = _probe(src)
    assert (r["compiled"], r["status"], r["edited"]) == (False, "stale", True)
    assert str(r["mac_file"]).endswith("mac.py")
    assert len(r["warnings"]) == 1 and "stale" in r["warnings"][0]  # type: ignore[index,arg-type]
    assert "the compiled build is stale" in str(r["version"])


def test_an_incomplete_build_is_stale(tmp_path: Path) -> None:
    src = _copy(tmp_path, native=False)
    _fake_build(src, _hashes(src))
    (src / "coorp" / "_accel" / loader.MANIFEST).unlink()  # interrupted build
    r = _probe(src)
    assert (r["compiled"], r["status"]) == (False, "stale")


def test_an_unloadable_build_falls_back_with_a_warning(tmp_path: Path) -> None:
    src = _copy(tmp_path, native=False)
    _fake_build(src, _hashes(src))  # fresh manifest, but the files do not load
    r = _probe(src)
    assert (r["compiled"], r["status"]) == (False, "compiled")
    assert len(r["warnings"]) == 1 and "unusable" in r["warnings"][0]  # type: ignore[index,arg-type]


def test_coorp_sim_pure_forces_plain_modules_silently(tmp_path: Path) -> None:
    src = _copy(tmp_path, native=False)
    _fake_build(src, {})
    r = _probe(src, COORP_PURE="1")
    assert (r["compiled"], r["warnings"]) == (False, [])
    assert "COORP_PURE=1" in str(r["version"])
    old = _probe(src, COORP_SIM_PURE="1")  # the older name still works
    assert (old["compiled"], old["warnings"]) == (False, [])


@pytest.mark.skipif(not COMPILED, reason="the mypyc-compiled simulator is not built")
def test_real_build_is_used_until_a_source_is_edited(tmp_path: Path) -> None:
    src = _copy(tmp_path, native=True)
    fresh = _probe(src)
    assert (fresh["compiled"], fresh["warnings"]) == (True, [])
    for key in ("mac_file", "gate_file", "hooks_file"):
        assert not str(fresh[key]).endswith(".py"), key
    assert "compiled (mypyc)" in str(fresh["version"])
    _edit(src)
    edited = _probe(src)
    assert (edited["compiled"], edited["status"], edited["edited"]) == (False, "stale", True)
    # One choice for every package: the control and policy modules run plain as well.
    assert str(edited["gate_file"]).endswith(".py") and str(edited["hooks_file"]).endswith(".py")


@pytest.mark.skipif(not COMPILED, reason="the compiled modules are not built")
def test_editing_a_control_module_makes_the_whole_build_stale(tmp_path: Path) -> None:
    src = _copy(tmp_path, native=True)
    _edit(src, "coorp.control._ctt")
    r = _probe(src)
    assert (r["compiled"], r["status"]) == (False, "stale")
    assert str(r["mac_file"]).endswith("mac.py")
    assert len(r["warnings"]) == 1  # type: ignore[arg-type]


def test_the_build_fails_fast_and_installs_nothing_without_a_compiler(tmp_path: Path) -> None:
    src = _copy(tmp_path, native=False)
    out = subprocess.run(
        [sys.executable, str(BUILD_SCRIPT), str(src)],
        env={**os.environ, "CC": str(tmp_path / "no-such-cc")},
        capture_output=True,
        text=True,
    )
    assert out.returncode == 1
    assert "no C compiler" in out.stderr
    assert not list((src / "coorp").rglob("*.so"))
    assert not (src / "coorp" / "_accel" / loader.MANIFEST).exists()


def test_the_build_script_compiles_what_the_loader_loads() -> None:
    """``_mypyc_build`` runs without coorp importable, so it has its own copy of the list."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("_coorp_mypyc_build_probe", BUILD_SCRIPT)
    assert spec is not None and spec.loader is not None
    build = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(build)
    assert build.MODULES == loader.MODULES
    assert build.NATIVE_LIB.rsplit(".", 1)[-1] + "__mypyc" == loader.NATIVE
    assert build.MANIFEST == loader.MANIFEST and build.BUILD_ERROR == loader.BUILD_ERROR


@pytest.mark.parametrize("package", sorted(loader.MODULES))
def test_each_compiled_module_imports_only_earlier_ones_of_its_package(package: str) -> None:
    """The plain modules are loaded in list order: a later one imported early would load
    its compiled extension next to plain ones."""
    import ast

    names = loader.MODULES[package]
    for i, name in enumerate(names):
        tree = ast.parse(loader.source(f"{package}.{name}").read_text())
        # Module-level imports run at import time (those under ``if TYPE_CHECKING:``
        # and inside functions do not, or only once every module is loaded).
        imported = {
            node.module for node in tree.body if isinstance(node, ast.ImportFrom) and node.module
        }
        later = {f"{package}.{n}" for n in names[i + 1 :]}
        assert not imported & later, f"{package}.{name} imports {imported & later}"
