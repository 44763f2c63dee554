"""A fleet, measured: per-channel targets, what a roam costs, how fast (issue 37).

    python benchmarks/fleet.py --json results/fleet.json                  # 5 seeds, 20 s
    python benchmarks/fleet.py --seeds 1-2 --duration 5 --json /tmp/f.json   # quicker

Three parts, each from a command anyone can re-run:

* **cells**: ``fleet-50`` and ``fleet-200`` under every fleet policy (``edca``,
  ``schedwifi``, ``coorp``, ``coorp-team``, ``oracle``) and the BH-only reference, over
  the seeds (the sweep machinery: ``coorp sweep`` runs the same tasks, cached in
  ``--cache``): per channel, the loops missed and the learning throughput against the
  BH-only run's. The table beside the JSON gives mean ± 95% CI and checks issue 9's two
  targets per channel: COORP's misses <= max(SchedWiFi's, 1%) and its utilization >=
  0.9 x min(EDCA's, the oracle's).
* **roam**: over ``fleet-200``'s COORP runs, the longest time from a robot's joining its
  new cell to its first LS send inside a protection window (``protection_gap_ms_max``,
  target <= one LS period) and the association gap itself (``association_gap_ms``,
  reported apart).
* **speed**: ``fleet-200`` (and ``fleet-50``) once per policy in a fresh process each:
  simulated seconds per CPU second of the whole run (setup, simulation, results), the
  wall-clock factor beside it on the console, and the process's peak resident memory.

The JSON has exactly the keys of issue 37's deliverable 5. ``runtime`` needs root and
network namespaces and is measured with ``--runtime`` (nulls without it):

* **runtime** (benchmarks/_fleet_runtime.py): two cells' leaders peering over sockets
  with their robots on one shared ``tbf`` queue, ``--runtime-runs`` times: BH write
  stretches of two robots that overlapped (``overlapping_bh_senders``, beside the
  per-team baseline's on the console) and a robot moved between the cells mid-transfer
  (``ls_miss_rate_across_move``: its LS messages lost or late within 2 s of the move).

    sudo .venv/bin/python benchmarks/fleet.py --only-runtime --json /tmp/fleet-rt.json
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing
import os
import resource
import sys
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from coorp.scenario import load_scenario, resolve_scenario
from coorp.seeds import seeds_option
from coorp.sweep import RunCache, aggregate, parse_sweep_spec, plan_sweep, run_sweep

POLICIES = ("edca", "schedwifi", "coorp", "coorp-team", "oracle")
SPEED_POLICIES = ("edca", "coorp")


def _cells(rows: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Per scenario, channel and policy: the mean miss rate and utilization (JSON rows),
    and the same with CIs and n for the table."""
    agg = aggregate(rows)
    by: dict[tuple[str, str, str], dict[str, Any]] = {}
    for a in agg:
        metric = str(a["metric"])
        for field, prefix in (("miss_rate", "channel_miss_rate_"),
                              ("utilization", "channel_utilization_")):  # fmt: skip
            if metric.startswith(prefix) and a["policy"] != "bh-only":
                ch = metric[len(prefix) :]
                row = by.setdefault((a["scenario"], ch, a["policy"]), {})
                row[field] = (a["mean"], a["ci95"], a["n"])
    json_rows, table = [], []
    for (sc, ch, policy), v in sorted(by.items(), key=lambda kv: (kv[0][0], int(kv[0][1]))):
        miss = v.get("miss_rate", (math.nan, math.nan, 0))
        util = v.get("utilization", (math.nan, math.nan, 0))
        json_rows.append({
            "scenario": sc, "channel": int(ch), "policy": policy,
            "miss_rate": _num(miss[0]), "utilization": _num(util[0]),
        })  # fmt: skip
        table.append({"scenario": sc, "channel": ch, "policy": policy, "miss": miss, "util": util})
    return json_rows, table


def _num(v: Any) -> float | None:
    return float(v) if isinstance(v, int | float) and math.isfinite(v) else None


