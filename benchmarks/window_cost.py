"""What a time model's protection windows cost and cover, on a run's real send times.

Runs a scenario once (under ``--policy``, default ``coorp``), takes every perception's
send instants, and replays each worker's through :class:`~coorp.control.SendTimeModel`
variants (``--windows gaussian,empirical,conformal``): before each send (after a
warm-up of ``--warm`` sends) it asks for the interval predicted just after the previous
send and reports, mean ± 95% CI over seeds (each seed: the mean over its workers):

* ``covered %``  sends inside their predicted interval (plus the planner's margin);
* ``paused ms``  time from the interval's start to the send (to the interval's end if
                 the send came later): what a gate holds bulk data back for before each
                 send, since a window is consumed by its send;
* ``… core`` / ``… tail``  the same for sends at most ``--core-ms`` after their loop's
                 tick and for the later ones (aligned phases only: the tick is the
                 nominal period start).

The model is fed exactly the sends the gate's planner is fed; nothing else of the
gate (completion times, the ring) is in these numbers::

    python benchmarks/window_cost.py crl-5-heavy-tail --seeds 1-5 \\
        --set workload.mpc.tail_probability=0.2 --set workload.mpc.tail_scale_us=5000
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

import numpy as np

from coorp.control import SendTimeModel
from coorp.scenario import apply_overrides, load_scenario, resolve_scenario
from coorp.sweep import mean_ci, parse_seeds
from coorp.workload import run_crl

MARGIN_NS = 2_000_000


def replay(sends: list[int], make: Callable[[], SendTimeModel], warm: int, period: int,
           tick0: int, core_ns: int) -> dict[str, float]:  # fmt: skip
    model = make()
    covered = n = 0
    paused: dict[str, list[float]] = {"all": [], "core": [], "tail": []}
    for i, t in enumerate(sends):
        if i >= warm:
            iv = model.predict(sends[i - 1] + 1)
            if iv is not None:
                n += 1
                end = iv.end_ns + MARGIN_NS
                covered += iv.start_ns <= t <= end
                wait = max(0, min(t, end) - iv.start_ns) / 1e6
                late = (t - tick0) % period
                paused["all"].append(wait)
                paused["core" if late <= core_ns else "tail"].append(wait)
        model.observe(t)
    out = {"covered %": 100 * covered / max(n, 1)}
    for k, v in paused.items():
        out[f"paused ms{'' if k == 'all' else ' ' + k}"] = float(np.mean(v)) if v else 0.0
    out["tail %"] = 100 * len(paused["tail"]) / max(n, 1)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("scenario")
    ap.add_argument("--policy", default="coorp")
    ap.add_argument("--seeds", default="1")
    ap.add_argument("--duration", type=float, default=20.0)
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--windows", default="gaussian,empirical,conformal")
    ap.add_argument("--warm", type=int, default=40, help="sends before the first question")
    ap.add_argument("--core-ms", type=float, default=3.0)
    args = ap.parse_args(argv)
    sc = load_scenario(resolve_scenario(args.scenario))
    if args.set:
        combo = [tuple(kv.split("=", 1)) for kv in args.set]
        sc = apply_overrides(sc, combo, source=args.scenario)
    assert sc.workload is not None
    period = round(sc.workload.mpc.period_us * 1000)
    tick0 = round(sc.workload.mpc.start_us * 1000)
    windows = args.windows.split(",")
    per_seed: dict[str, dict[str, list[float]]] = {w: {} for w in windows}
    for seed in parse_seeds(args.seeds):
        r = run_crl(sc, args.policy, seed=seed, duration_ns=round(args.duration * 1e9))
        msgs = r.sim.messages
        flows = sorted({f for f in msgs["flow"] if f.startswith("perception:")})
        for w in windows:
            rows = [
                replay(
                    sorted(msgs["created_ns"][msgs["flow"] == f].tolist()),
                    lambda w=w: SendTimeModel(window=w),
                    args.warm,
                    period,
                    tick0,
                    round(args.core_ms * 1e6),
                )
                for f in flows
            ]
            for key in rows[0]:
                per_seed[w].setdefault(key, []).append(float(np.mean([x[key] for x in rows])))
    keys = list(next(iter(per_seed.values())))
    print("| window | " + " | ".join(keys) + " |")
    print("|---|" + "---|" * len(keys))
    for w, cols in per_seed.items():
        cells = []
        for k in keys:
            m = mean_ci(cols[k])
            cells.append(f"{m.mean:.2f} ± {m.ci95:.2f}" if m.n > 1 else f"{m.mean:.2f}")
        print(f"| {w} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
