"""The runtime measured on the air (benchmarks/emulate.py ``--sections transparent_wifi``).

``benchmarks/transparent.py --medium wifi`` for each NIC ring model: crl-5's leader and
four robots as stations of the emulated channel, running the unmodified MPC loop (Cyclone
DDS or Zenoh) and plain TCP uploads, in each mode: ``none`` (no Coorp; the programs' own
marking, i.e. none: everything best effort), ``marking`` (Coorp's transparent agents
marking LS only: LS in AC_VO, bulk in AC_BE, nothing coordinated — EDCA as the simulator
has it), ``transparent`` (transparent COORP) and ``api`` (the loop and uploads on Coorp's
API). The MPC loop's programs run at SCHED_FIFO ``--tw-ls-rt`` (5, below the emulator's
10; the ``api`` program whole), so that on this shared 2-core host its latencies measure
the channel and the middleware more than the scheduler.

Every repetition runs every mode once, in the same order, on the same channel (a
``--tw-repetitions`` of them, each ``--tw-duration`` seconds measured). One row per (app,
mode, ring) in the JSON (exactly ``app, mode, ring, ls_miss_rate, ls_p99_ms, bulk_mbps``:
miss rate and p99 pooled over the repetitions' messages, bulk their mean); the details
file has, per row, the mean and 95% CI over the repetitions of the miss rate, the p99 and
the bulk, the bulk over the ``none`` bulk of the same repetition, per-direction latencies,
the 1-min load at each run, and every run.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

import transparent as tb  # benchmarks/transparent.py
from coorp.emulate import GRO_DEFAULT
from coorp.stats import mean_ci


def _ci(values: list[float]) -> dict[str, float | int | None]:
    m = mean_ci(values)

    def num(x: float) -> float | None:
        return None if math.isnan(x) else x

    return {"mean": num(m.mean), "ci95": num(m.ci95), "n": m.n}


def _pct(values: list[float], q: float) -> float | None:
    return float(np.percentile(values, q)) if values else None


def _direction(rows: list[dict[str, Any]], key: str) -> dict[str, Any]:
    """Pooled one-way latency of one direction (``perception_ms`` or ``command_ms``)."""
    lat = [x for r in rows for x in r.get(key, [])]
    expected = sum(r["ls_expected"] for r in rows) // 2
    late = sum(1 for x in lat if x > tb.BOUND_MS)
    return {"p50_ms": _pct(lat, 50), "p99_ms": _pct(lat, 99), "received": len(lat),
            "expected": expected, "miss_rate": (late + max(expected - len(lat), 0)) / expected
            if expected else None}  # fmt: skip


def emulator_lag(
    series: list[dict[str, Any]], started_at: float | None, t0: float, t1: float
) -> dict[str, Any]:
    """The emulator's real time during one run (wall ``time.monotonic()`` from ``t0`` to
    ``t1``), from its per-second report ``series`` (counted from ``started_at``): the
    frames later than 1 ms over the frames written, and the worst second's lag p99."""
    if started_at is None:
        return {"frames_late": None, "worst_second_lag_p99_ms": None}
    secs = [s for s in series if t0 <= started_at + s["t_ns"] / 1e9 <= t1 + 1.0]
    frames = sum(int(s.get("frames", 0)) for s in secs)
    late = sum(int(s["late"]) for s in secs)
    worst = max((s["lag_p99_ms"] for s in secs), default=None)
    return {"frames_late": late / frames if frames else None, "worst_second_lag_p99_ms": worst}


def describe(measured: list[dict[str, Any]], ring: str) -> list[dict[str, Any]]:
    """Per (app, mode): pooled values and the mean and 95% CI over the repetitions."""
    out = []
    for app, mode in dict.fromkeys((r["app"], r["mode"]) for r in measured):
        mine = [r for r in measured if (r["app"], r["mode"]) == (app, mode)]
        per_rep = [tb.pooled([r]) for r in mine]
        late = [r["emulator"]["frames_late"] for r in mine
                if r.get("emulator", {}).get("frames_late") is not None]  # fmt: skip
        ratios = []
        for r in mine:
            plain = tb._plain(measured, r, "bulk_mbps", r["repetition"])
            if mode != "none" and plain > 0:
                ratios.append(r["bulk_mbps"] / plain)
        out.append({
            "app": app, "mode": mode, "ring": ring, **tb.pooled(mine),
            "bulk_mbps": float(np.mean([r["bulk_mbps"] for r in mine])),
            "ls_miss_rate_ci": _ci([p["ls_miss_rate"] for p in per_rep]),
            "ls_p99_ms_ci": _ci([p["ls_p99_ms"] for p in per_rep if p["ls_p99_ms"] is not None]),
            "bulk_mbps_ci": _ci([r["bulk_mbps"] for r in mine]),
            "bulk_over_none_ci": _ci(ratios) if ratios else None,
            "perception": _direction(mine, "perception_ms"),
            "command": _direction(mine, "command_ms"),
            "reaction_ms": {"p50": _pct([x for r in mine for x in r.get("reaction_ms", [])], 50),
                            "p99": _pct([x for r in mine for x in r.get("reaction_ms", [])], 99)},
            "intact": all(r["intact"] for r in mine),
            "emulator_frames_late_ci": _ci(late) if late else None,
            "load": [r["load"] for r in mine],
            "repetitions": len(mine),
        })  # fmt: skip
    return out


