"""Co-simulation speed and synchronization: the targets of issue 13.

1. Wall time per simulated second, 5 robots (scenarios/cosim-5.toml) and 20 robots
   (scenarios/cosim-20.toml: a static leader and 19 ground robots in 4 aisles), physics at
   500 Hz, the full CRL workload (30 Hz MPC loop + BSP DRLC, 40 MB model), exact
   coupling. Targets: <= 0.2 s (5 robots) and <= 1 s (20 robots) per simulated
   second on 2 cores. The seed's Gazebo + ns-3 middleware runs at or below real time
   (>= 1 s per simulated second). Each run is split into physics (MuJoCo steps), links
   (ray casts + path loss) and the rest (channel simulator, workload, controller), and
   compared with the same channel, workload and policy without physics (links frozen).
2. Coupling: exact event coupling vs the seed's fixed window (1 ms) and velocity-aware
   window (w_a = w + |V_p - V_s| / 1000) on cosim-5: sync error of the data crossing the
   two simulators (a pose carried by a perception; a delivered command), the quantization
   of command application to the physics step, wall time, and how far the trajectories
   drift from the exact run's.
3. The seed's LOS/NLOS tables, qualitatively: packet loss and delay vs distance for a
   ground-ground and a ground-air pair (the aerial robot 10 m up), with line of sight and
   behind one wall: the TGax enterprise path loss picks each link's MCS and loss, the
   channel simulator carries 1 KB best-effort messages every 10 ms for 2 s.

    python benchmarks/cosim_speed.py                       # 5 s simulated per run
    python benchmarks/cosim_speed.py --duration 2 --json out.json
"""

from __future__ import annotations

import argparse
import copy
import json
import time
import tomllib
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console
from rich.table import Table

from coorp.cosim import CosimRun, Coupling, parse_cosim

ROOT = Path(__file__).resolve().parents[1]


def cosim_5() -> dict[str, Any]:
    return tomllib.loads((ROOT / "scenarios" / "cosim-5.toml").read_text())


def cosim_20() -> dict[str, Any]:
    """scenarios/cosim-20.toml: cosim-5's world and network with 19 workers."""
    return tomllib.loads((ROOT / "scenarios" / "cosim-20.toml").read_text())


class _Timed(CosimRun):
    """Counts the wall time spent in the physics steps and in the link updates."""

    physics_s = 0.0
    links_s = 0.0

    def _update_links(self, poses: np.ndarray) -> None:
        t = time.perf_counter()
        super()._update_links(poses)
        self.links_s += time.perf_counter() - t


class _Still(CosimRun):
    """No physics: links set once from the initial geometry, never again."""

    _links_set = False

    def _update_links(self, poses: np.ndarray) -> None:
        if not self._links_set:
            super()._update_links(poses)
            self._links_set = True


def _timed_world_step(run: _Timed) -> None:
    world = run.world
    step = world.step

    def timed(v: np.ndarray, w: np.ndarray) -> list[tuple[int, int]]:
        t = time.perf_counter()
        out = step(v, w)
        run.physics_s += time.perf_counter() - t
        return out

    world.step = timed  # type: ignore[method-assign]


def speed(data: dict[str, Any], duration_s: float, policy: str) -> dict[str, Any]:
    cs = parse_cosim(copy.deepcopy(data), source=data["name"])
    # Warm-up (imports, MuJoCo's model compilation, SciPy's Riccati solver, caches): a
    # first short run, not timed.
    CosimRun(cs, policy).run(200_000_000)
    run = _Timed(cs, policy)
    _timed_world_step(run)
    t0 = time.perf_counter()
    r = run.run(round(duration_s * 1e9))
    wall = time.perf_counter() - t0
    # The same channel, workload and policy without physics (links frozen at their
    # initial state, no physics steps): what the co-simulation adds to the channel.
    still = _Still(cs, policy)
    still.mpc.begin()
    t0 = time.perf_counter()
    still.sim.run(round(duration_s * 1e9))
    channel_only = time.perf_counter() - t0
    return {
        "scenario": data["name"], "robots": len(cs.cosim.robots), "policy": policy,
        "simulated_s": duration_s, "wall_s": wall, "wall_per_sim_s": wall / duration_s,
        "physics_s": run.physics_s, "links_s": run.links_s,
        "rest_s": wall - run.physics_s - run.links_s, "steps": run.world.steps,
        "loops": int(r.reaction_ns.size), "bh_mbps": r.summary()["bh_mbps"],
        "channel_only_wall_s": channel_only,
    }  # fmt: skip


