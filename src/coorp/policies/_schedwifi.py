"""SchedWiFi: a global time-aware schedule with one exclusive window per LS message.

Per MPC period the schedule reserves, back to back from the loop start, one Eq. 4
window for each worker's perception, then — after the inference time — one for each
control message. Every robot's time-aware shaper (the gate applied to the global
schedule) stops feeding bulk packets so none is on air when any window opens. The
schedule assumes all robots share one clock (padded by ``clock_skew_us``) and that the
loop keeps its nominal period.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from coorp._errors import InfeasibleError
from coorp.control import CompletionTimeTable, SchedWifiPlanner, TimeAwareShaper, stw_duration_ns
from coorp.policies._base import Policy
from coorp.policies._hooks import GatedHooks, per_packet_estimate_ns
from coorp.policies._registry import register_policy
from coorp.units import us

__all__ = ["SchedWifiPolicy"]


@register_policy
class SchedWifiPolicy(Policy):
    name = "schedwifi"
    summary = "global time-aware schedule: an exclusive Eq. 4 window per LS message"

    def install(self) -> None:
        team = self.team
        mpc = team.mpc
        if mpc is None or not mpc.enabled:
            return  # nothing to protect: behaves as EDCA
        sim = team.sim
        opts = team.options.schedwifi
        leader = sim.station(team.leader)

        def stw(src: str, dst: str, size: int) -> int:
            s, d = sim.station(src), sim.station(dst)
            rate = sim.timing.mode(sim.links.mcs(s.idx, d.idx)).rate_mbps
            return stw_duration_ns(
                size, rate, retries=opts.retries, tx_ack_ns=us(opts.tx_ack_us),
                clock_skew_ns=us(opts.clock_skew_us),
            )  # fmt: skip

        period = us(mpc.period_us)
        start = us(mpc.start_us)
        windows: list[tuple[int, int, int]] = []
        offset = start
        for w in team.workers:
            d = stw(w, leader.name, mpc.perception_bytes)
            windows.append((offset, period, d))
            offset += d
        offset += us(mpc.inference_us)
        for w in team.workers:
            d = stw(leader.name, w, mpc.control_bytes)
            windows.append((offset, period, d))
            offset += d
        if offset - start > period:
            raise InfeasibleError(
                f"SchedWiFi needs {(offset - start) / 1e6:.2f} ms of exclusive windows per "
                f"MPC period but the period is {period / 1e6:.2f} ms: the team is too large "
                "or its links too slow for this schedule"
            )
        self.planner = SchedWifiPlanner(windows)
        self.shapers = {}
        self.hooks: dict[str, GatedHooks] = {}
        for robot in team.robots:
            ctt = CompletionTimeTable(
                percentile=opts.ctt_percentile, default_ns=per_packet_estimate_ns(sim, robot)
            )
            shaper = TimeAwareShaper(self.planner, ctt)
            self.shapers[robot] = shaper
            # drain_recheck: a time-aware shaper re-checks as each packet leaves the NIC.
            # Without it a denial made at a deep ring (against CTT samples learned while
            # several robots sent) pauses the bulk queue until the window has passed,
            # and the last sender left gets one ring's worth per gap (docs/policies.md).
            hooks = GatedHooks(gate=shaper, drain_recheck=True)
            self.hooks[robot] = hooks
            sim.set_hooks(robot, hooks)

    def stats(self) -> dict[str, Any]:
        if not hasattr(self, "planner"):
            return {}
        return {
            "reserved_fraction": self.planner.reserved_fraction,
            "gate": {
                r: {**asdict(sh.stats), "early_resumes": self.hooks[r].early_resumes}
                for r, sh in self.shapers.items()
            },
        }
