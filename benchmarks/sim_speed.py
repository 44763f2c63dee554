"""How fast the coorp simulator runs: wall seconds per simulated second, saturated channel.

5 and 40 stations, each with one saturating bulk uplink (no TCP acks) to an AP, 80 MHz
2x2 VHT MCS 7, the scenario defaults otherwise (A-MPDU aggregation, classic retry
policy, basic access). ``time.perf_counter`` brackets ``simulate()`` only.

When ns-3's Python bindings import (``pip install 'coorp[ns3]'``), the same scenario runs
in ns-3 too (its own BlockAckReq retry behaviour; see ``ns3_crosscheck.py``), timing
``Simulator.Run`` over the same simulated span after association and warm-up; ns-3's
start-up (import, topology, association, warm-up) is reported separately. The ratio
column is ns-3 wall time / coorp wall time (> 1: coorp is faster).

    python benchmarks/sim_speed.py --duration 10 --json results/sim_speed.json
    python benchmarks/sim_speed.py --vs-ns3      # ns-3 required: fails if it is missing

``--vs-ns3`` makes ns-3 mandatory (exit status 2 with the install hint when its bindings
do not import) and prints each ratio as a sentence too. The header says whether the
compiled (mypyc) simulator ran (``coorp --version``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parent))
from ns3_crosscheck import (  # a sibling script, not a package
    INSTALL_HINT,
    Config,
    import_ns3,
    ns3_version,
    run_coorp,
    run_ns3,
)

STATIONS = (5, 40)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--duration", type=float, default=10.0, help="simulated seconds per run")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--no-ns3", action="store_true", help="skip ns-3 even if importable")
    ap.add_argument(
        "--vs-ns3", action="store_true", help="require ns-3 side by side (fail if missing)"
    )
    ap.add_argument("--json", type=Path, help="also write the results here")
    args = ap.parse_args(argv)
    console = Console()
    if not console.is_terminal:
        console = Console(width=120)

    if args.vs_ns3 and args.no_ns3:
        ap.error("--vs-ns3 and --no-ns3 contradict each other")
    from coorp.sim import COMPILED
    from coorp.sim._loader import describe

    console.print(f"coorp simulator: {describe(COMPILED)}")
    ns, import_s, why = (None, 0.0, "--no-ns3") if args.no_ns3 else import_ns3()
    if ns is None and args.vs_ns3:
        console.print(escape(INSTALL_HINT), style="red")
        console.print(escape(f"({why})"), style="dim")
        return 2
    if ns is None and not args.no_ns3:
        hint = INSTALL_HINT.replace("Showing coorp and Bianchi only", "Timing coorp only")
        console.print(escape(hint), style="yellow")
        console.print(escape(f"({why})"), style="dim")

    # Timings on a shared machine mean little without the load they were taken under.
    load_before = os.getloadavg()
    rows: list[dict[str, Any]] = []
    for n in STATIONS:
        # Scenario defaults: aggregation on, classic retry policy (ns-3 uses its own).
        ours = run_coorp(Config(n=n, retry_policy="classic"), args.duration, args.seed)
        theirs = run_ns3(ns, Config(n=n), args.duration, seed=args.seed) if ns else None
        rows.append(
            {
                "n": n,
                "simulated_s": args.duration,
                "coorp_wall_s": ours.wall_s,
                "coorp_wall_per_sim_s": ours.wall_s / args.duration,
                "coorp_mbps": ours.mbps,
                "ns3_wall_s": theirs.wall_s if theirs else None,
                "ns3_wall_per_sim_s": theirs.wall_s / args.duration if theirs else None,
                "ns3_startup_s": theirs.startup_s if theirs else None,
                "ns3_mbps": theirs.mbps if theirs else None,
                "ns3_over_coorp": theirs.wall_s / ours.wall_s if theirs else None,
            }
        )

    table = Table(
        title=f"Simulator speed: saturated A-MPDU uplink, {args.duration:g} s simulated per run"
    )
    for col in (
        "N", "coorp wall s / sim s", "ns-3 wall s / sim s", "ns-3 / coorp",
        "ns-3 start-up s", "coorp Mb/s (classic)", "ns-3 Mb/s",
    ):  # fmt: skip
        table.add_column(col, justify="right")

    def fmt(x: float | None, spec: str) -> str:
        return "-" if x is None else format(x, spec)

    for r in rows:
        table.add_row(
            str(r["n"]),
            fmt(r["coorp_wall_per_sim_s"], ".3f"),
            fmt(r["ns3_wall_per_sim_s"], ".3f"),
            fmt(r["ns3_over_coorp"], ".1f"),
            fmt(r["ns3_startup_s"], ".1f"),
            fmt(r["coorp_mbps"], ".1f"),
            fmt(r["ns3_mbps"], ".1f"),
        )
    load_after = os.getloadavg()
    console.print(table)
    console.print(
        f"load average (1/5/15 min) before {' '.join(f'{x:.2f}' for x in load_before)}, "
        f"after {' '.join(f'{x:.2f}' for x in load_after)}; {os.cpu_count()} CPUs"
    )
    if ns is not None:
        console.print(f"ns-3 {ns3_version()}: import of the bindings took {import_s:.1f} s.")
        for r in rows:
            console.print(
                f"{r['n']} stations: coorp is {r['ns3_over_coorp']:.0f}x faster than ns-3 per "
                f"simulated second ({r['coorp_wall_per_sim_s'] * 1e3:.2f} vs "
                f"{r['ns3_wall_per_sim_s'] * 1e3:.0f} ms); ns-3 start-up (topology, "
                f"association, warm-up) {r['ns3_startup_s']:.1f} s, not counted."
            )
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        doc = {
            "command": " ".join(["python benchmarks/sim_speed.py", *sys.argv[1:]]),
            "coorp_simulator": describe(COMPILED),
            "ns3_version": ns3_version() if ns is not None else None,
            "ns3_import_s": import_s if ns is not None else None,
            "load_average_before": load_before,
            "load_average_after": load_after,
            "cpus": os.cpu_count(),
            "rows": rows,
        }
        args.json.write_text(json.dumps(doc, indent=2))
        console.print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
