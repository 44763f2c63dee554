"""What fills a robot's NIC ring while it sends the team's bulk data.

Samples one station's hardware ring every ``--sample-us`` while it has a transfer of
the team's bulk data of its own under way, and reports, per policy and seed, the mean
number of packets in the ring by kind — the team's bulk data, the team's TCP acks, the
acks it sends for traffic outside the team, LS messages — with the mean number of runs
of each (the MAC aggregates only consecutive packets to one receiver, so each run of
another kind in between costs a channel access), the share of samples at which its bulk
queue was paused, and its bulk throughput over the 10 ms bins of the run's time series in
which it had bulk data waiting for more than half the bin (``Mb/s sending``: a leader's
model download). Read-only: results are the plain policy's::

    python benchmarks/ring_mix.py crl-5-guest-leader --station leader \\
        --policies ladder-serial,coorp,oracle --seeds 1-5
"""

from __future__ import annotations

import argparse
import runpy
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

from coorp.policies import _registry, get_policy
from coorp.scenario import apply_overrides, load_scenario, resolve_scenario
from coorp.sweep import mean_ci, parse_seeds
from coorp.workload import run_crl

KINDS = ("data", "team acks", "outside acks", "LS")


def _kind(p: Any) -> str:
    if p.message is not None:
        return "LS"
    if p.bulk:
        return "data" if getattr(p.transfer, "gated", True) else "outside data"
    return "team acks" if p.flow.gate_acks else "outside acks"


def sample_run(sc: Any, policy: str, seed: int, station: str, every_ns: int,
               duration_ns: int) -> dict[str, float]:  # fmt: skip
    counts: Counter[str] = Counter()
    n = [0]  # samples
    base = get_policy(policy)

    class Probe(base):  # type: ignore[valid-type, misc]
        name = f"{base.name}+ring-mix"

        def install(self) -> None:
            super().install()
            sim = self.team.sim
            st = sim.station(station)
            rings = list({id(r): r for r in st.rings.values()}.values())

            def look() -> None:
                if any(t.gated and t.flow.src is st for t in st.transfers):
                    n[0] += 1
                    for ring in rings:
                        for p in ring:
                            k = _kind(p)
                            counts[k] += p.count
                            counts["runs " + k] += 1
                    counts["paused"] += st.bulk_paused
                sim.call_at(sim.now_ns + every_ns, look)

            sim.call_at(every_ns, look)

    _registry._REGISTRY[Probe.name] = Probe
    try:
        r = run_crl(sc, Probe.name, seed=seed, duration_ns=duration_ns)
    finally:
        del _registry._REGISTRY[Probe.name]
    k = max(n[0], 1)
    out = {key: counts[key] / k for key in KINDS}
    out.update({f"runs {key}": counts["runs " + key] / k for key in KINDS})
    out["paused %"] = 100 * counts["paused"] / k
    ts = r.timeseries
    mine = np.asarray(ts["station"]) == station
    sending = np.asarray(ts["backlog_fraction"])[mine] > 0.5
    width_s = float(np.asarray(ts["t_end_ns"])[0] - np.asarray(ts["t_start_ns"])[0]) / 1e9
    sent = float(np.asarray(ts["bh_bytes"])[mine][sending].sum())
    out["Mb/s sending"] = 8 * sent / max(int(sending.sum()) * width_s, 1e-9) / 1e6
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("scenario")
    ap.add_argument("--station", default="leader")
    ap.add_argument("--policies", default="coorp,oracle")
    ap.add_argument(
        "--policy-module", type=Path, default=Path(__file__).with_name("coorp_ladder.py")
    )
    ap.add_argument("--seeds", default="1")
    ap.add_argument("--duration", type=float, default=20.0)
    ap.add_argument("--sample-us", type=float, default=200.0)
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    args = ap.parse_args(argv)
    runpy.run_path(str(args.policy_module))
    sc = load_scenario(resolve_scenario(args.scenario))
    if args.set:
        sc = apply_overrides(sc, [tuple(kv.split("=", 1)) for kv in args.set], source=args.scenario)
    cols = [*KINDS, *(f"runs {k}" for k in KINDS), "paused %", "Mb/s sending"]
    print("| policy | " + " | ".join(cols) + " |")
    print("|---|" + "---|" * len(cols))
    for policy in args.policies.split(","):
        rows = [
            sample_run(
                sc,
                policy,
                seed,
                args.station,
                round(args.sample_us * 1000),
                round(args.duration * 1e9),
            )
            for seed in parse_seeds(args.seeds)
        ]
        cells = []
        for c in cols:
            m = mean_ci([r[c] for r in rows])
            cells.append(f"{m.mean:.1f} ± {m.ci95:.1f}" if m.n > 1 else f"{m.mean:.1f}")
        print(f"| {policy} | " + " | ".join(cells) + " |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