def _targets(table: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Issue 9's two targets for COORP, per scenario and channel."""
    out = []
    keys = sorted({(r["scenario"], r["channel"]) for r in table})
    at = {(r["scenario"], r["channel"], r["policy"]): r for r in table}
    for sc, ch in keys:
        coorp = at.get((sc, ch, "coorp"))
        if coorp is None:
            continue
        sw = at.get((sc, ch, "schedwifi"), {}).get("miss", (math.nan,))[0]
        bar_miss = max(sw if math.isfinite(sw) else 0.0, 0.01)
        utils = [at.get((sc, ch, p), {}).get("util", (math.nan,))[0] for p in ("edca", "oracle")]
        bar_util = 0.9 * min(u for u in utils if math.isfinite(u)) if any(
            math.isfinite(u) for u in utils
        ) else math.nan  # fmt: skip
        m, u = coorp["miss"][0], coorp["util"][0]
        out.append({
            "scenario": sc, "channel": ch, "miss": m, "bar_miss": bar_miss,
            "miss_met": m <= bar_miss, "util": u, "bar_util": bar_util, "util_met": u >= bar_util,
            "schedwifi_feasible": math.isfinite(sw),
        })  # fmt: skip
    return out


def _roam(rows: list[dict[str, Any]], scenario: str) -> dict[str, Any]:
    """The roam block from the COORP runs of ``scenario`` (per-run metrics of the sweep)."""
    mine = [r for r in rows if r["scenario"] == scenario and r["policy"] == "coorp"]

    def values(metric: str) -> list[float]:
        return [r["value"] for r in mine if r["metric"] == metric and math.isfinite(r["value"])]

    gaps = values("roam_protection_gap_ms_max")
    assoc = values("roam_association_gap_ms")
    handovers = values("roam_handovers")
    after = values("roam_misses_after_join")
    return {
        "protection_gap_ms_max": max(gaps) if gaps else None,
        "association_gap_ms": sum(assoc) / len(assoc) if assoc else None,
        "_handovers": sum(handovers),
        "_misses_after_join": sum(after),
        "_runs": len(handovers),
    }


def _speed_one(args: tuple[str, str, float, int]) -> dict[str, Any]:
    """One run in a fresh process: CPU and wall time, peak memory."""
    scenario, policy, duration_s, seed = args
    from coorp.workload import run_fleet

    sc = load_scenario(resolve_scenario(scenario))
    c0, w0 = time.process_time(), time.perf_counter()
    run_fleet(sc, policy, seed=seed, duration_ns=round(duration_s * 1e9))
    cpu, wall = time.process_time() - c0, time.perf_counter() - w0
    rss_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {"scenario": sc.name, "policy": policy, "realtime_factor": duration_s / cpu,
            "wall_factor": duration_s / wall, "rss_mb": rss_kb / 1024, "cpu_s": cpu,
            "wall_s": wall}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    ap.add_argument("--json", type=Path, required=True, help="where to write the results")
    ap.add_argument("--scenarios", default="fleet-50,fleet-200")
    ap.add_argument("--policies", default=",".join(POLICIES))
    ap.add_argument("--seeds", default="1-5")
    ap.add_argument("--duration", type=float, default=20.0, help="simulated s per run")
    ap.add_argument("--speed-scenarios", default="fleet-200,fleet-50")
    ap.add_argument("--speed-policies", default=",".join(SPEED_POLICIES))
    ap.add_argument("--speed-duration", type=float, default=20.0)
    ap.add_argument("--roam-scenario", default="fleet-200")
    ap.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1))
    ap.add_argument("--cache", type=Path, default=Path("results/fleet-cache"))
    ap.add_argument("--no-speed", action="store_true", help="skip the speed part")
    ap.add_argument("--runtime", action="store_true",
                    help="also run the runtime part (namespaces; needs root)")  # fmt: skip
    ap.add_argument("--only-runtime", action="store_true",
                    help="the runtime part alone (cells and speed empty, roam null)")  # fmt: skip
    ap.add_argument("--runtime-runs", type=int, default=5)
    args = ap.parse_args(argv)
    if args.only_runtime:
        return _only_runtime(args)
    console = Console(width=150) if not Console().is_terminal else Console()
    scenarios = [s.strip() for s in args.scenarios.split(",") if s.strip()]
    policies = [p.strip() for p in args.policies.split(",") if p.strip()]
    seeds = seeds_option(args.seeds)
    load0 = os.getloadavg()[0]
    t0 = time.perf_counter()
    spec = parse_sweep_spec({"scenarios": scenarios, "policies": policies, "seeds": seeds,
                             "duration_s": args.duration})  # fmt: skip
    plan = plan_sweep(spec)
    result = run_sweep(plan, jobs=args.jobs, cache=RunCache(args.cache))
    rows = result.rows()
    cells, table = _cells(rows)
    roam_full = _roam(rows, args.roam_scenario)
    speed: list[dict[str, Any]] = []
    if not args.no_speed:
        tasks = [(sc, p, args.speed_duration, seeds[0])
                 for sc in args.speed_scenarios.split(",") if sc.strip()
                 for p in args.speed_policies.split(",") if p.strip()]  # fmt: skip
        ctx = multiprocessing.get_context("spawn")
        for task in tasks:  # one at a time: the timings must not share the cores
            with ctx.Pool(1, maxtasksperchild=1) as pool:
                speed.append(pool.apply(_speed_one, (task,)))
    wall = time.perf_counter() - t0
    load1 = os.getloadavg()[0]
    doc = {
        "cells": cells,
        "roam": {k: roam_full[k] for k in ("protection_gap_ms_max", "association_gap_ms")},
        "speed": [
            {k: s[k] for k in ("scenario", "policy", "realtime_factor", "rss_mb")} for s in speed
        ],
        "runtime": _runtime(args, console),
    }
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(doc, indent=2) + "\n")
    _print(console, table, _targets(table), roam_full, speed, args, seeds, wall, load0, load1,
           result.executed, result.cached)  # fmt: skip
    console.print(f"wrote {args.json}")
    return 0


