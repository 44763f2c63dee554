"""Build the mypyc-compiled modules in place (see ``coorp._accel``).

python -m coorp._accel build    # compile (needs mypy, setuptools, a C compiler)
python -m coorp._accel status   # compiled, stale or plain
python -m coorp._accel ensure   # rebuild if stale (``make`` runs this), then status
python -m coorp._accel clean    # remove the compiled modules
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from coorp._accel import (
    _ACCEL_DIR,
    _ROOT,
    _SRC_DIR,
    BUILD_ERROR,
    MANIFEST,
    build_error,
    extension_files,
    status,
)

__all__ = ["build", "clean", "main"]

#: What builds before this package existed left behind (the simulator alone, compiled
#: into ``coorp/sim``): removed by ``clean`` and by every build.
LEGACY = ("sim/_native__mypyc", "sim/_native_manifest.json", "sim/_native_build_error.txt")


def legacy_files() -> list[Path]:
    out = []
    for rel in LEGACY:
        p = _ROOT / rel
        out += [p] if p.suffix else [q for q in p.parent.glob(p.name + ".*") if q.is_file()]
    return [p for p in out if p.exists()]


def clean() -> list[Path]:
    """Remove the compiled modules; returns what went."""
    gone = extension_files() + legacy_files()
    gone += [p for p in (_ACCEL_DIR / MANIFEST, _ACCEL_DIR / BUILD_ERROR) if p.exists()]
    for p in gone:
        p.unlink()
    return gone


def build() -> list[Path]:
    """Compile every module of ``MODULES`` with mypyc; install next to the sources."""
    script = _ACCEL_DIR / "_mypyc_build.py"
    proc = subprocess.run(
        [sys.executable, str(script), str(_SRC_DIR)], capture_output=True, text=True
    )
    if proc.returncode:
        raise RuntimeError(proc.stderr)
    for p in legacy_files():
        p.unlink()
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
            print("coorp: sources changed since the compiled build; rebuilding (~60 s)")
            try:
                build()
            except RuntimeError as exc:
                lines = str(exc).strip().splitlines()
                print(f"coorp: rebuild failed: {lines[-1] if lines else exc}")
    elif cmd == "clean":
        for p in clean():
            print(f"removed {p}")
    elif cmd != "status":
        print("usage: python -m coorp._accel [build|ensure|clean|status]", file=sys.stderr)
        return 2
    state = status()
    if state == "plain" and (error := build_error()) is not None:
        state = f"plain Python: compiling failed at install ({error}); same results, slower"
    print(f"coorp (simulator, control, policy hooks, emulator): {state}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
