"""SchedWiFi for a fleet: one global schedule per contention domain.

SchedWiFi reserves an exclusive Eq. 4 window for every LS message; on a shared channel
the schedule must cover every station that shares the air, whatever its team, so a fleet
needs one schedule per contention domain (a central scheduler with synchronized
clocks, as SchedWiFi assumes). Each robot's perception window opens at its camera's
sample instant (its phase in the period), its control window follows after the
inference time; every station's time-aware shaper keeps its bulk packets off the air in
every window of its domain. A hand-over re-plans both domains. A domain whose windows
need more than the period cannot be scheduled: its stations run unshaped (as EDCA) and
the run names it (``infeasible``); if no domain can be scheduled the policy is
infeasible.
"""

from __future__ import annotations

from typing import Any

from coorp._errors import InfeasibleError
from coorp.control import CompletionTimeTable, SchedWifiPlanner, TimeAwareShaper, stw_duration_ns
from coorp.policies._fleet import FleetPolicy, register_fleet_policy
from coorp.policies._hooks import GatedHooks, _share_ns
from coorp.policies._schedwifi import CTT_MAX_AGE_NS
from coorp.units import us

__all__ = ["FleetSchedWifiPolicy"]


@register_fleet_policy
class FleetSchedWifiPolicy(FleetPolicy):
    name = "schedwifi"
    summary = "one global time-aware schedule per contention domain: an Eq. 4 window per LS message"

    def install(self) -> None:
        fleet = self.fleet
        self.infeasible: dict[str, str] = {}
        self.reserved: dict[str, float] = {}
        self.hooks: dict[str, GatedHooks] = {}
        self._ctt: dict[str, CompletionTimeTable] = {}
        if fleet.loop is None or not fleet.loop.enabled:
            return  # nothing to protect: as EDCA
        sim = fleet.sim
        opts = fleet.options.schedwifi
        for st in fleet.stations:
            peer = fleet.cells.ap_of.get(st) or (fleet.cells.members(st) or [None])[0]
            code = sim.links.rate_code(sim.station(st).idx, sim.station(peer).idx) if peer else 0
            self._ctt[st] = CompletionTimeTable(
                percentile=opts.ctt_percentile, default_ns=_share_ns(sim, code, backoff=True),
                max_age_ns=CTT_MAX_AGE_NS,
            )  # fmt: skip
            self.hooks[st] = GatedHooks(drain_recheck=True)
            sim.set_hooks(st, self.hooks[st])
        for d in fleet.cells.domains:
            self._plan(d.name)
        if len(self.infeasible) == len(fleet.cells.domains):
            raise InfeasibleError(
                "SchedWiFi cannot schedule any contention domain: "
                + "; ".join(f"{d}: {why}" for d, why in self.infeasible.items())
            )

    def _stw(self, src: str, dst: str, size: int) -> int:
        sim = self.fleet.sim
        opts = self.fleet.options.schedwifi
        a, b = sim.station(src), sim.station(dst)
        rate = sim.timing.mode(sim.links.rate_code(a.idx, b.idx)).rate_mbps
        return stw_duration_ns(
            size, rate, retries=opts.retries, tx_ack_ns=us(opts.tx_ack_us),
            clock_skew_ns=us(opts.clock_skew_us),
        )  # fmt: skip

    def _plan(self, domain: str) -> None:
        """(Re-)plan one domain's schedule from the robots in its cells now."""
        fleet = self.fleet
        cells = fleet.cells
        loop = fleet.loop
        assert loop is not None
        period, start, inference = us(loop.period_us), us(loop.start_us), us(loop.inference_us)
        phases = fleet.ls_phases or {}
        aps = [ap for ap in cells.access_points if cells.domain_of_ap[ap] == domain]
        windows: list[tuple[int, int, int]] = []
        reserved = 0
        for ap in aps:
            for r in cells.members(ap):
                dp = self._stw(r, ap, loop.perception_bytes)
                dc = self._stw(ap, r, loop.control_bytes)
                at = start + phases.get(r, 0)
                windows += [(at, period, dp), (at + dp + inference, period, dc)]
                reserved += dp + dc
        stations = [*aps, *(r for ap in aps for r in cells.members(ap))]
        if reserved > period:
            self.infeasible[domain] = (
                f"{reserved / 1e6:.2f} ms of exclusive windows per {period / 1e6:.2f} ms period "
                f"for {len(stations) - len(aps)} robots"
            )
            for st in stations:
                self.hooks[st].gate = None  # unscheduled: as EDCA
            return
        self.infeasible.pop(domain, None)
        planner = SchedWifiPlanner(windows) if windows else None
        self.reserved[domain] = reserved / period
        for st in stations:
            self.hooks[st].gate = (
                TimeAwareShaper(planner, self._ctt[st]) if planner is not None else None
            )

    def on_leave(self, robot: str, ap: str, now_ns: int) -> None:
        if self.hooks:
            self.hooks[robot].gate = None  # off the air: nothing to shape
            self._plan(self.fleet.cells.domain_of_ap[ap])

    def on_join(self, robot: str, ap: str, now_ns: int) -> None:
        if self.hooks:
            self._plan(self.fleet.cells.domain_of_ap[ap])

    def stats(self) -> dict[str, Any]:
        return {
            "reserved_fraction": dict(getattr(self, "reserved", {})),
            "infeasible": dict(getattr(self, "infeasible", {})),
        }