def _runtime(args: Any, console: Console) -> dict[str, Any]:
    """The runtime part's two numbers (nulls without ``--runtime``), its table printed."""
    if not (args.runtime or args.only_runtime):
        return {"overlapping_bh_senders": None, "ls_miss_rate_across_move": None}
    from _fleet_runtime import netns_unavailable, run_runtime

    reason = netns_unavailable()
    if reason is not None:
        raise SystemExit(f"--runtime: {reason}")
    load0 = os.getloadavg()[0]
    t0 = time.perf_counter()
    rt = run_runtime(args.runtime_runs)
    wall = time.perf_counter() - t0
    t = Table(title=f"runtime in namespaces: {args.runtime_runs} rounds (two leaders, one tbf "
                    "queue; a robot moved between cells)")  # fmt: skip
    for c in ("round", "peered overlaps", "per-team overlaps", "per-team overlap ms",
              "move: LS misses (late+lost)", "late in sink stalls", "LS sends",
              "unmoved a4: misses / sends",
              "followed ms"):  # fmt: skip
        t.add_column(c, justify="right")
    for i, r in enumerate(rt["rounds"], 1):
        t.add_row(str(i), str(r["peered"]["overlaps"] + r["move"]["overlaps"]),
                  str(r["per-team"]["overlaps"]), f"{r['per-team']['overlap_ms']:.0f}",
                  f"{r['move']['misses']} ({r['move']['late']}+{r['move']['lost']})",
                  str(r["move"]["late_sink_starved"]), str(r["move"]["sends"]),
                  f"{r['move']['still_misses']} / {r['move']['still_sends']}",
                  f"{r['move']['follow_ms']:.0f}" + _reruns(r["move"]))  # fmt: skip
    console.print(t)
    rate = rt["ls_miss_rate_across_move"]
    console.print(
        f"overlapping_bh_senders {rt['overlapping_bh_senders']} (target 0), "
        f"ls_miss_rate_across_move {rate if rate is None else f'{100 * rate:.2f}%'} "
        f"(target <= 1%); {wall:.0f} s wall, 1-min load {load0:.1f} -> "
        f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} cores"
    )
    return {k: rt[k] for k in ("overlapping_bh_senders", "ls_miss_rate_across_move")}


