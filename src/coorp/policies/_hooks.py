"""Driver hooks shared by the gated policies: permit check, gate, time-model feed."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import ClassVar, Final

from coorp._errors import UsageError
from coorp.control import BulkClient, Gate, ProtectionPlanner
from coorp.phy import MAX_PPDU_NS, SLOT_NS
from coorp.scenario import AccessCategory
from coorp.sim import FOREVER, DriverView, Simulation
from coorp.sim.packets import Packet
from coorp.sim.timing import aifs_ns, edca_params, mpdu_bytes, psdu_bytes

__all__ = [
    "CappedGatedHooks",
    "GatedHooks",
    "OutsideWaiting",
    "RingBudget",
    "per_packet_estimate_ns",
    "per_packet_floor_ns",
]

#: A module constant: compiled, a lookup on the enum class per call is not free.
_BE: Final = AccessCategory.BE


def per_packet_estimate_ns(sim: Simulation, robot: str) -> int:
    """What one bulk packet ahead in the NIC costs, before anything was measured.

    Its share of one AC_BE channel access at the robot's slowest link: AIFS, a full
    CWmin backoff and one exchange of the largest A-MPDU the MAC would build (a single
    MPDU when BE aggregation is off), divided by the MPDUs it carries. The completion-
    time table scales this with the queue depth until real samples replace it; it is
    derived from the PHY/MAC parameters, never tuned to results.
    """
    st = sim.station(robot)
    slowest = min(
        (sim.links.rate_code(st.idx, o.idx) for o in sim.stations.values() if o is not st),
        key=lambda code: sim.timing.mode(code).rate_mbps,
    )
    return _share_ns(sim, slowest, backoff=True)


def per_packet_floor_ns(sim: Simulation, robot: str, peers: Iterable[str]) -> int:
    """The least one bulk packet ahead in the NIC can cost: its share of one AC_BE
    access (AIFS, no backoff) carrying the largest A-MPDU, at the fastest of the
    robot's links to ``peers`` (where its bulk data goes). A lower bound from the
    PHY/MAC parameters, for :class:`~coorp.control.CompletionTimeTable`'s floor."""
    st = sim.station(robot)
    codes = [sim.links.rate_code(st.idx, sim.station(p).idx) for p in peers if p != robot]
    if not codes:
        return 0  # no bulk peer: no floor to speak of
    fastest = max(codes, key=lambda code: sim.timing.mode(code).rate_mbps)
    return _share_ns(sim, fastest, backoff=False)


