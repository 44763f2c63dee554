"""CPU time of the same CRL runs under two source trees, alternating, plain Python.

For a change that must cost nothing when it is off (e.g. the TCP model's hooks): each
round runs ``run_crl`` for every policy in a fresh process on each tree (``--base`` and
``--tree``, ``src`` directories), in alternating order, with ``COORP_PURE=1`` on both
(the compiled build belongs to one tree only), and reports the per-round CPU-time ratios
tree / base and their median::

    git archive 810dd83 src | tar -x -C /tmp/base
    python benchmarks/tree_ab.py --base /tmp/base/src --tree src --scenario scenarios/crl-5.toml
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

_CODE = r"""
import json, sys, time
from coorp.scenario import load_scenario
from coorp.workload import run_crl
sc = load_scenario(sys.argv[1])
out = {}
for pol in sys.argv[3].split(","):
    t = time.process_time()
    r = run_crl(sc, pol, seed=int(sys.argv[4]), duration_ns=int(sys.argv[2]), timeseries=False)
    out[pol] = [time.process_time() - t, r.sim.events_processed]
print(json.dumps(out))
"""


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--base", type=Path, required=True, help="the reference tree's src/")
    ap.add_argument("--tree", type=Path, default=Path("src"), help="the tree measured")
    ap.add_argument("--scenario", type=Path, default=Path("scenarios/crl-5.toml"))
    ap.add_argument("--policies", default="edca,coorp")
    ap.add_argument("--duration", type=float, default=5.0, help="simulated seconds")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args(argv)
    trees = {"base": args.base.resolve(), "tree": args.tree.resolve()}
    policies = args.policies.split(",")
    cpu: dict[str, dict[str, list[float]]] = {k: {p: [] for p in policies} for k in trees}
    load_before = os.getloadavg()
    for rnd in range(args.rounds):
        order = list(trees.items()) if rnd % 2 == 0 else list(trees.items())[::-1]
        for name, src in order:
            env = {**os.environ, "PYTHONPATH": str(src), "COORP_PURE": "1",
                   "PYTHONWARNINGS": "ignore"}  # fmt: skip
            cmd = [sys.executable, "-c", _CODE, str(args.scenario.resolve()),
                   str(round(args.duration * 1e9)), args.policies, str(args.seed)]  # fmt: skip
            out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
            runs = json.loads(out.stdout.strip().splitlines()[-1])
            for p in policies:
                cpu[name][p].append(runs[p][0])
            print(f"round {rnd} {name}: {runs}", flush=True)
    for p in policies:
        ratios = [t / b for b, t in zip(cpu["base"][p], cpu["tree"][p], strict=True)]
        print(f"{p}: tree / base CPU per round {[round(r, 3) for r in ratios]}, "
              f"median {statistics.median(ratios):.3f}")  # fmt: skip
    print(f"load average before {load_before}, after {os.getloadavg()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
