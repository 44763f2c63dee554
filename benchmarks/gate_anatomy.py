"""Where a gated policy's bandwidth goes: per robot, while it may send bulk data.

For each scenario and policy (any policy built on ``coorp``'s permits: ``coorp``,
``coorp-paper``, ``coorp-local``, ``oracle``...), samples every robot's driver state
every ``--sample-us`` of simulated time and reports, over the time the robot *may* send
bulk data and has some waiting (it holds a permit, or the policy has no permits):

* ``gate %``        the bulk queue is paused (the gate or the oracle said no);
* ``idle NIC %``    paused **and** no bulk packet in the NIC: airtime the robot gave
                    away (what a better gate could win back);
* ``in window %``   inside one of its protection windows (the price of protection);
* ``windows/period`` distinct protection windows per MPC period held;
* ``late %``        bulk packets still in the NIC when the robot's next LS message
                    came (the gate's CTT percentile aims at 100 − ``ctt_percentile``,
                    5%; this is what happened);
* ``LS p99 ms``     latency of the robot's own LS messages (what the gate protects).

The probe only reads state (results are those of the plain policy, bit for bit)::

    python benchmarks/gate_anatomy.py crl-10 one-low --policies coorp-paper,coorp \\
        --duration 30 --seeds 1,2 --json results/gate_anatomy.json
"""

from __future__ import annotations

import argparse
import json
import runpy
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console
from rich.table import Table

from coorp.policies import CoorpPolicy, _registry, get_policy
from coorp.scenario import AccessCategory, apply_overrides, load_scenario, resolve_scenario
from coorp.units import us
from coorp.workload import run_crl

COLUMNS = ("holding s", "gate %", "idle NIC %", "in window %", "windows/period",
           "late %", "LS p99 ms")  # fmt: skip


class Recorder:
    """Wraps a robot's driver hooks: records bulk enqueues/completions and LS sends."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.per_packet = bool(getattr(inner, "per_packet", True))
        self.enqueued: dict[int, int] = {}
        self.done: list[tuple[int, int]] = []  # (enqueued, completed)
        self.sends: list[int] = []

    def __getattr__(self, name: str) -> Any:  # e.g. the oracle's max_bulk_airtime_ns
        return getattr(self.inner, name)

    def admit_bulk(self, station: Any, now_ns: int) -> int | None:
        return self.inner.admit_bulk(station, now_ns)

    def on_ls_send(self, station: Any, flow: str, now_ns: int) -> None:
        if flow in getattr(self.inner, "ls_flows", ()):
            self.sends.append(now_ns)
        self.inner.on_ls_send(station, flow, now_ns)

    def on_hw_enqueue(self, station: Any, pid: int, ac: Any, depth: int, now_ns: int) -> None:
        if ac is AccessCategory.BE:
            self.enqueued[pid] = now_ns
        self.inner.on_hw_enqueue(station, pid, ac, depth, now_ns)

    def on_hw_complete(self, station: Any, pid: int, ac: Any, now_ns: int, delivered: bool) -> None:
        t = self.enqueued.pop(pid, None) if ac is AccessCategory.BE else None
        if t is not None and delivered:
            self.done.append((t, now_ns))
        self.inner.on_hw_complete(station, pid, ac, now_ns, delivered)

    def late_share(self) -> float:
        """Completed bulk packets that were still in the NIC at the next LS send."""
        if not self.done or not self.sends:
            return float("nan")
        sends = np.asarray(self.sends, dtype=np.int64)
        enq, comp = np.asarray(self.done, dtype=np.int64).T
        idx = np.searchsorted(sends, enq)
        has_send = idx < sends.size
        nxt = sends[np.minimum(idx, sends.size - 1)]
        late = has_send & (comp > nxt)
        return float(late.sum() / max(1, has_send.sum()))


def probe_class(
    base: type[CoorpPolicy],
    sample_ns: int,
    out: dict[str, Counter[str]],
    windows: dict[str, set[int]],
    recorders: dict[str, Recorder],
) -> type[CoorpPolicy]:
    """``base`` plus a read-only sampler of every robot's driver state."""

    class Probe(base):  # type: ignore[valid-type, misc]
        name = f"{base.name}+probe"

        def install(self) -> None:
            super().install()
            sim = self.team.sim
            for robot in self.team.robots:
                recorders[robot] = Recorder(sim.station(robot).hooks)
                sim.set_hooks(robot, recorders[robot])

            def sample() -> None:
                now = sim.now_ns
                for robot in self.team.robots:
                    st = sim.station(robot)
                    client = self.clients.get(robot)
                    may = client.may_send(now) if client is not None else True
                    if not (may and st.bulk_backlog):
                        continue
                    c = out[robot]
                    c["holding"] += 1
                    ring = st.rings[AccessCategory.BE]
                    bulk = sum(
                        p.count for p in ring if p.message is None and p.ac is AccessCategory.BE
                    )
                    if st.bulk_paused:
                        c["gate"] += 1
                        if bulk == 0:
                            c["idle"] += 1
                    gate = self.gates.get(robot)
                    w = gate.window(now) if gate is not None else None
                    if w is not None:
                        windows[robot].add(w.start_ns)
                        if w.start_ns <= now <= w.end_ns:
                            c["window"] += 1
                sim.call_at(now + sample_ns, sample)

            sim.call_at(sample_ns, sample)

    return Probe


