"""The compiled simulator is used only while it is exactly the source: the staleness rule.

An editable install compiles the simulator next to its sources (``src/coorp/sim/*.so``).
After a source edit those extensions would shadow the edited ``.py`` silently; instead
``coorp.sim._loader`` compares the sources' SHA-256 with the build's manifest and, on a
mismatch, loads the plain modules with one warning. Each case runs in a subprocess on a
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
from coorp.sim import COMPILED
from coorp.sim import _loader as loader

PKG = Path(coorp.__file__).resolve().parent
BUILD_SCRIPT = PKG / "sim" / "_mypyc_build.py"

_PROBE = """
import json, warnings
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    import coorp.sim as sim
    from coorp.sim import _loader
    from coorp.cli import version_text
print(json.dumps({
    "compiled": sim.COMPILED,
    "status": _loader.status(),
    "mac_file": getattr(sim.mac, "__file__", ""),
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
    environ = {k: v for k, v in os.environ.items() if k != "COORP_SIM_PURE"}
    environ.update(PYTHONPATH=str(src), **env)
    out = subprocess.run(
        [sys.executable, "-c", _PROBE], env=environ, capture_output=True, text=True, check=True
    )
    result: dict[str, object] = json.loads(out.stdout)
    return result


def _edit(src: Path) -> None:
    mac = src / "coorp" / "sim" / "mac.py"
    mac.write_text(mac.read_text() + "\nEDITED_FOR_TEST = True\n")


def test_nothing_compiled_runs_plain_without_a_warning(tmp_path: Path) -> None:
    r = _probe(_copy(tmp_path, native=False))
    assert (r["compiled"], r["status"], r["warnings"]) == (False, "plain", [])
    assert "plain Python (not compiled" in str(r["version"])


def test_a_failed_install_build_is_reported_by_version(tmp_path: Path) -> None:
    src = _copy(tmp_path, native=False)
    (src / "coorp" / "sim" / loader.BUILD_ERROR).write_text("no C compiler found\n")
    r = _probe(src)
    assert (r["compiled"], r["warnings"]) == (False, [])
    assert "compiling failed at install: no C compiler found" in str(r["version"])


def _fake_build(src: Path, manifest_sources: dict[str, str]) -> None:
    """Extension files that are not loadable, and a manifest."""
    sim = src / "coorp" / "sim"
    suffix = importlib.machinery.EXTENSION_SUFFIXES[0]
    for name in (*loader.MODULES, loader.NATIVE):
        (sim / f"{name}{suffix}").write_bytes(b"not an extension")
    (sim / loader.MANIFEST).write_text(json.dumps({"sources": manifest_sources}))


def _hashes(src: Path) -> dict[str, str]:
    sim = src / "coorp" / "sim"
    return {
        name: hashlib.sha256((sim / f"{name}.py").read_bytes()).hexdigest()
        for name in loader.MODULES
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
    (src / "coorp" / "sim" / loader.MANIFEST).unlink()  # interrupted build
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
    r = _probe(src, COORP_SIM_PURE="1")
    assert (r["compiled"], r["warnings"]) == (False, [])
    assert "COORP_SIM_PURE=1" in str(r["version"])


@pytest.mark.skipif(not COMPILED, reason="the mypyc-compiled simulator is not built")
def test_real_build_is_used_until_a_source_is_edited(tmp_path: Path) -> None:
    src = _copy(tmp_path, native=True)
    fresh = _probe(src)
    assert (fresh["compiled"], fresh["warnings"]) == (True, [])
    assert not str(fresh["mac_file"]).endswith(".py")
    _edit(src)
    edited = _probe(src)
    assert (edited["compiled"], edited["status"], edited["edited"]) == (False, "stale", True)


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
    sim = src / "coorp" / "sim"
    assert not list(sim.glob("*.so")) and not (sim / loader.MANIFEST).exists()
