"""``rtwt`` and ``coorp-rtwt``: 802.11be restricted TWT service periods for the MPC loop.

Restricted TWT (802.11be-2024 35.8): the AP announces periodic service periods (SPs) for
latency-sensitive traffic; every rTWT-capable station ends its TXOPs before an SP starts,
and inside it the member stations send the traffic of the rTWT TIDs (here the LS
messages, AC_VO); the AP quiets the rest for the SP (a Quiet element). The schedule is
derived from the loop as SchedWiFi's is (``coorp.policies._schedwifi``): per MPC period,
one SP per perception from its worker's sample instant, back to back where they would
overlap, then - after the inference time - one SP for the leader's controls. Unlike
SchedWiFi's Eq. 4 windows (seven retries, exclusive per message), an SP lasts what its
messages take on an idle channel, AC_VO access and TXOPs included, times ``1 +
sp_retries`` (its members contend inside it), rounded up to whole wake-duration units;
its wake interval is the MPC period in whole µs (TWT's resolution), so the SPs drift
0.3 µs per period against a 33 333.3 µs loop.

Enforcement is the MAC's (``AirtimeBudgetHooks``): a bulk frame or TCP ack must be off
the air before the next SP starts (its A-MPDU is trimmed to the gap, or held), and is held
for the whole SP; LS messages go at any time. Frames wait in the NIC ring: with a
``shared`` ring an LS message queued behind a held bulk frame waits with it - the NIC
cannot reorder its FIFO (rTWT firmware needs per-TID queues: ``hw_queue.mode =
"per_ac"``). The SPs run on 802.11ax (HE) timing: an EHT PHY is not modelled, so the
policy needs ``phy.standard = "ax"``.

``coorp-rtwt`` is COORP (permits and the local gate) with the same SPs on top.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

from coorp._errors import InfeasibleError
from coorp.control import SchedWifiPlanner
from coorp.phy import SIFS_NS, SLOT_NS, PhyStandard
from coorp.policies._base import Policy, Team
from coorp.policies._coorp import CoorpPolicy
from coorp.policies._registry import register_policy
from coorp.scenario import AccessCategory
from coorp.sim import AdmitAll, DriverHooks, DriverView, Simulation
from coorp.sim.packets import IP_HEADER_BYTES
from coorp.sim.timing import aifs_ns, edca_params, mpdu_bytes, psdu_bytes
from coorp.units import us

__all__ = ["CoorpRtwtPolicy", "RtwtHooks", "RtwtPolicy", "ls_message_airtime_ns", "rtwt_schedule"]

_UDP_HEADER_BYTES = 8


def ls_message_airtime_ns(sim: Simulation, src: str, dst: str, size_bytes: int) -> int:
    """How long an LS message takes on an idle channel: its IP fragments sent in AC_VO
    as the MAC sends them (aggregated if VO aggregates, one TXOP after another), each
    access AIFS plus a mean CWmin backoff."""
    sc = sim.scenario
    a, b = sim.station(src), sim.station(dst)
    code = sim.links.rate_code(a.idx, b.idx)
    vo = edca_params(sc.mac)[AccessCategory.VO]
    per_frag = sc.packet_bytes - IP_HEADER_BYTES
    total = size_bytes + _UDP_HEADER_BYTES
    n = max(1, math.ceil(total / per_frag))
    ips = [sc.packet_bytes] * (n - 1) + [total - per_frag * (n - 1) + IP_HEADER_BYTES]
    mpdus = [mpdu_bytes(ip) for ip in ips]
    group = sc.mac.max_ampdu_mpdus if vo.aggregation else 1
    exchanges = []
    for i in range(0, len(mpdus), group):
        part = mpdus[i : i + group]
        data = sim.timing.data_ns(psdu_bytes(part), code)
        exchanges.append(sim.timing.success_ns(data, block_ack=len(part) > 1, rts=False))
    access = aifs_ns(vo.aifsn) + vo.cw_min * SLOT_NS // 2
    t = 0
    txop_used = -1  # -1: no TXOP open
    for ex in exchanges:
        if txop_used >= 0 and vo.txop_limit_ns and txop_used + SIFS_NS + ex <= vo.txop_limit_ns:
            t += SIFS_NS + ex
            txop_used += SIFS_NS + ex
        else:
            t += access + ex
            txop_used = ex if vo.txop_limit_ns else -1
    return t


def rtwt_schedule(team: Team) -> list[tuple[int, int, int]]:
    """The rTWT service periods of one team: ``(offset_ns, interval_ns, duration_ns)``
    per SP (see the module docstring). InfeasibleError if they need more than a period."""
    sim, mpc = team.sim, team.mpc
    assert mpc is not None
    opts = team.options.rtwt
    unit = us(opts.wake_duration_unit_us)
    factor = 1 + opts.sp_retries
    interval = round(mpc.period_us) * 1000  # TWT wake interval: whole µs

    def sp(airtime: int) -> int:
        return -(-airtime * factor // unit) * unit

    start = us(mpc.start_us)
    phases = team.ls_phases or {}
    sps: list[tuple[int, int, int]] = []
    cursor = start
    for w in sorted(team.workers, key=lambda w: phases.get(w, 0)):
        d = sp(ls_message_airtime_ns(sim, w, team.leader, mpc.perception_bytes))
        offset = max(start + phases.get(w, 0), cursor)
        sps.append((offset, interval, d))
        cursor = offset + d
    if opts.controls:
        cursor += us(mpc.inference_us)
        d = sp(sum(ls_message_airtime_ns(sim, team.leader, w, mpc.control_bytes)
                   for w in team.workers))  # fmt: skip
        sps.append((cursor, interval, d))
    reserved = sum(d for _, _, d in sps)
    if reserved > interval or any(d > 255 * unit for _, _, d in sps):
        raise InfeasibleError(
            f"restricted TWT needs {reserved / 1e6:.2f} ms of service periods per "
            f"{interval / 1e6:.3f} ms wake interval (or an SP longer than 255 wake-duration "
            "units): the team is too large or its links too slow"
        )
    return sps


class RtwtHooks:
    """Driver hooks of one station under restricted TWT: bulk frames (and TCP acks) are
    kept off the air from each SP's start to its end; everything else is ``inner``'s
    (plain EDCA by default, COORP's gated hooks in ``coorp-rtwt``)."""

    def __init__(self, planner: SchedWifiPlanner, inner: DriverHooks | None = None) -> None:
        self.planner = planner
        self.inner: DriverHooks = AdmitAll() if inner is None else inner
        self.per_packet = bool(getattr(self.inner, "per_packet", True))
        self._inner_budget = getattr(self.inner, "max_bulk_airtime_ns", None)

    def admit_bulk(self, station: DriverView, now_ns: int) -> int | None:
        return self.inner.admit_bulk(station, now_ns)

    def on_ls_send(self, station: DriverView, flow: str, now_ns: int) -> None:
        self.inner.on_ls_send(station, flow, now_ns)

    def on_hw_enqueue(
        self, station: DriverView, pid: int, ac: AccessCategory, depth: int, now_ns: int
    ) -> None:
        self.inner.on_hw_enqueue(station, pid, ac, depth, now_ns)

    def on_hw_complete(
        self, station: DriverView, pid: int, ac: AccessCategory, now_ns: int, delivered: bool
    ) -> None:
        self.inner.on_hw_complete(station, pid, ac, now_ns, delivered)

    def max_bulk_airtime_ns(self, station: DriverView, now_ns: int) -> int | None:
        """0 inside an SP (the frame is held), else the time left before the next one
        (or ``inner``'s budget if shorter)."""
        sp = self.planner.next_window(now_ns)
        mine = None if sp is None else max(0, sp.start_ns - now_ns)
        if self._inner_budget is not None:
            theirs = self._inner_budget(station, now_ns)
            if theirs is not None and (mine is None or theirs < mine):
                return int(theirs)
        return mine

    def bulk_hold_until_ns(self, station: DriverView, now_ns: int) -> int | None:
        """A held bulk frame waits for the end of the SP it was held in."""
        sp = self.planner.next_window(now_ns)
        if sp is not None and sp.start_ns <= now_ns:
            return sp.end_ns + 1
        return None


def _require_ax(team: Team, name: str) -> None:
    phy = team.sim.scenario.phy
    if phy.standard is not PhyStandard.AX:
        raise InfeasibleError(
            f"{name}: restricted TWT is an 802.11be feature; it runs here on 802.11ax (HE) "
            f'timing and needs phy.standard = "ax"; this channel is "{phy.standard.value}" '
            "(try --set phy.standard=ax)"
        )


def _install_rtwt(policy: Policy) -> SchedWifiPlanner | None:
    team = policy.team
    if team.mpc is None or not team.mpc.enabled:
        return None  # nothing to protect
    planner = SchedWifiPlanner(rtwt_schedule(team))
    sim = team.sim
    for robot in team.robots:
        st = sim.station(robot)
        sim.set_hooks(robot, RtwtHooks(planner, st.hooks))
    return planner


def _rtwt_stats(policy: Policy) -> dict[str, Any]:
    planner: SchedWifiPlanner | None = getattr(policy, "planner", None)
    if planner is None:
        return {}
    sim = policy.team.sim
    return {
        "rtwt": {
            "service_periods": [
                {"offset_ns": w.offset_ns, "interval_ns": w.period_ns, "duration_ns": w.duration_ns}
                for w in planner.windows
            ],
            "reserved_fraction": planner.reserved_fraction,
            "bulk_holds": {r: sim.station(r).bulk_holds for r in policy.team.robots},
        }
    }


@register_policy
class RtwtPolicy(Policy):
    name = "rtwt"
    summary = "802.11be restricted TWT: service periods for the MPC loop, bulk quiet inside"
    standards: ClassVar[frozenset[PhyStandard]] = frozenset({PhyStandard.AX})

    def install(self) -> None:
        _require_ax(self.team, self.name)
        self.planner = _install_rtwt(self)

    def stats(self) -> dict[str, Any]:
        return _rtwt_stats(self)


@register_policy
class CoorpRtwtPolicy(CoorpPolicy):
    name = "coorp-rtwt"
    summary = "COORP (permits + local gate) with restricted-TWT service periods on top"
    standards: ClassVar[frozenset[PhyStandard]] = frozenset({PhyStandard.AX})
    #: The service periods already keep TCP acks off the air with the bulk frames
    #: (RtwtHooks trims and holds both), and the wrapper does not pass the ack hook on.
    gate_acks = False
    #: Its bulk transfers run as they did when its service periods were measured
    #: (issue 26): interleaved; and its gate as it was then (issue 36's additions off).
    serial_transfers = False
    time_model_window = "gaussian"
    protect_tail = True
    lead_hints = False
    realized_in_window = False
    ring_budget_skips_outside_acks = False
    acks_yield_to_outside = False
    ack_ac = None

    def install(self) -> None:
        _require_ax(self.team, self.name)
        super().install()
        self.planner = _install_rtwt(self)

    def stats(self) -> dict[str, Any]:
        return {**super().stats(), **_rtwt_stats(self)}
