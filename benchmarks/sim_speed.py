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
compiled (mypyc) modules ran (``coorp --version``).

``--policies`` times the coordinated-robotic-learning workload instead (``run_crl``, the
run behind ``coorp compare``) under each named policy, on each ``--scenarios`` entry:
wall seconds per simulated second per policy and the ratio to EDCA's in the same run.
``--repeat`` rounds run every policy once each, in a rotated order (so load drift on a
shared machine hits every contender alike); each time brackets the whole run
(``Simulation`` set-up, policy install, simulation) from the same ``perf_counter``
instant for every contender; the table shows medians over rounds, the JSON every time.
The process's CPU time of each run is shown too: on a shared machine wall times drift
with the other load, CPU times much less. The policies do not simulate the same work:
a loop that EDCA lets stall sends fewer messages than one COORP keeps (crl-10: 107
against 298 loops in 10 s, 2.3 times the events), so the table also gives the events
each run processed and the CPU time per event relative to EDCA's.

    python benchmarks/sim_speed.py --policies edca,coorp,coorp-paper,oracle --json out.json
    COORP_PURE=1 python benchmarks/sim_speed.py --policies edca,coorp   # plain Python

``oracle`` is a reference bound that cannot be deployed (it reads the future); it is
labelled so.

``--tcp none,cubic`` runs each scenario once per TCP sender model (``[tcp] sender``,
docs/simulator.md) in every round, and gives each run's CPU time against the same
policy's without the model (``tcp = none``) in the same round: what the model costs.

    python benchmarks/sim_speed.py --policies edca,coorp --scenarios crl-5 --tcp none,cubic

