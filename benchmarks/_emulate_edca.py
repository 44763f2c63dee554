"""The loop without Coorp on the air, against the simulator's prediction of the same
traffic (benchmarks/emulate.py ``--sections edca``; details file only).

The emulated runs (``transparent_wifi``) measure one-way latencies of an MPC loop whose
robots publish at their own phases and whose leader answers each perception at once
(``examples/unmodified/mpc_loop.py``), beside four TCP uploads; the simulator's ``coorp
compare`` reports the reaction time of another loop (every robot on one grid, the leader
waiting for all perceptions and 5 ms of inference). Not like for like. So the simulator
runs here the emulated runs' traffic itself, on the same scenario (crl-5 with the same
NIC ring model): per robot a 12 KB perception to the leader at 30 Hz at the phase
``mpc_loop.py`` gives that robot (same seed and name), the leader's 1 KB command to it
``--edca-command-lag-us`` later (the emulated perception's median one-way latency, about
2 ms), and a saturating TCP upload to the leader (``[tcp] sender = "cubic"``, as Linux's);
the messages' sizes carry RTPS's overhead (``--edca-overhead-bytes``, 100). One-way
latency of every perception and command created in the window, misses (> 33 ms or
lost), bulk Mb/s in the window; ``--seeds`` seeds.

* ``edca``: LS in AC_VO, bulk in AC_BE — the simulator's EDCA, and the emulated
  ``marking`` mode (Coorp's agents mark LS, nothing is coordinated);
* ``best effort``: LS in AC_BE too — the emulated ``none`` mode, with one difference in
  the models: the simulator's datagrams skip the kernel queue (fq_codel's sparse-flow
  priority), the emulator's share a tail-drop FIFO with the bulk (no FQ-CoDel, see
  docs/emulate.md, "Limits"; ``hw_queue.kernel_queue_fifo`` gives the simulator that
  FIFO). Like for like, the emulated hosts' TCP must be cubic too (``--tw-tcp-cc
  cubic``; this machine's default is BBR): docs/emulate.md, "The gap, found", and
  ``benchmarks/_edca_gap.py``.
"""

from __future__ import annotations

import math
import random
from typing import Any

import numpy as np

from coorp.scenario import (
    AccessCategory,
    Scenario,
    apply_overrides,
    load_scenario,
    resolve_scenario,
)
from coorp.sim import Simulation
from coorp.stats import mean_ci

BOUND_MS = 33.0
PERIOD_NS = round(1e9 / 30.0)


def scenario(ring: str, ls: AccessCategory, *, robots: int = 4, app_seed: str = "1",
             perception_bytes: int = 12_100, command_bytes: int = 1_100,
             command_lag_us: float = 2000.0) -> Scenario:  # fmt: skip
    """crl-5's channel with the emulated runs' traffic (module docstring)."""
    path = resolve_scenario("crl-5")
    base = apply_overrides(load_scenario(path), [("hw_queue.mode", ring.replace("-", "_"))],
                           source=str(path))  # fmt: skip
    names = [s.name for s in base.stations if s.name != "leader"][:robots]
    flows: list[dict[str, Any]] = []
    for name in names:
        # examples/unmodified/mpc_loop.py: phase = Random(f"{seed}/{name}").randrange(period)
        phase_us = random.Random(f"{app_seed}/{name}").randrange(PERIOD_NS) / 1e3
        flows += [
            {"kind": "datagram", "name": f"perception-{name}", "src": name, "dst": "leader",
             "size_bytes": perception_bytes, "period_us": PERIOD_NS / 1e3,
             "start_us": phase_us, "category": ls.value},
            {"kind": "datagram", "name": f"command-{name}", "src": "leader", "dst": name,
             "size_bytes": command_bytes, "period_us": PERIOD_NS / 1e3,
             "start_us": phase_us + command_lag_us, "category": ls.value},
            {"kind": "bulk", "name": f"upload-{name}", "src": name, "dst": "leader",
             "tcp_acks": True},
        ]  # fmt: skip
    data = base.model_dump(mode="json")
    data.update(workload=None, flows=flows, tcp={**data["tcp"], "sender": "cubic"})
    return Scenario.model_validate(data)


