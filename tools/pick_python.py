#!/usr/bin/env python3
"""Print the Python interpreter the .venv is made from: the Makefile's default ``PY``.

Candidates, in order: ``python3``, ``python3.13``, ``python3.12``, ``python3.11`` on the
PATH, then ``/usr/bin/python3`` and ``/usr/local/bin/python3``. Usable: Python >= 3.11
with ``venv`` and ``ensurepip``. Among the usable ones the first that has its C headers
(the install compiles the simulator with mypyc; without them it runs as plain Python)
and links libpython statically wins, then the first with headers, then the first.

(Static: no libpython shared object mapped into the running interpreter, read from
``/proc/self/maps``; ``Py_ENABLE_SHARED`` alone misleads, Debian's is 1 for the library
it ships beside a statically linked ``python3``.)

Why static first: the compiled simulator spends about half its time in the
interpreter's runtime (reference counts, allocation, dict lookups), and a libpython
built as a shared library (``--enable-shared``, pyenv's default) calls its own functions
through the PLT, where any may be interposed, so the compiler cannot inline across them.
Measured on the project's machine, the same code built on each: fleet-200, 2 s,
instructions inside the run -8.3 % (EDCA) and -9.1 % (COORP) on Debian's
``/usr/bin/python3.11`` (static) against pyenv's 3.11.7 (shared); CPU time of 20 s
runs, both at once, one per core: 0.92x (EDCA, 5 pairs) and 0.90x (COORP, 4 pairs)
(docs/compare.md, "A fleet").

    python3 tools/pick_python.py            # the path
    python3 tools/pick_python.py --explain  # every candidate and what was found

``make PY=/path/to/python`` overrides the choice; an existing .venv is kept as it is.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass

NAMES = ("python3", "python3.13", "python3.12", "python3.11")
FIXED = ("/usr/bin/python3", "/usr/local/bin/python3")
MIN_VERSION = (3, 11)

_PROBE = r"""
import importlib.util, json, os, sys, sysconfig
inc = sysconfig.get_paths().get("include") or ""
try:  # libpython mapped as a shared object into this very process (Linux)
    with open("/proc/self/maps") as f:
        shared = any("libpython" in line for line in f)
except OSError:
    shared = bool(sysconfig.get_config_var("Py_ENABLE_SHARED"))
print(json.dumps({
    "version": list(sys.version_info[:2]),
    "shared": shared,
    "venv": all(importlib.util.find_spec(m) is not None for m in ("venv", "ensurepip")),
    "headers": os.path.exists(os.path.join(inc, "Python.h")),
    "executable": sys.executable,
}))
"""


@dataclass(frozen=True)
class Found:
    """What one candidate interpreter is."""

    path: str
    version: tuple[int, int]
    shared: bool
    venv: bool
    headers: bool

    @property
    def usable(self) -> bool:
        return self.version >= MIN_VERSION and self.venv


def candidates() -> list[str]:
    """Candidate paths in order, each real file once."""
    out: list[str] = []
    seen: set[str] = set()
    for p in [shutil.which(n) for n in NAMES] + [p for p in FIXED if os.access(p, os.X_OK)]:
        if p is None:
            continue
        real = os.path.realpath(p)
        if real not in seen:
            seen.add(real)
            out.append(p)
    return out


def probe(path: str) -> Found | None:
    """Ask ``path`` what it is; None if it does not answer as a Python should."""
    try:
        done = subprocess.run(
            [path, "-I", "-c", _PROBE], capture_output=True, text=True, timeout=20, check=True
        )
        d = json.loads(done.stdout)
        return Found(
            path=str(d["executable"]) or path,
            version=(int(d["version"][0]), int(d["version"][1])),
            shared=bool(d["shared"]),
            venv=bool(d["venv"]),
            headers=bool(d["headers"]),
        )
    except (OSError, subprocess.SubprocessError, ValueError, KeyError, IndexError, TypeError):
        return None


def pick(found: list[Found]) -> Found | None:
    """The first usable one with headers and a static libpython, else the first with
    headers, else the first usable one; None if none is usable."""
    usable = [f for f in found if f.usable]
    for good in (lambda f: f.headers and not f.shared, lambda f: f.headers, lambda f: True):
        for f in usable:
            if good(f):
                return f
    return None


def main(argv: list[str]) -> int:
    explain = "--explain" in argv
    found = []
    for path in candidates():
        f = probe(path)
        if explain:
            print(f"{path}: {f}", file=sys.stderr)
        if f is not None:
            found.append(f)
    best = pick(found)
    if best is None:
        print(
            f"pick_python: no Python >= {MIN_VERSION[0]}.{MIN_VERSION[1]} with venv and "
            f"ensurepip among {', '.join(NAMES + FIXED)}; install one or run make PY=...",
            file=sys.stderr,
        )
        return 1
    print(best.path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
