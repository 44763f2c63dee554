"""One fleet run: a scenario with ``[fleet]``, a fleet policy, a seed -> :class:`FleetResult`.

The counterpart of :func:`~coorp.workload.run_crl` for several cells and channels: every
robot's loop and learning (:mod:`._fleetloop`) on a simulation with cells
(``coorp.sim.cells``), under a fleet policy (``coorp.policies.get_fleet_policy``), with
the robots' hand-overs wired to the workload and the policy in that order. The metrics
have the shape ``coorp compare`` reads (``violation_rate``, ``bh_mbps``, ...) plus
per-channel and per-cell blocks and the hand-overs' costs (:meth:`FleetResult.metrics`).
"""

from __future__ import annotations

import gc
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from coorp._errors import UsageError
from coorp.policies import Fleet, FleetPolicy, get_fleet_policy
from coorp.scenario import Scenario, hidden_pairs
from coorp.sim import SimResult, Simulation
from coorp.stats import percentile
from coorp.units import NS_PER_MS, s, us
from coorp.workload._fleetloop import FleetLearning, FleetLoop, LoopRecord

__all__ = ["FleetResult", "run_fleet"]

#: Whether an earlier :func:`run_fleet` in this process moved what it made to the oldest
#: generation, uncounted (see there): the next one collects first.
_spliced = False