def simulate(sc: Scenario, seed: int, warmup_s: float, window_s: float) -> dict[str, Any]:
    """One seed: latencies of the LS messages created in the window, bulk in the window."""
    sim = Simulation(sc, seed=seed)
    a = round(warmup_s * 1e9)
    b = a + round(window_s * 1e9)
    uploads = [f for name, f in sim.flows.items() if name.startswith("upload-")]
    sim.loop.run(a)
    before = sum(f.delivered_bytes for f in uploads)
    sim.loop.run(b)
    bulk = (sum(f.delivered_bytes for f in uploads) - before) * 8e3 / (b - a)
    res = sim.run(b + 1_000_000_000)  # one more second to deliver the window's messages
    m = res.messages
    out: dict[str, Any] = {"seed": seed, "bulk_mbps": bulk}
    for kind in ("perception", "command"):
        sel = np.array([str(f).startswith(kind) for f in m["flow"]], dtype=bool)
        sel &= (m["created_ns"] >= a) & (m["created_ns"] < b)
        lat = m["latency_ns"][sel] / 1e6
        done = lat[lat >= 0]
        out[kind] = {"sent": int(sel.sum()), "latencies_ms": done.tolist(),
                     "misses": int((done > BOUND_MS).sum() + (lat < 0).sum())}  # fmt: skip
    return out


def _summary(seeds: list[dict[str, Any]], kind: str | None) -> dict[str, Any]:
    kinds = ("perception", "command") if kind is None else (kind,)
    lat = [x for s in seeds for k in kinds for x in s[k]["latencies_ms"]]
    sent = sum(s[k]["sent"] for s in seeds for k in kinds)
    miss = sum(s[k]["misses"] for s in seeds for k in kinds)
    per_seed = [sum(s[k]["misses"] for k in kinds) / max(sum(s[k]["sent"] for k in kinds), 1)
                for s in seeds]  # fmt: skip
    m = mean_ci(per_seed)
    return {"p50_ms": float(np.percentile(lat, 50)) if lat else None,
            "p99_ms": float(np.percentile(lat, 99)) if lat else None,
            "miss_rate": miss / sent if sent else None,
            "miss_rate_ci": {"mean": m.mean, "ci95": None if math.isnan(m.ci95) else m.ci95,
                             "n": m.n}}  # fmt: skip


def edca(args: Any, details: dict[str, Any]) -> None:
    """Simulate each ring's traffic under EDCA and best effort; pair with the emulated
    ``marking`` and ``none`` rows when ``transparent_wifi`` ran in the same invocation."""
    emulated = {r["ring"]: r["rows"] for r in details.get("transparent_wifi", [])}
    out = details.setdefault("edca_vs_simulator", [])
    for ring in args.tw_rings.split(","):
        for label, ac, mode in (("edca", AccessCategory.VO, "marking"),
                                ("best effort", AccessCategory.BE, "none")):  # fmt: skip
            sc = scenario(ring, ac, command_lag_us=args.edca_command_lag_us,
                          perception_bytes=12_000 + args.edca_overhead_bytes,
                          command_bytes=1_000 + args.edca_overhead_bytes)  # fmt: skip
            seeds = [simulate(sc, s, args.tw_warmup, args.tw_duration)
                     for s in range(1, args.seeds + 1)]  # fmt: skip
            bulk = mean_ci([s["bulk_mbps"] for s in seeds])
            sim = {
                "ls": _summary(seeds, None), "perception": _summary(seeds, "perception"),
                "command": _summary(seeds, "command"),
                "bulk_mbps": {"mean": bulk.mean, "ci95": bulk.ci95, "n": bulk.n},
            }  # fmt: skip
            emu = [
                {k: r[k] for k in ("app", "ls_miss_rate", "ls_miss_rate_ci", "ls_p99_ms",
                                   "perception", "command", "bulk_mbps", "bulk_mbps_ci",
                                   "load")}
                for r in emulated.get(ring, []) if r["mode"] == mode
            ]  # fmt: skip
            out.append({"ring": ring, "simulated": label, "emulated_mode": mode,
                        "simulator": sim, "emulated": emu})  # fmt: skip
            print(f"edca {ring} {label}: simulator misses {sim['ls']['miss_rate']:.2%} "
                  f"(per seed {sim['ls']['miss_rate_ci']['mean']:.2%} ± "
                  f"{sim['ls']['miss_rate_ci']['ci95'] or 0:.2%}), p99 {sim['ls']['p99_ms']:.1f} "
                  f"ms, bulk {bulk.mean:.0f} Mb/s; emulated {mode}: "
                  + ", ".join(f"{e['app']} {e['ls_miss_rate']:.2%} p99 {e['ls_p99_ms']:.1f} ms"
                              for e in emu), flush=True)  # fmt: skip
