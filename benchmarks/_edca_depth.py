"""Where the unmarked loop's perceptions miss: by the robot's queue when they enter it,
emulated against simulated (docs/emulate.md, "Steady state").

Each perception is taken with its robot's queue (kernel queue, ring and the frame on the
air) at the instant it entered: in an emulator's trace the enqueue of its last fragment
(the 284-byte tail, ``_edca_gap.PERCEPTION_TAIL_BYTES``) and the frames of that robot
enqueued and not yet settled; in the simulator the message's creation and the queue
sampled every millisecond. Per depth class: the share of perceptions, the share missed
(> 33 ms or lost) and the median time per packet ahead (the sojourn over the depth);
whether the two sides differ in how often the queue is deep or in what a deep queue
costs.

::

    # an emulated run kept with its traces (root), then both sides at the same window
    sudo nice -n 10 .venv/bin/python benchmarks/_edca_gap.py emu --repetitions 4 \\
        --cc cubic --no-rack --trace T --json E.json
    .venv/bin/python benchmarks/_edca_depth.py --trace T --emu-json E.json --seeds 10 \\
        --set ... (as _edca_gap.py sim's)
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _edca_gap as gap

#: Depth classes (packets ahead), as docs/emulate.md's table.
EDGES = (0, 100, 200, 300, 400, 600, 1_000_000)
BOUND_MS = 33.0


def classes(depth: Any, sojourn_ms: Any) -> list[dict[str, Any]]:
    """Per depth class: perceptions' share, share missed, median µs per packet ahead
    (``inf`` sojourn: lost)."""
    d, s = np.asarray(depth), np.asarray(sojourn_ms, dtype=float)
    out = []
    for lo, hi in itertools.pairwise(EDGES):
        sel = (d >= lo) & (d < hi)
        fin = sel & np.isfinite(s) & (d > 0)
        out.append(
            {
                "depth": f"{lo}-{hi if hi < EDGES[-1] else ''}",
                "share": float(sel.mean()) if d.size else 0.0,
                "missed": float((s[sel] > BOUND_MS).mean()) if sel.any() else None,
                "us_per_packet": float(np.median(s[fin] / d[fin]) * 1e3) if fin.any() else None,
            }
        )
    return out


def emulated(trace: Path, reps: list[dict[str, Any]], window_s: float) -> dict[str, Any]:
    """The perceptions of every repetition's window in an ``emu --trace`` folder."""
    f = gap._frames(trace)
    src, size, enq, done, outc = (np.asarray(f[k]) for k in
                                  ("src", "bytes", "enq_ns", "done_ns", "outcome"))  # fmt: skip
    # each repetition's uploads start where the robots' full-size frames do (as emu finds them)
    bins = np.bincount((enq[(src != 0) & (size >= 1400)] // 100_000_000).astype(int))
    active = np.flatnonzero(bins > 500)
    starts = [int(active[0])] + [int(x) for i, x in enumerate(active[1:]) if x - active[i] > 10]
    depth: list[int] = []
    soj: list[float] = []
    for s0, rep in zip(starts, reps, strict=False):
        a = round((s0 / 10 + rep["window_after_uploads_s"]) * 1e9)
        b = a + round(window_s * 1e9)
        for r in (s for s in np.unique(src) if s > 0):
            kept = (src == r) & (outc != 2)
            e, dn = np.sort(enq[kept]), np.sort(done[kept])
            tail = np.flatnonzero(
                (src == r) & (size == gap.PERCEPTION_TAIL_BYTES) & (enq >= a) & (enq < b)
            )
            t = enq[tail]
            depth += list(np.searchsorted(e, t, "left") - np.searchsorted(dn, t, "right"))
            soj += list(np.where(outc[tail] == 2, np.inf, (done[tail] - t) / 1e6))
    return {"perceptions": len(depth), "classes": classes(depth, soj)}


def simulated(seeds: int, overrides: list[str], warmup_s: float, window_s: float) -> dict[str, Any]:
    """The same classes over ``seeds`` simulated runs of ``_edca_gap.py sim``'s cell."""
    import _emulate_edca as edca
    from coorp.scenario import apply_overrides
    from coorp.sim import Simulation
    from coorp.sim.events import PRIO_CONTROL
    from coorp.sweep import parse_override

    depth: list[int] = []
    soj: list[float] = []
    for seed in range(1, seeds + 1):
        sc = edca.scenario("shared", gap.BE)
        if overrides:
            pairs = [(k, v[0]) for k, v in map(parse_override, overrides)]
            sc = apply_overrides(sc, pairs, source="--set")
        sim = Simulation(sc, seed=seed)
        robots = [sim.station(n) for n in gap.ROBOTS]
        a = round(warmup_s * 1e9)
        b = a + round(window_s * 1e9)
        occ: list[list[int]] = [[] for _ in robots]

        def sample(sim: Any = sim, robots: Any = robots, occ: Any = occ, b: int = b) -> None:
            t = sim.loop.now_ns
            for q, r in zip(occ, robots, strict=True):
                q.append(r.kernel_queued(gap.BE) + r.rings[gap.BE].n)
            if t + 1_000_000 < b:
                sim.loop.call_at(t + 1_000_000, PRIO_CONTROL, sample)

        sim.loop.call_at(a, PRIO_CONTROL, sample)
        m = sim.run(b + 1_000_000_000).messages
        for q, r in zip(occ, robots, strict=True):
            sel = np.array([str(x) == f"perception-{r.name}" for x in m["flow"]], dtype=bool)
            sel &= (m["created_ns"] >= a) & (m["created_ns"] < b)
            k = np.clip((m["created_ns"][sel] - a) // 1_000_000, 0, len(q) - 1).astype(int)
            lat = m["latency_ns"][sel] / 1e6
            depth += list(np.asarray(q)[k])
            soj += list(np.where(lat < 0, np.inf, lat))
    return {"perceptions": len(depth), "classes": classes(depth, soj)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--trace", type=Path, required=True, help="an `_edca_gap.py emu --trace` folder"
    )
    ap.add_argument("--emu-json", type=Path, required=True, help="that run's --json")
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--set", action="append", default=[], help="scenario override KEY=VALUE")
    ap.add_argument("--window", type=float, default=10.0)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    reps = json.loads(args.emu_json.read_text())["repetitions"]
    lead = float(np.mean([r["window_after_uploads_s"] for r in reps]))
    out: dict[str, Any] = {
        "emulator": emulated(args.trace, reps, args.window),
        "simulator": simulated(args.seeds, args.set, lead, args.window),
        "window_after_uploads_s": lead,
    }
    for side in ("emulator", "simulator"):
        print(
            f"{side}: {out[side]['perceptions']} perceptions, window {lead:.1f} s after the uploads"
        )
        for c in out[side]["classes"]:
            miss = "-" if c["missed"] is None else f"{c['missed']:.1%}"
            per = "-" if c["us_per_packet"] is None else f"{c['us_per_packet']:.0f} us"
            print(
                f"  depth {c['depth']:>8s}: share {c['share']:6.1%}  missed {miss:>6s}  "
                f"per packet {per}"
            )
    if args.json is not None:
        args.json.write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