def coupling(data: dict[str, Any], duration_s: float, policy: str) -> list[dict[str, Any]]:
    cs = parse_cosim(copy.deepcopy(data), source=data["name"])
    rows = []
    exact_poses = None
    for mode in (Coupling.EXACT, Coupling.FIXED_WINDOW, Coupling.VELOCITY_WINDOW):
        t0 = time.perf_counter()
        r = CosimRun(cs, policy, coupling=mode).run(round(duration_s * 1e9))
        wall = time.perf_counter() - t0
        if exact_poses is None:
            exact_poses = r.poses
        drift = np.hypot(*(r.poses[..., :2] - exact_poses[..., :2]).transpose(2, 0, 1))
        s = r.summary()
        rows.append({
            "coupling": mode.value, "window_ms": cs.cosim.window_ms if mode is not
            Coupling.EXACT else None,
            "inject_mean_us": s["sync_error_ns"]["inject_mean"] / 1e3,
            "inject_max_us": s["sync_error_ns"]["inject_max"] / 1e3,
            "apply_mean_us": s["sync_error_ns"]["apply_mean"] / 1e3,
            "apply_max_us": s["sync_error_ns"]["apply_max"] / 1e3,
            "quantization_mean_us": s["quantization_ns"]["mean"] / 1e3,
            "quantization_max_us": s["quantization_ns"]["max"] / 1e3,
            "drift_vs_exact_max_m": float(drift.max()),
            "tracking_mean_m": s["tracking_error_m"]["mean"],
            "wall_s": wall, "wall_per_sim_s": wall / duration_s,
        })  # fmt: skip
    return rows


