"""What reading a run's message table costs: ``SimResult.collect``'s column reads.

Runs fleet-200 under EDCA once (``--seconds`` simulated, seed 1), keeps the finished
simulation, then times on the same messages, alternating, ``--rounds`` times each (CPU
time of this process):

* ``previous``: the column reads ``collect`` made before (one generator per column
  through ``np.fromiter``; kept here as the reference, not in the package);
* ``columns``: ``coorp.sim.packets.message_columns`` (one compiled pass into lists of
  ints, flow numbers included, each made an int64 array by ``np.fromiter``);
* ``two_percentiles`` / ``one_percentile_call`` / ``grouped_percentiles``: each flow's
  p50 and p99 as two calls of ``coorp.stats.percentile``, as one ``np.percentile`` call
  with both, and every flow's at once (``coorp.stats.grouped_percentiles`` on the
  latencies sorted by flow, then latency: what ``collect`` does now, the sort included);
* ``collect``: the whole ``SimResult.collect`` as it is now.

    .venv/bin/python benchmarks/_collect_columns.py [--seconds 10] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from coorp.scenario import load_scenario, resolve_scenario
from coorp.sim.packets import message_columns
from coorp.sim.results import SimResult
from coorp.stats import grouped_percentiles, percentile
from coorp.units import NS_PER_MS
from coorp.workload import run_fleet


def _cpu(f: Callable[[], object]) -> float:
    t = time.process_time()
    f()
    return time.process_time() - t


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    ap.add_argument("--seconds", type=float, default=10.0, help="simulated seconds")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    if args.seconds <= 0 or args.rounds < 1:
        ap.error(f"--seconds {args.seconds} must be > 0 and --rounds {args.rounds} >= 1")
    kept: dict[str, Any] = {}
    collect = SimResult.collect.__func__  # type: ignore[attr-defined]

    def spy(cls: type[SimResult], sim: Any, duration_ns: int) -> SimResult:
        kept["sim"], kept["duration_ns"] = sim, duration_ns
        return collect(cls, sim, duration_ns)  # type: ignore[no-any-return]

    SimResult.collect = classmethod(spy)  # type: ignore[assignment,method-assign]
    try:
        sc = load_scenario(resolve_scenario("fleet-200"))
        run_fleet(sc, "edca", seed=1, duration_ns=round(args.seconds * 1e9))
    finally:
        SimResult.collect = classmethod(collect)  # type: ignore[assignment,method-assign]
    sim = kept["sim"]
    msgs = sim.messages
    n = len(msgs)

    def previous() -> None:  # collect's reads before, as they were
        [m.flow.name for m in msgs]
        np.fromiter((m.created_ns for m in msgs), np.int64, n)
        np.fromiter((m.delivered_ns for m in msgs), np.int64, n)
        np.fromiter((m.msg_id for m in msgs), np.int64, n)
        np.fromiter((m.size_bytes for m in msgs), np.int64, n)
        np.fromiter((m.lost for m in msgs), bool, n)
        np.fromiter((m.first_depth for m in msgs), np.int64, n)

    def columns() -> None:
        _, *cols = message_columns(msgs)
        [np.fromiter(c, np.int64, len(c)) for c in cols]

    result = SimResult.collect(sim, kept["duration_ns"])
    latency = result.messages["latency_ns"]
    by_flow: dict[str, list[int]] = {}
    for i, name in enumerate(result.messages["flow"]):
        by_flow.setdefault(name, []).append(i)
    done = [latency[np.array(ix)] for ix in by_flow.values()]
    done = [d[d >= 0] / NS_PER_MS for d in done]

    def two() -> None:
        for d in done:
            percentile(d, 50, empty=None, method="linear")
            percentile(d, 99, empty=None, method="linear")

    def one() -> None:
        for d in done:
            if d.size:
                np.percentile(d, [50, 99], method="linear")

    codes = np.repeat(np.arange(len(done)), [d.size for d in done])
    flat = np.concatenate(done) if done else np.empty(0)

    def grouped() -> None:
        order = np.lexsort((flat, codes))
        grouped_percentiles(flat[order], np.bincount(codes, minlength=len(done)), (50, 99))

    times: dict[str, list[float]] = {}
    cases = {"previous": previous, "columns": columns, "two_percentiles": two,
             "one_percentile_call": one, "grouped_percentiles": grouped,
             "collect": lambda: SimResult.collect(sim, kept["duration_ns"])}  # fmt: skip
    for _ in range(args.rounds):
        for name, f in cases.items():
            times.setdefault(name, []).append(round(_cpu(f), 4))
    print(json.dumps({"messages": n, "flows": len(done), "cpu_s": times}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
