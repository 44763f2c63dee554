"""COORP: coordinated preemption (paper §IV), and its two ablations.

*Global preemption*: the leader's :class:`~coorp.control.GlobalController` lets at most
``limit`` robots send bulk data at a time; requests, grants, revocations and releases
travel over the simulated channel as small AC_VO datagrams (a robot that is the leader
talks to the controller locally). *Local preemption*: every robot learns its own LS send
times and its NIC's completion times and stops feeding bulk packets ahead of each
protection window (Algorithm 2).

``coorp-global`` keeps only the permits, ``coorp-local`` only the gate.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import asdict
from functools import partial
from typing import Any, ClassVar

from coorp.control import (
    BulkClient,
    CompletionTimeTable,
    Gate,
    GlobalController,
    Grant,
    PermitUpdate,
    ProtectionPlanner,
)
from coorp.policies._base import Policy
from coorp.policies._hooks import (
    CappedGatedHooks,
    GatedHooks,
    OutsideWaiting,
    RingBudget,
    per_packet_estimate_ns,
    per_packet_floor_ns,
)
from coorp.policies._registry import register_policy
from coorp.scenario import AccessCategory
from coorp.sim.events import Event
from coorp.sim.packets import FlowState, Message
from coorp.units import NS_PER_MS, s, us

__all__ = ["CoorpGlobalPolicy", "CoorpLocalPolicy", "CoorpPaperPolicy", "CoorpPolicy"]

#: When to check whether a permit request was lost on the air (then it is sent again).
REQUEST_RETRY_NS = 200 * NS_PER_MS

#: How often the air taken by stations outside the team is measured (see
#: ``CoorpPolicy.foreign_ctt_percentile``), and the share of it that counts as a
#: foreign contender.
FOREIGN_PERIOD_NS = 500 * NS_PER_MS
FOREIGN_SHARE = 0.2


@register_policy
class CoorpPolicy(Policy):
    name = "coorp"
    summary = "coordinated preemption: one bulk sender at a time + local gate before LS sends"
    use_permits: ClassVar[bool] = True
    use_gate: ClassVar[bool] = True
    #: Re-ask the gate as the NIC drains ahead of a window (see GatedHooks).
    drain_recheck: ClassVar[bool] = True
    #: Take the applications' send-time hints (Policy.expect_ls_send) into the windows.
    use_hints: ClassVar[bool] = True
    #: The table learns completion relative to the LS send the packet had to clear
    #: (Gate(realized=True)) rather than its bare duration.
    realized_ctt: ClassVar[bool] = True
    #: ... and only against sends in or after the window it was enqueued ahead of
    #: (Gate(realized_in_window=True)): a send no window predicted (a late tail send
    #: after its window ended) priced every packet enqueued for the next window with
    #: up to a period of slack it never had.
    realized_in_window: ClassVar[bool] = True
    #: How long a completion-time sample counts (None: for ever, the paper's table).
    ctt_max_age_ns: ClassVar[int | None] = None
    #: Lead buckets of the completion-time table (see CompletionTimeTable).
    ctt_lead_edges_ns: ClassVar[tuple[int, ...]] = tuple(k * NS_PER_MS for k in (1, 2, 4, 8, 16))
    #: Answer unmeasured depths no lower than the packets ahead need on the air
    #: (CompletionTimeTable's floor), at the robot's fastest bulk link.
    ctt_floor: ClassVar[bool] = True
    #: Each bulk exchange's airtime at most this (CappedGatedHooks); None: no cap.
    bulk_airtime_cap_ns: ClassVar[int | None] = None
    #: Bulk data in the NIC ring at most this much airtime (RingBudget, per the next
    #: packet's link); None: the whole ring. 1.5 ms is 83 packets at crl-5's rates (of a
    #: 128-packet ring), 3 at MCS 0's.
    ring_airtime_budget_ns: ClassVar[int | None] = 1_500_000
    #: The ring budget counts the ring's packets of traffic outside the team too (its
    #: first version; off: the budget is the team's, see RingBudget).
    ring_budget_counts_other: ClassVar[bool] = False
    #: Nor does it count the TCP acks a robot sends for traffic outside the team (a
    #: guest uploading to the leader: its acks held 80 of the leader's 128 ring slots,
    #: and counted as the team's they left the model download 23). Off: issue 22's
    #: budget, which counted them (``ladder-serial``).
    ring_budget_skips_outside_acks: ClassVar[bool] = True
    #: The team's acks are never held while packets outside the team wait behind them
    #: in the robot's priority queue (OutsideWaiting): a held ack held the queue behind
    #: it, and with a guest uploading to the leader the guest's acks waited there for
    #: seconds while the team's model filled the ring. Off: issue 22's ack gate.
    acks_yield_to_outside: ClassVar[bool] = True
    #: While traffic outside the team takes at least ``FOREIGN_SHARE`` of the air
    #: (measured over ``FOREIGN_PERIOD_NS``: what stations outside the team transmit, as
    #: a monitor interface or the NIC's channel survey measures it, plus the team's own
    #: bulk data that is not the team's, from its bytes and link rates), the gates'
    #: completion-time tables answer with this percentile instead of
    #: ``ctt_percentile``: a bulk packet's completion then depends on when traffic the
    #: team does not control leaves the medium, and the high percentile prices every
    #: packet at its longest wait. None: never.
    foreign_ctt_percentile: ClassVar[float | None] = 50.0
    #: The time model's windows: "gaussian" (±z·σ, the paper's), "empirical" (the
    #: recent out-of-sample residuals' quantiles, SendTimeModel(window="empirical")) or
    #: "conformal" (those quantiles around a Theil–Sen line, each send scored against
    #: the slot it was predicted for: a heavy tail of late sends costs the bandwidth of
    #: the late sends, not of every send; docs/control.md, "Windows for real timing").
    time_model_window: ClassVar[str] = "conformal"
    #: The time model's fit: "least-squares" (the paper's) or "robust" (medians,
    #: SendTimeModel(fit="robust")).
    time_model_fit: ClassVar[str] = "least-squares"
    #: The gate protects each window's core only, ±miss_sigmas·σ of the robust fit
    #: (SendTimeModel(protect_tail=False)); the tail of late sends is scored as before
    #: (misses, phase jumps) but left to the ring budget, the defence of every send the
    #: gate cannot foresee. Protecting the tail paused a worker's upload until each late
    #: send came: with 20 % of sends 10–30 ms late its windows spanned 31 of 33 ms, and
    #: the late sends missed as often either way (docs/control.md, "Windows for real
    #: timing"). True: the whole window (``coorp`` of issue 36, ``ladder-in-window``).
    protect_tail: ClassVar[bool] = False
    #: The MPC leader's full word on its controls (Policy.lead_hints, MpcLoop.lead_hints):
    #: a moving bound while perceptions are missing, exact instants once controls are due.
    lead_hints: ClassVar[bool] = True

    #: The gate also holds the TCP acks each robot sends for the team's bulk data it
    #: receives (GatedHooks(gate_acks=True)): at 60 Hz with aligned phases most late
    #: perceptions waited behind 26-32 of their robot's own acks for the model download.
    gate_acks: ClassVar[bool] = True
    #: The acks have a gate and a completion-time table of their own (the same planner
    #: and settings): a 52-byte ack completes unlike a bulk packet, and its samples in
    #: the bulk table made the gate deny bulk data it could have sent.
    ack_table: ClassVar[bool] = True
    #: The acks' gate explores as the bulk gate does (GatedHooks(ack_probes=True)).
    #: Without probes an ack table whose estimate exceeds every gap holds a robot's acks
    #: for good: with TCP senders (crl-5-guest-leader, random phases, seed 5) a worker's
    #: data download then timed out six times (RTO 12.8 s) and the team's bulk fell from
    #: ~100 to 33 Mb/s. Off by default: without a TCP sender model (every published
    #: table) held acks cost nothing and the probes cost 0.1-2 points of utilization
    #: (docs/control.md, "Probes in the acks' gate"); ``ladder-ack-probes`` has them.
    ack_probes: ClassVar[bool] = False
    #: A robot's own bulk transfers go one at a time, in the order they were started
    #: (the leader's model to one worker, then the next), not interleaved: each
    #: receiver sends TCP acks, so four transfers at once put four ack senders on the
    #: air beside the data, and every extra contender adds collisions whose binary
    #: exponential backoff is what a control message then waits behind. The permits
    #: make the team one bulk sender; this makes it one bulk conversation.
    serial_transfers: ClassVar[bool] = True
    #: The access category of the TCP acks each robot sends for the team's bulk data it
    #: receives, as a receiving socket's DSCP or SO_PRIORITY marks its pure acks (which
    #: mac80211 maps to an AC); None: the simulator's AC_BE. In AC_BE an ack contends
    #: with the permit holder's aggregates, whose EDCA function resets its window after
    #: every success while the ack's doubles after every collision: on crl-20 the
    #: leader's acks waited 15-36 ms for the air, and its controls behind them in the
    #: shared ring (8 of 9 late control bursts); beside a guest, late messages found
    #: 45-90 of their robot's own acks ahead. In AC_VI they leave at the next access,
    #: and their airtime is a few microseconds. A robot that also sends bulk data
    #: outside the team keeps AC_BE (see _mark_acks). docs/control.md, "The acks'
    #: access category"; ``ladder-be-acks`` is ``coorp`` with AC_BE acks.
    ack_ac: ClassVar[AccessCategory | None] = AccessCategory.VI

    def install(self) -> None:
        team = self.team
        sim = team.sim
        opts = team.options.coorp
        self.controller: GlobalController | None = None
        self.clients: dict[str, BulkClient] = {}
        self.gates: dict[str, Gate] = {}
        self.ack_gates: dict[str, Gate] = {}
        self.planners: dict[str, ProtectionPlanner] = {}
        self.hooks: dict[str, GatedHooks] = {}
        self.hints_taken: dict[str, int] = {}
        self._active: dict[str, int] = dict.fromkeys(team.robots, 0)
        self._tick_event: Event | None = None
        self.messages_sent = 0
        #: Transfers waiting for the robot's current one (serial_transfers).
        self._waiting: dict[str, deque[tuple[FlowState, int, Callable[[int], None]]]] = {
            r: deque() for r in team.robots
        }
        #: Transfers that waited for another of their robot's (serial_transfers).
        self.transfers_queued = 0
        #: Ack flows whose category ``ack_ac`` has decided (see _mark_acks).
        self._acks_seen: set[str] = set()
        if self.use_permits:
            self.controller = GlobalController(
                team.robots, limit=opts.limit, timeslice_ns=s(opts.timeslice_s)
            )
            self.clients = {r: BulkClient(r) for r in team.robots}
        # Stations outside the team share the air: traffic the team does not control.
        outsiders = any(name not in team.robots for name in sim.stations)
        for robot in team.robots:
            gate = planner = None
            if self.use_gate:
                extra: dict[str, Any] = {}
                if self.time_model_window != "gaussian":
                    extra["window"] = self.time_model_window
                if self.time_model_fit != "least-squares":
                    extra["fit"] = self.time_model_fit
                if not self.protect_tail:
                    extra["protect_tail"] = False
                planner = ProtectionPlanner(
                    margin_ns=us(opts.margin_us), confidence=opts.confidence, **extra
                )
                ctt = self._table(robot, opts.ctt_percentile)
                gate = Gate(
                    planner, ctt, realized=self.realized_ctt,
                    realized_in_window=self.realized_in_window,
                )  # fmt: skip
                self.gates[robot] = gate
                self.planners[robot] = planner
                if self.gate_acks and self.ack_table:
                    self.ack_gates[robot] = Gate(
                        planner, self._table(robot, opts.ctt_percentile),
                        realized=self.realized_ctt, realized_in_window=self.realized_in_window,
                    )  # fmt: skip
            kwargs: dict[str, Any] = dict(
                client=self.clients.get(robot), gate=gate, planner=planner,
                ls_flows=team.ls_flows, drain_recheck=self.drain_recheck,
                gate_acks=self.gate_acks and gate is not None,
                ack_gate=self.ack_gates.get(robot), ack_probes=self.ack_probes,
                outside_waiting=(
                    OutsideWaiting(sim, robot)
                    if outsiders and self.gate_acks and self.acks_yield_to_outside else None
                ),
            )  # fmt: skip
            budget = self.ring_airtime_budget_ns
            if budget is not None and opts.ring_budget_us is not None:
                budget = us(opts.ring_budget_us)  # the scenario's [policy.coorp] choice
            if budget is not None:
                kwargs["ring_limit"] = RingBudget(
                    sim, robot, budget, count_other=self.ring_budget_counts_other,
                    outside_acks=self.ring_budget_skips_outside_acks and outsiders,
                )  # fmt: skip
            cap = self.bulk_airtime_cap_ns
            hooks = GatedHooks(**kwargs) if cap is None else CappedGatedHooks(cap_ns=cap, **kwargs)
            self.hooks[robot] = hooks
            sim.set_hooks(robot, hooks)
        #: Bulk flows the team's policy started (its own data); see _own_other_air_ns.
        self._team_bulk: set[str] = set()
        self._share_by_code: dict[int, int] = {}
        self._foreign = [st for name, st in sim.stations.items() if name not in team.robots]
        self.foreign_busy_ns = 0
        self._foreign_busy = False
        if self.foreign_ctt_percentile is not None and self.gates and self._foreign:
            self._foreign_air = self._own_other_air_ns()
            self._foreign_at = sim.now_ns
            sim.call_control_at(sim.now_ns + FOREIGN_PERIOD_NS, self._watch_foreign)
        if not opts.protect_leader:
            # The paper: the leader's control dissemination is unprotected, its gate
            # learns none of its LS sends and so never opens a window for them.
            leader_hooks = sim.station(team.leader).hooks
            assert isinstance(leader_hooks, GatedHooks)
            leader_hooks.ls_flows = frozenset()

    def _table(self, robot: str, percentile: float) -> CompletionTimeTable:
        """A completion-time table for ``robot``'s gate (or its acks' gate)."""
        sim, team = self.team.sim, self.team
        return CompletionTimeTable(
            percentile=percentile,
            default_ns=per_packet_estimate_ns(sim, robot),
            lead_edges_ns=self.ctt_lead_edges_ns,
            max_age_ns=self.ctt_max_age_ns,
            min_per_packet_ns=(
                per_packet_floor_ns(sim, robot, team.bulk_peers(robot)) if self.ctt_floor else None
            ),
        )

    def _watch_foreign(self) -> None:
        """Measure the air stations outside the team took since the last look; switch
        the gates' percentile when a foreign contender comes or goes."""
        sim = self.team.sim
        now = sim.now_ns
        air = sum(st.airtime_ns for st in self._foreign) + self._own_other_air_ns()
        share = (air - self._foreign_air) / max(1, now - self._foreign_at)
        if self._foreign_busy:
            self.foreign_busy_ns += now - self._foreign_at
        self._foreign_air, self._foreign_at = air, now
        busy = share >= FOREIGN_SHARE
        if busy != self._foreign_busy:
            assert self.foreign_ctt_percentile is not None
            p = self.foreign_ctt_percentile if busy else self.team.options.coorp.ctt_percentile
            for gate in (*self.gates.values(), *self.ack_gates.values()):
                gate.ctt.set_percentile(p)
        self._foreign_busy = busy
        sim.call_control_at(now + FOREIGN_PERIOD_NS, self._watch_foreign)

    def _own_other_air_ns(self) -> int:
        """The air the team's robots have used for bulk data that is not the team's
        (a download the leader serves to a station outside the team), from the bytes
        delivered and each link's rate: what a robot knows of its own traffic. Each
        packet counts its share of an AC_BE access carrying the largest A-MPDU (AIFS,
        preamble, BlockAck; no backoff): a lower bound."""
        sim = self.team.sim
        robots = set(self.team.robots)
        total = 0
        for f in sim.flows.values():
            if f.bulk and f.src.name in robots and f.name not in self._team_bulk:
                code = sim.links.rate_code(f.src.idx, f.dst.idx)
                share = self._share_by_code.get(code)
                if share is None:
                    share = self._share_by_code[code] = per_packet_floor_ns(
                        sim, f.src.name, [f.dst.name]
                    )
                total += f.delivered_packets * share
        return total

    def expect_ls_send(
        self, robot: str, flow: str, at_ns: int, *, exact: bool = False, min_lead_ns: int = 0
    ) -> None:
        planner = self.planners.get(robot)
        if not self.use_hints or planner is None or flow not in self.hooks[robot].ls_flows:
            return
        planner.expect(flow, at_ns, exact=exact, min_lead_ns=min_lead_ns)
        self.hints_taken[robot] = self.hints_taken.get(robot, 0) + 1
        sim = self.team.sim
        self.hooks[robot].reconsider(sim.station(robot), sim.now_ns)

    # -- bulk transfers ------------------------------------------------------------------
    def send_bulk(
        self, robot: str, flow: FlowState, nbytes: int, on_complete: Callable[[int], None]
    ) -> None:
        self._team_bulk.add(flow.name)
        ack = flow.ack_flow
        if self.ack_ac is not None and ack is not None and ack.gate_acks:
            self._mark_acks(ack)
        if self.serial_transfers and self._active[robot]:
            self._waiting[robot].append((flow, nbytes, on_complete))
            self.transfers_queued += 1
            return
        self._start(robot, flow, nbytes, on_complete)

    def _mark_acks(self, ack: FlowState) -> None:
        """Put the team's acks of one flow in ``ack_ac``, once, before its first transfer
        (a flow a later transfer reuses keeps its acks' category): unless the robot that
        sends them also sends bulk data outside the team (a download to a laptop). There
        its acks take turns with that traffic in its AC_BE function; in AC_VI they would
        leave it an AC_BE function of its own against the team's permit holder
        (crl-5-download: the workers' uploads to the leader 301 -> 222 Mb/s)."""
        if ack.name in self._acks_seen:
            return
        self._acks_seen.add(ack.name)
        assert self.ack_ac is not None
        if not ack.src.free_transfers:
            ack.ac = self.ack_ac

    def _start(
        self, robot: str, flow: FlowState, nbytes: int, on_complete: Callable[[int], None]
    ) -> None:
        sim = self.team.sim
        self._active[robot] += 1

        def done(_t: object, now: int) -> None:
            self._active[robot] -= 1
            waiting = self._waiting[robot]
            if waiting and not self._active[robot]:
                # The next one starts first (in order, and the permit is still wanted).
                self._start(robot, *waiting.popleft())
            on_complete(now)
            if self._active[robot] == 0 and self.controller is not None:
                self._finished(robot, now)

        sim.start_transfer(flow, nbytes, done)
        if self.controller is not None:
            self._want(robot, sim.now_ns)

    # -- robot side of Algorithm 1 -------------------------------------------------------
    def _want(self, robot: str, now: int) -> None:
        if self._active[robot] and self.clients[robot].want(now):
            msg = self._to_leader(robot, lambda t: self._leader_request(robot, t))
            if msg is not None:
                self.team.sim.call_control_at(
                    now + REQUEST_RETRY_NS, self._request_timeout, robot, msg
                )

    def _request_timeout(self, robot: str, msg: Message) -> None:
        # The control channel is reliable (TCP-like): only a request the MAC dropped
        # after all its retries is sent again.
        client = self.clients[robot]
        if msg.lost and client.requested:
            now = self.team.sim.now_ns
            client.on_request_lost(now)
            self._want(robot, now)

    def _on_grant(self, robot: str, grant: Grant, now: int) -> None:
        client = self.clients[robot]
        unwanted = client.on_grant(grant, now)
        if unwanted is not None:
            self._to_leader(robot, lambda t: self._leader_release(robot, unwanted, t))
            return
        expires = client.local_expires_ns
        if expires is not None:
            self.team.sim.call_control_at(expires, self._local_expiry, robot)
        self.team.sim.station(robot).resume_bulk()

    def _local_expiry(self, robot: str) -> None:
        # The timeslice ended on the robot's clock: queue again if data remains.
        self._want(robot, self.team.sim.now_ns)

    def _on_revoke(self, robot: str, grant_id: int, now: int) -> None:
        self.clients[robot].on_revoke(grant_id, now)
        self._want(robot, now)

    def _finished(self, robot: str, now: int) -> None:
        grant_id = self.clients[robot].finished(now)
        if grant_id is not None:
            self._to_leader(robot, lambda t: self._leader_release(robot, grant_id, t))

    # -- leader side ---------------------------------------------------------------------
    def _leader_request(self, robot: str, now: int) -> None:
        assert self.controller is not None
        self._apply(self.controller.request(robot, now), now)

    def _leader_release(self, robot: str, grant_id: int, now: int) -> None:
        assert self.controller is not None
        self._apply(self.controller.release(robot, grant_id, now), now)

    def _tick(self) -> None:
        self._tick_event = None
        assert self.controller is not None
        now = self.team.sim.now_ns
        self._apply(self.controller.tick(now), now)

    def _apply(self, update: PermitUpdate, now: int) -> None:
        assert self.controller is not None
        for g in update.revoked:
            self._to_robot(g.robot, partial(self._on_revoke, g.robot, g.grant_id))
        for g in update.granted:
            self._to_robot(g.robot, partial(self._on_grant, g.robot, g))
        deadline = self.controller.next_deadline_ns()
        if self._tick_event is not None and (
            deadline is None or self._tick_event.time_ns != deadline
        ):
            self._tick_event.cancel()
            self._tick_event = None
        if deadline is not None and self._tick_event is None:
            self._tick_event = self.team.sim.call_control_at(max(deadline, now), self._tick)

    # -- control messages over the air ---------------------------------------------------
    def _to_leader(self, robot: str, deliver: Callable[[int], None]) -> Message | None:
        return self._send(robot, self.team.leader, deliver)

    def _to_robot(self, robot: str, deliver: Callable[[int], None]) -> Message | None:
        return self._send(self.team.leader, robot, deliver)

    def _send(self, src: str, dst: str, deliver: Callable[[int], None]) -> Message | None:
        """A control message over the air; the leader talks to itself without one."""
        sim = self.team.sim
        if src == dst:
            deliver(sim.now_ns)
            return None
        flow = sim.flow(f"permit:{src}->{dst}", src, dst, AccessCategory.VO, bulk=False)
        self.messages_sent += 1
        return sim.send_message(
            flow,
            self.team.options.coorp.permit_message_bytes,
            on_delivered=lambda m: deliver(m.delivered_ns),
        )

    def stats(self) -> dict[str, Any]:
        out: dict[str, Any] = {"permit_messages": getattr(self, "messages_sent", 0)}
        if getattr(self, "controller", None) is not None:
            assert self.controller is not None
            st = self.controller.stats
            out["permits"] = asdict(st)
        gates = getattr(self, "gates", {})
        if gates:
            out["gate"] = {r: asdict(g.stats) for r, g in gates.items()}
            hooks = getattr(self, "hooks", {})
            out["early_resumes"] = {r: h.early_resumes for r, h in hooks.items()}
            out["hints"] = dict(getattr(self, "hints_taken", {}))
            out["ring_full_pauses"] = {r: h.ring_full_pauses for r, h in hooks.items()}
            if self.gate_acks:
                sim = self.team.sim
                out["ack_holds"] = {r: sim.station(r).ack_holds for r in hooks}
            ack_gates = getattr(self, "ack_gates", {})
            if ack_gates:
                out["ack_gate"] = {r: asdict(g.stats) for r, g in ack_gates.items()}
        if self.serial_transfers:
            out["transfers_queued"] = getattr(self, "transfers_queued", 0)
        if getattr(self, "_foreign", None):
            out["foreign_contender_s"] = getattr(self, "foreign_busy_ns", 0) / 1e9
        return out


@register_policy
class CoorpGlobalPolicy(CoorpPolicy):
    name = "coorp-global"
    summary = "COORP ablation: permits only (one bulk sender at a time), no local gate"
    use_gate = False
    ring_airtime_budget_ns = None
    #: Permits only: the robots' acks as the simulator sends them (AC_BE), as the
    #: oracle's, which is these permits plus exact knowledge.
    ack_ac = None


@register_policy
class CoorpLocalPolicy(CoorpPolicy):
    name = "coorp-local"
    summary = "COORP ablation: local gate only, every robot sends bulk data at will"
    use_permits = False


@register_policy
class CoorpPaperPolicy(CoorpPolicy):
    name = "coorp-paper"
    summary = "COORP exactly as published (Algorithms 1 and 2), without Coorp's gate additions"
    drain_recheck = False
    use_hints = False
    realized_ctt = False
    ctt_lead_edges_ns = ()
    ctt_floor = False
    ring_airtime_budget_ns = None
    foreign_ctt_percentile = None
    gate_acks = False
    serial_transfers = False
    time_model_window = "gaussian"
    lead_hints = False
    realized_in_window = False
    ack_ac = None