class RingBudget:
    """An airtime queue limit for one robot's NIC ring, as Linux's AQL: how many
    packets the ring may hold before the next bulk packet joins it.

    ``budget_ns`` over one packet's share of an AC_BE access (AIFS, no backoff, the
    largest A-MPDU) at the rate of the link the *next* bulk packet goes over, at least
    one packet; links are read when asked (they may change during a run, as in
    co-simulation), and each rate's answer is computed once. On a fast link it is
    most of the ring (1.5 ms: 83 packets at 780 Mb/s); on a slow one a few (3 at
    29.25 Mb/s), which keeps the robot's LS messages from queueing behind milliseconds
    of its own bulk data. A leader sending to a fast and a slow worker is limited per
    destination, not by its slowest link."""

    def __init__(
        self,
        sim: Simulation,
        robot: str,
        budget_ns: int,
        *,
        count_other: bool = False,
        outside_acks: bool = False,
    ) -> None:
        if budget_ns < 1:
            raise UsageError(f"ring budget {budget_ns} ns: must be >= 1 ns")
        self._sim = sim
        self._station = sim.station(robot)
        self.budget_ns = budget_ns
        #: Count the ring's packets of traffic outside the team against the budget too
        #: (the first version did; a ladder variant).
        self.count_other = count_other
        #: Leave out of the count the TCP acks the robot sends for traffic outside the
        #: team too (a guest uploading to the leader), not only the packets of its own
        #: ungated transfers. Only worth a look at the ring where stations outside the
        #: team share the air; off, such acks count as the team's (issue 22's budget).
        self.outside_acks = outside_acks and not count_other
        self._by_code: dict[int, int] = {}

    def packets_at(self, code: int) -> int:
        """The limit for bulk packets sent at rate ``code``."""
        limit = self._by_code.get(code)
        if limit is None:
            limit = max(1, self.budget_ns // _share_ns(self._sim, code, backoff=False))
            self._by_code[code] = limit
        return limit

    def packets_to(self, peer: str) -> int:
        """The limit while the next bulk packet goes to ``peer``."""
        return self.packets_at(
            self._sim.links.rate_code(self._station.idx, self._sim.station(peer).idx)
        )

    def __call__(self) -> int:
        """The limit for the bulk packet the driver would hand over next (its head
        transfer's destination; the ring's capacity when no bulk data waits).

        The budget is the team's: packets of traffic outside the team (ungated
        transfers, ``Station.ungated_in_ring``) are in the ring but not counted against
        it, as the runtime's in-flight budget counts only its own streams."""
        station = self._station
        transfers = station.transfers
        if not transfers:
            return self._sim.scenario.hw_queue.capacity_packets
        head = transfers[0].flow
        code = self._sim.links.rate_code(station.idx, head.dst.idx)
        limit = self._by_code.get(code)
        if limit is None:
            limit = self.packets_at(code)
        if self.count_other:
            return limit
        if self.outside_acks:
            return limit + _outside_in(station.rings[head.ac])
        return limit + station.ungated_in_ring(head.ac)


def _outside_in(ring: Iterable[Packet]) -> int:
    """Packets in ``ring`` that are not the team's: those of ungated transfers (traffic
    outside the team the robot sends) and the TCP acks the robot sends for traffic
    outside the team it receives (an ack flow whose acks the hooks may not hold,
    ``FlowState.gate_acks`` false). The team's data, its acks and every LS message
    count."""
    n = 0
    for p in ring:
        if p.message is not None:
            continue
        if p.bulk:
            t = p.transfer
            if t is not None and not getattr(t, "gated", True):
                n += p.count
        elif not p.flow.gate_acks:
            n += p.count
    return n


class OutsideWaiting:
    """Whether a packet of traffic outside the team waits in one of a robot's priority
    queues (the queues its LS messages and TCP acks pass before the NIC ring): any
    packet there that is neither an LS message nor one of the team's acks (an ack flow
    whose acks the hooks may hold, ``FlowState.gate_acks``) is the acks of a transfer
    outside the team, which a held team ack at the head of the queue would hold too."""

    def __init__(self, sim: Simulation, robot: str) -> None:
        self._queues = list(sim.station(robot).ls_queues.values())

    def __call__(self) -> bool:
        for queue in self._queues:
            for p in queue:
                if p.message is None and not p.flow.gate_acks:
                    return True
        return False


def _share_ns(sim: Simulation, code: int, *, backoff: bool) -> int:
    mac = sim.scenario.mac
    be = edca_params(mac)[AccessCategory.BE]
    mpdu = mpdu_bytes(sim.scenario.packet_bytes)
    per_ampdu = 1
    if be.aggregation:
        limit = min(mac.max_ampdu_bytes, sim.timing.max_psdu_bytes(code, MAX_PPDU_NS))
        while per_ampdu < mac.max_ampdu_mpdus and psdu_bytes([mpdu] * (per_ampdu + 1)) <= limit:
            per_ampdu += 1
    data = sim.timing.data_ns(psdu_bytes([mpdu] * per_ampdu), code)
    access = sim.timing.success_ns(data, block_ack=per_ampdu > 1, rts=False)
    access += aifs_ns(be.aifsn) + (be.cw_min * SLOT_NS if backoff else 0)
    return -(-access // per_ampdu)


class GatedHooks:
    """One robot's virtual-preemption layer as seen by the simulated driver.

    * ``client``: bulk packets flow only while the robot holds a permit (global
      preemption); without one the bulk queue waits until the policy resumes it.
    * ``gate``: Algorithm 2 against ``gate.planner``'s windows (local preemption, or
      SchedWiFi's time-aware shaper).
    * ``planner``: learns the robot's own LS send times (COORP's time model).
    * ``drain_recheck``: Algorithm 2 as published pauses the bulk queue until the
      window it denied for has passed. But the answer can change before that: as
      the NIC drains, a packet behind fewer others may still finish before the
      window; once the robot's own LS message went out, its window is consumed;
      an application hint may move the window. With this on, the gate is asked
      again (:meth:`Gate.admits`) at each of those events while the queue is
      paused by a denial, and the queue resumes at once if a packet would now be
      admitted (``early_resumes`` counts it).
    * ``ring_limit``: called before each bulk packet, at most this many packets in
      the ring it would join (a :class:`RingBudget`); a full one resumes at the next
      completion that leaves room. None: the ring's capacity.
    * ``gate_acks``: the gate also holds the TCP acks the robot sends for the team's
      bulk data it receives (``coorp.sim.AckGateHooks``): they skip the kernel queue,
      so a robot downloading the model otherwise finds a ring of its own acks ahead of
      its next LS message. Each ack is admitted as Algorithm 2 alone would admit a
      packet at its depth (:meth:`Gate.admits_run`: no permit, no ring budget, no
      exploration), and held ones are asked again after the window.
    * ``ack_gate``: with ``gate_acks``, a gate of its own for the acks (the same
      planner, its own completion-time table): acks are asked about, recorded and
      completed there, and the bulk gate's table learns from bulk data only. None:
      the bulk gate does all of it (one table for both).
    * ``outside_waiting``: with ``gate_acks``, whether packets outside the team wait
      behind the team's acks in the robot's priority queue (an :class:`OutsideWaiting`):
      then the acks are never held, since a held ack holds everything queued behind it,
      and traffic outside the team is never gated. None: not asked.
    * ``ack_probes``: with ``ack_gate``, the acks' gate decides as the bulk gate does,
      exploration included (:class:`~coorp.control.Gate`: one probe at a gap's start
      into an empty ring): its table learns only from the acks it admits, so without
      probes an estimate larger than every gap between windows holds the acks for
      good. False: Algorithm 2 alone (:meth:`Gate.admits_run`), as before issue 36.
    """

    def __init__(
        self,
        *,
        client: BulkClient | None = None,
        gate: Gate | None = None,
        planner: ProtectionPlanner | None = None,
        ls_flows: frozenset[str] = frozenset(),
        drain_recheck: bool = False,
        ring_limit: Callable[[], int] | None = None,
        gate_acks: bool = False,
        ack_gate: Gate | None = None,
        outside_waiting: Callable[[], bool] | None = None,
        ack_probes: bool = False,
    ) -> None:
        self.client = client
        self.gate = gate
        self.planner = planner
        self.ls_flows = ls_flows
        self.drain_recheck = drain_recheck
        # Paused by a gate denial until this instant (re-checks only then).
        self._paused_until: int | None = None
        #: Times a re-check ended a gate pause before its resume time.
        self.early_resumes = 0
        self.ring_limit = ring_limit
        # Paused because the ring held ring_limit() packets (resumes at a completion).
        self._ring_full = False
        #: Times bulk data waited for room under ring_limit.
        self.ring_full_pauses = 0
        #: Read by the station when the hooks are set (``AckGateHooks``).
        self.gates_acks = gate_acks and gate is not None
        self.ack_gate = ack_gate if self.gates_acks else None
        self.outside_waiting = outside_waiting
        self.ack_probes = ack_probes

    def admit_acks(
        self, station: DriverView, now_ns: int, count: int, depth: int
    ) -> tuple[int, int]:
        ack_gate = self.ack_gate
        if (
            self.ack_probes
            and ack_gate is not None
            and not (self.outside_waiting is not None and self.outside_waiting())
        ):
            # The acks' own gate decides as the bulk gate does, exploration included:
            # its table learns only from acks it admits, so without probes an estimate
            # larger than every gap held them for good (a TCP sender then timed out
            # again and again, its retransmissions' acks held too).
            if ack_gate.decide_run(now_ns, 1, depth) == 0:
                return 0, ack_gate.resume_ns
            if count == 1:
                return 1, 0
            if ack_gate.probe_armed:  # a probe goes alone (on_acks_enqueued marks it)
                return 1, ack_gate.resume_ns
            n = 1 + ack_gate.decide_run(now_ns, count - 1, depth + 1)
            return (count, 0) if n >= count else (n, ack_gate.resume_ns)
        gate = ack_gate if ack_gate is not None else self.gate
        if gate is None or (self.outside_waiting is not None and self.outside_waiting()):
            return count, 0
        n = gate.admits_run(now_ns, count, depth)
        if n >= count:
            return count, 0
        window = gate.window(now_ns)
        # Denied ahead of or inside the window: ask again after it, as Algorithm 2 does
        # (and at every refill before that, as the ring drains).
        return n, (window.end_ns + 1 if window is not None else FOREVER)

    def on_acks_enqueued(
        self, station: DriverView, pid: int, count: int, depth: int, now_ns: int
    ) -> None:
        gate = self.ack_gate if self.ack_gate is not None else self.gate
        if gate is not None:
            gate.on_enqueue_run(pid, count, now_ns, depth)

    def admit_bulk(self, station: DriverView, now_ns: int) -> int | None:
        resume = self._admit(now_ns, station.hw_queue_length())
        return None if resume < 0 else resume

    def _admit(self, now_ns: int, depth: int) -> int:
        """Whether the next bulk packet, behind ``depth`` others, goes to the NIC now:
        -1 if so, else when to ask again (``FOREVER``: when resumed)."""
        self._paused_until = None
        self._ring_full = False
        if self.client is not None and not self.client.may_send(now_ns):
            return FOREVER
        if self.ring_limit is not None and depth >= self.ring_limit():
            self._ring_full = True
            self.ring_full_pauses += 1
            return FOREVER
        if self.gate is not None:
            decision = self.gate.decide(now_ns, depth)
            if not decision.allow:
                assert decision.resume_ns is not None
                resume = max(decision.resume_ns, now_ns + 1)
                if self.drain_recheck:
                    self._paused_until = resume
                return resume
        return -1

    def _recheck(self, station: DriverView, now_ns: int, depth: int = -1) -> None:
        """``depth``: the station's ``hw_queue_length()`` if the caller knows it."""
        until = self._paused_until
        if until is None or now_ns >= until or self.gate is None:
            return
        if depth < 0:
            depth = station.hw_queue_length()
        if self.gate.admits(now_ns, depth):
            # Resume through the driver's timer (an event at now), not from inside
            # the caller's processing (a MAC completion, a send).
            self._paused_until = None
            self.early_resumes += 1
            station.pause_bulk(now_ns)

    def reconsider(self, station: DriverView, now_ns: int) -> None:
        """The windows changed (an application hint): a paused queue asks again."""
        self._recheck(station, now_ns)

    def on_ls_send(self, station: DriverView, flow: str, now_ns: int) -> None:
        if self.planner is not None and flow in self.ls_flows:
            self.planner.observe(flow, now_ns)
            if self.gate is not None:
                self.gate.on_ls_send(now_ns)
            if self.ack_gate is not None:
                self.ack_gate.on_ls_send(now_ns)
            self._recheck(station, now_ns)

    def on_hw_enqueue(
        self, station: DriverView, pid: int, ac: AccessCategory, depth: int, now_ns: int
    ) -> None:
        if self.gate is not None and ac is _BE:
            self.gate.on_enqueue(pid, now_ns, depth)

    def on_hw_complete(
        self, station: DriverView, pid: int, ac: AccessCategory, now_ns: int, delivered: bool
    ) -> None:
        acks = self.ack_gate
        # The acks' own pids, in whatever category they were sent (CoorpPolicy.ack_ac).
        if acks is not None and acks.holds(pid):
            if delivered:
                acks.on_complete(pid, now_ns)
            else:
                acks.on_discard(pid)
            self._drained(station, now_ns, station.hw_queue_length())
            return
        self._completed(station, pid, ac, now_ns, delivered, station.hw_queue_length())

    def _drained(self, station: DriverView, now_ns: int, depth: int) -> None:
        """Packets that were not bulk data left the ring: a paused queue asks again."""
        if self.gate is not None:
            self._recheck(station, now_ns, depth)
        if self._ring_full:
            self._room(station, now_ns, depth)

    def _room(self, station: DriverView, now_ns: int, depth: int) -> None:
        """The ring was full under ``ring_limit``: resume if it has room now."""
        assert self.ring_limit is not None
        if depth < self.ring_limit():
            self._ring_full = False
            station.pause_bulk(now_ns)  # resume through the driver's timer

    def _completed(
        self, station: DriverView, pid: int, ac: AccessCategory, now_ns: int, delivered: bool,
        depth: int,
    ) -> None:  # fmt: skip
        """``on_hw_complete`` with the station's ``hw_queue_length()`` given."""
        if self.gate is not None and ac is _BE:
            if delivered:
                self.gate.on_complete(pid, now_ns)
            else:
                self.gate.on_discard(pid)
            self._recheck(station, now_ns, depth)
        if self._ring_full:
            self._room(station, now_ns, depth)

    # -- RunHooks: the same calls, a run of packets at a time ------------------------------
    #: The driver may call the ``*_run`` methods (see ``coorp.sim.RunHooks``).
    per_run: ClassVar[bool] = True

    def admit_bulk_run(
        self, station: DriverView, now_ns: int, pid: int, count: int, ac: AccessCategory,
        depth: int,
    ) -> tuple[int, int]:  # fmt: skip
        # _admit for depth, depth + 1, … in turn, with what cannot change within one run
        # (the same instant, the same transfer) asked once: the permit, the ring limit.
        self._paused_until = None
        self._ring_full = False
        if count <= 0:
            return 0, 0
        if self.client is not None and not self.client.may_send(now_ns):
            return 0, FOREVER
        room = count
        if self.ring_limit is not None:
            room = min(count, self.ring_limit() - depth)  # packets below the limit
        admitted = max(room, 0)
        gate = self.gate
        if gate is not None and admitted:
            if ac is _BE:
                admitted = gate.admit_run(now_ns, pid, admitted, depth)
            else:
                admitted = gate.decide_run(now_ns, admitted, depth)
            if admitted < room:  # the gate denied packet ``admitted``
                resume = max(gate.resume_ns, now_ns + 1)
                if self.drain_recheck:
                    self._paused_until = resume
                return admitted, resume
        if admitted < count:  # packet ``admitted`` would find the ring at its limit
            self._ring_full = True
            self.ring_full_pauses += 1
            return admitted, FOREVER
        return count, 0

    def on_hw_enqueue_run(
        self, station: DriverView, pid: int, count: int, ac: AccessCategory, depth: int,
        now_ns: int,
    ) -> None:  # fmt: skip
        if self.gate is not None and ac is _BE:
            self.gate.on_enqueue_run(pid, count, now_ns, depth)

    def on_hw_complete_run(
        self, station: DriverView, pid: int, count: int, ac: AccessCategory, now_ns: int,
        delivered: bool,
    ) -> None:  # fmt: skip
        acks = self.ack_gate
        if acks is not None and acks.holds(pid):
            # One ring run, so all of them acks (a run is never part acks, part data), in
            # whatever category they were sent (CoorpPolicy.ack_ac).
            if delivered:
                acks.on_complete_run(pid, count, now_ns)
            else:
                for q in range(pid, pid + count):
                    acks.on_discard(q)
            self._drained(station, now_ns, station.hw_queue_length())
            return
        gate = self.gate
        if (gate is None or ac is not _BE) and not self._ring_full:
            return  # nothing to do for any of them
        # The ring does not change while the driver reports one run's completions.
        depth = station.hw_queue_length()
        end = pid + count
        q = pid
        # While a gate pause may end early, each completion may end it (its sample can
        # change the answer): one by one until it did.
        while q < end and self._paused_until is not None and now_ns < self._paused_until:
            self._completed(station, q, ac, now_ns, delivered, depth)
            q += 1
        if q == end:
            return
        if gate is not None and ac is _BE:
            if delivered:
                gate.on_complete_run(q, end - q, now_ns)
            else:
                for r in range(q, end):
                    gate.on_discard(r)
        if self._ring_full:
            self._room(station, now_ns, depth)


class CappedGatedHooks(GatedHooks):
    """:class:`GatedHooks` whose every bulk exchange (data or TCP acks) fits in
    ``cap_ns`` of airtime (the simulator's ``AirtimeBudgetHooks``): a slow link's
    5.5 ms aggregates become several short ones that other robots' LS messages can
    get between. Costs each exchange's overhead more often."""

    def __init__(
        self,
        *,
        cap_ns: int,
        client: BulkClient | None = None,
        gate: Gate | None = None,
        planner: ProtectionPlanner | None = None,
        ls_flows: frozenset[str] = frozenset(),
        drain_recheck: bool = False,
        ring_limit: Callable[[], int] | None = None,
        gate_acks: bool = False,
        ack_gate: Gate | None = None,
        outside_waiting: Callable[[], bool] | None = None,
        ack_probes: bool = False,
    ) -> None:
        # Spelled out, not **kwargs: mypyc mis-forwards **kwargs to a compiled base.
        super().__init__(
            client=client, gate=gate, planner=planner, ls_flows=ls_flows,
            drain_recheck=drain_recheck, ring_limit=ring_limit, gate_acks=gate_acks,
            ack_gate=ack_gate, outside_waiting=outside_waiting, ack_probes=ack_probes,
        )  # fmt: skip
        if cap_ns < 1:
            raise UsageError(f"cap_ns={cap_ns}: must be >= 1 nanosecond")
        self.cap_ns = cap_ns

    def max_bulk_airtime_ns(self, station: DriverView, now_ns: int) -> int | None:
        return self.cap_ns
