"""One coordinated-robotic-learning run: a scenario, a policy, a seed -> :class:`CrlResult`."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from coorp._errors import UsageError
from coorp.policies import Team, get_policy
from coorp.scenario import Scenario, SyncMode
from coorp.sim import SimResult, Simulation
from coorp.stats import percentile
from coorp.units import NS_PER_MS, s, us
from coorp.workload._drlc import Drlc, EpochRecord
from coorp.workload._mpc import LoopRecord, MpcLoop
from coorp.workload._series import Sampler

__all__ = ["CrlResult", "comparison_warnings", "run_crl"]


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
    #: Names of the MPC loop's LS flows (perceptions and controls).
    ls_flows: frozenset[str] = frozenset()
    #: Whether the scenario's workload runs DRLC epochs / the MPC loop in this run.
    drlc_enabled: bool = False
    mpc_enabled: bool = False
    #: The earliest the first epoch can start: once its batch of data items (one per
    #: MPC period) is in.
    first_epoch_ns: int = 0
    #: 10 ms bins per station (see :mod:`coorp.workload._series`); empty if not sampled.
    timeseries: dict[str, np.ndarray] = field(default_factory=dict, repr=False)

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
            # Empirical quantiles (coorp.stats.percentile): abandoned loops are inf, and a
            # percentile that falls among them must be inf, not inf - inf = NaN.
            "reaction_ms": {q: percentile(r, int(q[1:])) for q in ("p50", "p90", "p99")},
            "ls_latency_ms": {"p50": percentile(lat, 50), "p99": percentile(lat, 99)},
            "bh_mbps": self.bh_mbps,
            "epoch_s": self.epoch_s,
            "loops": len(self.loops),
            "epochs": len(self.epochs),
            "lag_ms_max": max((lp.lag_ns for lp in self.loops), default=0) / NS_PER_MS,
            "warnings": self.warnings(),
        }

    def warnings(self) -> list[str]:
        """Why a metric of this run is missing or rests on little data (a run too short
        for an epoch, an MPC loop, or bulk data): shown in tables and JSON."""
        dur = f"{self.duration_ns / 1e9:g} s"
        out = []
        if self.mpc_enabled and not self.loops:
            out.append(f"no MPC loop finished in {dur}: miss rate and reaction times are null")
        if self.drlc_enabled and not self.epochs:
            if self.bh_bytes > 0:
                why = " (the first epoch's transfers had started)"
            else:
                first = self.first_epoch_ns / 1e9
                why = f" (the first epoch starts at {first:.2f} s at the earliest)"
            out.append(f"no epoch in {dur}: epoch time is null{why}; run longer (--duration)")
        elif self.drlc_enabled and len(self.epochs) < MIN_EPOCHS:
            n = len(self.epochs)
            out.append(f"epoch time from {n} epoch{'s' if n > 1 else ''} only in {dur}")
        if self.drlc_enabled and self.bh_bytes == 0 and self.duration_ns > self.first_epoch_ns:
            out.append(f"no bulk data delivered in {dur}: BH throughput is 0")
        return out

    def tables(self) -> dict[str, dict[str, Any]]:
        """Raw per-loop, per-epoch, per-LS-message and time-series tables (columnar).

        ``loops``: one row per MPC loop (``reaction_ns`` null if abandoned; ``missed`` =
        reaction > the deadline or abandoned, so its mean is the miss rate). ``epochs``:
        one row per finished epoch (``worker`` null for BSP/SSP). ``ls_messages``: one row
        per perception/control message (``deliver_ns``/``latency_ns`` null if it never
        arrived; ``hw_depth``: packets ahead of its first fragment in the hardware ring).
        ``timeseries``: 10 ms bins per station (see :mod:`coorp.workload._series`).
        """
        loops = self.loops
        reaction = [lp.reaction_ns for lp in loops]
        out: dict[str, dict[str, Any]] = {
            "loops": {
                "index": np.array([lp.index for lp in loops], np.int64),
                "nominal_ns": np.array([lp.nominal_ns for lp in loops], np.int64),
                "start_ns": np.array([lp.start_ns for lp in loops], np.int64),
                "end_ns": [lp.end_ns if lp.end_ns >= 0 else None for lp in loops],
                "reaction_ns": reaction,
                "lag_ns": np.array([lp.lag_ns for lp in loops], np.int64),
                "abandoned": np.array([r is None for r in reaction], bool),
                "missed": np.array([r is None or r > self.deadline_ns for r in reaction], bool),
            },
            "epochs": {
                "index": np.array([e.index for e in self.epochs], np.int64),
                "worker": [e.worker for e in self.epochs],
                "start_ns": np.array([e.start_ns for e in self.epochs], np.int64),
                "end_ns": np.array([e.end_ns for e in self.epochs], np.int64),
                "duration_ns": np.array([e.duration_ns for e in self.epochs], np.int64),
            },
        }
        msgs = self.sim.messages
        flows = self.sim.flows
        ls = np.isin(msgs["flow"], np.array(sorted(self.ls_flows), dtype=object))
        names = msgs["flow"][ls]
        delivered = msgs["delivered_ns"][ls]
        arrived = delivered >= 0
        out["ls_messages"] = {
            "flow": names,
            "src": np.array([flows[n].src for n in names], dtype=object),
            "dst": np.array([flows[n].dst for n in names], dtype=object),
            "msg_id": msgs["msg_id"][ls],
            "size_bytes": msgs["size_bytes"][ls],
            "enqueue_ns": msgs["created_ns"][ls],
            "deliver_ns": [int(d) if a else None for d, a in zip(delivered, arrived, strict=True)],
            "latency_ns": [
                int(v) if a else None for v, a in zip(msgs["latency_ns"][ls], arrived, strict=True)
            ],
            "lost": msgs["lost"][ls],
            "hw_depth": msgs["hw_depth_first"][ls],
        }
        if self.timeseries:
            out["timeseries"] = dict(self.timeseries)
        return out


#: Fewer finished epochs than this: the epoch time carries a warning.
MIN_EPOCHS = 3


def comparison_warnings(
    metrics: Mapping[str, Mapping[str, Any]],
    reference: Mapping[str, Any],
    *,
    duration_s: float,
    reference_name: str = "bh-only",
) -> dict[str, list[str]]:
    """Warnings of a comparison, per run name (the reference under ``reference_name``):
    each run's own (``metrics[name]["warnings"]``) plus what a short reference does to
    the others (utilization is relative to the reference's bulk throughput)."""
    out: dict[str, list[str]] = {}
    ref_bh = reference.get("bh_mbps")
    ref_dead = ref_bh is None or not ref_bh > 0
    for name, m in metrics.items():
        w = list(m.get("warnings", ()))
        if ref_dead and not m.get("infeasible"):
            w.append(
                f"utilization is null: the {reference_name} reference delivered no bulk "
                f"data in {duration_s:g} s"
            )
        out[name] = w
    out[reference_name] = list(reference.get("warnings", ()))
    return out


def run_crl(
    scenario: Scenario,
    policy: str,
    *,
    seed: int | None = None,
    duration_ns: int | None = None,
    bh_only: bool = False,
    on_progress: Callable[[int], None] | None = None,
    source: str = "<scenario>",
    timeseries: bool = True,
    trace: bool = False,
) -> CrlResult:
    """Simulate the scenario's workload under ``policy`` (a registered name).

    ``timeseries``: sample bulk throughput, ring depth and gate state into 10 ms bins
    (:attr:`CrlResult.timeseries`); read-only, so the results are the same without it.
    ``trace``: keep every channel exchange (``result.sim.trace``: start, end, collided,
    stations, categories, MPDUs, PSDU bytes, TXOP start); read-only too.
    """
    wl = scenario.workload
    if wl is None:
        raise UsageError(f"{source} has no [workload] section; see docs/scenarios.md")
    policy_cls = get_policy(policy)
    sim = Simulation(scenario, seed=seed, source=source, trace=trace)
    workers = tuple(scenario.workers)
    mpc_on = wl.mpc.enabled and not bh_only
    mpc = MpcLoop(sim, wl.mpc, wl.leader, workers) if mpc_on else None
    team = Team(
        sim=sim, leader=wl.leader, workers=workers,
        ls_flows=mpc.flow_names if mpc is not None else frozenset(),
        mpc=wl.mpc if mpc_on else None, options=scenario.policy,
        ls_schedule=mpc.next_send_ns if mpc is not None else None,
        ls_send=mpc.next_send if mpc is not None else None,
        ls_phases=mpc.phase_ns if mpc is not None else None,
    )  # fmt: skip
    pol = policy_cls(team)
    pol.install()
    drlc = None
    bulk_flows = []
    if wl.drlc.enabled:
        item = wl.drlc.item_bytes or len(workers) * (wl.mpc.perception_bytes + wl.mpc.control_bytes)
        drlc = Drlc(sim, wl.drlc, wl.leader, workers, item, pol.send_bulk)
        drlc.begin()
        bulk_flows = [
            *drlc.data_flow.values(),
            *drlc.update_flow.values(),
            *drlc.model_flow.values(),
        ]
    if mpc is not None:
        mpc.on_expect = pol.expect_ls_send
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
    sampler = None
    if timeseries and until > 0:
        # Read-only sampling: results are the same with or without it.
        sampler = Sampler(sim, until, bulk_flows)
        sampler.begin()
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
        policy_stats=pol.stats(), sim=result, ls_flows=frozenset(team.ls_flows),
        drlc_enabled=wl.drlc.enabled, mpc_enabled=mpc_on,
        first_epoch_ns=us(wl.mpc.start_us) + us(wl.mpc.period_us) * (
            drlc.per_worker_items if wl.drlc.sync is SyncMode.ASP else wl.drlc.batch_items
        ) if drlc is not None else 0,
        timeseries=sampler.table() if sampler is not None else {},
    )  # fmt: skip
