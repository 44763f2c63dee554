"""How large can a team get before the MPC loop alone misses its 33 ms bound?

Run it from the repository root::

    .venv/bin/python examples/team_scaling.py                 # 10, 15, 20, 30, 40 workers
    .venv/bin/python examples/team_scaling.py --workers 8,12 --duration 5

Bulk traffic is switched off (``[workload.drlc] enabled = false``) and the MPC loop runs
under plain EDCA, so what remains is the floor no network policy can go below: N
workers send their 12 KB perceptions within about a millisecond of the loop tick, all
in AC_VO (CWmin 3, CWmax 7), so their ~9 fragments each collide with each other. Teams
are placed like ``coorp model --simulate`` places them (leader at the origin, workers
uniform in a 10 m disc, seed 1). ``--vo-aggregation`` lets VO fragments share an
A-MPDU, which removes per-frame overhead but not the contention.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import numpy as np

from coorp.analysis.crl_model import team_scenario
from coorp.scenario import load_scenario, parse_scenario
from coorp.workload import run_crl

ROOT = Path(__file__).resolve().parents[1]


def mpc_alone(workers: int, *, duration_s: float, seed: int, vo_aggregation: bool) -> str:
    base = load_scenario(ROOT / "scenarios" / "crl-5.toml")
    data = team_scenario(base, workers, seed=seed, duration_s=duration_s).model_dump(mode="json")
    data["workload"]["drlc"]["enabled"] = False
    if vo_aggregation:
        data["mac"]["edca"] = {"VO": {"aggregation": True}}
    r = run_crl(parse_scenario(data, source=f"<{workers} workers>"), "edca", seed=seed)
    reaction = r.reaction_ns / 1e6

    def pct(q: float) -> str:
        v = float(np.percentile(reaction, q, method="inverted_cdf"))
        return f"{v:7.1f}" if math.isfinite(v) else "      ∞"

    return f"{workers:7d} {len(r.loops):6d} {r.violation_rate:7.1%} {pct(50)} {pct(99)}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workers", default="10,15,20,30,40", help="comma-separated team sizes")
    ap.add_argument("--duration", type=float, default=3.0, help="simulated seconds per team")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--vo-aggregation", action="store_true", help="A-MPDUs in AC_VO too")
    args = ap.parse_args()
    try:
        sizes = [int(w) for w in args.workers.split(",")]
    except ValueError:
        ap.error(f"--workers {args.workers!r}: give worker counts like 10,20")
    if any(n < 1 for n in sizes):
        ap.error(f"--workers {args.workers!r}: every team needs at least one worker")
    print("workers  loops    miss  p50 ms  p99 ms   (MPC only, EDCA, no bulk traffic)")
    for n in sizes:
        print(mpc_alone(n, duration_s=args.duration, seed=args.seed,
                        vo_aggregation=args.vo_aggregation), flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
