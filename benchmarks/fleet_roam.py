"""What each hand-over of a fleet costs, one line per hand-over (issue 37's roam target).

    python benchmarks/fleet_roam.py                       # fleet-200, coorp, seeds 1-5, 10 s
    python benchmarks/fleet_roam.py --seeds 4 --duration 6 --policy coorp-team

benchmarks/fleet.py reports the worst protection gap over the runs; this script shows
the distribution behind it, the association gap apart. Per hand-over:

* ``assoc``: the association gap (off the air: scan + association, or fast transition);
* ``first send``: from the join to the robot's first loop send (its camera's phase:
  anywhere in one period, plus its send delay);
* ``protected after``: from the join to its first send inside a protection window
  (``protection_gap`` of the roam metrics; the target is <= one LS period) — equal to
  ``first send`` when that send was protected;
* the first loop's reaction after the join (the deadline is 33.3 ms).

Beside them, the reference for "protected": of the robots' later sends in the periods
watched after each join (the 2nd to the 8th), the share outside a window — the time
model's ordinary misses, which any send risks, hand-over or not.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from typing import Any

import numpy as np

from coorp.scenario import load_scenario, resolve_scenario
from coorp.seeds import seeds_option
from coorp.workload import run_fleet

MS = 1e6


def _t95(n: int) -> float:
    # Student's t, two-sided 95%, for n - 1 degrees of freedom (n <= 6 here; 1.96 above).
    return {2: 12.71, 3: 4.30, 4: 3.18, 5: 2.78, 6: 2.57}.get(n, 1.96)


def _mean_ci(xs: list[float]) -> str:
    if not xs:
        return "-"
    m = float(np.mean(xs))
    if len(xs) < 2:
        return f"{m:.2f}"
    return f"{m:.2f} ± {_t95(len(xs)) * float(np.std(xs, ddof=1)) / math.sqrt(len(xs)):.2f}"


def one_run(scenario: str, policy: str, seed: int, duration_s: float) -> dict[str, Any]:
    sc = load_scenario(resolve_scenario(scenario))
    res = run_fleet(sc, policy, seed=seed, duration_ns=round(duration_s * 1e9))
    by: dict[str, list[Any]] = {}
    for rec in res.loops:
        by.setdefault(rec.robot, []).append(rec)
    rows, later, later_out = [], 0, 0
    for robot, src, dst, _decided, left, joined in res.handovers:
        if joined + 2 * res.period_ns > res.duration_ns:
            continue  # too close to the end to tell (as the roam metrics)
        sent = [r for r in by.get(robot, []) if r.send_ns >= joined]
        watched = [r for r in sent if r.protected is not None]
        first_prot = next((r.send_ns for r in watched if r.protected), None)
        for r in watched[1:]:
            later += 1
            later_out += not r.protected
        first = sent[0] if sent else None
        rows.append({
            "seed": seed, "robot": robot, "from": src, "to": dst,
            "assoc_ms": (joined - left) / MS,
            "first_send_ms": (first.send_ns - joined) / MS if first else math.nan,
            "protected_ms": (first_prot - joined) / MS if first_prot is not None else math.nan,
            "first_protected": bool(watched and watched[0].protected),
            "reaction_ms": (first.reaction_ns or math.inf) / MS if first else math.nan,
        })  # fmt: skip
    return {"rows": rows, "later": later, "later_out": later_out, "period_ms": res.period_ns / MS}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    ap.add_argument("--scenario", default="fleet-200")
    ap.add_argument("--policy", default="coorp")
    ap.add_argument("--seeds", default="1-5")
    ap.add_argument("--duration", type=float, default=10.0, help="simulated s per run")
    args = ap.parse_args(argv)
    load0 = os.getloadavg()[0]
    runs = [one_run(args.scenario, args.policy, s, args.duration) for s in seeds_option(args.seeds)]
    rows = [r for run in runs for r in run["rows"]]
    if not rows:
        print("no hand-over far enough from the end of the run", file=sys.stderr)
        return 1
    period = runs[0]["period_ms"]
    print(f"{'seed':>4} {'robot':>6} {'cell':>10} {'assoc':>6} {'first send':>10} "
          f"{'protected after':>15} {'reaction':>8}  (ms)")  # fmt: skip
    for r in rows:
        flag = "" if r["first_protected"] else "  <- first send outside its window"
        print(f"{r['seed']:>4} {r['robot']:>6} {r['from'] + '>' + r['to']:>10} "
              f"{r['assoc_ms']:>6.1f} {r['first_send_ms']:>10.2f} {r['protected_ms']:>15.2f} "
              f"{r['reaction_ms']:>8.2f}{flag}")  # fmt: skip
    prot = [r["protected_ms"] for r in rows]
    per_run_max = [max(r["protected_ms"] for r in run["rows"]) for run in runs if run["rows"]]
    per_run_mean = [float(np.mean([r["protected_ms"] for r in run["rows"]])) for run in runs
                    if run["rows"]]  # fmt: skip
    later = sum(run["later"] for run in runs)
    later_out = sum(run["later_out"] for run in runs)
    unprot = sum(not r["first_protected"] for r in rows)
    over = sum(p > period for p in prot)
    missed = sum(r["reaction_ms"] > 33.3 for r in rows)
    print(f"\n{args.scenario}, {args.policy}, seeds {args.seeds}, {args.duration:g} s each: "
          f"{len(rows)} hand-overs")  # fmt: skip
    print(f"association gap: {_mean_ci([r['assoc_ms'] for r in rows])} ms "
          f"(max {max(r['assoc_ms'] for r in rows):.1f})")  # fmt: skip
    print(f"protected after the join: p50 {np.percentile(prot, 50):.2f}, p90 "
          f"{np.percentile(prot, 90):.2f}, max {max(prot):.2f} ms; over one period "
          f"({period:.1f} ms): {over}; per run mean {_mean_ci(per_run_mean)}, max "
          f"{_mean_ci(per_run_max)} (mean ± 95% CI over runs)")  # fmt: skip
    print(f"first send after the join outside its window: {unprot} of {len(rows)}; later "
          f"watched sends outside theirs: {later_out} of {later} "
          f"({100 * later_out / max(later, 1):.1f}%)")  # fmt: skip
    print(f"first loop after the join over its deadline: {missed}; 1-min load {load0:.1f} -> "
          f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