@contextlib.contextmanager
def _folder(logs: Path | None, ring: str) -> Any:
    """Where the runs' team files and every process's stderr go: ``logs/ring`` when
    given and kept (the agents' stop lines carry their relays' pacing counters), else a
    temporary folder."""
    if logs is None:
        with tempfile.TemporaryDirectory(prefix="coorp-tw-") as tmp:
            yield tmp
        return
    d = logs / ring
    d.mkdir(parents=True, exist_ok=True)
    yield str(d)


def transparent_wifi(args: Any, details: dict[str, Any]) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    runs = details.setdefault("transparent_wifi", [])
    apps = [a for a in args.tw_apps.split(",") if a]
    modes = [m for m in args.tw_modes.split(",") if m]
    for ring in args.tw_rings.split(","):
        targs = argparse.Namespace(
            robots=4, duration=args.tw_duration, warmup=args.tw_warmup, seed=1,
            medium="wifi", scenario="crl-5", ring=ring, rate_mbit=0.0,
            ls_rt_priority=args.tw_ls_rt, agent_rt_priority=args.tw_agent_rt,
            # benchmarks/transparent.py's cell options (issue 34), at their defaults
            timeslice_ms=5000.0, agent_scheduling="nice:-10", lead=3.0,
            cpu_hog=getattr(args, "tw_cpu_hog", 0),
            sink_rt_priority=getattr(args, "tw_sink_rt", 0),
            gate_completion=getattr(args, "tw_gate_completion", "") or None,
            ack_category=getattr(args, "tw_ack_category", "") or None,
            ls_category=getattr(args, "tw_ls_category", "") or None,
            emu_split_cpus=getattr(args, "split_cpus", True),
            emu_gro=getattr(args, "gro", GRO_DEFAULT),
        )  # fmt: skip
        measured: list[dict[str, Any]] = []
        with (
            _folder(getattr(args, "tw_logs", None), ring) as tmp,
            tb.network(targs, "wifi") as net,
        ):
            net.create(sysctls=tb.WIFI_SYSCTLS)
            if args.tw_tcp_cc:
                tb.route_congestion_control(net, args.tw_tcp_cc)
            for rep in range(args.tw_repetitions):
                todo = [(a, m) for a in apps for m in modes if m != "api"]
                todo += [("coorp", "api")] if "api" in modes else []
                for app, mode in todo:
                    t0 = time.monotonic()
                    row = tb.measure(net, Path(tmp), targs, app=app, mode=mode, medium="wifi")
                    measured.append(row | {"repetition": rep, "span": (t0, time.monotonic())})
                    print(f"transparent_wifi {ring}: {tb._line(rep, row)} (load "
                          f"{row['load'][-1]:.1f})", flush=True)  # fmt: skip
            emulator = net.stop().data
        for r in measured:  # the emulator's real time in each run, from its report
            r["emulator"] = emulator_lag(emulator.get("series", []), net.started_at, *r["span"])
        described = describe(measured, ring)
        for r in described:
            rows.append({k: r[k] for k in ("app", "mode", "ring", "ls_miss_rate", "ls_p99_ms",
                                           "bulk_mbps")})  # fmt: skip
        runs.append({
            "ring": ring, "ls_rt_priority": tb.ls_rt_priority(targs, "wifi"),
            "agent_rt_priority": args.tw_agent_rt, "tcp_cc": args.tw_tcp_cc or "host default",
            "sink_rt_priority": targs.sink_rt_priority, "cpu_hog": targs.cpu_hog,
            "gate_completion": targs.gate_completion or "default (departure)",
            "ack_category": targs.ack_category or "default (AC_VI)",
            "ls_category": targs.ls_category or "default (AC_VO)",
            "rows": described,
            "runs": [tb._without_samples(r) for r in measured],
            "emulator": {k: emulator[k] for k in ("verdict", "frame_lag", "by_ac", "load_start",
                                                  "load_end", "cpu", "rps_cpus")
                         if k in emulator},
        })  # fmt: skip
    return rows
