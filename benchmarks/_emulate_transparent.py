"""The runtime measured on the air (benchmarks/emulate.py ``--sections transparent_wifi``).

``benchmarks/transparent.py --medium wifi`` for each NIC ring model: crl-5's leader and
four robots as stations of the emulated channel, running the unmodified MPC loop (Cyclone
DDS or Zenoh) and plain TCP uploads, in each mode: ``none`` (no Coorp; EDCA with the
programs' own marking), ``marking`` (Coorp's transparent agents marking LS only),
``transparent`` (transparent COORP) and ``api`` (the loop and uploads on Coorp's API).
One row per (app, mode, ring), pooled over ``--tw-repetitions``: LS miss rate (one-way,
> 33 ms or lost) and p99, and the bulk Mb/s that reached the leader in the window.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path
from typing import Any

import transparent as tb  # benchmarks/transparent.py


def transparent_wifi(args: Any, details: dict[str, Any]) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    runs = details.setdefault("transparent_wifi", [])
    apps = [a for a in args.tw_apps.split(",") if a]
    modes = [m for m in args.tw_modes.split(",") if m]
    for ring in args.tw_rings.split(","):
        targs = argparse.Namespace(
            robots=4, duration=args.tw_duration, warmup=args.tw_warmup, seed=1,
            medium="wifi", scenario="crl-5", ring=ring, rate_mbit=0.0,
        )  # fmt: skip
        measured: list[dict[str, Any]] = []
        with tempfile.TemporaryDirectory(prefix="coorp-tw-") as tmp, tb.network(targs) as net:
            net.create(sysctls=tb.WIFI_SYSCTLS)
            for rep in range(args.tw_repetitions):
                todo = [(a, m) for a in apps for m in modes if m != "api"]
                todo += [("coorp", "api")] if "api" in modes else []
                for app, mode in todo:
                    row = tb.measure(net, Path(tmp), targs, app=app, mode=mode)
                    measured.append(row | {"repetition": rep})
                    print(f"transparent_wifi {ring}: {tb._line(rep, row)}", flush=True)
            emulator = net.stop().data
        summary = tb.summarize(measured, [])
        for r in summary["results"]:
            rows.append({
                "app": r["app"], "mode": r["mode"], "ring": ring,
                "ls_miss_rate": r["ls_miss_rate"], "ls_p99_ms": r["ls_p99_ms"],
                "bulk_mbps": r["bulk_mbps"],
            })  # fmt: skip
        runs.append({"ring": ring, "summary": {k: v for k, v in summary.items() if k != "runs"},
                     "emulator": {k: emulator[k] for k in ("verdict", "frame_lag",
                                                           "load_start", "load_end")}})  # fmt: skip
    return rows
