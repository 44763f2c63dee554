"""``coorp emulate`` measured: real time under load, and saturation against the simulator.

Sections (``--sections``, default all that are built):

* ``realtime``: crl-5's stations saturated with real UDP (every robot to the leader and
  the leader to every robot, offered 1.5x what the simulator says the channel carries)
  on a 20 MHz 1x1 channel and on crl-5 as shipped (80 MHz 2x2, ~400 Mb/s); then crl-5 as
  shipped under a ladder of offered loads (the robots' uplinks, unsaturated), to find the
  highest aggregate rate at which real time holds. Per run: the aggregate IP throughput
  on the air, the emulator's frame lag p99 (frame written to its receiver's interface
  minus its simulated delivery time) and the frames late by more than 1 ms. First, the
  host's own floor (details ``host_wakeup_floor``; a limit of the machine, not a
  contender): how late a bare loop at the emulator's priority wakes from 200 µs sleeps
  with nothing else running (a virtual machine's stolen time shows here).
* ``saturation``: ``n`` = 1, 2, 5, 10 stations saturating the uplink to an AP (20 MHz,
  1x1, MCS 7, per-AC rings, 1500-byte IP packets), emulated (real UDP sockets in the
  namespaces, mean over ``--emu-seeds`` seeds) and simulated (the simulator's own
  saturated UDP flows, mean over ``--seeds`` seeds), over the same window of simulated
  time; Bianchi's model beside them in the details file.
* ``transparent_wifi``: ``benchmarks/transparent.py --medium wifi`` per NIC ring model
  (shared, per-AC): the unmodified DDS/Zenoh MPC loop and TCP uploads on crl-5's emulated
  channel without Coorp, with Coorp's marking only, transparent, and on Coorp's API
  (``benchmarks/_emulate_transparent.py``).
* ``edca`` (details file only): the simulator runs the ``transparent_wifi`` runs'
  traffic itself (the same phases, sizes and uploads on the same scenario and rings),
  under EDCA (LS in AC_VO: the emulated ``marking`` mode) and all best effort (the
  emulated ``none`` mode), ``--seeds`` seeds: one-way LS latency and misses of the same
  flows side by side (``benchmarks/_emulate_edca.py``).
* ``anchors`` (details file only): a UDP echo's round-trip times idle and under load in
  AC_BE and AC_VO against the simulator's access delays, and a real TCP upload against
  the simulator's bulk rate (``benchmarks/_emulate_anchors.py``).

``--json PATH`` gets exactly ``{"realtime": [{"scenario", "stations", "aggregate_mbps",
"lag_p99_ms", "late_frames"}], "saturation": [{"n", "emulated_mbps", "simulated_mbps"}],
"transparent_wifi": [...]}``; ``PATH`` with ``.details.json`` gets every run's report,
the load, the seeds' spread and Bianchi's numbers, and ``manifest.json`` lands next to it.

    sudo .venv/bin/python benchmarks/emulate.py --json results/emulate.json

Needs root, iproute2 and /dev/net/tun. The emulator runs at SCHED_FIFO priority
``--rt-priority`` (10; 0 for ordinary scheduling).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from coorp._manifest import build_manifest, write_json
from coorp.analysis import saturation_throughput
from coorp.emulate import GRO_DEFAULT, emulation_unavailable
from coorp.emulate._validate import run_load, saturation_scenario, simulated_saturation, uplinks
from coorp.scenario import Scenario, apply_overrides, load_scenario, resolve_scenario

SECTIONS = ("realtime", "saturation", "anchors", "transparent_wifi", "edca")


def crl5(width: int | None = None, streams: int | None = None) -> tuple[str, Scenario]:
    path = resolve_scenario("crl-5")
    sc = load_scenario(path)
    if width is None:
        return "crl-5 (80 MHz 2x2)", sc
    sc = apply_overrides(sc, [("phy.width_mhz", width), ("phy.spatial_streams", streams)],
                         source=str(path))  # fmt: skip
    return f"crl-5 {width} MHz {streams}x{streams}", sc


def star_flows(sc: Scenario, leader: str = "leader") -> list[tuple[str, str]]:
    robots = [s.name for s in sc.stations if s.name != leader]
    return [(r, leader) for r in robots] + [(leader, r) for r in robots]


def _summary(r: Any) -> dict[str, Any]:
    d = dict(r.report.data)
    d.pop("series", None)
    return {"emulated_mbps": r.mbps, "app_ip_mbps": r.ip_app_mbps, "blast": r.blast,
            "report": d}  # fmt: skip


def host_wakeup_floor(seconds: float, rt_priority: int) -> dict[str, Any]:
    """The host's own floor (not a contender: a physical limit of this machine): how
    late a bare loop wakes from 200 µs ``select`` sleeps as the emulator sleeps, at its
    SCHED_FIFO priority, nothing else running; in a child process so that this one's
    scheduling is untouched."""
    code = (
        "import json, sys; from coorp.emulate._pump import probe_wakeups; "
        "m = probe_wakeups(int(float(sys.argv[1]) * 1e9), rt_priority=int(sys.argv[2])); "
        "print(json.dumps(m.summary().as_dict()))"
    )
    argv = [sys.executable, "-c", code, str(seconds), str(rt_priority)]
    r = subprocess.run(argv, capture_output=True, text=True, timeout=seconds + 60, check=True)
    return {"seconds": seconds, "period_us": 200, "rt_priority": rt_priority,
            "load": os.getloadavg(), **json.loads(r.stdout.strip().splitlines()[-1])}  # fmt: skip


def realtime(args: argparse.Namespace, details: dict[str, Any]) -> list[dict[str, Any]]:
    rows = []
    runs = details.setdefault("realtime", [])
    floor = host_wakeup_floor(args.window, args.rt_priority)
    details["host_wakeup_floor"] = floor
    print(f"realtime: the host's wake-up floor (a bare loop, no load; not a contender): "
          f"p50 {floor['p50_ms']:.3f} ms, p99 {floor['p99_ms']:.3f} ms, max "
          f"{floor['max_ms']:.2f} ms, {floor['late']} of {floor['count']} wake-ups late "
          f"by > 1 ms", flush=True)  # fmt: skip
    for label, sc in (crl5(20, 1), crl5()):
        flows = star_flows(sc)
        cap = simulated_saturation(sc, flows, warmup_s=args.warmup, window_s=args.window, seed=1)
        pps = 1.5 * cap * 1e6 / 8 / sc.packet_bytes / len(flows)
        load = os.getloadavg()
        r = run_load(sc, flows, pps=pps, warmup_s=args.warmup, window_s=args.window, seed=1,
                     rt_priority=args.rt_priority, sender_rt_priority=args.sender_rt,
                     split_cpus=args.split_cpus, gro=args.gro)  # fmt: skip
        row = {"scenario": f"{label}, saturated", "stations": len(sc.stations),
               "aggregate_mbps": round(r.mbps, 3), "lag_p99_ms": round(r.report.lag_p99_ms, 4),
               "late_frames": r.report.late_frames}  # fmt: skip
        rows.append(row)
        runs.append({**row, "simulated_mbps": cap, "offered_pps_per_flow": pps, "load": load,
                     **_summary(r)})  # fmt: skip
        print(f"realtime {row} (simulated {cap:.1f} Mb/s, load {load[0]:.1f})", flush=True)
    label, sc = crl5()
    robots = [(s.name, "leader") for s in sc.stations if s.name != "leader"]
    for total in args.ladder:
        pps = total * 1e6 / 8 / sc.packet_bytes / len(robots)
        load = os.getloadavg()
        r = run_load(sc, robots, pps=pps, warmup_s=args.warmup, window_s=args.window, seed=1,
                     rt_priority=args.rt_priority, sender_rt_priority=args.sender_rt,
                     split_cpus=args.split_cpus, gro=args.gro)  # fmt: skip
        row = {"scenario": f"{label}, {total:g} Mb/s offered up", "stations": len(sc.stations),
               "aggregate_mbps": round(r.mbps, 3), "lag_p99_ms": round(r.report.lag_p99_ms, 4),
               "late_frames": r.report.late_frames}  # fmt: skip
        rows.append(row)
        runs.append({**row, "offered_mbps": total, "load": load, **_summary(r)})
        print(f"realtime {row} (load {load[0]:.1f})", flush=True)
    held = [r for r in rows if r["lag_p99_ms"] <= 1.0]
    details["highest_aggregate_mbps_held"] = max((r["aggregate_mbps"] for r in held), default=None)
    return rows


def saturation(args: argparse.Namespace, details: dict[str, Any]) -> list[dict[str, Any]]:
    rows = []
    runs = details.setdefault("saturation", [])
    for n in args.ns:
        sc = saturation_scenario(n)
        flows = uplinks(sc)
        sims = [simulated_saturation(sc, flows, warmup_s=args.warmup, window_s=args.window,
                                     seed=s) for s in range(1, args.seeds + 1)]  # fmt: skip
        sim = statistics.fmean(sims)
        pps = 1.5 * sim * 1e6 / 8 / sc.packet_bytes / n
        load = os.getloadavg()
        rs = [run_load(sc, flows, pps=pps, warmup_s=args.warmup, window_s=args.window,
                       seed=s, rt_priority=args.rt_priority, sender_rt_priority=args.sender_rt,
                       split_cpus=args.split_cpus, gro=args.gro)
              for s in range(1, args.emu_seeds + 1)]  # fmt: skip
        emu = statistics.fmean(r.mbps for r in rs)
        model = saturation_throughput(n, payload_bytes=sc.packet_bytes, mcs=sc.links.mcs,
                                      phy=sc.phy, mac=sc.mac).throughput_mbps  # fmt: skip
        row = {"n": n, "emulated_mbps": round(emu, 3), "simulated_mbps": round(sim, 3)}
        rows.append(row)
        lag = max(r.report.lag_p99_ms for r in rs)
        runs.append({**row, "simulated_per_seed": sims, "emulated_per_seed": [r.mbps for r in rs],
                     "bianchi_mbps": model, "emulated_over_simulated": emu / sim,
                     "emulated_over_bianchi": emu / model, "lag_p99_ms_worst": lag,
                     "late_frames": sum(r.report.late_frames for r in rs), "load": load,
                     "runs": [_summary(r) for r in rs]})  # fmt: skip
        print(
            f"saturation {row} ratio {emu / sim:.4f} bianchi {model:.2f} (ratio "
            f"{emu / model:.4f}) lag p99 <= {lag:.3f} ms load {load[0]:.1f}",
            flush=True,
        )
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", required=True, type=Path)
    ap.add_argument("--sections", default=",".join(SECTIONS))
    ap.add_argument("--window", type=float, default=5.0, help="measured seconds per run")
    ap.add_argument("--warmup", type=float, default=2.0, help="seconds before the window")
    ap.add_argument("--seeds", type=int, default=5, help="simulator seeds per saturation n")
    ap.add_argument("--emu-seeds", type=int, default=3, help="emulated runs per saturation n")
    ap.add_argument("--ns", default="1,2,5,10", help="saturation: stations")
    ap.add_argument("--ladder", default="25,100,200,300,400,500", help="realtime: Mb/s offered")
    ap.add_argument("--rt-priority", type=int, default=10)
    ap.add_argument(
        "--no-split-cpus",
        dest="split_cpus",
        action="store_false",
        help="every section: the emulator not pinned and the stations' receives not "
        "steered to the other CPUs (Emulation(split_cpus=False); the default splits)",
    )
    ap.add_argument(
        "--gro",
        action=argparse.BooleanOptionalAction,
        default=GRO_DEFAULT,
        help="every section: the receivers' stacks get each exchange's TCP segments "
        "coalesced as a NIC driver's GRO hands them (coorp emulate --gro)",
    )
    ap.add_argument("--tw-apps", default="dds,zenoh", help="transparent_wifi: middleware")
    ap.add_argument("--tw-modes", default="none,marking,transparent,api")
    ap.add_argument("--tw-rings", default="shared,per-ac")
    ap.add_argument("--tw-repetitions", type=int, default=5)
    ap.add_argument("--tw-duration", type=float, default=15.0, help="seconds per run")
    ap.add_argument("--tw-warmup", type=float, default=3.0)
    ap.add_argument(
        "--tw-ls-rt",
        type=int,
        default=5,
        help="transparent_wifi: SCHED_FIFO priority of the MPC loop's programs (0: "
        "ordinary scheduling)",
    )
    ap.add_argument(
        "--tw-agent-rt",
        type=int,
        default=0,
        help="transparent_wifi: SCHED_FIFO priority of coorp leader and the agents (0: "
        "ordinary scheduling, as the daemons run)",
    )
    ap.add_argument(
        "--tw-tcp-cc",
        default="",
        help="transparent_wifi: every host's TCP congestion control, by route ('': the "
        "host's default, bbr on this machine; cubic: the simulator's, for the edca section's "
        "like-for-like comparison, docs/emulate.md)",
    )
    ap.add_argument(
        "--tw-gate-completion",
        default="",
        choices=("", "departure", "ack"),
        help="transparent_wifi: the agents' [agent] gate_completion ('': Coorp's default, "
        "departure; ack: the rule before, for a like-for-like comparison)",
    )
    ap.add_argument(
        "--tw-ack-category",
        default="",
        choices=("", "AC_VI", "AC_BE"),
        help="transparent_wifi: the access category of the team's TCP acks, [agent] "
        "inbox_ack_category and [transparent] ack_category ('': Coorp's default, AC_VI; "
        "AC_BE: the acks as the data, for an A/B)",
    )
    ap.add_argument(
        "--tw-ls-category",
        default="",
        choices=("", "AC_VO", "AC_VI"),
        help="transparent_wifi: the category Coorp marks LS packets for, [agent] and "
        "[transparent] ls_category ('': Coorp's default, AC_VO; AC_VI: aggregated)",
    )
    ap.add_argument(
        "--tw-sink-rt",
        type=int,
        default=0,
        help="transparent_wifi: SCHED_FIFO priority of the leader's upload sink (0: "
        "ordinary scheduling, the benchmark's own nice level): on a busy host a sink that "
        "hashes what it reads decides the bulk rate (docs/emulate.md, 'Under load')",
    )
    ap.add_argument(
        "--tw-logs",
        type=Path,
        default=None,
        help="transparent_wifi: keep every process's stderr here, per ring (the agents' "
        "stop lines carry their relays' pacing counters: where the bulk's time went)",
    )
    ap.add_argument(
        "--tw-cpu-hog",
        type=int,
        default=0,
        help="transparent_wifi: busy processes on every host, at the benchmark's nice level",
    )
    ap.add_argument(
        "--edca-command-lag-us",
        type=float,
        default=2000.0,
        help="edca: the simulated command's offset after its perception",
    )
    ap.add_argument(
        "--edca-overhead-bytes", type=int, default=100, help="edca: RTPS bytes per message"
    )
    ap.add_argument(
        "--sender-rt",
        type=int,
        default=5,
        help="SCHED_FIFO priority of the UDP senders (0: ordinary): on a busy host the "
        "load offered is then the load asked for",
    )
    args = ap.parse_args()
    args.ns = [int(x) for x in args.ns.split(",")]
    args.ladder = [float(x) for x in args.ladder.split(",") if x]
    sections = args.sections.split(",")
    for s in sections:
        if s not in SECTIONS:
            ap.error(f"--sections: {s!r}; allowed: {', '.join(SECTIONS)}")
    for flag, value in (("--tw-sink-rt", args.tw_sink_rt), ("--tw-cpu-hog", args.tw_cpu_hog)):
        if value < 0:
            ap.error(f"{flag} {value}: must be >= 0 (0: none)")
    if args.tw_sink_rt > 99:
        ap.error(f"--tw-sink-rt {args.tw_sink_rt}: SCHED_FIFO priorities are 1-99 (0: none)")
    why = emulation_unavailable()
    if why is not None:
        print(f"benchmarks/emulate.py cannot run here: {why}", file=sys.stderr)
        return 2
    if not args.json.parent.is_dir():
        ap.error(f"--json {args.json}: the folder {args.json.parent} does not exist")
    t0 = time.perf_counter()
    load0 = os.getloadavg()
    out: dict[str, list[dict[str, Any]]] = {"realtime": [], "saturation": [],
                                            "transparent_wifi": []}  # fmt: skip
    details: dict[str, Any] = {"load_start": load0, "cores": os.cpu_count(),
                               "rt_priority": args.rt_priority}  # fmt: skip
    if "saturation" in sections:
        out["saturation"] = saturation(args, details)
    if "realtime" in sections:
        out["realtime"] = realtime(args, details)
    if "anchors" in sections:
        from _emulate_anchors import anchors

        anchors(args, details)
    if "transparent_wifi" in sections:
        from _emulate_transparent import transparent_wifi

        out["transparent_wifi"] = transparent_wifi(args, details)
    if "edca" in sections:
        from _emulate_edca import edca

        edca(args, details)
    details["load_end"] = os.getloadavg()
    write_json(args.json, out)
    write_json(args.json.with_suffix(".details.json"), details)
    write_json(args.json.parent / "manifest.json", build_manifest(
        scenario={}, scenario_path=None, seed=1, wall_s=time.perf_counter() - t0,
        extra={"benchmark": "emulate", "args": {k: v for k, v in vars(args).items()
                                                if k != "json"}},
    ))  # fmt: skip
    print(f"wrote {args.json} ({time.perf_counter() - t0:.0f} s; load {load0[0]:.1f} -> "
          f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} cores)")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
