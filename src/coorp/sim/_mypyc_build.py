"""Compile the simulator's hot modules with mypyc, in place. Standalone on purpose.

Runs with nothing but the standard library, mypy (which ships mypyc) and setuptools, so
that a build backend hook can run it before ``coorp``'s own dependencies exist:

    python src/coorp/sim/_mypyc_build.py SRC_DIR     # SRC_DIR holds the coorp package

The build works in a temporary copy of the package and moves each extension in with an
atomic rename (a running simulator keeps its old files), then writes :data:`MANIFEST`:
the SHA-256 of every source it compiled. The loader uses the compiled modules only
while the sources still match it (see ``_loader``). Prints the installed files; exits
non-zero (installing nothing new) if the build fails.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

#: The compiled modules; keep in step with ``coorp.sim._loader.MODULES``.
MODULES = ("events", "timing", "links", "packets", "station", "mac", "engine")
#: mypyc's shared library for the group, inside the package.
NATIVE_LIB = "coorp.sim._native"
#: What the build compiled: {"sources": {module: sha256 of its source}}.
MANIFEST = "_native_manifest.json"

_SETUP = """\
from setuptools import setup
from mypyc.build import mypycify

files = {files!r}
setup(
    name="coorp-sim-native",
    ext_modules=mypycify(
        ["--ignore-missing-imports", "--follow-imports=silent", *files],
        separate=[(files, {lib!r})],
        opt_level="3",
    ),
)
"""


def build(src_dir: Path) -> list[Path]:
    pkg_dir = src_dir / "coorp" / "sim"
    with tempfile.TemporaryDirectory(prefix="coorp-mypyc-") as tmp:
        work = Path(tmp)
        shutil.copytree(
            src_dir / "coorp",
            work / "coorp",
            ignore=shutil.ignore_patterns("__pycache__", "*.so", "*.pyd"),
        )
        files = [f"coorp/sim/{name}.py" for name in MODULES]
        (work / "setup.py").write_text(_SETUP.format(files=files, lib=NATIVE_LIB))
        env = {**os.environ, "MYPY_CACHE_DIR": str(work / ".mypy_cache")}
        cmd = [sys.executable, "setup.py", "build_ext", "--inplace"]
        proc = subprocess.run(cmd, cwd=work, env=env, capture_output=True, text=True)
        if proc.returncode:
            raise RuntimeError(f"mypyc build failed:\n{proc.stdout}\n{proc.stderr}")
        built = [p for p in (work / "coorp" / "sim").iterdir() if p.suffix in (".so", ".pyd")]
        if not built:
            raise RuntimeError("mypyc build produced no extension modules")
        sources = {
            name: hashlib.sha256((work / "coorp" / "sim" / f"{name}.py").read_bytes()).hexdigest()
            for name in MODULES
        }
        manifest = pkg_dir / MANIFEST
        manifest.unlink(missing_ok=True)  # no manifest while the files change
        installed = []
        for path in built:
            dest = pkg_dir / path.name
            staged = dest.with_name(dest.name + ".new")
            shutil.copy2(path, staged)
            os.replace(staged, dest)
            installed.append(dest)
        staged = manifest.with_name(MANIFEST + ".new")
        staged.write_text(json.dumps({"sources": sources}, indent=1, sort_keys=True) + "\n")
        os.replace(staged, manifest)
        installed.append(manifest)
    return installed


if __name__ == "__main__":
    src = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parents[2]
    try:
        for p in build(src):
            print(p)
    except RuntimeError as exc:
        print(exc, file=sys.stderr)
        sys.exit(1)
