"""The emulated channel: real IP packets in, each delivered at its simulated time out.

:class:`Air` wraps one :class:`coorp.sim.Simulation` of a scenario (its stations, PHY,
MAC, links and NIC rings; by default none of its modelled traffic) and is driven from
outside with two calls, both at an instant ``now`` in integer nanoseconds:

* :meth:`Air.send` hands it a packet a station's interface emitted: the access category
  comes from the packet's DSCP (RFC 8325, ``coorp.emulate._dscp``), the MAC destination
  from its IP destination: in an infrastructure BSS every frame goes through the access
  point, so a packet between two robots crosses the air twice (up to the AP, then down
  from its queues), and a group-addressed one goes up to the AP and down once to every
  other station (multicast-to-unicast, as hostapd's ``multicast_to_unicast``);
* :meth:`Air.advance` runs the simulator up to ``now`` and returns what was delivered
  by then: ``(time_ns, station, packet, frame id)``, in the order the receivers' block-ack
  reorder buffers release them (802.11's in-order delivery per sender, receiver and
  access category: a frame retried after later ones of its A-MPDU went through holds
  them back until it is delivered or dropped).

Nothing here reads a clock or touches a device (``coorp.emulate._pump`` does), so the
same packet arrivals at the same instants with the same seed give the same channel
decisions: :func:`replay` runs a recorded arrival log again offline.

Each station's *kernel queue* holds at most ``queue_packets`` packets per access category
(like Linux's ``mq`` qdisc, one queue per hardware queue); one arriving at a full queue
is dropped there (a tail drop), and a full BE queue never drops a VO packet. Inside it, as in
mac80211, every receiver has its own queue per access category, and receivers take
turns handing the driver a burst of up to one A-MPDU each (what the simulator's bulk
transfers do too): :meth:`Air._feed` keeps the simulator's priority queues (one per
category, served VO first) one burst deep, when a packet arrives and whenever one of
the station's frames is settled. Behind them is the scenario's NIC ring model
(``shared`` or ``per_ac``), then EDCA, A-MPDU aggregation with block ack, retries and
losses as the simulator has them. (A shared ring filled while packets for several
receivers trickle in holds them interleaved, and each A-MPDU then carries the few
consecutive ones of one receiver: the model's commodity NIC, which an AP's saturated
downlink to several robots shows at its start.)
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Final

from coorp._accel import mypyc_attr
from coorp._errors import UsageError
from coorp.emulate._dscp import AC_OF_DSCP
from coorp.emulate._ip import address_key, parse_header
from coorp.scenario import AccessCategory, Scenario
from coorp.sim import Simulation
from coorp.sim.packets import FlowState, Message

__all__ = [
    "GROUP",
    "Air",
    "AirCounters",
    "Arrival",
    "Delivery",
    "Outcome",
    "choose_ap",
    "replay",
    "station_addresses",
]

#: The final destination of a group-addressed frame on its way up to the AP.
GROUP = -1
#: (time_ns, station index, packet, frame id).
Delivery = tuple[int, int, bytes, int]
#: (time_ns, station index, packet): one packet a station's interface emitted.
Arrival = tuple[int, int, bytes]

_MISSING = object()
#: A packet waiting in a station's queue: packet, final destination, arrival instant.
_Queued = tuple[bytes, int, int]
#: A frame in flight: packet, src, hop receiver, final destination, category, link,
#: sequence number on the link, enqueue time, frame id.
_Rec = tuple[bytes, int, int, int, AccessCategory, int, int, int, int]


class Outcome:
    """What became of a frame (the ``outcome`` column of the frame trace)."""

    DELIVERED: Final = 0  # acknowledged by its receiver on this hop
    LOST: Final = 1  # dropped by the MAC after its last retry
    QUEUE_DROP: Final = 2  # its station's kernel queue was full
    NO_ROUTE: Final = 3  # no station has its destination address
    MALFORMED: Final = 4  # not an IPv4/IPv6 packet, or larger than the scenario's MTU


@dataclass(slots=True)
class AirCounters:
    """Per-station counters (lists indexed like ``Air.names``)."""

    sent_packets: list[int]
    sent_bytes: list[int]
    queue_drops: list[int]
    mac_lost: list[int]
    #: Frames and IP bytes acknowledged by each station as the receiver of a hop.
    rx_frames: list[int]
    rx_bytes: list[int]
    no_route: int = 0
    malformed: int = 0
    relayed: int = 0
    by_ac: dict[str, int] = field(default_factory=dict)


def choose_ap(scenario: Scenario, ap: str | None = None) -> str:
    """The station that is the access point: ``ap`` if given, else the workload's leader,
    else a station named ``ap`` or ``leader``, else the first station."""
    names = [s.name for s in scenario.stations]
    if ap is not None:
        if ap not in names:
            raise UsageError(
                f"--ap {ap!r} is not a station of {scenario.name!r}; stations: {names}"
            )
        return ap
    if scenario.workload is not None and scenario.workload.leader in names:
        return scenario.workload.leader
    for name in ("ap", "leader"):
        if name in names:
            return name
    return names[0]


def station_addresses(names: Sequence[str], ap: str, subnet: str) -> dict[str, str]:
    """IPv4 addresses in ``subnet`` (three octets, ``10.77.0``): the AP gets ``.1``, the
    k-th other station (scenario order, from 1) ``.(10 + k)``."""
    parts = subnet.split(".")
    if len(parts) != 3 or not all(p.isdigit() and int(p) < 256 for p in parts):
        raise UsageError(f"subnet {subnet!r}: give three octets of an IPv4 /24, like 10.77.0")
    if len(names) > 245:
        raise UsageError(f"{len(names)} stations: one /24 holds at most 245 (AP + 244)")
    out = {ap: f"{subnet}.1"}
    k = 0
    for name in names:
        if name != ap:
            k += 1
            out[name] = f"{subnet}.{10 + k}"
    return out


class Air:
    """One simulated channel driven by real packets (see the module docstring)."""

    def __init__(
        self,
        scenario: Scenario,
        *,
        seed: int | None = None,
        ap: str | None = None,
        subnet: str = "10.77.0",
        queue_packets: int = 1000,
        background: bool = False,
        record_arrivals: bool = False,
        trace: bool = False,
    ) -> None:
        if queue_packets < 1:
            raise UsageError(f"queue_packets = {queue_packets}; allowed: >= 1")
        if not background:
            scenario = scenario.model_copy(update={"flows": []})
        self.scenario = scenario
        self.sim = Simulation(scenario, seed=seed, trace=trace)
        self.names = [s.name for s in scenario.stations]
        self.ap_name = choose_ap(scenario, ap)
        self.ap = self.names.index(self.ap_name)
        self.addresses = station_addresses(self.names, self.ap_name, subnet)
        self._to_idx: dict[bytes, int] = {
            address_key(a): self.names.index(n) for n, a in self.addresses.items()
        }
        self._broadcast = address_key(f"{subnet}.255")
        self.mtu = scenario.packet_bytes
        self.queue_packets = queue_packets
        stations = [self.sim.station(n) for n in self.names]
        self._queues = [list(st.ls_queues.values()) for st in stations]
        self._sim_queue = [dict(st.ls_queues) for st in stations]
        #: Per station and category: the queue of each receiver, and the receivers with
        #: packets waiting in the order they take turns.
        self._txq: list[dict[AccessCategory, tuple[dict[int, deque[_Queued]], deque[int]]]] = [
            {ac: ({}, deque()) for ac in AccessCategory} for _ in stations
        ]
        self._pending = [dict.fromkeys(AccessCategory, 0) for _ in stations]
        self._burst = scenario.mac.max_ampdu_mpdus
        self._stations = stations
        n = len(self.names)
        self._links: dict[tuple[int, int, AccessCategory], int] = {}
        self._flows: list[FlowState] = []
        self._next_seq: list[int] = []
        self._expect: list[int] = []
        self._held: list[dict[int, _Rec | None]] = []
        #: Frames on the air or in a queue: frame id -> (packet, src, hop, final, ac,
        #: link, seq, enqueue time, frame id).
        self._inflight: dict[int, _Rec] = {}
        self._fid = 0
        self._out: list[Delivery] = []
        self.counters = AirCounters(
            [0] * n, [0] * n, [0] * n, [0] * n, [0] * n, [0] * n,
            by_ac={ac.value: 0 for ac in AccessCategory},
        )  # fmt: skip
        #: Every arrival, when ``record_arrivals`` (for :func:`replay`).
        self.arrivals: list[Arrival] | None = [] if record_arrivals else None
        #: Every frame's fate, when a log is attached (``coorp.emulate._trace.FrameLog``).
        self.log: FrameSink | None = None
        self._ok = self._delivered
        self._lost = self._dropped

    # -- driving ---------------------------------------------------------------------------
    @property
    def now_ns(self) -> int:
        return self.sim.loop.now_ns

    def next_event_ns(self) -> int:
        """When the simulator has something to do next (-1: nothing pending)."""
        return self.sim.loop.next_time()

    def advance(self, now_ns: int) -> list[Delivery]:
        """Run the channel up to ``now_ns``; the deliveries since the last call."""
        loop = self.sim.loop
        if now_ns > loop.now_ns:
            loop.run(now_ns)
        out = self._out
        if out:
            self._out = []
        return out

    def send(self, src: int, packet: bytes, now_ns: int) -> None:
        """Station ``src``'s interface emitted ``packet`` at ``now_ns`` (not before the
        last :meth:`advance`; the channel is advanced to it first if needed)."""
        if now_ns > self.sim.loop.now_ns:
            self.sim.loop.run(now_ns)
        if self.arrivals is not None:
            self.arrivals.append((now_ns, src, packet))
        c = self.counters
        hdr = parse_header(packet)
        if hdr is None or len(packet) > self.mtu:
            c.malformed += 1
            if self.log is not None:
                self.log.frame(-1, src, -1, -1, "", len(packet), now_ns, Outcome.MALFORMED, now_ns)
            return
        dscp, key, group = hdr
        ac = AC_OF_DSCP[dscp]
        ap = self.ap
        if group or key == self._broadcast:
            if src != ap:
                self._enqueue(src, ap, ac, packet, GROUP, now_ns)
            else:
                for j in range(len(self.names)):
                    if j != ap:
                        self._enqueue(ap, j, ac, packet, j, now_ns)
            return
        dst = self._to_idx.get(key, -1)
        if dst < 0 or dst == src:
            c.no_route += 1
            if self.log is not None:
                self.log.frame(-1, src, -1, -1, ac.value, len(packet), now_ns, Outcome.NO_ROUTE,
                               now_ns)  # fmt: skip
            return
        hop = dst if src == ap or dst == ap else ap
        self._enqueue(src, hop, ac, packet, dst, now_ns)

    # -- inside ----------------------------------------------------------------------------
    def _link(self, src: int, hop: int, ac: AccessCategory) -> int:
        key = (src, hop, ac)
        link = self._links.get(key)
        if link is None:
            link = len(self._flows)
            name = f"emu:{self.names[src]}>{self.names[hop]}:{ac.value}"
            self._flows.append(
                self.sim.flow(name, self.names[src], self.names[hop], ac, bulk=False)
            )
            self._next_seq.append(0)
            self._expect.append(0)
            self._held.append({})
            self._links[key] = link
        return link

    def _enqueue(
        self, src: int, hop: int, ac: AccessCategory, packet: bytes, final: int, now: int
    ) -> None:
        """Into ``src``'s queue for receiver ``hop`` and category ``ac`` (tail drop when
        the station's kernel queue is full), then on to the simulator if it wants more."""
        pending = self._pending[src]
        if pending[ac] + len(self._sim_queue[src][ac]) >= self.queue_packets:
            self.counters.queue_drops[src] += 1
            if self.log is not None:
                self.log.frame(-1, src, hop, final, ac.value, len(packet), now,
                               Outcome.QUEUE_DROP, now)  # fmt: skip
            return
        by_hop, turns = self._txq[src][ac]
        q = by_hop.get(hop)
        if q is None:
            q = by_hop[hop] = deque()
        if not q:
            turns.append(hop)
        q.append((packet, final, now))
        pending[ac] += 1
        self._feed(src, ac)

    def _feed(self, src: int, ac: AccessCategory) -> None:
        """Hand ``src``'s queued packets of category ``ac`` to the simulator's priority
        queue while it holds fewer than one A-MPDU's worth: receivers take turns, a burst
        of up to one A-MPDU each, as mac80211's per-station queues feed the driver (and as
        the simulator's own bulk transfers take turns). Runs when a packet arrives and
        when one of the station's frames is settled, so the NIC ring refills as the
        simulator's does, and only at the simulator's own instants."""
        by_hop, turns = self._txq[src][ac]
        if not turns:
            return
        lsq = self._sim_queue[src][ac]
        pending = self._pending[src]
        burst = self._burst
        c = self.counters
        while turns and len(lsq) < burst:
            hop = turns[0]
            q = by_hop[hop]
            link = self._links.get((src, hop, ac))
            if link is None:
                link = self._link(src, hop, ac)
            flow = self._flows[link]
            for _ in range(min(burst, len(q))):
                packet, final, enq = q.popleft()
                size = len(packet)
                fid = self._fid
                self._fid = fid + 1
                seq = self._next_seq[link]
                self._next_seq[link] = seq + 1
                self._inflight[fid] = (packet, src, hop, final, ac, link, seq, enq, fid)
                pending[ac] -= 1
                c.sent_packets[src] += 1
                c.sent_bytes[src] += size
                c.by_ac[ac.value] += 1
                self.sim.send_packet(flow, size, self._ok, self._lost, fid)
            if q:
                turns.rotate(-1)
            else:
                turns.popleft()

    def _delivered(self, msg: Message) -> None:
        self._settle(msg.msg_id, True)

    def _dropped(self, msg: Message) -> None:
        self._settle(msg.msg_id, False)

    def _settle(self, fid: int, ok: bool) -> None:
        """Frame ``fid`` was acknowledged (``ok``) or dropped: through the receiver's
        reorder buffer of its link."""
        rec = self._inflight.pop(fid)
        now = self.sim.loop.now_ns
        packet, src, hop, final, ac, link, seq, enq, _ = rec
        c = self.counters
        if ok:
            c.rx_frames[hop] += 1
            c.rx_bytes[hop] += len(packet)
        else:
            c.mac_lost[src] += 1
        if self.log is not None:
            self.log.frame(fid, src, hop, final, ac.value, len(packet), enq,
                           Outcome.DELIVERED if ok else Outcome.LOST, now)  # fmt: skip
        expect = self._expect[link]
        if seq != expect:
            self._held[link][seq] = rec if ok else None
            self._feed(src, ac)
            return
        ready: list[_Rec] = []
        if ok:
            ready.append(rec)
        expect += 1
        held = self._held[link]
        while held:
            r = held.pop(expect, _MISSING)
            if r is _MISSING:
                break
            if r is not None:
                ready.append(r)  # type: ignore[arg-type]
            expect += 1
        self._expect[link] = expect
        for r in ready:
            self._release(r, now)
        self._feed(src, ac)

    def _release(self, rec: _Rec, now: int) -> None:
        packet, src, hop, final, ac = rec[0], rec[1], rec[2], rec[3], rec[4]
        if final == hop:
            self._out.append((now, hop, packet, rec[8]))
            return
        ap = self.ap
        self.counters.relayed += 1
        if final == GROUP:  # up at the AP: to its own host, and down to every other
            self._out.append((now, ap, packet, rec[8]))
            for j in range(len(self.names)):
                if j != ap and j != src:
                    self._enqueue(ap, j, ac, packet, j, now)
            return
        self._enqueue(ap, final, ac, packet, final, now)

    # -- reading -------------------------------------------------------------------------
    def queued(self, station: int) -> int:
        """Packets in the station's kernel queue (not yet in its NIC ring)."""
        return sum(self._pending[station].values()) + sum(map(len, self._queues[station]))

    def drain_ls_depths(self) -> None:
        """Forget the NIC depths the simulator records for every LS packet (an emulator
        sends millions: the list would only grow)."""
        for st in self._stations:
            st.ls_depths.clear()

    def exchanges(self) -> list[tuple[object, ...]]:
        """The channel's exchange trace (``trace=True``): start, end, collided,
        stations, categories, MPDUs, PSDU bytes and TXOP start of every exchange."""
        trace = self.sim.channel.stats.trace
        return [] if trace is None else trace


@mypyc_attr(allow_interpreted_subclasses=True)
class FrameSink:
    """Where :class:`Air` reports each frame's fate (``coorp.emulate._trace.FrameLog``)."""

    def frame(
        self, fid: int, src: int, hop: int, final: int, ac: str, size: int, enq_ns: int,
        outcome: int, done_ns: int,
    ) -> None:  # fmt: skip
        raise NotImplementedError


def replay(air: Air, arrivals: Iterable[Arrival], until_ns: int | None = None) -> list[Delivery]:
    """Feed ``arrivals`` (time order) to ``air`` as a live run would: at each distinct
    instant, advance to it, then send every packet that arrived then. Every delivery,
    up to ``until_ns`` (default: the last arrival)."""
    out: list[Delivery] = []
    last = -1
    pending: deque[Arrival] = deque(arrivals)
    while pending:
        t = pending[0][0]
        if t < last:
            raise UsageError(f"arrivals out of time order: {t} ns after {last} ns")
        out += air.advance(t)
        while pending and pending[0][0] == t:
            _, src, packet = pending.popleft()
            air.send(src, packet, t)
        last = t
    out += air.advance(max(last, 0) if until_ns is None else until_ns)
    return out