@dataclass(frozen=True)
class FleetResult:
    """Metrics of one fleet run (``bh_only``: every loop switched off, plain EDCA)."""

    policy: str
    bh_only: bool
    seed: int
    duration_ns: int
    deadline_ns: int
    period_ns: int
    loops: tuple[LoopRecord, ...]
    #: AP -> its channel number and its contention domain.
    channel_of: dict[str, int]
    domain_of: dict[str, str]
    #: Learning bytes delivered per cell (AP), and learning cycles completed.
    bytes_by_cell: dict[str, int]
    cycles: int
    #: Every hand-over: (robot, from, to, decided, left, joined) in ns.
    handovers: tuple[tuple[str, str, str, int, int, int], ...]
    policy_stats: dict[str, Any]
    #: Most stations holding a bulk permit at once, per contention domain (None: the
    #: policy has no permits).
    overlapping_senders: dict[str, int] | None
    ls_latency_ns: np.ndarray
    sim: SimResult = field(repr=False)
    #: Per domain at the start: (station pairs below the CCA threshold, all pairs).
    hidden: dict[str, tuple[int, int]] = field(default_factory=dict)
    other_bytes: dict[str, int] = field(default_factory=dict)

    # -- per loop ----------------------------------------------------------------------------
    def _arrays(self) -> dict[str, np.ndarray]:
        cached = self.__dict__.get("_cached_arrays")
        if cached is not None:
            return cached
        out = self._compute_arrays()
        object.__setattr__(self, "_cached_arrays", out)
        return out

    def _compute_arrays(self) -> dict[str, np.ndarray]:
        recs = self.loops
        n = len(recs)
        sample = np.fromiter((r.sample_ns for r in recs), np.int64, n)
        end = np.fromiter((r.end_ns for r in recs), np.int64, n)
        lost = np.array([r.lost != "" for r in recs], bool)
        ap = np.array([r.ap for r in recs], dtype=object)
        done = end >= 0
        judged = (done | (sample + self.deadline_ns <= self.duration_ns)) & ~lost
        reaction = np.where(done, end - sample, np.iinfo(np.int64).max)
        missed = judged & (reaction > self.deadline_ns)
        return {"sample": sample, "end": end, "lost": lost, "ap": ap, "judged": judged,
                "missed": missed, "reaction": reaction}  # fmt: skip

    @staticmethod
    def _rate(missed: np.ndarray, judged: np.ndarray) -> float:
        n = int(judged.sum())
        return float(missed.sum()) / n if n else math.nan

    def miss_rate_by(self, key: str) -> dict[str, float]:
        """Miss rate per ``"cell"`` (AP) or ``"channel"`` (its number), of the loops sent
        there (lost-to-hand-over loops apart); NaN where the policy could not run."""
        a = self._arrays()
        groups = self._groups(key)
        bad = self._infeasible_aps()
        out = {}
        for g, aps in groups.items():
            wanted = set(aps)
            mine = np.fromiter((x in wanted for x in a["ap"]), bool, len(a["ap"]))
            missed, judged = a["missed"] & mine, a["judged"] & mine
            out[g] = math.nan if bad & set(aps) else self._rate(missed, judged)
        return out

    def _infeasible_aps(self) -> set[str]:
        """The APs of every channel with a domain the policy could not serve."""
        channels = set(self.infeasible_channels())
        return {ap for ap, ch in self.channel_of.items() if str(ch) in channels}

    def _groups(self, key: str) -> dict[str, list[str]]:
        if key == "cell":
            return {ap: [ap] for ap in self.channel_of}
        out: dict[str, list[str]] = {}
        for ap, ch in self.channel_of.items():
            out.setdefault(str(ch), []).append(ap)
        return out

    def bh_mbps_by(self, key: str) -> dict[str, float]:
        secs = self.duration_ns / 1e9
        bad = self._infeasible_aps()
        return {
            g: math.nan
            if bad & set(aps)
            else sum(self.bytes_by_cell.get(ap, 0) for ap in aps) * 8 / secs / 1e6
            for g, aps in self._groups(key).items()
        }

    @property
    def reaction_ns(self) -> np.ndarray:
        """Reaction times of the judged loops; a loop that never completed is ``inf``."""
        a = self._arrays()
        r = np.where(a["end"] >= 0, a["reaction"], np.inf).astype(float)
        return r[a["judged"]]

    @property
    def ls_hw_depths(self) -> np.ndarray:
        """Packets ahead of each loop message's first fragment in its sender's ring."""
        msgs = self.sim.messages
        flows = msgs["flow"].astype(str)
        mine = np.char.startswith(flows, "perception:") | np.char.startswith(flows, "control:")
        return msgs["hw_depth_first"][mine]

    def infeasible_channels(self) -> dict[str, str]:
        """Channels (their number) a policy could not serve, with why (SchedWiFi's
        domains whose windows exceed the period)."""
        bad = self.policy_stats.get("infeasible") or {}
        out: dict[str, str] = {}
        for ap, domain in self.domain_of.items():
            if domain in bad:
                out[str(self.channel_of[ap])] = f"{domain}: {bad[domain]}"
        return out

    @property
    def bh_mbps(self) -> float:
        return sum(self.bytes_by_cell.values()) * 8 / (self.duration_ns / 1e9) / 1e6

    @property
    def violation_rate(self) -> float:
        a = self._arrays()
        return self._rate(a["missed"], a["judged"])

    # -- hand-overs -------------------------------------------------------------------------
    def roam_metrics(self) -> dict[str, Any]:
        """What the hand-overs cost: the gap off the air, the loops lost to them, how
        soon after joining the robot's sends were protected again, and the misses of
        loops sampled within one period after joining (a miss the hand-over itself
        caused beyond its gap)."""
        hos = self.handovers
        out: dict[str, Any] = {"handovers": len(hos)}
        if not hos:
            return {**out, "association_gap_ms": None, "protection_gap_ms_max": None,
                    "protection_gap_ms_mean": None, "lost_to_handover": 0,
                    "misses_after_join": 0, "loops_after_join": 0}  # fmt: skip
        gaps = [(j - left) / NS_PER_MS for _r, _f, _t, _d, left, j in hos]
        by_robot: dict[str, list[LoopRecord]] = {}
        for rec in self.loops:
            by_robot.setdefault(rec.robot, []).append(rec)
        prot_gaps: list[float] = []
        after = missed_after = 0
        for robot, _f, _t, _d, _left, joined in hos:
            if joined + 2 * self.period_ns > self.duration_ns:
                continue  # too close to the end to tell
            mine = by_robot.get(robot, [])
            sent = [rec for rec in mine if rec.send_ns >= joined and rec.protected is not None]
            if sent:
                first = next((rec.send_ns for rec in sent if rec.protected), self.duration_ns)
                prot_gaps.append((first - joined) / NS_PER_MS)
            for rec in mine:
                soon = joined <= rec.sample_ns < joined + self.period_ns
                judged = rec.sample_ns + self.deadline_ns <= self.duration_ns
                if soon and judged and not rec.lost:
                    after += 1
                    r = rec.reaction_ns
                    missed_after += r is None or r > self.deadline_ns
        lost = sum(1 for rec in self.loops if rec.lost)
        return {
            **out,
            "association_gap_ms": float(np.mean(gaps)),
            "association_gap_ms_max": float(np.max(gaps)),
            "protection_gap_ms_max": max(prot_gaps) if prot_gaps else None,
            "protection_gap_ms_mean": float(np.mean(prot_gaps)) if prot_gaps else None,
            "lost_to_handover": lost,
            "misses_after_join": missed_after,
            "loops_after_join": after,
        }

    # -- the report's view ------------------------------------------------------------------
    def metrics(self) -> dict[str, Any]:
        """The per-policy block of ``coorp compare --json`` for a fleet (utilization, per
        channel and per cell, is filled by the caller against the BH-only run)."""
        a = self._arrays()
        ok = a["judged"]
        r = np.where(a["end"] >= 0, a["reaction"], np.inf)[ok] / NS_PER_MS
        lat = self.ls_latency_ns / NS_PER_MS
        return {
            "violation_rate": self._rate(a["missed"], ok),
            "reaction_ms": {q: percentile(r, int(q[1:])) for q in ("p50", "p90", "p99")},
            "ls_latency_ms": {"p50": percentile(lat, 50), "p99": percentile(lat, 99)},
            "bh_mbps": self.bh_mbps,
            "other_mbps": sum(self.other_bytes.values()) * 8 / (self.duration_ns / 1e9) / 1e6,
            "epoch_s": math.nan,
            "loops": int(ok.sum()),
            "epochs": self.cycles,
            "lag_ms_max": 0.0,
            "warnings": self.warnings(),
            "channel_miss_rate": self.miss_rate_by("channel"),
            "channel_bh_mbps": self.bh_mbps_by("channel"),
            "cell_miss_rate": self.miss_rate_by("cell"),
            "cell_bh_mbps": self.bh_mbps_by("cell"),
            "roam": self.roam_metrics(),
            "overlapping_bh_senders": self.overlapping_senders,
            **({"channel_infeasible": bad} if (bad := self.infeasible_channels()) else {}),
        }

    def warnings(self) -> list[str]:
        dur = f"{self.duration_ns / 1e9:g} s"
        out = []
        if not self.bh_only and not any(rec.end_ns >= 0 for rec in self.loops):
            out.append(f"no loop finished in {dur}: miss rate and reaction times are null")
        if self.bh_mbps == 0:
            out.append(f"no learning data delivered in {dur}: BH throughput is 0")
        for d, (hidden, total) in self.hidden.items():
            if total and hidden:
                out.append(
                    f"{d}: {hidden} of {total} station pairs are out of carrier-sense range of "
                    "each other (modelled as hearing each other: no hidden nodes)"
                )
        return out

    def tables(self) -> dict[str, dict[str, Any]]:
        """Raw tables: one row per loop, per cell, per hand-over."""
        a = self._arrays()
        recs = self.loops
        cells = list(self.channel_of)
        return {
            "loops": {
                "robot": np.array([x.robot for x in recs], dtype=object),
                "index": np.array([x.index for x in recs], np.int64),
                "ap": a["ap"],
                "sample_ns": a["sample"],
                "send_ns": np.array([x.send_ns for x in recs], np.int64),
                "end_ns": [x.end_ns if x.end_ns >= 0 else None for x in recs],
                "lost": np.array([x.lost for x in recs], dtype=object),
                "protected": [x.protected for x in recs],
                "missed": a["missed"],
            },
            "cells": {
                "ap": np.array(cells, dtype=object),
                "channel": np.array([self.channel_of[c] for c in cells], np.int64),
                "domain": np.array([self.domain_of[c] for c in cells], dtype=object),
                "miss_rate": np.array([self.miss_rate_by("cell")[c] for c in cells]),
                "bh_mbps": np.array([self.bh_mbps_by("cell")[c] for c in cells]),
            },
            "handovers": {
                k: np.array([h[i] for h in self.handovers], dtype=object if i < 3 else np.int64)
                for i, k in enumerate(
                    ("robot", "from_ap", "to_ap", "decided_ns", "left_ns", "joined_ns")
                )
            },
        }


