"""Where late LS messages wait: the air during each late message's wait, by who sent what.

For every LS message (a perception or a control) slower than ``--late-ms``, the airtime of
every channel exchange between its enqueue and its delivery is summed by sender role
(leader / worker) and access category (VO: LS messages and permit datagrams; BE: bulk
data and TCP acks), collisions apart. What is left of the wait is ``idle`` air (AIFS,
backoff, or a queue with nothing on the air). ``own ring`` is the share of the late
messages that found packets ahead of them in their own NIC ring (a robot's own bulk data
or acks, which its gate could have kept out); ``ahead`` the mean number found. Any
packet counts, so a leader's control always finds the same loop's earlier controls.

Read-only (the channel trace; results are those of the plain run)::

    python benchmarks/ls_attribution.py crl-20 all-low one-low --policies coorp \\
        --seeds 1-5 --phase random --json results/ls_attribution.json

Means ± 95% CI over seeds of each seed's per-message mean.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console
from rich.table import Table

from coorp.scenario import LsPhase, load_scenario, resolve_scenario
from coorp.sweep import mean_ci, parse_seeds
from coorp.units import NS_PER_MS, s
from coorp.workload import run_crl

KINDS = ("perception", "control")
SOURCES = ("W:VO", "W:BE", "L:VO", "L:BE", "collisions", "idle")


def attribute(
    scenario: str, policy: str, seed: int, phase: str, duration_s: float, late_ms: float
) -> dict[str, Any]:
    """One run: per LS kind, the late messages and the air during their waits (ms)."""
    sc = load_scenario(resolve_scenario(scenario))
    assert sc.workload is not None
    mpc = sc.workload.mpc.model_copy(update={"phase": LsPhase(phase)})
    sc = sc.model_copy(update={"workload": sc.workload.model_copy(update={"mpc": mpc})})
    result = run_crl(sc, policy, seed=seed, duration_ns=s(duration_s), timeseries=False, trace=True)
    trace = result.sim.trace or []
    starts = np.array([t[0] for t in trace], dtype=np.int64)
    ends = np.array([t[1] for t in trace], dtype=np.int64)
    leader = sc.workload.leader
    msgs = result.sim.messages
    late_ns = round(late_ms * NS_PER_MS)
    out: dict[str, Any] = {"scenario": scenario, "policy": policy, "seed": seed, "phase": phase,
                           "miss_rate": result.violation_rate}  # fmt: skip
    flows = msgs["flow"].astype(str)
    for kind in KINDS:
        mine = np.char.startswith(flows, f"{kind}:")
        lat = msgs["latency_ns"][mine]
        late = np.flatnonzero(mine & (msgs["latency_ns"] > late_ns))
        air: Counter[str] = Counter()
        for i in late:
            e, d = int(msgs["created_ns"][i]), int(msgs["delivered_ns"][i])
            j = int(np.searchsorted(ends, e, side="right"))
            while j < len(trace) and starts[j] < d:
                t = trace[j]
                overlap = min(ends[j], d) - max(starts[j], e)
                if t[2]:
                    key = "collisions"
                else:
                    who = "L" if t[3][0] == leader else "W"
                    key = f"{who}:{'VO' if t[4][0] == 'VO' else 'BE'}"
                air[key] += int(overlap)
                j += 1
        n = late.size
        waited = float(np.sum(msgs["latency_ns"][late])) if n else 0.0
        busy = sum(air.values())
        per = {k: (air[k] / n / NS_PER_MS if n else 0.0) for k in SOURCES if k != "idle"}
        per["idle"] = (waited - busy) / n / NS_PER_MS if n else 0.0
        ahead = msgs["hw_depth_first"][late]
        out[kind] = {
            "messages": int(lat.size),
            "late": int(n),
            "late %": 100.0 * n / lat.size if lat.size else float("nan"),
            "mean wait ms": waited / n / NS_PER_MS if n else float("nan"),
            **{f"{k} ms": v for k, v in per.items()},
            "own ring %": 100.0 * float(np.mean(ahead > 0)) if n else float("nan"),
            "ahead": float(np.mean(ahead)) if n else float("nan"),
        }
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("scenarios", nargs="+", help="scenario files or built-in names")
    ap.add_argument("--policies", default="coorp")
    ap.add_argument("--seeds", default="1-5")
    ap.add_argument("--phase", choices=[p.value for p in LsPhase], default="random")
    ap.add_argument("--duration", type=float, default=20.0, help="simulated seconds")
    ap.add_argument("--late-ms", type=float, default=10.0, help="a message slower is late")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    try:
        seeds = parse_seeds(args.seeds)
    except ValueError as exc:
        ap.error(f"--seeds {args.seeds!r}: {exc}")
    console = Console(width=None if sys.stdout.isatty() else 200)
    runs = [
        attribute(sc, pol, seed, args.phase, args.duration, args.late_ms)
        for sc in args.scenarios
        for pol in args.policies.split(",")
        for seed in seeds
    ]
    cols = ["late %", "mean wait ms", *(f"{k} ms" for k in SOURCES), "own ring %", "ahead"]
    table = Table(title=f"LS messages > {args.late_ms:g} ms, {args.phase} phases, "
                        f"seeds {args.seeds} (mean ± 95% CI over seeds)")  # fmt: skip
    for c in ["scenario", "policy", "kind", "miss %", *cols]:
        table.add_column(c, justify="left" if c in ("scenario", "policy", "kind") else "right")
    summary = []
    for sc in args.scenarios:
        for pol in args.policies.split(","):
            group = [r for r in runs if r["scenario"] == sc and r["policy"] == pol]
            miss = mean_ci(100 * r["miss_rate"] for r in group)
            for kind in KINDS:
                cells = {c: mean_ci(r[kind][c] for r in group) for c in cols}
                row = {c: [v.mean, v.ci95] for c, v in cells.items()}
                summary.append({"scenario": sc, "policy": pol, "kind": kind,
                                "miss %": miss.mean, **row})  # fmt: skip
                shown = (f"{v.mean:.1f} ± {v.ci95:.1f}" for v in cells.values())
                table.add_row(sc, pol, kind, f"{miss.mean:.1f}", *shown)
    console.print(table)
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"args": vars(args) | {"json": str(args.json)},
                                         "summary": summary, "runs": runs}, indent=1))  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
