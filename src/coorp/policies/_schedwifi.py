"""SchedWiFi: a global time-aware schedule with one exclusive window per LS message.

Per MPC period the schedule reserves one Eq. 4 window for each worker's perception,
then — after the inference time — one for each control message. Each perception window
opens at its worker's sample instant (the loop start plus the worker's fixed phase,
``Team.ls_phases``; 0 when phases are aligned) or right after the previous window, so
with aligned phases they lie back to back from the loop start; the controls follow the
last perception window. Every robot's time-aware shaper (the gate applied to the global
schedule) stops feeding bulk packets so none is on air when any window opens, and
re-checks as the NIC drains. The schedule assumes all robots share one clock (padded by
``clock_skew_us``) and that the loop keeps its nominal period.
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

__all__ = ["CTT_MAX_AGE_NS", "SchedWifiPolicy"]

#: How long a completion-time sample counts (CompletionTimeTable ``max_age_ns``): 1 s,
#: thirty MPC periods, long past any one congested moment.
CTT_MAX_AGE_NS = 1_000_000_000


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
            rate = sim.timing.mode(sim.links.rate_code(s.idx, d.idx)).rate_mbps
            return stw_duration_ns(
                size, rate, retries=opts.retries, tx_ack_ns=us(opts.tx_ack_us),
                clock_skew_ns=us(opts.clock_skew_us),
            )  # fmt: skip

        period = us(mpc.period_us)
        start = us(mpc.start_us)
        phases = team.ls_phases or {}
        windows: list[tuple[int, int, int]] = []
        # Perception windows in sample order (worker order among equal phases), each from
        # its worker's sample instant, or right after the previous window if that one is
        # still open: with aligned phases (all 0) they lie back to back from the start.
        cursor = start
        reserved = us(mpc.inference_us)
        for w in sorted(team.workers, key=lambda w: phases.get(w, 0)):
            d = stw(w, leader.name, mpc.perception_bytes)
            offset = max(start + phases.get(w, 0), cursor)
            windows.append((offset, period, d))
            cursor = offset + d
            reserved += d
        # The leader infers once the loop's last perception is in: controls follow the
        # last perception window and the inference time, back to back.
        cursor += us(mpc.inference_us)
        for w in team.workers:
            d = stw(leader.name, w, mpc.control_bytes)
            windows.append((cursor, period, d))
            cursor += d
            reserved += d
        if reserved > period:
            raise InfeasibleError(
                f"SchedWiFi needs {reserved / 1e6:.2f} ms of exclusive windows per "
                f"MPC period but the period is {period / 1e6:.2f} ms: the team is too large "
                "or its links too slow for this schedule"
            )
        self.planner = SchedWifiPlanner(windows)
        self.shapers = {}
        self.hooks: dict[str, GatedHooks] = {}
        for robot in team.robots:
            # Samples age out (CTT_MAX_AGE_NS): depths no longer admitted are not held
            # back for good by what they took while several robots sent.
            ctt = CompletionTimeTable(
                percentile=opts.ctt_percentile,
                default_ns=per_packet_estimate_ns(sim, robot),
                max_age_ns=CTT_MAX_AGE_NS,
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