def run_fleet(
    scenario: Scenario,
    policy: str,
    *,
    seed: int | None = None,
    duration_ns: int | None = None,
    bh_only: bool = False,
    on_progress: Callable[[int], None] | None = None,
    source: str = "<scenario>",
    trace: bool = False,
) -> FleetResult:
    """Simulate the fleet's loops and learning under ``policy`` (a fleet policy name)."""
    cfg = scenario.fleet
    if cfg is None:
        raise UsageError(f"{source} has no [fleet] section; see docs/scenarios.md")
    policy_cls = get_fleet_policy("edca" if bh_only else policy)
    sim = Simulation(scenario, seed=seed, source=source, trace=trace)
    cells = sim.cells
    loop_on = cfg.loop.enabled and not bh_only
    loop = FleetLoop(sim, cfg.loop, cells) if loop_on else None
    fleet = Fleet(
        sim=sim, cells=cells, access_points=cells.access_points, robots=cells.robots,
        perception={r: f.name for r, f in loop.perception.items()} if loop else {},
        control={r: f.name for r, f in loop.control.items()} if loop else {},
        loop=cfg.loop if loop_on else None, options=scenario.policy,
        ls_send=loop.next_send if loop else None,
        ls_phases=loop.phase_ns if loop else None,
    )  # fmt: skip
    pol = policy_cls(fleet)
    pol.install()
    learning = None
    if cfg.learning.enabled:
        learning = FleetLearning(sim, cfg.learning, cells, pol.send_bulk)

    def leave(robot: str, ap: str, now: int) -> None:
        if loop is not None:
            loop.on_leave(robot, ap, now)
        if learning is not None:
            learning.on_leave(robot, ap, now)
        pol.on_leave(robot, ap, now)

    def join(robot: str, ap: str, now: int) -> None:
        if loop is not None:
            loop.on_join(robot, ap, now)
        if learning is not None:
            learning.on_join(robot, ap, now)
        pol.on_join(robot, ap, now)
        if learning is not None:
            learning.restart(robot)

    cells.on_leave.append(leave)
    cells.on_join.append(join)
    if loop is not None:
        # A policy that keeps the base class's no-op hint is not called per perception.
        if type(pol).expect_ls_send is not FleetPolicy.expect_ls_send:
            loop.hint = pol.expect_ls_send
        loop.protected = pol.protected
        loop.begin()
    if learning is not None:
        learning.begin()
    until = s(scenario.duration_s) if duration_ns is None else duration_ns
    # A fleet allocates tens of thousands of long-lived objects per simulated second
    # (loop records, messages): the cyclic collector would walk the growing heap again
    # and again during the run (a fifth of fleet-200's CPU time), so it is off for the
    # run. Afterwards what the run made goes straight to the oldest generation
    # (``gc.freeze`` then ``gc.unfreeze``: two list splices), not through the young
    # ones, whose collections would walk all of it while it is still in use (0.3-0.5 s
    # of a 20 s fleet-200 COORP run). It is not left frozen: a run's objects form
    # reference cycles (an access function and its station, the loop's callbacks and
    # the simulation), which only a collection frees, and frozen, every run in a process
    # (a sweep's worker, ``coorp compare``) left its whole heap behind
    # (tests/workload/test_fleet_memory.py). In the oldest generation they are not
    # counted towards its next collection, so the next run in the process collects
    # first (one walk of what is alive, when the last run's cycles are garbage). Objects
    # the caller froze stay frozen.
    global _spliced
    if _spliced:
        _spliced = False
        gc.collect()
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        result = sim.run(until, on_progress)
    finally:
        if gc.get_freeze_count() == 0:
            gc.freeze()
            gc.unfreeze()
            _spliced = True
        if was_enabled:
            gc.enable()
    msgs = result.messages
    ls_names = loop.flow_names if loop else frozenset()
    # (``map`` of the set's own ``__contains__``: no interpreted generator step per message.)
    is_ls = np.fromiter(map(ls_names.__contains__, msgs["flow"]), bool, len(msgs["flow"]))
    lat = msgs["latency_ns"][is_ls]
    overlap = getattr(pol, "overlapping_senders", None)
    other = [f.name for f in scenario.flows]
    return FleetResult(
        policy=policy, bh_only=bh_only, seed=sim.seed, duration_ns=until,
        deadline_ns=us(cfg.loop.deadline_us), period_ns=us(cfg.loop.period_us),
        loops=tuple(loop.records) if loop else (),
        channel_of=dict(cells.channel_of_ap), domain_of=dict(cells.domain_of_ap),
        bytes_by_cell=learning.finish() if learning else {},
        cycles=learning.cycles if learning else 0,
        handovers=tuple(
            (h.robot, h.from_ap, h.to_ap, h.decided_ns, h.left_ns, h.joined_ns)
            for h in cells.handovers
        ),
        policy_stats=pol.stats(),
        overlapping_senders=overlap(until) if callable(overlap) else None,
        ls_latency_ns=lat[lat >= 0].astype(np.int64), sim=result,
        hidden=hidden_pairs(scenario),
        other_bytes={n: result.flows[n].delivered_bytes for n in other},
    )  # fmt: skip
