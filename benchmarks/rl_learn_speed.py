"""How long ``coorp learn`` takes: policies x seeds on a scenario, wall time and CPU time
(the issue's target: crl-5, 3 policies x 3 seeds in <= 10 minutes on 2 cores).

    python benchmarks/rl_learn_speed.py crl-5 --air-params 10000000

Any other argument goes to ``coorp learn`` unchanged, e.g. the real-socket runs of
docs/learn.md (root, network namespaces; ``--policies`` is not used with ``--runtime``):

    python benchmarks/rl_learn_speed.py crl-5 --runtime --seeds 1-5 --air-params 500000 \
        --duration 30 --out results/learn-runtime

The CPU time is this process's (the simulated path runs in it); ``--runtime`` runs its
robots as child processes, whose CPU is reported apart.
"""

from __future__ import annotations

import argparse
import os
import resource
import tempfile
import time

from coorp.cli import main


def _cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("scenario", nargs="?", default="crl-5")
    ap.add_argument("--policies", default="edca,schedwifi,coorp")
    ap.add_argument("--seeds", default="1-3")
    ap.add_argument("--air-params", default=None)
    ap.add_argument("--out", default=None, help="keep the results here (default: a temp dir)")
    args, rest = ap.parse_known_args()
    runtime = "--runtime" in rest
    argv = ["learn", args.scenario, "--seeds", args.seeds, *rest]
    if not runtime:
        argv += ["--policies", args.policies]
    if args.air_params:
        argv += ["--air-params", args.air_params]
    load0, t0, c0 = os.getloadavg()[0], time.perf_counter(), _cpu()
    with tempfile.TemporaryDirectory() as tmp:
        try:
            main([*argv, "--out", args.out or tmp])
        except SystemExit as exc:
            if exc.code not in (0, None):
                raise
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    print(
        f"coorp learn {args.scenario}: wall {time.perf_counter() - t0:.1f} s, "
        f"CPU {_cpu() - c0:.1f} s (child processes {kids.ru_utime + kids.ru_stime:.1f} s), "
        f"load {load0:.2f} -> {os.getloadavg()[0]:.2f}"
    )
