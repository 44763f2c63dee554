"""One coordinated-robotic-learning run: a scenario, a policy, a seed -> :class:`CrlResult`."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from coorp._errors import UsageError
from coorp.policies import Team, get_policy
from coorp.scenario import Scenario
from coorp.sim import SimResult, Simulation
from coorp.units import NS_PER_MS, s, us
from coorp.workload._drlc import Drlc, EpochRecord
from coorp.workload._mpc import LoopRecord, MpcLoop

__all__ = ["CrlResult", "run_crl"]


def _pct(values: np.ndarray, q: float) -> float:
    # The empirical quantile (no interpolation): abandoned loops are inf, and a
    # percentile that falls among them must be inf, not inf - inf = NaN.
    return float(np.percentile(values, q, method="inverted_cdf")) if values.size else math.nan


@dataclass(frozen=True)
class CrlResult:
    """Metrics of one policy on one scenario and seed (``bh_only``: MPC switched off)."""

    policy: str
    bh_only: bool
    seed: int
    duration_ns: int
    deadline_ns: int
    loops: tuple[LoopRecord, ...]
    epochs: tuple[EpochRecord, ...]
    ls_latency_ns: np.ndarray
    ls_hw_depths: np.ndarray
    bh_bytes: int
    policy_stats: dict[str, Any]
    sim: SimResult = field(repr=False)

    @property
    def reaction_ns(self) -> np.ndarray:
        """Reaction times of finished loops; abandoned loops are ``inf``."""
        return np.array(
            [r.reaction_ns if r.reaction_ns is not None else math.inf for r in self.loops],
            dtype=float,
        )

    @property
    def violation_rate(self) -> float:
        r = self.reaction_ns
        return float(np.mean(r > self.deadline_ns)) if r.size else math.nan

    @property
    def bh_mbps(self) -> float:
        return self.bh_bytes * 8 / (self.duration_ns / 1e9) / 1e6

    @property
    def epoch_s(self) -> float:
        if not self.epochs:
            return math.nan
        return float(np.mean([e.duration_ns for e in self.epochs])) / 1e9

    def metrics(self) -> dict[str, Any]:
        """The per-policy block of ``coorp compare --json`` (utilization filled by caller)."""
        r = self.reaction_ns / NS_PER_MS
        lat = self.ls_latency_ns / NS_PER_MS
        return {
            "violation_rate": self.violation_rate,
            "reaction_ms": {"p50": _pct(r, 50), "p90": _pct(r, 90), "p99": _pct(r, 99)},
            "ls_latency_ms": {"p50": _pct(lat, 50), "p99": _pct(lat, 99)},
            "bh_mbps": self.bh_mbps,
            "epoch_s": self.epoch_s,
            "loops": len(self.loops),
            "epochs": len(self.epochs),
            "lag_ms_max": max((lp.lag_ns for lp in self.loops), default=0) / NS_PER_MS,
        }


def run_crl(
    scenario: Scenario,
    policy: str,
    *,
    seed: int | None = None,
    duration_ns: int | None = None,
    bh_only: bool = False,
    on_progress: Callable[[int], None] | None = None,
    source: str = "<scenario>",
) -> CrlResult:
    """Simulate the scenario's workload under ``policy`` (a registered name)."""
    wl = scenario.workload
    if wl is None:
        raise UsageError(f"{source} has no [workload] section; see docs/scenarios.md")
    policy_cls = get_policy(policy)
    sim = Simulation(scenario, seed=seed, source=source)
    workers = tuple(scenario.workers)
    mpc_on = wl.mpc.enabled and not bh_only
    mpc = MpcLoop(sim, wl.mpc, wl.leader, workers) if mpc_on else None
    team = Team(
        sim=sim, leader=wl.leader, workers=workers,
        ls_flows=mpc.flow_names if mpc is not None else frozenset(),
        mpc=wl.mpc if mpc_on else None, options=scenario.policy,
    )  # fmt: skip
    pol = policy_cls(team)
    pol.install()
    drlc = None
    if wl.drlc.enabled:
        item = wl.drlc.item_bytes or len(workers) * (wl.mpc.perception_bytes + wl.mpc.control_bytes)
        drlc = Drlc(sim, wl.drlc, wl.leader, workers, item, pol.send_bulk)
        drlc.begin()
    if mpc is not None:
        if drlc is not None:
            mpc.on_loop_done = lambda _rec: drlc.add_item()
        mpc.begin()
    elif drlc is not None:
        # No MPC traffic: data items still arrive once per period.
        period = us(wl.mpc.period_us)

        def produce(k: int) -> None:
            drlc.add_item()
            sim.call_at(sim.now_ns + period, produce, k + 1)

        sim.call_at(us(wl.mpc.start_us), produce, 0)
    until = s(scenario.duration_s) if duration_ns is None else duration_ns
    result = sim.run(until, on_progress)

    msgs = result.messages
    ls_names = np.array(sorted(team.ls_flows), dtype=object)
    is_ls = np.isin(msgs["flow"], ls_names)
    lat = msgs["latency_ns"][is_ls]
    bulk_names = drlc.bulk_flow_names if drlc is not None else frozenset()
    return CrlResult(
        policy=policy, bh_only=bh_only, seed=sim.seed, duration_ns=until,
        deadline_ns=us(wl.mpc.deadline_us),
        loops=tuple(mpc.records) if mpc is not None else (),
        epochs=tuple(drlc.epochs) if drlc is not None else (),
        ls_latency_ns=lat[lat >= 0].astype(np.int64),
        ls_hw_depths=msgs["hw_depth_first"][is_ls],
        bh_bytes=sum(result.flows[n].delivered_bytes for n in bulk_names),
        policy_stats=pol.stats(), sim=result,
    )  # fmt: skip
