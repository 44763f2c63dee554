"""One coordinated-robotic-learning run: a scenario, a policy, a seed -> :class:`CrlResult`."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from coorp._errors import UsageError
from coorp.policies import Team, get_policy
from coorp.scenario import BulkFlow, LsTransport, Scenario, SyncMode
from coorp.sim import SimResult, Simulation
from coorp.stats import percentile
from coorp.units import NS_PER_MS, s, us
from coorp.workload._drlc import Drlc, EpochRecord
from coorp.workload._lsflows import LsFlows
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
    #: ``[[workload.ls_flows]]`` that ran: name -> latency bound (ns).
    ls_flow_deadlines: dict[str, int] = field(default_factory=dict)
    #: Traffic outside the team's coordination (``[[flows]]`` not ``coordinated``):
    #: flow name -> bytes delivered.
    other_bytes: dict[str, int] = field(default_factory=dict)

    #: Name of the MPC loop in per-flow results.
    LOOP: ClassVar[str] = "mpc-loop"

    def flow_misses(self) -> dict[str, float]:
        """Miss rate per LS flow: the MPC loop's (reaction over its bound, or abandoned)
        under :attr:`LOOP`, and each ``[[workload.ls_flows]]`` flow's: messages delivered
        later than its deadline or lost, over the messages whose deadline fell within
        the run (a message still in flight at the end is counted only if its deadline
        has passed). NaN: no loop, no message to judge."""
        out: dict[str, float] = {}
        if self.mpc_enabled:
            out[self.LOOP] = self._loop_miss_rate()
        if not self.ls_flow_deadlines:
            return out
        msgs = self.sim.messages
        names = msgs["flow"]
        created = msgs["created_ns"]
        latency = msgs["latency_ns"]
        delivered = msgs["delivered_ns"]
        for name, deadline in self.ls_flow_deadlines.items():
            mine = names == name
            judged = mine & (created + deadline <= self.duration_ns)
            n = int(judged.sum())
            if n == 0:
                out[name] = math.nan
                continue
            late = judged & ((delivered < 0) | (latency > deadline))
            out[name] = float(late.sum()) / n
        return out

    def _loop_miss_rate(self) -> float:
        r = self.reaction_ns
        return float(np.mean(r > self.deadline_ns)) if r.size else math.nan

    @property
    def reaction_ns(self) -> np.ndarray:
        """Reaction times of finished loops; abandoned loops are ``inf``."""
        return np.array(
            [r.reaction_ns if r.reaction_ns is not None else math.inf for r in self.loops],
            dtype=float,
        )

    @property
    def violation_rate(self) -> float:
        """The miss rate of the worst LS flow (:meth:`flow_misses`): the MPC loop's when
        it is the only one."""
        if not self.ls_flow_deadlines:
            return self._loop_miss_rate()
        rates = [v for v in self.flow_misses().values() if not math.isnan(v)]
        return max(rates) if rates else math.nan

    @property
    def other_mbps(self) -> float:
        """Throughput of the traffic outside the team (Mb/s; 0 without any)."""
        return sum(self.other_bytes.values()) * 8 / (self.duration_ns / 1e9) / 1e6

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
            "other_mbps": self.other_mbps,
            "epoch_s": self.epoch_s,
            "loops": len(self.loops),
            "epochs": len(self.epochs),
            "lag_ms_max": max((lp.lag_ns for lp in self.loops), default=0) / NS_PER_MS,
            "warnings": self.warnings(),
            **self._per_flow(),
        }

    def _per_flow(self) -> dict[str, Any]:
        """Per-flow blocks, only where a scenario has more than the MPC loop's LS flows
        or traffic outside the team (so the plain scenarios' results keep their shape):
        ``flow_miss_rate`` and ``flow_latency_p99_ms`` per LS flow, ``flow_mbps`` per flow
        outside the team."""
        out: dict[str, Any] = {}
        if self.ls_flow_deadlines:
            out["flow_miss_rate"] = self.flow_misses()
            msgs = self.sim.messages
            lat = {}
            for name in self.ls_flow_deadlines:
                v = msgs["latency_ns"][(msgs["flow"] == name) & (msgs["delivered_ns"] >= 0)]
                lat[name] = percentile(v / NS_PER_MS, 99)
            out["flow_latency_p99_ms"] = lat
        if self.other_bytes:
            secs = self.duration_ns / 1e9
            out["flow_mbps"] = {n: b * 8 / secs / 1e6 for n, b in self.other_bytes.items()}
        return out

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
    # Bulk [[flows]] are started here, not by the simulation: the team's (coordinated)
    # through the policy, the others ungated, so the policy's gate never holds them.
    scenario_bulk = [f for f in scenario.flows if isinstance(f, BulkFlow)]
    sim_scenario = scenario
    if scenario_bulk:
        sim_scenario = scenario.model_copy(
            update={"flows": [f for f in scenario.flows if not isinstance(f, BulkFlow)]}
        )
    sim = Simulation(sim_scenario, seed=seed, source=source, trace=trace)
    workers = tuple(scenario.workers)
    robots = {wl.leader, *workers}
    mpc_on = wl.mpc.enabled and not bh_only
    mpc = MpcLoop(sim, wl.mpc, wl.leader, workers) if mpc_on else None
    # The team's own extra LS flows stop with the MPC loop in the BH-only reference;
    # other stations' flows are part of the channel and keep running.
    ls_cfgs = [f for f in wl.ls_flows if not (bh_only and f.src in robots)]
    repair = us(wl.mpc.repair_us) if wl.mpc.ls_transport is LsTransport.RELIABLE else None
    extra = LsFlows(sim, ls_cfgs, repair_ns=repair) if ls_cfgs else None
    protected = (mpc.flow_names if mpc is not None else frozenset()) | (
        extra.coordinated if extra is not None else frozenset()
    )
    ls_send = _joint_schedule(mpc, extra)
    team = Team(
        sim=sim, leader=wl.leader, workers=workers,
        ls_flows=protected,
        mpc=wl.mpc if mpc_on else None, options=scenario.policy,
        ls_schedule=_instants(mpc, extra, ls_send),
        ls_send=ls_send,
        ls_phases=mpc.phase_ns if mpc is not None else None,
    )  # fmt: skip
    pol = policy_cls(team)
    pol.install()
    team_bulk: list[str] = []
    other: list[str] = []
    for f in scenario_bulk:
        flow = sim.flow(f.name, f.src, f.dst, f.category, bulk=True, tcp_acks=f.tcp_acks)
        start = us(f.start_us)
        if f.coordinated:
            team_bulk.append(f.name)
            sim.call_at(start, pol.send_bulk, f.src, flow, f.total_bytes, _ignore)
        else:
            other.append(f.name)
            sim.call_at(start, _start_ungated, sim, flow, f.total_bytes)
    other += [f.name for f in scenario.flows if not isinstance(f, BulkFlow)]
    if extra is not None:
        extra.begin()
    for change in wl.link_changes:
        sim.call_control_at(s(change.at_s), _change_link, sim, change)
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
        mpc.lead_hints = pol.lead_hints
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
    ls_all = set(team.ls_flows) | (extra.flow_names if extra is not None else set())
    ls_names = np.array(sorted(ls_all), dtype=object)
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
        bh_bytes=sum(result.flows[n].delivered_bytes for n in (*bulk_names, *team_bulk)),
        policy_stats=pol.stats(), sim=result, ls_flows=frozenset(ls_all),
        drlc_enabled=wl.drlc.enabled, mpc_enabled=mpc_on,
        first_epoch_ns=us(wl.mpc.start_us) + us(wl.mpc.period_us) * (
            drlc.per_worker_items if wl.drlc.sync is SyncMode.ASP else wl.drlc.batch_items
        ) if drlc is not None else 0,
        timeseries=sampler.table() if sampler is not None else {},
        ls_flow_deadlines=extra.deadlines_ns if extra is not None else {},
        other_bytes={n: result.flows[n].delivered_bytes for n in other},
    )  # fmt: skip


def _ignore(_now: int) -> None:
    """A team bulk flow of the scenario: nothing waits for it to finish."""


def _start_ungated(sim: Simulation, flow: Any, total: int | None) -> None:
    sim.start_transfer(flow, total, gated=False)


def _change_link(sim: Simulation, change: Any) -> None:
    """``[[workload.link_changes]]``: the link's rate from now on (its received power,
    which only packet errors read, is kept)."""
    from coorp.sim.timing import rate_code

    a, b = sim.station(change.src).idx, sim.station(change.dst).idx
    streams = change.spatial_streams
    code = change.mcs
    if streams is not None and streams != sim.scenario.phy.spatial_streams:
        code = rate_code(change.mcs, streams)
    pairs = [(a, b), (b, a)] if change.both_directions else [(a, b)]
    for src, dst in pairs:
        sim.links.set_link(src, dst, code, sim.links.rx_power_dbm(src, dst))


def _instants(
    mpc: MpcLoop | None,
    extra: LsFlows | None,
    joint: Callable[[str, int], tuple[int, bool] | None] | None,
) -> Callable[[str, int], int | None] | None:
    """``Team.ls_schedule``: the instants of ``joint`` (the MPC loop's own method when
    it is the only LS traffic)."""
    if extra is None:
        return mpc.next_send_ns if mpc is not None else None
    if joint is None:
        return None

    def instant(robot: str, now_ns: int) -> int | None:
        nxt = joint(robot, now_ns)
        return None if nxt is None else nxt[0]

    return instant


def _joint_schedule(
    mpc: MpcLoop | None, extra: LsFlows | None
) -> Callable[[str, int], tuple[int, bool] | None] | None:
    """A robot's next protected LS send over the MPC loop and its extra flows: the
    earliest; exact only if that one is."""
    if extra is None:
        return mpc.next_send if mpc is not None else None
    if mpc is None:
        return extra.next_send

    def both(robot: str, now_ns: int) -> tuple[int, bool] | None:
        a, b = mpc.next_send(robot, now_ns), extra.next_send(robot, now_ns)
        if a is None or (b is not None and b[0] < a[0]):
            return b
        return a

    return both
