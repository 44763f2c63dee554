"""Broadcast benchmark (thesis Fig. 2.4 style): same as ``coorp bench broadcast``.

Usage: ``python benchmarks/broadcast.py --sizes 1MB,10MB,50MB --subscribers 4 --json out.json``
"""

from __future__ import annotations

import sys

from coorp.cli import main

if __name__ == "__main__":
    main(["bench", "broadcast", *sys.argv[1:]])