``--groupings consecutive,per_receiver_tid`` times the same workloads under each value
of ``mac.ampdu_grouping`` (issue 36: A-MPDUs per receiver and TID against the MAC
before), in rotated order per round, and gives each one's CPU and wall time relative to
the first grouping's in the same round (medians over ``--repeat`` rounds): the
saturated uplinks above (one receiver per station: the price of the check alone), a
mixed-destination downlink (an AP with interleaved packets for 4 stations in a per-AC
ring: more traffic gets through, so the time per event is the fair comparison), and
the CRL workload on each ``--scenarios`` entry under EDCA and COORP (shared rings).

    python benchmarks/sim_speed.py --groupings consecutive,per_receiver_tid --repeat 5
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parent))
from ns3_crosscheck import (  # a sibling script, not a package
    INSTALL_HINT,
    MIXED_CASES,
    Config,
    coorp_scenario,
    import_ns3,
    mixed_scenario,
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
    ap.add_argument(
        "--policies", help="time the CRL workload under these policies (comma-separated)"
    )
    ap.add_argument(
        "--scenarios", default="crl-5,crl-10", help="with --policies: scenarios (names/paths)"
    )
    ap.add_argument("--repeat", type=int, default=3, help="with --policies: rounds")
    ap.add_argument(
        "--tcp", help="with --policies: TCP sender models to run each scenario with, e.g. "
        "none,cubic ([tcp] sender; the scenario's own if unset)",
    )  # fmt: skip
    ap.add_argument(
        "--groupings",
        help="time workloads under these mac.ampdu_grouping values (comma-separated), "
        "each relative to the first",
    )
    args = ap.parse_args(argv)
    console = Console()
    if not console.is_terminal:
        console = Console(width=120)
    if args.policies is not None:
        return policies_main(args, console)
    if args.groupings is not None:
        return groupings_main(args, console)

    if args.vs_ns3 and args.no_ns3:
        ap.error("--vs-ns3 and --no-ns3 contradict each other")
    console.print(f"coorp simulator: {describe()}")
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
            "coorp_simulator": describe(),
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


def describe() -> str:
    """Which modules run compiled (``coorp --version``); also on a tree from before
    ``coorp._accel`` (where only the simulator compiled), to time it the same way."""
    try:
        from coorp._accel import describe as accel_describe
    except ImportError:
        from coorp.sim._loader import describe as sim_describe  # type: ignore[import-not-found]

        from coorp.sim import COMPILED

        return f"simulator {sim_describe(COMPILED)}, control and hooks plain Python"
    return accel_describe()


def policies_main(args: argparse.Namespace, console: Console) -> int:
    """``--policies``: the CRL workload per policy, wall time relative to EDCA's."""
    from coorp import CoorpError
    from coorp.policies import get_policy, policy_label
    from coorp.scenario import apply_overrides, load_scenario, resolve_scenario
    from coorp.workload import run_crl

    policies = [p.strip() for p in args.policies.split(",") if p.strip()]
    if not policies:
        console.print("--policies: name at least one policy", style="red")
        return 2
    if args.repeat < 1:
        console.print(f"--repeat {args.repeat}: must be >= 1", style="red")
        return 2
    if "edca" not in policies:
        policies.insert(0, "edca")  # every ratio is to EDCA in the same run
    try:  # bad names fail here, before anything runs
        for name in policies:
            get_policy(name)
        scenarios = [
            (name, load_scenario(resolve_scenario(name)))
            for name in args.scenarios.split(",")
            if name
        ]
        senders = [t.strip() for t in (args.tcp or "").split(",") if t.strip()]
        if senders:
            scenarios = [
                (f"{name} tcp={t}", apply_overrides(sc, [("tcp.sender", t)], source=name))
                for name, sc in scenarios
                for t in senders
            ]
    except CoorpError as exc:
        console.print(escape(f"error: {exc}"), style="red")
        return 2
    sim_ns = round(args.duration * 1e9)
    console.print(f"coorp: {describe()}")
    load_before = os.getloadavg()
    times: dict[str, dict[str, list[float]]] = {n: {p: [] for p in policies} for n, _ in scenarios}
    cpu: dict[str, dict[str, list[float]]] = {n: {p: [] for p in policies} for n, _ in scenarios}
    # Events the simulator processed and control loops run: the same scenario and seed
    # give the same counts every round, but not the same counts under every policy.
    events: dict[str, dict[str, int]] = {n: {} for n, _ in scenarios}
    loops: dict[str, dict[str, int]] = {n: {} for n, _ in scenarios}
    for rnd in range(args.repeat):
        order = policies[rnd % len(policies) :] + policies[: rnd % len(policies)]
        for name, scenario in scenarios:
            for pol in order:
                start, start_cpu = time.perf_counter(), time.process_time()
                res = run_crl(scenario, pol, seed=args.seed, duration_ns=sim_ns, timeseries=False)
                times[name][pol].append(time.perf_counter() - start)
                cpu[name][pol].append(time.process_time() - start_cpu)
                events[name][pol] = res.sim.events_processed
                loops[name][pol] = len(res.loops)
    load_after = os.getloadavg()

    table = Table(
        title=(
            f"CRL workload: wall seconds per simulated second ({args.duration:g} s simulated, "
            f"seed {args.seed}, median of {args.repeat} rounds)"
        )
    )
    table.add_column("scenario")
    table.add_column("policy")
    table.add_column("wall s / sim s", justify="right")
    table.add_column("vs EDCA", justify="right")
    table.add_column("CPU s / sim s", justify="right")
    table.add_column("CPU vs EDCA", justify="right")
    table.add_column("events", justify="right")
    table.add_column("loops", justify="right")
    table.add_column("CPU µs / event", justify="right")
    table.add_column("per event vs EDCA", justify="right")
    rows = []
    for name, _ in scenarios:
        for pol in policies:
            walls, cpus = times[name][pol], cpu[name][pol]
            # Ratio per round (both timed in that round), then the median.
            ratio = statistics.median(
                w / e for w, e in zip(walls, times[name]["edca"], strict=True)
            )
            cpu_ratio = statistics.median(
                c / e for c, e in zip(cpus, cpu[name]["edca"], strict=True)
            )
            per_sim = statistics.median(walls) / args.duration
            cpu_per_sim = statistics.median(cpus) / args.duration
            n_events, n_edca = events[name][pol], events[name]["edca"]
            cpu_per_event = statistics.median(cpus) / max(n_events, 1)
            # The CPU ratio with each run's time divided by the events it processed:
            # what the policy costs per unit of simulated work, where the policies
            # simulate different amounts of it (a loop EDCA lets stall sends fewer
            # messages than one COORP keeps).
            per_event_ratio = cpu_ratio * n_edca / max(n_events, 1)
            rows.append(
                {
                    "scenario": name,
                    "policy": pol,
                    "label": policy_label(pol),
                    "deployable": get_policy(pol).deployable,
                    "wall_s": walls,
                    "cpu_s": cpus,
                    "wall_per_sim_s": per_sim,
                    "cpu_per_sim_s": cpu_per_sim,
                    "vs_edca": ratio,
                    "cpu_vs_edca": cpu_ratio,
                    "events": n_events,
                    "loops": loops[name][pol],
                    "cpu_us_per_event": cpu_per_event * 1e6,
                    "cpu_per_event_vs_edca": per_event_ratio,
                }
            )
            table.add_row(
                name, escape(policy_label(pol)), f"{per_sim:.4f}", f"{ratio:.2f}x",
                f"{cpu_per_sim:.4f}", f"{cpu_ratio:.2f}x", str(n_events), str(loops[name][pol]),
                f"{cpu_per_event * 1e6:.2f}", f"{per_event_ratio:.2f}x",
            )  # fmt: skip
    console.print(table)
    # The model's cost: each run against the same policy without it, round by round.
    for r in rows:
        base_name = r["scenario"].rsplit(" tcp=", 1)[0] + " tcp=none"
        if " tcp=" in r["scenario"] and base_name in cpu and base_name != r["scenario"]:
            base = cpu[base_name][r["policy"]]
            r["cpu_vs_no_tcp"] = statistics.median(
                c / b for c, b in zip(r["cpu_s"], base, strict=True)
            )
            r["wall_vs_no_tcp"] = statistics.median(
                w / b for w, b in zip(r["wall_s"], times[base_name][r["policy"]], strict=True)
            )
            console.print(
                f"{r['scenario']}, {r['policy']}: CPU {r['cpu_vs_no_tcp']:.2f}x, wall "
                f"{r['wall_vs_no_tcp']:.2f}x the same policy without the TCP model"
            )
    console.print(
        f"load average (1/5/15 min) before {' '.join(f'{x:.2f}' for x in load_before)}, "
        f"after {' '.join(f'{x:.2f}' for x in load_after)}; {os.cpu_count()} CPUs"
    )
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        doc = {
            "command": " ".join(["python benchmarks/sim_speed.py", *sys.argv[1:]]),
            "compiled": describe(),
            "duration_s": args.duration,
            "seed": args.seed,
            "repeat": args.repeat,
            "load_average_before": load_before,
            "load_average_after": load_after,
            "cpus": os.cpu_count(),
            "rows": rows,
        }
        args.json.write_text(json.dumps(doc, indent=2))
        console.print(f"wrote {args.json}")
    return 0


def groupings_main(args: argparse.Namespace, console: Console) -> int:
    """``--groupings``: the same workloads under each ``mac.ampdu_grouping``, CPU and wall
    time relative to the first grouping's in the same round."""
    from coorp import CoorpError
    from coorp.scenario import AmpduGrouping, apply_overrides, load_scenario, resolve_scenario
    from coorp.sim import simulate
    from coorp.workload import run_crl

    groupings = [g.strip() for g in args.groupings.split(",") if g.strip()]
    allowed = [g.value for g in AmpduGrouping]
    bad = [g for g in groupings if g not in allowed]
    if len(groupings) < 2 or bad:
        console.print(
            f"--groupings {args.groupings}: name two or more of {', '.join(allowed)}", style="red"
        )
        return 2
    if args.repeat < 1:
        console.print(f"--repeat {args.repeat}: must be >= 1", style="red")
        return 2
    try:
        crl = [(n, load_scenario(resolve_scenario(n))) for n in args.scenarios.split(",") if n]
    except CoorpError as exc:
        console.print(escape(f"error: {exc}"), style="red")
        return 2
    sim_ns = round(args.duration * 1e9)

    def with_grouping(sc: Any, g: str) -> Any:
        return apply_overrides(sc, [("mac.ampdu_grouping", g)], source=sc.name)

    # name -> grouping -> a callable that runs the workload once and returns its events.
    def sim_job(sc: Any) -> Any:
        return lambda: simulate(sc, seed=args.seed, duration_ns=sim_ns).events_processed

    def crl_job(sc: Any, pol: str) -> Any:
        return lambda: (
            run_crl(
                sc, pol, seed=args.seed, duration_ns=sim_ns, timeseries=False
            ).sim.events_processed
        )

    cfg = Config(n=1)
    jobs: dict[str, dict[str, Any]] = {}
    for n in STATIONS:
        base = coorp_scenario(Config(n=n, retry_policy="classic"))
        jobs[f"uplink {n} stations"] = {g: sim_job(with_grouping(base, g)) for g in groupings}
    jobs["ap-to-4 (per-AC ring)"] = {
        g: sim_job(mixed_scenario(MIXED_CASES["ap-to-4"], cfg, g, "per_ac")) for g in groupings
    }
    for name, sc in crl:
        for pol in ("edca", "coorp"):
            jobs[f"{name} / {pol}"] = {g: crl_job(with_grouping(sc, g), pol) for g in groupings}
    console.print(f"coorp: {describe()}")
    load_before = os.getloadavg()
    wall: dict[str, dict[str, list[float]]] = {j: {g: [] for g in groupings} for j in jobs}
    cpu: dict[str, dict[str, list[float]]] = {j: {g: [] for g in groupings} for j in jobs}
    events: dict[str, dict[str, int]] = {j: {} for j in jobs}
    for rnd in range(args.repeat):
        order = groupings[rnd % len(groupings) :] + groupings[: rnd % len(groupings)]
        for job, runs in jobs.items():
            for g in order:
                start, start_cpu = time.perf_counter(), time.process_time()
                events[job][g] = runs[g]()
                wall[job][g].append(time.perf_counter() - start)
                cpu[job][g].append(time.process_time() - start_cpu)
    load_after = os.getloadavg()
    ref = groupings[0]
    table = Table(
        title=f"mac.ampdu_grouping: time relative to {ref!r} in the same round "
        f"({args.duration:g} s simulated, seed {args.seed}, median of {args.repeat} rounds)"
    )
    for col in ("workload", "grouping", "CPU s / sim s", "CPU ratio", "wall ratio", "events",
                "CPU per event ratio"):  # fmt: skip
        table.add_column(col, justify="left" if col in ("workload", "grouping") else "right")
    rows = []
    for job in jobs:
        for g in groupings:
            c_ratio = statistics.median(
                c / r for c, r in zip(cpu[job][g], cpu[job][ref], strict=True)
            )
            w_ratio = statistics.median(
                w / r for w, r in zip(wall[job][g], wall[job][ref], strict=True)
            )
            per_event = c_ratio * events[job][ref] / max(events[job][g], 1)
            cpu_per_sim = statistics.median(cpu[job][g]) / args.duration
            rows.append({"workload": job, "grouping": g, "cpu_s": cpu[job][g],
                         "wall_s": wall[job][g], "cpu_per_sim_s": cpu_per_sim,
                         "cpu_ratio": c_ratio, "wall_ratio": w_ratio,
                         "events": events[job][g], "cpu_per_event_ratio": per_event})  # fmt: skip
            table.add_row(job, g, f"{cpu_per_sim:.4f}", f"{c_ratio:.3f}x", f"{w_ratio:.3f}x",
                          str(events[job][g]), f"{per_event:.3f}x")  # fmt: skip
    console.print(table)
    console.print(
        f"load average (1/5/15 min) before {' '.join(f'{x:.2f}' for x in load_before)}, "
        f"after {' '.join(f'{x:.2f}' for x in load_after)}; {os.cpu_count()} CPUs"
    )
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        doc = {
            "command": " ".join(["python benchmarks/sim_speed.py", *sys.argv[1:]]),
            "compiled": describe(),
            "duration_s": args.duration,
            "seed": args.seed,
            "repeat": args.repeat,
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
