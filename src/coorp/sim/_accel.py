"""Build the mypyc-compiled simulator modules in place (see ``coorp.sim._loader``).

python -m coorp.sim._accel build    # compile (needs mypy and a C compiler)
python -m coorp.sim._accel status   # compiled, stale or plain
python -m coorp.sim._accel clean    # remove the compiled modules
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from coorp.sim._loader import _PKG_DIR, _SRC_DIR, MODULES, _extensions, status

__all__ = ["build", "clean", "main"]


def clean() -> list[Path]:
    """Remove the compiled modules (and mypyc's shared library); returns what went."""
    gone = [p for name in MODULES for p in _extensions(name)]
    gone += [p for p in _SRC_DIR.glob("*__mypyc*") if p.suffix in (".so", ".pyd")]
    for p in gone:
        p.unlink()
    return gone


def build() -> list[Path]:
    """Compile :data:`MODULES` with mypyc and install them next to their sources.

    The build runs in a temporary copy of the package; the results are moved in with
    atomic renames, so processes already running the old modules are not disturbed.
    """
    with tempfile.TemporaryDirectory(prefix="coorp-mypyc-") as tmp:
        work = Path(tmp)
        # The build is as old as the sources it copies: a source edited from now on
        # makes it stale.
        started = time.time()
        shutil.copytree(
            _SRC_DIR / "coorp",
            work / "coorp",
            ignore=shutil.ignore_patterns("__pycache__", "*.so", "*.pyd"),
        )
        files = [f"coorp/sim/{name}.py" for name in MODULES]
        env = {**os.environ, "MYPY_CACHE_DIR": str(work / ".mypy_cache")}
        # Only the compiled modules are type-checked; the rest are just followed.
        flags = ["--ignore-missing-imports", "--follow-imports=silent"]
        cmd = [sys.executable, "-m", "mypyc", *flags, *files]
        proc = subprocess.run(cmd, cwd=work, env=env, capture_output=True, text=True)
        if proc.returncode:
            raise RuntimeError(f"mypyc failed:\n{proc.stdout}\n{proc.stderr}")
        installed = []
        for path in [*work.glob("*__mypyc*"), *(work / "coorp" / "sim").iterdir()]:
            if path.suffix not in (".so", ".pyd"):
                continue
            dest = (_SRC_DIR if "__mypyc" in path.name else _PKG_DIR) / path.name
            staged = dest.with_name(dest.name + ".new")
            shutil.copy2(path, staged)
            os.utime(staged, (started, started))
            os.replace(staged, dest)
            installed.append(dest)
    return installed


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    cmd = args[0] if args else "status"
    if cmd == "build":
        for p in build():
            print(f"built {p}")
    elif cmd == "clean":
        for p in clean():
            print(f"removed {p}")
    elif cmd != "status":
        print("usage: python -m coorp.sim._accel [build|clean|status]", file=sys.stderr)
        return 2
    print(f"coorp.sim: {status()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
