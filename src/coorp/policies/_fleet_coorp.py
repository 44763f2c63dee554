"""COORP for a fleet: permits per channel (or per team), local preemption per station.

* **Permits.** Every AP's leader runs a :class:`~coorp.control.CellLeader`. With
  ``coorp`` the leaders of one contention domain (the APs of one channel that hear each
  other: its shared air) peer over the wired backbone and elect a coordinator, so at
  most ``[policy.coorp] limit`` stations of the whole channel send bulk data at a time;
  with ``coorp-team`` each leader coordinates its own cell only (the per-team baseline).
  Requests, grants, revocations and releases between a robot and its cell's leader are
  AC_VO datagrams over the air, as in a team; between leaders they take the backbone's
  latency, and a backbone outage (``[[fleet.backbone.outages]]``) drops them.
* **Local preemption.** Every station (robots and APs) has COORP's gate as the team
  policy builds it (the same settings, read from :class:`CoorpPolicy`): a time model per
  LS flow it sends, completion-time tables, the ring budget, its TCP acks held. A
  robot's planner and tables belong to the robot and follow it from cell to cell
  (``[fleet.roaming] keep_planner``); an AP learns the controls of the robots in its
  cell, told exactly when each will go (perception arrival + inference).
* **Hand-overs.** A robot that leaves a cell gives up its permit and its place in the
  queue (its leader tells the coordinator); its transfers, and its AP's to it, were
  flushed by the simulator. In its new cell it joins the leader's members and asks again.

``oracle`` (not deployable) keeps these permits and replaces the gate by exact knowledge
of every station's next loop send and of the airtime of every frame it would send
(:class:`~coorp.policies._oracle.OracleHooks`).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import asdict
from functools import partial
from typing import Any, ClassVar

from coorp.control import (
    BulkClient,
    CellActions,
    CellLeader,
    CompletionTimeTable,
    Gate,
    Grant,
    PeerMessage,
    ProtectionPlanner,
)
from coorp.policies._coorp import REQUEST_RETRY_NS, CoorpPolicy
from coorp.policies._fleet import FleetPolicy, register_fleet_policy
from coorp.policies._hooks import GatedHooks, RingBudget, _share_ns
from coorp.policies._oracle import OracleHooks
from coorp.scenario import AccessCategory
from coorp.sim.events import Event
from coorp.sim.packets import FlowState, Message
from coorp.units import s, us

__all__ = ["FleetCoorpPolicy", "FleetCoorpTeamPolicy", "FleetOraclePolicy"]

Transfer = tuple[FlowState, int, Callable[[int], None]]


@register_fleet_policy
class FleetCoorpPolicy(FleetPolicy):
    name = "coorp"
    summary = "COORP with one bulk sender per channel: co-channel leaders elect a coordinator"
    #: "channel": the leaders of a contention domain peer; "team": each cell alone.
    scope: ClassVar[str] = "channel"
    use_gate: ClassVar[bool] = True

    def install(self) -> None:
        fleet = self.fleet
        sim, cells = fleet.sim, fleet.cells
        opts = fleet.options.coorp
        fleet_cfg = sim.scenario.fleet
        assert fleet_cfg is not None
        backbone = fleet_cfg.backbone
        #: A robot's local preemption follows it to its new cell ([fleet.roaming]).
        self.keep_planner = fleet_cfg.roaming.keep_planner
        self.latency_ns = us(backbone.latency_us)
        self.outages = [(o.access_point, s(o.start_s), s(o.end_s)) for o in backbone.outages]
        self.leaders: dict[str, CellLeader] = {}
        for d in cells.domains:
            for ap in d.access_points:
                self.leaders[ap] = CellLeader(
                    ap, d.access_points, limit=opts.limit, timeslice_ns=s(opts.timeslice_s),
                    heartbeat_ns=us(backbone.heartbeat_us), timeout_ns=us(backbone.timeout_us),
                    alone=self.scope == "team",
                )  # fmt: skip
                for r in (ap, *cells.members(ap)):  # the leader's own bulk data asks too
                    self.leaders[ap].join(r, 0)
        self._ticks: dict[str, Event | None] = dict.fromkeys(self.leaders)
        self.clients: dict[str, BulkClient] = {}
        self.hooks: dict[str, Any] = {}
        self.planners: dict[str, ProtectionPlanner] = {}
        self.gates: dict[str, Gate] = {}
        self._active: dict[str, list[FlowState]] = {st: [] for st in fleet.stations}
        self._waiting: dict[str, deque[Transfer]] = {st: deque() for st in fleet.stations}
        #: A robot's association number: messages and timers of an older one are stale.
        self._epoch: dict[str, int] = dict.fromkeys(fleet.stations, 0)
        self.messages_sent = 0
        self.backbone_messages = 0
        self.backbone_dropped = 0
        self.transfers_queued = 0
        #: Permits held, per contention domain: (station, from, to) — see stats().
        self._held_since: dict[str, tuple[str, int]] = {}
        self.permit_intervals: list[tuple[str, str, int, int]] = []
        for st in fleet.stations:
            self.clients[st] = BulkClient(st)
            self._install_station(st)
        for ap in self.leaders:
            self._schedule_tick(ap, 0)

    # -- local preemption ----------------------------------------------------------------------
    def _install_station(self, station: str) -> None:
        """The station's hooks: COORP's gate as the team policy builds it (or the
        oracle's), its permits through its BulkClient."""
        fleet, sim = self.fleet, self.fleet.sim
        if not sim.station(station).shared:
            # An AP's per-AC rings: its controls never wait behind its bulk data in the
            # NIC, so it needs the permits only (local preemption is the robots' answer
            # to their one shared ring).
            hooks = GatedHooks(client=self.clients[station])
            self.hooks[station] = hooks
            sim.set_hooks(station, hooks)
            return
        opts = fleet.options.coorp
        team = CoorpPolicy
        peers = self._peers(station)
        estimate = max((self._share(station, p, backoff=True) for p in peers), default=0)
        floor = min((self._share(station, p, backoff=False) for p in peers), default=0)

        def table() -> CompletionTimeTable:
            return CompletionTimeTable(
                percentile=opts.ctt_percentile, default_ns=max(1, estimate),
                lead_edges_ns=team.ctt_lead_edges_ns, max_age_ns=team.ctt_max_age_ns,
                min_per_packet_ns=floor if team.ctt_floor and floor > 0 else None,
            )  # fmt: skip

        planner = ProtectionPlanner(margin_ns=us(opts.margin_us), confidence=opts.confidence)
        gate = Gate(planner, table(), realized=team.realized_ctt)
        ack_gate = Gate(planner, table(), realized=team.realized_ctt)
        budget = us(opts.ring_budget_us) if opts.ring_budget_us is not None else None
        budget = budget or team.ring_airtime_budget_ns
        hooks = GatedHooks(
            client=self.clients[station], gate=gate, planner=planner,
            ls_flows=fleet.protected_flows(station), drain_recheck=team.drain_recheck,
            gate_acks=team.gate_acks, ack_gate=ack_gate if team.ack_table else None,
            ring_limit=RingBudget(sim, station, budget) if budget is not None else None,
        )  # fmt: skip
        self.planners[station] = planner
        self.gates[station] = gate
        self.hooks[station] = hooks
        sim.set_hooks(station, hooks)

    def _peers(self, station: str) -> list[str]:
        cells = self.fleet.cells
        if station in self.leaders:
            return cells.members(station) or list(cells.robots)
        ap = cells.ap_of[station]
        return [ap] if ap is not None else []

    def _share(self, station: str, peer: str, *, backoff: bool) -> int:
        sim = self.fleet.sim
        code = sim.links.rate_code(sim.station(station).idx, sim.station(peer).idx)
        return _share_ns(sim, code, backoff=backoff)

    def expect_ls_send(self, station: str, flow: str, at_ns: int, *, exact: bool = False) -> None:
        planner = self.planners.get(station)
        hooks = self.hooks[station]
        if planner is None or flow not in hooks.ls_flows:
            return
        planner.expect(flow, at_ns, exact=exact)
        sim = self.fleet.sim
        hooks.reconsider(sim.station(station), sim.now_ns)

    def protected(self, station: str, now_ns: int) -> bool | None:
        planner = self.planners.get(station)
        if planner is None:
            return None
        w = planner.next_window(now_ns)
        return w is not None and w.start_ns <= now_ns <= w.end_ns

    # -- bulk transfers (as CoorpPolicy: one at a time per station) --------------------------------
    def send_bulk(
        self, station: str, flow: FlowState, nbytes: int, on_complete: Callable[[int], None]
    ) -> None:
        if self._active[station] and CoorpPolicy.serial_transfers:
            self._waiting[station].append((flow, nbytes, on_complete))
            self.transfers_queued += 1
            return
        self._start(station, flow, nbytes, on_complete)

    def _start(
        self, station: str, flow: FlowState, nbytes: int, on_complete: Callable[[int], None]
    ) -> None:
        sim = self.fleet.sim
        self._active[station].append(flow)

        def done(_t: object, now: int) -> None:
            active = self._active[station]
            if flow in active:
                active.remove(flow)
            if not active and self._waiting[station]:
                # The next one starts first (in order, and the permit is still wanted).
                self._start(station, *self._waiting[station].popleft())
            on_complete(now)
            if not self._active[station]:
                self._finished(station, now)

        sim.start_transfer(flow, nbytes, done)
        self._want(station, sim.now_ns)

    def _next(self, station: str, now: int) -> None:
        """A transfer of ``station`` ended (or was abandoned): the next one, or the permit
        back."""
        if not self._active[station]:
            if self._waiting[station]:
                self._start(station, *self._waiting[station].popleft())
            else:
                self._finished(station, now)

    # -- a station's side of Algorithm 1 ---------------------------------------------------------
    def _leader_of(self, station: str) -> str | None:
        return station if station in self.leaders else self.fleet.cells.ap_of[station]

    def _want(self, station: str, now: int) -> None:
        ap = self._leader_of(station)
        if ap is None or not self._active[station] or not self.clients[station].want(now):
            return
        epoch = self._epoch[station]
        msg = self._send(station, ap, lambda t: self._leader_request(ap, station, epoch, t))
        if msg is not None:
            self.fleet.sim.call_control_at(
                now + REQUEST_RETRY_NS, self._request_timeout, station, msg, epoch
            )

    def _request_timeout(self, station: str, msg: Message, epoch: int) -> None:
        client = self.clients[station]
        if epoch == self._epoch[station] and msg.lost and client.requested:
            now = self.fleet.sim.now_ns
            client.on_request_lost(now)
            self._want(station, now)

    def _on_grant(self, station: str, epoch: int, grant: Grant, now: int) -> None:
        if epoch != self._epoch[station]:
            return  # a grant of the cell it has left
        client = self.clients[station]
        unwanted = client.on_grant(grant, now)
        ap = self._leader_of(station)
        if unwanted is not None:
            if ap is not None:
                self._send(station, ap, lambda t: self._leader_release(ap, station, unwanted, t))
            return
        self._held_since[station] = (self._domain(station), now)
        expires = client.local_expires_ns
        if expires is not None:
            self.fleet.sim.call_control_at(expires, self._local_expiry, station, epoch)
        self.fleet.sim.station(station).resume_bulk()

    def _local_expiry(self, station: str, epoch: int) -> None:
        if epoch == self._epoch[station]:
            now = self.fleet.sim.now_ns
            self._held_until(station, now)
            self._want(station, now)

    def _on_revoke(self, station: str, epoch: int, grant_id: int, now: int) -> None:
        if epoch != self._epoch[station]:
            return
        self.clients[station].on_revoke(grant_id, now)
        if self.clients[station].grant is None:
            self._held_until(station, now)
        self._want(station, now)

    def _finished(self, station: str, now: int) -> None:
        grant_id = self.clients[station].finished(now)
        self._held_until(station, now)
        ap = self._leader_of(station)
        if grant_id is not None and ap is not None:
            self._send(station, ap, lambda t: self._leader_release(ap, station, grant_id, t))

    # -- leaders --------------------------------------------------------------------------------
    def _leader_request(self, ap: str, station: str, epoch: int, now: int) -> None:
        leader = self.leaders[ap]
        if epoch != self._epoch[station] or station not in leader.members:
            return  # it left this cell while its request was on the air
        self._act(ap, leader.request(station, now), now)

    def _leader_release(self, ap: str, station: str, grant_id: int, now: int) -> None:
        self._act(ap, self.leaders[ap].release(station, grant_id, now), now)

    def _act(self, ap: str, acts: CellActions, now: int) -> None:
        for g in acts.revoked:
            epoch = self._epoch[g.robot]
            self._send(ap, g.robot, partial(self._on_revoke, g.robot, epoch, g.grant_id))
        for g in acts.granted:
            epoch = self._epoch[g.robot]
            self._send(ap, g.robot, partial(self._on_grant, g.robot, epoch, g))
        for m in acts.to_peers:
            self._backbone(m, now)
        self._schedule_tick(ap, now)

    def _schedule_tick(self, ap: str, now: int) -> None:
        due = self.leaders[ap].next_deadline_ns()
        ev = self._ticks[ap]
        if ev is not None and (due is None or ev.time_ns != max(due, now)):
            ev.cancel()
            self._ticks[ap] = ev = None
        if due is not None and ev is None:
            self._ticks[ap] = self.fleet.sim.call_control_at(max(due, now), self._tick, ap)

    def _tick(self, ap: str) -> None:
        self._ticks[ap] = None
        now = self.fleet.sim.now_ns
        self._act(ap, self.leaders[ap].tick(now), now)

    def _cut(self, ap: str, now: int) -> bool:
        return any(a == ap and start <= now < end for a, start, end in self.outages)

    def _backbone(self, m: PeerMessage, now: int) -> None:
        self.backbone_messages += 1
        if self._cut(m.src, now) or self._cut(m.dst, now):
            self.backbone_dropped += 1
            return
        self.fleet.sim.call_control_at(now + self.latency_ns, self._peer_arrives, m)

    def _peer_arrives(self, m: PeerMessage) -> None:
        now = self.fleet.sim.now_ns
        if self._cut(m.src, now) or self._cut(m.dst, now):
            self.backbone_dropped += 1
            return
        self._act(m.dst, self.leaders[m.dst].on_peer(m, now), now)

    # -- control messages over the air -------------------------------------------------------
    def _send(self, src: str, dst: str, deliver: Callable[[int], None]) -> Message | None:
        """A permit message over the air; a leader talks to itself without one. Nothing
        goes to or from a robot between two cells."""
        sim = self.fleet.sim
        if src == dst:
            deliver(sim.now_ns)
            return None
        cells = self.fleet.cells
        robot = src if src in cells.ap_of else dst
        if cells.ap_of[robot] is None:
            return None
        flow = sim.flow(f"permit:{src}->{dst}", src, dst, AccessCategory.VO, bulk=False)
        self.messages_sent += 1
        return sim.send_message(
            flow, self.fleet.options.coorp.permit_message_bytes,
            on_delivered=lambda m: deliver(m.delivered_ns),
        )  # fmt: skip

    # -- hand-overs -------------------------------------------------------------------------
    def on_leave(self, robot: str, ap: str, now_ns: int) -> None:
        self._epoch[robot] += 1
        self._held_until(robot, now_ns)
        self._active[robot].clear()
        self._waiting[robot].clear()
        self.clients[robot] = BulkClient(robot)
        self._attach_client(robot)
        # The AP's transfers to the robot were flushed: forget them, go on with the next.
        gone = [f for f in self._active[ap] if f.dst.name == robot]
        for f in gone:
            self._active[ap].remove(f)
        self._waiting[ap] = deque(t for t in self._waiting[ap] if t[0].dst.name != robot)
        self._act(ap, self.leaders[ap].leave(robot, now_ns), now_ns)
        if gone:
            self._next(ap, now_ns)
        self._update_flows(ap)
        planner = self.planners.get(ap)
        if planner is not None:
            planner.forget(self.fleet.control[robot])

    def on_join(self, robot: str, ap: str, now_ns: int) -> None:
        self._act(ap, self.leaders[ap].join(robot, now_ns), now_ns)
        if not self.keep_planner:
            self._install_station(robot)  # local preemption starts afresh
        else:
            # Its models saw nothing of the sends it sampled off the air: until it sends
            # again, protect from now rather than from the predicted window's early
            # edge alone (a send 0.1 ms before that edge, one in ~50 anywhere, made a
            # roam's protection gap one period longer). Costs at most one period of
            # bulk, and only when a permit came that fast.
            planner = self.planners.get(robot)
            if planner is not None:
                for flow in self.hooks[robot].ls_flows:
                    planner.resume(flow, now_ns)
        self._refresh_channel(robot)
        self._update_flows(ap)

    def _attach_client(self, station: str) -> None:
        self.hooks[station].client = self.clients[station]

    def _refresh_channel(self, station: str) -> None:
        """After a hand-over: what the hooks cache of the station's medium."""

    def _update_flows(self, ap: str) -> None:
        hooks = self.hooks[ap]
        if hooks.planner is not None:
            hooks.ls_flows = self.fleet.protected_flows(ap)

    # -- measurement --------------------------------------------------------------------------
    def _domain(self, station: str) -> str:
        d = self.fleet.cells.domain_of(station)
        return d if d is not None else "-"

    def _held_until(self, station: str, now: int) -> None:
        since = self._held_since.pop(station, None)
        if since is not None:
            self.permit_intervals.append((since[0], station, since[1], now))

    def overlapping_senders(self, until_ns: int) -> dict[str, int]:
        """Most stations holding a permit at once, per contention domain (a permit held
        at the end of the run counts until then)."""
        intervals = list(self.permit_intervals)
        intervals += [(d, st, t0, until_ns) for st, (d, t0) in self._held_since.items()]
        out: dict[str, int] = {d.name: 0 for d in self.fleet.cells.domains}
        events: dict[str, list[tuple[int, int]]] = {}
        for d, _st, t0, t1 in intervals:
            if t1 > t0:
                events.setdefault(d, []).extend([(t0, 1), (t1, -1)])
        for d, evs in events.items():
            cur = 0
            for _t, step in sorted(evs):  # an end before a start at the same instant
                cur += step
                out[d] = max(out.get(d, 0), cur)
        return out

    def stats(self) -> dict[str, Any]:
        leaders = getattr(self, "leaders", {})
        return {
            "scope": self.scope,
            "permit_messages": getattr(self, "messages_sent", 0),
            "backbone_messages": getattr(self, "backbone_messages", 0),
            "backbone_dropped": getattr(self, "backbone_dropped", 0),
            "transfers_queued": getattr(self, "transfers_queued", 0),
            "leaders": {ap: asdict(ldr.stats) for ap, ldr in leaders.items()},
            "gate": {st: asdict(g.stats) for st, g in getattr(self, "gates", {}).items()},
        }


@register_fleet_policy
class FleetCoorpTeamPolicy(FleetCoorpPolicy):
    name = "coorp-team"
    summary = "COORP per team only (each cell's leader alone): what co-channel teams cost"
    scope = "team"


@register_fleet_policy
class FleetOraclePolicy(FleetCoorpPolicy):
    name = "oracle"
    summary = (
        "reference bound, not deployable: per-channel permits + exact future loop sends "
        "and airtimes, aggregates sized to the gap"
    )
    deployable = False
    use_gate = False

    def _install_station(self, station: str) -> None:
        fleet, sim = self.fleet, self.fleet.sim
        if fleet.ls_send is None or not sim.station(station).shared:
            permits = GatedHooks(client=self.clients[station])
            self.hooks[station] = permits
            sim.set_hooks(station, permits)
            return
        send = fleet.ls_send

        def schedule(robot: str, now_ns: int) -> int | None:
            nxt = send(robot, now_ns)
            return None if nxt is None else nxt[0]

        st = sim.station(station)
        assert st.channel is not None
        hooks = OracleHooks(
            robot=station, station=st, channel=st.channel, schedule=schedule,
            permits=GatedHooks(client=self.clients[station]),
            ls_flows=fleet.protected_flows(station), exactness=send,
        )  # fmt: skip
        self.hooks[station] = hooks
        sim.set_hooks(station, hooks)

    def _attach_client(self, station: str) -> None:
        hooks = self.hooks[station]
        if isinstance(hooks, OracleHooks):
            hooks.permits.client = self.clients[station]
        else:
            hooks.client = self.clients[station]

    def _refresh_channel(self, station: str) -> None:
        hooks = self.hooks[station]
        if isinstance(hooks, OracleHooks):
            channel = self.fleet.sim.station(station).channel
            assert channel is not None
            hooks.channel = channel
            hooks._model = hooks._trial = None

    def _update_flows(self, ap: str) -> None:
        hooks = self.hooks[ap]
        if isinstance(hooks, OracleHooks):
            hooks.ls_flows = self.fleet.protected_flows(ap)

    def protected(self, station: str, now_ns: int) -> bool | None:
        return None

    def stats(self) -> dict[str, Any]:
        out = super().stats()
        out["oracle"] = {
            st: asdict(h.stats) for st, h in self.hooks.items() if isinstance(h, OracleHooks)
        }
        return out
