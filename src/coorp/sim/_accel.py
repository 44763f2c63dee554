"""Build the mypyc-compiled simulator modules in place (see ``coorp.sim._loader``).

python -m coorp.sim._accel build    # compile (needs mypy, setuptools, a C compiler)
python -m coorp.sim._accel status   # compiled, stale or plain
python -m coorp.sim._accel ensure   # rebuild if stale (``make`` runs this), then status
python -m coorp.sim._accel clean    # remove the compiled modules
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from coorp.sim._loader import (
    _PKG_DIR,
    _SRC_DIR,
    BUILD_ERROR,
    MANIFEST,
    MODULES,
    NATIVE,
    _extensions,
    build_error,
    status,
)

__all__ = ["build", "clean", "main"]


def clean() -> list[Path]:
    """Remove the compiled modules; returns what went."""
    gone = [p for name in (*MODULES, NATIVE) for p in _extensions(name)]
    gone += [p for p in (_PKG_DIR / MANIFEST, _PKG_DIR / BUILD_ERROR) if p.exists()]
    for p in gone:
        p.unlink()
    return gone


def build() -> list[Path]:
    """Compile :data:`MODULES` with mypyc and install them next to their sources."""
    script = _PKG_DIR / "_mypyc_build.py"
    proc = subprocess.run(
        [sys.executable, str(script), str(_SRC_DIR)], capture_output=True, text=True
    )
    if proc.returncode:
        raise RuntimeError(proc.stderr)
    return [Path(line) for line in proc.stdout.split()]


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    cmd = args[0] if args else "status"
    if cmd == "build":
        for p in build():
            print(f"built {p}")
    elif cmd == "ensure":
        # Sources edited since the last build: rebuild (a failed build leaves the
        # plain modules in use; the status line below says so).
        if status() == "stale":
            print("coorp.sim: sources changed since the compiled build; rebuilding (~40 s)")
            try:
                build()
            except RuntimeError as exc:
                lines = str(exc).strip().splitlines()
                print(f"coorp.sim: rebuild failed: {lines[-1] if lines else exc}")
    elif cmd == "clean":
        for p in clean():
            print(f"removed {p}")
    elif cmd != "status":
        print("usage: python -m coorp.sim._accel [build|ensure|clean|status]", file=sys.stderr)
        return 2
    state = status()
    if state == "plain" and (error := build_error()) is not None:
        state = f"plain Python: compiling failed at install ({error}); same results, slower"
    print(f"coorp.sim: {state}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