def _reruns(move: dict[str, Any]) -> str:
    n = move.get("reruns", 0)
    return f" (run {n + 1}: the robot had not moved)" if n else ""


def _only_runtime(args: Any) -> int:
    console = Console(width=150) if not Console().is_terminal else Console()
    doc = {
        "cells": [],
        "roam": {"protection_gap_ms_max": None, "association_gap_ms": None},
        "speed": [],
        "runtime": _runtime(args, console),
    }
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(doc, indent=2) + "\n")
    console.print(f"wrote {args.json}")
    return 0


def _pm(v: tuple[float, float, int], pct: bool) -> str:
    mean, ci, _n = v
    if not math.isfinite(mean):
        return "-"
    k = 100 if pct else 1
    return f"{mean * k:.2f} ± {ci * k:.2f}" if math.isfinite(ci) else f"{mean * k:.2f}"


def _print(
    console: Console, table: list[dict[str, Any]], targets: list[dict[str, Any]],
    roam: dict[str, Any], speed: list[dict[str, Any]], args: Any, seeds: list[int],
    wall: float, load0: float, load1: float, executed: int, cached: int,
) -> None:  # fmt: skip
    t = Table(title=f"per channel: mean ± 95% CI over seeds {seeds}, {args.duration:g} s each")
    for c in ("scenario", "channel", "policy", "miss %", "util. %"):
        t.add_column(c, justify="left" if c in ("scenario", "policy") else "right")
    for r in table:
        t.add_row(r["scenario"], r["channel"], r["policy"], _pm(r["miss"], True),
                  _pm(r["util"], True))  # fmt: skip
    console.print(t)
    t = Table(title="COORP against issue 9's targets, per channel")
    for c in ("scenario", "channel", "miss %", "bar (max(SchedWiFi, 1%))", "met",
              "util. %", "bar (0.9 min(EDCA, oracle))", "met"):  # fmt: skip
        t.add_column(c, justify="right")
    for r in targets:
        t.add_row(r["scenario"], r["channel"], f"{100 * r['miss']:.2f}",
                  f"{100 * r['bar_miss']:.2f}" + ("" if r["schedwifi_feasible"] else " (1%)"),
                  "yes" if r["miss_met"] else "NO", f"{100 * r['util']:.1f}",
                  f"{100 * r['bar_util']:.1f}", "yes" if r["util_met"] else "NO")  # fmt: skip
    console.print(t)
    console.print(
        f"roam ({args.roam_scenario}, coorp, {roam['_runs']} runs, {roam['_handovers']:.0f} "
        f"hand-overs): protection gap max {roam['protection_gap_ms_max']} ms, association gap "
        f"{roam['association_gap_ms']} ms, loops missed within a period after joining: "
        f"{roam['_misses_after_join']:.0f}"
    )
    if speed:
        t = Table(title=f"speed: {args.speed_duration:g} s simulated, seed {seeds[0]}, one run "
                        "at a time in a fresh process")  # fmt: skip
        for c in ("scenario", "policy", "sim s / CPU s", "sim s / wall s", "CPU s",
                  "peak RSS MB"):  # fmt: skip
            t.add_column(c, justify="right")
        for s in speed:
            t.add_row(
                s["scenario"], s["policy"], f"{s['realtime_factor']:.1f}",
                f"{s['wall_factor']:.1f}", f"{s['cpu_s']:.1f}", f"{s['rss_mb']:.0f}",
            )  # fmt: skip
        console.print(t)
    console.print(f"{executed} runs executed, {cached} from cache; {wall:.0f} s wall; "
                  f"1-min load {load0:.1f} -> {load1:.1f} on {os.cpu_count()} cores")  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