def anatomy(
    scenario: str, policy: str, seed: int, duration_s: float, sample_us: float,
    overrides: list[str] | None = None,
) -> dict[str, Any]:  # fmt: skip
    sc = load_scenario(resolve_scenario(scenario))
    if overrides:
        combo = [tuple(kv.split("=", 1)) for kv in overrides]
        sc = apply_overrides(sc, combo, source=scenario)  # type: ignore[arg-type]
    base = get_policy(policy)
    if not issubclass(base, CoorpPolicy):
        raise SystemExit(f"{policy}: not built on coorp's permits (nothing to dissect)")
    counts: dict[str, Counter[str]] = {s.name: Counter() for s in sc.stations}
    windows: dict[str, set[int]] = {s.name: set() for s in sc.stations}
    recorders: dict[str, Recorder] = {}
    cls = probe_class(base, us(sample_us), counts, windows, recorders)
    _registry._REGISTRY[cls.name] = cls
    try:
        result = run_crl(sc, cls.name, seed=seed, duration_ns=round(duration_s * 1e9))
    finally:
        del _registry._REGISTRY[cls.name]
    assert sc.workload is not None
    msgs = result.sim.messages
    flows = result.sim.flows
    ls_flows = [n for n in flows if n.startswith(("perception:", "control:"))]
    robots: dict[str, dict[str, float]] = {}
    for robot, c in counts.items():
        if robot not in recorders:
            continue  # a station outside the team (a guest, a laptop): nothing gated
        held = c["holding"]
        own_ls = sorted(n for n in ls_flows if flows[n].src == robot)
        lat = msgs["latency_ns"][np.isin(msgs["flow"], own_ls)]
        lat = lat[lat >= 0]
        held_periods = held * sample_us / sc.workload.mpc.period_us
        robots[robot] = {
            "holding s": held * sample_us / 1e6,
            "gate %": 100 * c["gate"] / held if held else float("nan"),
            "idle NIC %": 100 * c["idle"] / held if held else float("nan"),
            "in window %": 100 * c["window"] / held if held else float("nan"),
            "windows/period": len(windows[robot]) / held_periods if held else float("nan"),
            "late %": 100 * recorders[robot].late_share(),
            "LS p99 ms": float(np.percentile(lat, 99)) / 1e6 if lat.size else float("nan"),
        }
    return {
        "scenario": scenario, "policy": policy, "seed": seed, "duration_s": duration_s,
        "metrics": {k: v for k, v in result.metrics().items() if k != "warnings"},
        "bh_mbps": result.bh_mbps, "robots": robots,
    }  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("scenarios", nargs="+", help="scenario files or built-in names")
    ap.add_argument("--policies", default="coorp-paper,coorp")
    ap.add_argument("--seeds", default="1")
    ap.add_argument("--duration", type=float, default=30.0, help="simulated seconds")
    ap.add_argument("--sample-us", type=float, default=100.0)
    ap.add_argument("--json", type=Path)
    ap.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a scenario override, as coorp sweep --set (one value)",
    )
    ap.add_argument(
        "--policy-module",
        type=Path,
        action="append",
        default=[],
        help="a Python file registering policies (benchmarks/coorp_ladder.py)",
    )
    args = ap.parse_args(argv)
    for module in args.policy_module:
        runpy.run_path(str(module))
    console = Console(width=None if sys.stdout.isatty() else 160)
    seeds = [int(s) for s in args.seeds.split(",")]
    out = []
    for scenario in args.scenarios:
        for policy in args.policies.split(","):
            for seed in seeds:
                a = anatomy(scenario, policy, seed, args.duration, args.sample_us, args.set)
                out.append(a)
                m = a["metrics"]
                t = Table(
                    title=f"{scenario} · {policy} · seed {seed} · {args.duration:g} s: miss "
                    f"{m['violation_rate']:.1%}, BH {a['bh_mbps']:.1f} Mb/s"
                )
                t.add_column("robot")
                for col in COLUMNS:
                    t.add_column(col, justify="right")
                for robot, r in a["robots"].items():
                    t.add_row(robot, *(f"{r[c]:.1f}" if c in r else "-" for c in COLUMNS))
                console.print(t)
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(out, indent=1, default=float))
    return 0


if __name__ == "__main__":
    sys.exit(main())
