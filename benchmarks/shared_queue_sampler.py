"""Sample the shared queue of ``coorp learn --runtime --medium shared`` while it runs.

Run as root beside the command (any order); for ``--seconds`` it watches every run's hub
namespace (``coorpl-*-ap``, one per run, made and removed by the command) and reads
the ``tbf`` on ``air0`` -- the one queue every packet crosses -- every few ms: the
bytes it has sent and its backlog. One JSON line per reading: ``[namespace,
monotonic_ns, bytes_sent, backlog_bytes, drops]`` (the host's monotonic clock, the one
the roles' receipts carry). ``benchmarks/learn_sync_timeline.py OUT --queue FILE``
then says how busy the queue was during each run's rounds.

Usage: ``sudo .venv/bin/python benchmarks/shared_queue_sampler.py FILE --seconds 600``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any


def _hubs(seen: set[str]) -> list[str]:
    try:
        names = os.listdir("/run/netns")
    except FileNotFoundError:
        return []
    return sorted(
        n for n in names if n.startswith("coorpl-") and n.endswith("-ap") and n not in seen
    )


def _sample(ns: Any, idx: int) -> tuple[int, int, int] | None:
    for m in ns.get_qdiscs(index=idx):
        if m.get_attr("TCA_KIND") == "tbf":
            st = m.get_attr("TCA_STATS2")
            q = st.get_attr("TCA_STATS_QUEUE")
            basic = st.get_attr("TCA_STATS_BASIC")
            return basic.get("bytes"), q.get("backlog"), q.get("drops")
    return None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--seconds", type=float, default=600.0)
    ap.add_argument("--every-ms", type=float, default=2.0)
    args = ap.parse_args(argv)
    try:
        from pyroute2 import NetNS
    except ImportError:
        print("needs pyroute2 (the transparent extra)", file=sys.stderr)
        return 2
    end = time.monotonic() + args.seconds
    seen: set[str] = set()
    with args.out.open("w") as out:
        while time.monotonic() < end:
            hubs = _hubs(seen)
            if not hubs:
                time.sleep(0.1)
                continue
            name = hubs[0]
            try:
                ns = NetNS(name)
            except Exception:  # gone already
                seen.add(name)
                continue
            try:
                idx = ns.link_lookup(ifname="air0")
                if not idx or _sample(ns, idx[0]) is None:
                    time.sleep(0.05)  # the run is still building its network
                    continue
                seen.add(name)
                # A namespace this process holds open outlives its name: stop once
                # the run removed it.
                while time.monotonic() < end and os.path.exists(f"/run/netns/{name}"):
                    t = time.monotonic_ns()
                    got = _sample(ns, idx[0])
                    if got is None:
                        break
                    out.write(json.dumps([name, t, *got]) + "\n")
                    time.sleep(args.every_ms / 1e3)
            except Exception as exc:  # the run ended and its namespace went with it
                print(f"{name}: {type(exc).__name__}: {exc}", file=sys.stderr)
            finally:
                ns.close()
            out.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
