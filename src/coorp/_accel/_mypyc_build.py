"""Compile the hot modules (simulator, control, policy hooks, emulator) with mypyc; standalone.

Runs with nothing but the standard library, mypy (which ships mypyc) and setuptools, so
that a build backend hook can run it before ``coorp``'s own dependencies exist:

    python src/coorp/_accel/_mypyc_build.py SRC_DIR [OUT_DIR]   # SRC_DIR holds coorp

The build works in a temporary copy of the package and moves each extension in with an
atomic rename (a running simulator keeps its old files), then writes :data:`MANIFEST`:
the SHA-256 of every source it compiled. The loader uses the compiled modules only
while the sources still match it (see ``coorp._accel``). The files go next to the
sources (``SRC_DIR/coorp/...``; the shared library, the manifest and :data:`BUILD_ERROR`
in ``coorp/_accel``), or under ``OUT_DIR/coorp/...`` when given (a regular wheel build,
which must not write into the source tree). A successful build removes
:data:`BUILD_ERROR`. Prints the installed files; exits non-zero (installing nothing new)
if the build fails.
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

#: The compiled modules per package; keep in step with ``coorp._accel.MODULES``.
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
#: mypyc's shared library for the group (one group: calls between the modules are native).
NATIVE_LIB = "coorp._accel._native"
#: Where the manifest, the build error and the shared library go, inside ``coorp``.
ACCEL = "_accel"
#: What the build compiled: {"sources": {module: sha256 of its source}}.
MANIFEST = "_native_manifest.json"
#: Written by the build hook when compiling failed: why (the loader and ``coorp
#: --version`` report it); removed by a successful build.
BUILD_ERROR = "_native_build_error.txt"

_SETUP = """\
from setuptools import setup
from mypyc.build import mypycify

files = {files!r}
setup(
    name="coorp-native",
    ext_modules=mypycify(
        ["--ignore-missing-imports", "--follow-imports=silent", *files],
        separate=[(files, {lib!r})],
        opt_level="3",
    ),
)
"""


def build(src_dir: Path, out_dir: Path | None = None) -> list[Path]:
    if compiler() is None:  # fail in a second, not after mypyc's code generation
        raise RuntimeError("no C compiler found ($CC, cc, gcc or clang)")
    root = (out_dir or src_dir) / "coorp"
    with tempfile.TemporaryDirectory(prefix="coorp-mypyc-") as tmp:
        work = Path(tmp)
        shutil.copytree(
            src_dir / "coorp",
            work / "coorp",
            ignore=shutil.ignore_patterns("__pycache__", "*.so", "*.pyd"),
        )
        modules = [f"{pkg}.{name}" for pkg, names in MODULES.items() for name in names]
        files = [m.replace(".", "/") + ".py" for m in modules]
        (work / "setup.py").write_text(_SETUP.format(files=files, lib=NATIVE_LIB))
        env = {**os.environ, "MYPY_CACHE_DIR": str(work / ".mypy_cache")}
        cmd = [sys.executable, "setup.py", "build_ext", "--inplace"]
        proc = subprocess.run(cmd, cwd=work, env=env, capture_output=True, text=True)
        if proc.returncode:
            raise RuntimeError(f"mypyc build failed:\n{proc.stdout}\n{proc.stderr}")
        built = [p for p in (work / "coorp").rglob("*") if p.suffix in (".so", ".pyd")]
        if len(built) < len(modules) + 1:
            raise RuntimeError(
                f"mypyc build produced {len(built)} extension modules, expected {len(modules) + 1}"
            )
        sources = {
            m: hashlib.sha256((work / f).read_bytes()).hexdigest()
            for m, f in zip(modules, files, strict=True)
        }
        manifest = root / ACCEL / MANIFEST
        manifest.parent.mkdir(parents=True, exist_ok=True)
        manifest.unlink(missing_ok=True)  # no manifest while the files change
        installed = []
        for path in built:
            dest = root / path.relative_to(work / "coorp")
            dest.parent.mkdir(parents=True, exist_ok=True)
            staged = dest.with_name(dest.name + ".new")
            shutil.copy2(path, staged)
            os.replace(staged, dest)
            installed.append(dest)
        staged = manifest.with_name(MANIFEST + ".new")
        staged.write_text(json.dumps({"sources": sources}, indent=1, sort_keys=True) + "\n")
        os.replace(staged, manifest)
        installed.append(manifest)
        (src_dir / "coorp" / ACCEL / BUILD_ERROR).unlink(missing_ok=True)
    return installed


def compiler() -> str | None:
    """The C compiler setuptools would run (``$CC`` or Python's build-time one), if found."""
    cc = os.environ.get("CC") or sysconfig.get_config_var("CC") or "cc"
    parts = shlex.split(cc)
    return shutil.which(parts[0]) if parts else None


def reason(stderr: str) -> str:
    """One line saying why a build failed."""
    text = stderr.lower()
    if "no c compiler" in text or ("command '" in text and "no such file" in text):
        return "no C compiler found (install gcc or clang, then rebuild)"
    if "no module named" in text:
        return "mypy or setuptools missing from the build environment"
    lines = [ln.strip() for ln in stderr.splitlines() if ln.strip()]
    return lines[-1][:200] if lines else "unknown error"


if __name__ == "__main__":
    src = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parents[2]
    out = Path(sys.argv[2]) if len(sys.argv) > 2 else None
    try:
        for p in build(src, out):
            print(p)
    except RuntimeError as exc:
        print(exc, file=sys.stderr)
        sys.exit(1)