def los_table() -> list[dict[str, Any]]:
    from coorp.cosim import Radio
    from coorp.cosim._config import RadioConfig
    from coorp.scenario import parse_scenario
    from coorp.sim import Simulation

    radio = Radio(RadioConfig(), spatial_streams=2, width_mhz=80)
    sc = parse_scenario({
        "duration_s": 2.0, "phy": {"width_mhz": 80, "spatial_streams": 2},
        "stations": [{"name": "a"}, {"name": "b"}], "links": {"packet_errors": True},
        "flows": [{"kind": "datagram", "name": "m", "src": "a", "dst": "b",
                   "size_bytes": 1024, "period_us": 10_000.0, "jitter_us": 500.0}],
    })  # fmt: skip
    rows = []
    for pair, height in (("ground-ground", 0.0), ("ground-air", 10.0)):
        for walls in (0, 1):
            for d in (5.0, 10.0, 20.0, 30.0, 40.0, 60.0, 80.0):
                link = radio.link(float(np.hypot(d, height)), walls)
                sim = Simulation(sc, seed=1)
                sim.links.set_link(0, 1, link.mcs, link.rx_dbm)
                sim.links.set_link(1, 0, link.mcs, link.rx_dbm)
                f = sim.run().flows["m"]
                rows.append({
                    "pair": pair, "los": walls == 0, "distance_m": d, "mcs": link.mcs,
                    "rx_dbm": link.rx_dbm, "in_range": link.best_mcs is not None,
                    "loss": f.messages_lost / max(f.messages_sent, 1),
                    "delay_ms_p50": f.latency_ms_p50, "delay_ms_p99": f.latency_ms_p99,
                })  # fmt: skip
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--duration", type=float, default=5.0, help="simulated s per run")
    ap.add_argument("--policy", default="edca", help="policy of the coupling comparison")
    ap.add_argument("--speed-policies", default="edca,coorp", help="policies of the speed runs")
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--skip-20", action="store_true", help="only the 5-robot speed run")
    args = ap.parse_args()
    con = Console(highlight=False, width=160)
    runs = []
    for policy in args.speed_policies.split(","):
        runs.append(speed(cosim_5(), args.duration, policy))
        if not args.skip_20:
            runs.append(speed(cosim_20(), args.duration, policy))
    t = Table(title="co-simulation speed · full CRL workload · 500 Hz physics")
    for c in ("policy", "robots", "sim s", "wall s", "wall / sim s", "target", "physics s",
              "links s", "channel+rest s", "channel alone s", "steps", "loops",
              "BH Mb/s"):  # fmt: skip
        t.add_column(c, justify="right")
    for r in runs:
        target = 0.2 if r["robots"] <= 5 else 1.0
        ok = "ok" if r["wall_per_sim_s"] <= target else "MISSED"
        t.add_row(r["policy"], str(r["robots"]), f"{r['simulated_s']:g}", f"{r['wall_s']:.2f}",
                  f"{r['wall_per_sim_s']:.3f}", f"<= {target:g} {ok}", f"{r['physics_s']:.2f}",
                  f"{r['links_s']:.2f}", f"{r['rest_s']:.2f}", f"{r['channel_only_wall_s']:.2f}",
                  str(r["steps"]), str(r["loops"]),
                  f"{r['bh_mbps']:.1f}")  # fmt: skip
    t.caption = "seed's Gazebo + ns-3 middleware: >= 1 s wall per simulated second"
    con.print(t)
    rows = coupling(cosim_5(), args.duration, args.policy)
    t = Table(title="coupling: sync error, quantization and wall time (cosim-5)")
    for c in ("coupling", "inject mean/max µs", "apply mean/max µs", "quant mean/max µs",
              "drift vs exact m", "track err m", "wall / sim s"):  # fmt: skip
        t.add_column(c, justify="right")
    for r in rows:
        t.add_row(r["coupling"], f"{r['inject_mean_us']:.0f} / {r['inject_max_us']:.0f}",
                  f"{r['apply_mean_us']:.0f} / {r['apply_max_us']:.0f}",
                  f"{r['quantization_mean_us']:.0f} / {r['quantization_max_us']:.0f}",
                  f"{r['drift_vs_exact_max_m']:.4f}", f"{r['tracking_mean_m']:.4f}",
                  f"{r['wall_per_sim_s']:.3f}")  # fmt: skip
    t.caption = (
        "inject: perception instant - instant of the pose it carries; apply: command "
        "released - delivered; quant: applied at the physics step - released"
    )
    con.print(t)
    los = los_table()
    t = Table(title="LOS/NLOS: loss and delay vs distance (TGax enterprise, 1 KB every 10 ms)")
    for c in ("pair", "sight", "distance m", "rx dBm", "MCS", "loss %", "delay p50 ms",
              "p99 ms"):  # fmt: skip
        t.add_column(c, justify="right")
    for r in los:
        mcs = str(r["mcs"]) if r["in_range"] else "0 (below)"
        p50 = "-" if r["delay_ms_p50"] is None else f"{r['delay_ms_p50']:.3f}"
        p99 = "-" if r["delay_ms_p99"] is None else f"{r['delay_ms_p99']:.3f}"
        t.add_row(r["pair"], "LOS" if r["los"] else "NLOS (1 wall)", f"{r['distance_m']:g}",
                  f"{r['rx_dbm']:.1f}", mcs, f"{100 * r['loss']:.1f}",
                  p50, p99)  # fmt: skip
    con.print(t)
    if args.json is not None:
        args.json.write_text(
            json.dumps({"speed": runs, "coupling": rows, "los": los}, indent=2) + "\n"
        )


if __name__ == "__main__":
    main()
