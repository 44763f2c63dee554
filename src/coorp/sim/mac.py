"""The shared medium and EDCA contention (802.11-2016 10.22.2), without per-slot events.

When the medium goes idle at time ``I``, the EDCAF of category ``ac`` with counter ``b``
may transmit at ``I + AIFS[ac] + b·slot``; the channel schedules one access event at the
earliest such time over all EDCAFs with a frame. When a transmission starts at time
``t``, every other EDCAF's counter drops by the number of slot boundaries at or before
``t`` (Bianchi's virtual-slot rule: a counter also decrements at the boundary where
another station starts), then freezes until the medium is idle again.

EDCAFs of different stations whose access times coincide collide; EDCAFs of the same
station resolve the internal collision in favour of the higher category, and the loser
behaves as after a failed attempt. The exchange airtimes come from
:mod:`coorp.sim.timing`.

An access function with ``Edcaf.mu`` set (an AP's trigger-based UL OFDMA scheduler,
:mod:`coorp.sim.ofdma`) contends like any EDCAF; when it wins, it builds the exchange
(trigger frame, the stations' TB PPDUs, the multi-STA BlockAck) and ends it itself.

A station whose hooks give an airtime budget (``AirtimeBudgetHooks``) has each bulk
A-MPDU trimmed to it when its EDCAF wins the medium, or its frame held until the budget
has passed if not even one MPDU fits. :meth:`Channel.ring_drain` is the matching
read-only model: when a station's rings would be empty at best.

Why one module above the project's 600-line guide: speed. :class:`Channel` is the
simulator's hottest state machine: every access, exchange, success, failure and retry
runs through its methods, several calls per frame, and mypyc compiles it as one native
class whose fields are C struct slots and whose method calls are direct vtable calls.
Splitting it by concern would mean either trait mixins (mypyc's only multiple
inheritance, with indirect attribute access and method dispatch) or helper objects that
hand the channel's state to each other on every event: extra work on the hottest path
for no change in behaviour (the golden digests pin this code). What is not per-event
channel state already lives in its own module: exchange timing (``timing``), rings and
EDCAFs (``station``), links (``links``), the event loop (``events``).

The one import circle kept on purpose (speed): ``packets``, ``station``, ``mac``,
``_ungated``, ``_txq``, ``tcp``, ``congestion`` and ``sack`` name each other's classes
(mostly for typing only) so that mypyc compiles every access between packets, stations,
TCP connections and the channel to a native field access.
"""

from __future__ import annotations

import os
import random
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Final, cast

from coorp._accel import mypyc_attr
from coorp._errors import InvariantError
from coorp.phy import MAX_PPDU_NS, SIFS_NS, SLOT_NS
from coorp.scenario import AccessCategory, AmpduGrouping, MacConfig, RetryPolicy
from coorp.sim.driver import RunHooks
from coorp.sim.events import PRIO_ACCESS, PRIO_CONTROL, PRIO_MEDIUM, EventLoop, SlotOwner
from coorp.sim.links import LinkTable
from coorp.sim.packets import Packet, Ring
from coorp.sim.station import BulkTransfer, Edcaf, Station
from coorp.sim.timing import ExchangeTiming, aifs_ns

if TYPE_CHECKING:
    from mypy_extensions import i64

__all__ = ["Channel", "ChannelStats", "Receiver", "RingDrain", "Transmission"]

#: Self-checks of the fast paths (set COORP_SIM_CHECK=1; for tests and fuzzing).
_CHECK: Final = os.environ.get("COORP_SIM_CHECK") == "1"


def _min3(a: int, b: int, c: int) -> int:
    """``min(a, b, c)`` of ints: compiled, a native call where the builtin with three
    arguments is a generic call with every argument boxed (2-3 % of a fleet's time)."""
    m = a if a <= b else b
    return m if m <= c else c


@dataclass(slots=True)
class ChannelStats:
    """Counters of the medium.

    The live counters (``Channel.stats``) count an exchange's airtime in full when it
    starts (the SIFS gap before a TXOP continuation when the gap starts) and a busy
    period when it ends. ``Channel.stats_at(horizon)``, what results report, clips every
    time counter at the horizon, so that ``busy_ns == success_ns + failure_ns`` holds
    at any horizon; ``exchanges`` and ``collisions`` count the exchanges started by then.
    """

    busy_ns: int = 0
    success_ns: int = 0
    failure_ns: int = 0
    exchanges: int = 0
    collisions: int = 0
    internal_collisions: int = 0
    bar_exchanges: int = 0
    per_failures: int = 0
    trace: list[tuple[object, ...]] | None = field(default=None)


class Transmission:
    """One station's PPDU in one exchange: an A-MPDU (or single MPDU), or a BlockAckReq."""

    __slots__ = (
        "block_ack", "data_ns", "edcaf", "failure_ns", "mpdus", "packets", "psdu", "rts",
        "scattered", "success_ns", "txop_start",
    )  # fmt: skip

    def __init__(
        self,
        edcaf: Edcaf,
        packets: list[Packet],
        txop_start: int,
        mpdus: int,
        psdu: int = 0,
        timing: tuple[int, int, int, bool, bool] = (0, 0, 0, False, False),
    ) -> None:
        self.edcaf = edcaf
        #: Whole runs of the ring in ring order, the first at its head, sealed; empty for
        #: a BlockAckReq.
        self.packets = packets
        #: Whether runs of other receivers lie between them (an A-MPDU per receiver and
        #: TID from a per-AC ring); False: they are the ring's first runs.
        self.scattered = False
        self.mpdus = mpdus
        self.txop_start = txop_start
        self.psdu = psdu
        self.data_ns, self.success_ns, self.failure_ns, self.block_ack, self.rts = timing


#: What a channel's slot event is (``Channel.on_slot``).
_ACCESS: Final = 0
_END: Final = 1
_END_COLLIDED: Final = 2
_CONTINUE: Final = 3


@mypyc_attr(allow_interpreted_subclasses=True)  # (Simulation allows them)
class Receiver:
    """What a channel hands its outcomes to (the simulation): a native base class, so
    that a delivery is a direct method call when compiled, where a stored bound method
    was a generic call with its arguments boxed."""

    def delivered(self, p: Packet, pid: int, k: int, now: int) -> None:
        """Packets ``pid .. pid + k - 1`` of run ``p`` arrived at ``now``."""
        raise NotImplementedError

    def dropped(self, p: Packet, now: int) -> None:
        """Run ``p`` was dropped at ``now`` (its retries used up)."""
        raise NotImplementedError


class Channel(SlotOwner):
    """One collision domain: every station hears every other (no hidden nodes).

    Its one pending event (the next access, or the end of the exchange on the air) lives
    in a slot of the event loop (``EventLoop.new_slot``); several channels may share one
    loop (a fleet's contention domains, ``coorp.sim.cells``), each with its slot.
    """

    def __init__(
        self,
        loop: EventLoop,
        timing: ExchangeTiming,
        mac: MacConfig,
        links: LinkTable,
        *,
        rng: random.Random,
        receiver: Receiver,
        trace: bool = False,
    ) -> None:
        self.loop = loop
        self.timing = timing
        self.links = links
        self.retry_limit = mac.retry_limit
        self.ns3_retry = mac.retry_policy is RetryPolicy.NS3
        self.rts_threshold = mac.rts_threshold_bytes
        self.max_mpdus = mac.max_ampdu_mpdus
        self.max_ampdu_bytes = mac.max_ampdu_bytes
        #: A-MPDUs per receiver and TID (``AmpduGrouping``): the MAC takes the head
        #: receiver's packets from anywhere in a per-AC ring. (A shared ring is a FIFO:
        #: there the driver groups, ``Station.group_ls``.)
        self.per_receiver = mac.ampdu_grouping is AmpduGrouping.PER_RECEIVER_TID
        self.rng = rng
        self.receiver = receiver
        self.edcafs: list[Edcaf] = []
        self.busy = False
        self.idle_since: i64 = 0
        self.stats = ChannelStats(trace=[] if trace else None)
        #: Whether the loop's slot holds our next access (else it is empty or holds the
        #: end of the exchange on the air): see ``EventLoop.set_slot``.
        self._access_pending = False
        self._winners: list[Edcaf] = []
        #: The current busy period (or the last one): its number, idle and busy start.
        self._epoch: i64 = 0
        self._dec_idle: i64 = 0
        self._dec_now: i64 = 0
        self._busy_start = 0
        #: The exchange on the air (empty in the SIFS gap before a TXOP continuation),
        #: when it started, whether it is a collision, and the end of the time counted
        #: for it in ``stats`` (see ``stats_at``).
        self._on_air: list[Transmission] = []
        self._on_air_start = 0
        self._on_air_collided = False
        self._counted_until = 0
        #: Exchange durations by ``_exchange_key(psdu, mcs, block_ack)`` (an int: no tuple
        #: to build and hash per lookup), and the largest PSDU by ``_psdu_key``.
        self._durations: dict[int, tuple[int, int, int, bool, bool]] = {}
        self._mcs = links.mcs_table
        self._max_psdu: dict[int, int] = {}
        #: What an A-MPDU's exchange adds to its PPDU: SIFS + BlockAck, and RTS/CTS with
        #: their SIFS when an A-MPDU may be long enough to use RTS.
        self._ampdu_overhead = SIFS_NS + timing.block_ack_ns
        #: Every data PPDU lasts a whole number of this (4 µs VHT: preamble and data
        #: field, either guard interval; 0.4 µs HE), so the largest PSDU for a duration
        #: only depends on it in these steps.
        self._quantum = timing.ppdu_quantum_ns
        if self.rts_threshold < self.max_ampdu_bytes:
            self._ampdu_overhead += timing.rts_ns + timing.cts_ns + 2 * SIFS_NS
        #: The pending event (next access, end of the exchange): this channel's slot.
        self._slot = loop.new_slot(self)

    # -- the pending event: this channel's slot of the loop ---------------------------------
    def on_slot(self, kind: int, arg: object) -> None:
        """The slot's event is due (``EventLoop.run``)."""
        if kind == _ACCESS:
            self._on_access()
        elif kind == _END:
            self._end(cast(list[Transmission], arg), False)
        elif kind == _END_COLLIDED:
            self._end(cast(list[Transmission], arg), True)
        else:
            self._continue_txop(cast(Transmission, arg))

    # -- stations joining and leaving this medium (coorp.sim.cells) -------------------------
    def detach(self, st: Station) -> None:
        """Take ``st``'s access functions off this medium (it left its BSS here). Only on
        an idle medium, so that no exchange of it is on the air."""
        if self.busy:
            raise InvariantError(f"{st.name!r} leaves a medium that is busy")
        self.edcafs = [e for e in self.edcafs if e.station is not st]
        self._schedule_access()

    def attach(self, st: Station, now: int) -> None:
        """Put ``st``'s access functions on this medium (it associated here), with fresh
        EDCA state, and contend for what its rings hold."""
        st.channel = self
        for e in st.edcafs.values():
            e.backoff = 0
            e.cw = e.cw_min
            e.not_before = 0
            e.bar_pending = None
            e.bar_retries = 0
            e.held = False
            e.deadline = -1
            self.add_edcaf(e)
        for e in st.edcafs.values():
            if st.head_ac(e.ac):
                self.frame_arrived(e, now)

    def queues_changed(self, st: Station, now: int) -> None:
        """``st``'s rings changed outside an exchange (packets purged on an idle medium):
        the new head's category gets its frame now, and the next access is recomputed."""
        if self.busy:
            raise InvariantError(f"{st.name!r}'s queues changed while the medium is busy")
        for e in st.edcafs.values():
            if st.head_ac(e.ac):
                self.frame_arrived(e, now)
        self._schedule_access()

    def add_edcaf(self, e: Edcaf) -> None:
        e.epoch = self._epoch
        self.edcafs.append(e)

    # -- contention ----------------------------------------------------------------------
    def frame_arrived(self, e: Edcaf, now: int) -> None:
        """``e`` had no frame and now has one."""
        if e.epoch != self._epoch:
            self._catch_up(e)
        if self.busy:
            if e.backoff == 0:
                # 10.22.2.2: a frame arriving while the medium is busy invokes a backoff.
                e.backoff = e.station.draw(e.cw + 1)
            return
        e.not_before = now
        self._schedule_access()

    # Counting down at the start of a busy period is lazy: ``_begin_busy`` only records
    # the busy period (epoch, idle start, busy start); each EDCAF catches up once, in the
    # next ``_schedule_access`` loop (which visits every EDCAF anyway) or when a frame
    # arrives first. Winners of the access are exempt, as the standard has it.
    def _catch_up(self, e: Edcaf) -> None:
        """Apply the start of the current busy period to ``e``'s counter, if not yet done."""
        e.epoch = self._epoch
        e.not_before = 0
        b = e.backoff
        if b:
            b0 = self._dec_idle + e.aifs
            now = self._dec_now
            if now >= b0:
                k = (now - b0) // SLOT_NS + 1
                # (Statements, not ``b - k if b > k else 0``: compiled, that mixes the
                # native counter with a literal and boxes the result.)
                if b > k:
                    e.backoff = b - k
                else:
                    e.backoff = 0

    def _access_time(self, e: Edcaf) -> int:
        t = self.idle_since + e.aifs + e.backoff * SLOT_NS
        return t if t >= e.not_before else e.not_before

    # The loops below inline ``Station.head_ac`` and ``_access_time``: they run over every
    # EDCAF a few times per exchange and dominate the cost of a busy channel.
    def _schedule_access(self) -> None:
        """Schedule the next access at the earliest access time of an EDCAF with a frame,
        and remember the EDCAFs whose access time it is: nothing changes who they are
        until then without calling this again (frames only arrive through
        ``frame_arrived``, and every exchange ends in ``_go_idle``)."""
        best: i64 = -1
        first: Edcaf | None = None
        ties: list[Edcaf] | None = None
        idle = self.idle_since
        epoch = self._epoch
        for e in self.edcafs:
            if not e.backoff and not e.ring.n and e.mu is None:
                # No frame and nothing to count down (most of a fleet's access functions
                # at any instant): nothing to decide, and its catch-up can wait for its
                # next frame (``frame_arrived``), where it comes to the same state.
                continue
            if e.epoch != epoch:  # inlined _catch_up
                e.epoch = epoch
                e.not_before = 0
                b = e.backoff
                if b:
                    b0 = self._dec_idle + e.aifs
                    if self._dec_now >= b0:
                        k = (self._dec_now - b0) // SLOT_NS + 1
                        if b > k:
                            e.backoff = b - k
                        else:
                            e.backoff = 0
            if e.held:
                continue
            t = idle + e.aifs + e.backoff * SLOT_NS
            if t < e.not_before:
                t = e.not_before
            if best >= 0 and t > best:
                continue  # too late to win, frame or not: its ring need not be read
            h = e.ring.head
            if h is not None and (not e.shared or h.ac is e.ac):
                # (The first winner alone, a list only for a tie: no list per new best.)
                if best < 0 or t < best:
                    best = t
                    first = e
                    ties = None
                elif t == best:
                    if ties is None:
                        assert first is not None
                        ties = [first, e]
                    else:
                        ties.append(e)
        if ties is not None:
            self._winners = ties
        elif first is not None:
            self._winners = [first]
        else:
            self._winners = []
        if self._access_pending:
            if self._slot.time_ns == best:
                return
            self.loop.clear_slot(self._slot)
            self._access_pending = False
        if best >= 0:
            self.loop.set_slot(self._slot, best, PRIO_ACCESS, _ACCESS, None)
            self._access_pending = True

    def _winners_now(self, now: int) -> list[Edcaf]:
        """The EDCAFs with a frame whose access time is ``now`` (recomputed)."""
        idle = self.idle_since
        winners = []
        for e in self.edcafs:
            if e.epoch != self._epoch:
                self._catch_up(e)
            h = e.ring.head
            if h is not None and (not e.shared or h.ac is e.ac) and not e.held:
                t = idle + e.aifs + e.backoff * SLOT_NS
                if t < e.not_before:
                    t = e.not_before
                if t == now:
                    winners.append(e)
        return winners

    def _on_access(self) -> None:
        self._access_pending = False
        now = self.loop.now_ns
        winners = self._winners
        if _CHECK and winners != self._winners_now(now):
            raise InvariantError(f"stale access winners at {now} ns")
        if not winners:
            self._schedule_access()
            return
        for e in winners:
            if e.station.airtime_budget is not None:
                winners = self._within_budget(winners, now)
                if not winners:
                    self._schedule_access()
                    return
                break
        self._begin_busy(now, winners)
        if len(winners) == 1:
            tx = self._build(winners[0], now, now)
            self._transmit(now, [] if tx is None else [tx])
            return
        by_station: dict[Station, Edcaf] = {}
        for e in winners:
            other = by_station.get(e.station)
            if other is None:
                by_station[e.station] = e
                continue
            hi, lo = (e, other) if e.priority > other.priority else (other, e)
            by_station[e.station] = hi
            self.stats.internal_collisions += 1
            self._fail_internal(lo)
        txs = [self._build(e, now, now) for e in by_station.values()]
        self._transmit(now, [tx for tx in txs if tx is not None])

    def _begin_busy(self, now: int, winners: list[Edcaf]) -> None:
        self.busy = True
        self._busy_start = now
        self._epoch += 1
        self._dec_idle = self.idle_since
        self._dec_now = now
        for e in winners:
            e.epoch = self._epoch
            e.not_before = 0

    # -- airtime budgets (AirtimeBudgetHooks) ----------------------------------------------
    def _within_budget(self, winners: list[Edcaf], now: int) -> list[Edcaf]:
        """The winners that transmit: each EDCAF of a station with an airtime budget gets
        its deadline; one whose single head MPDU would not fit holds its frame."""
        kept: list[Edcaf] = []
        for e in winners:
            if e.station.airtime_budget is not None:
                deadline = self._ask_budget(e, now)
                if deadline >= 0 and now + self._single_exchange_ns(e) > deadline:
                    self._hold(e, self._hold_end(e, now, deadline + 1))
                    continue
            kept.append(e)
        return kept

    def _ask_budget(self, e: Edcaf, now: int) -> int:
        """Set (and return) ``e.deadline`` from its station's airtime budget for the frame
        at the head of its ring: -1 (no limit) unless that is bulk data or a TCP ack."""
        st = e.station
        hook = st.airtime_budget
        deadline = -1
        if hook is not None and e.bar_pending is None and e.ring.first().message is None:
            b = hook(st, now)
            if b is not None:
                if isinstance(b, bool) or not isinstance(b, int) or b < 0:
                    raise InvariantError(
                        f"max_bulk_airtime_ns on {st.name!r} returned {b!r} at {now} ns: "
                        "it must return None or an int budget >= 0 ns (AirtimeBudgetHooks)"
                    )
                deadline = now + b
        e.deadline = deadline
        return deadline

    def _single_exchange_ns(self, e: Edcaf) -> int:
        """The exchange of the head MPDU alone (PPDU + SIFS + Ack, RTS/CTS if used)."""
        first = e.ring.first()
        mcs = self._mcs[e.station.idx][first.dst.idx]
        return self._exchange(4 + first.mpdu, mcs, False)[1]

    def _hold_end(self, e: Edcaf, now: int, until: int) -> int:
        """When a hold ends: the first instant after the budget, or later if the hooks'
        ``bulk_hold_until_ns`` says so (a quiet period that outlasts the budget)."""
        st = e.station
        hook = st.hold_until
        if hook is None:
            return until
        later = hook(st, now)
        if later is None:
            return until
        if isinstance(later, bool) or not isinstance(later, int):
            raise InvariantError(
                f"bulk_hold_until_ns on {st.name!r} returned {later!r} at {now} ns: it must "
                "return None or an int time in ns (AirtimeBudgetHooks)"
            )
        return later if later > until else until

    def _hold(self, e: Edcaf, until: int) -> None:
        """``e`` keeps its frame off the medium until ``until``, as if its queue were empty."""
        e.held = True
        e.deadline = -1
        e.station.bulk_holds += 1
        self.loop.call_at(until, PRIO_CONTROL, self._release, e)

    def _release(self, e: Edcaf) -> None:
        if e.station.channel is not self:
            return  # its station moved to another medium since (coorp.sim.cells)
        e.held = False
        if e.station.head_ac(e.ac):
            # The frame arrives again: at once after AIFS on an idle medium, a backoff
            # if the medium is busy (10.22.2.2).
            self.frame_arrived(e, self.loop.now_ns)

    def ring_drain(self, st: Station, now: int, ac: AccessCategory) -> RingDrain:
        """When ``st``'s rings would be empty at best, as a model that packets appended to
        the ring of category ``ac`` can extend (``RingDrain.add``).

        Every frame the MAC would build from the rings as they are (same aggregation
        rules, no TXOP) is sent back to back from ``now``, AIFS before each, with no
        contention, collision or loss; an exchange of ``st`` on the air counts until it
        ends. The rings of other categories count first (one medium serves them all),
        the ring of ``ac`` last, so the model's open frame is that ring's tail."""
        d = RingDrain(self, st, now)
        skip: list[Packet] = []
        if self.busy:
            collided = self._on_air_collided
            for tx in self._on_air:
                if tx.edcaf.station is st:
                    end = self._on_air_start + (tx.failure_ns if collided else tx.success_ns)
                    if end > d.closed_ns:
                        d.closed_ns = end
                    if not collided:
                        skip = tx.packets
        target = st.rings[ac]
        rings: list[Ring] = []
        for r in st.rings.values():
            if r is not target and all(r is not q for q in rings):
                rings.append(r)
        rings.append(target)
        for ring in rings:
            for run in ring:
                if not any(run is q for q in skip):
                    d.add(run)
            if ring is not target:
                d.close()
        return d

    # -- building PPDUs ------------------------------------------------------------------
    def _exchange(self, psdu: int, mcs: int, block_ack: bool) -> tuple[int, int, int, bool, bool]:
        """Durations of the exchange of a PSDU ``(psdu, mcs, block_ack)``: PPDU, success,
        failure, BlockAck, RTS (cached)."""
        key = _exchange_key(psdu, mcs, block_ack)
        cached = self._durations.get(key)
        if cached is not None:
            return cached
        timing = self.timing
        rts = psdu > self.rts_threshold
        data_ns = timing.data_ns(psdu, mcs)
        durations = (
            data_ns,
            timing.success_ns(data_ns, block_ack=block_ack, rts=rts),
            timing.failure_ns(data_ns, block_ack=block_ack, rts=rts),
            block_ack,
            rts,
        )
        self._durations[key] = durations
        return durations

    def _max_psdu_for(self, mcs: int, max_data: int) -> int:
        """The largest A-MPDU for a PPDU of at most ``max_data`` ns (cached)."""
        key = _psdu_key(mcs, max_data)
        max_psdu = self._max_psdu.get(key, -1)
        if max_psdu < 0:
            max_psdu = min(self.max_ampdu_bytes, self.timing.max_psdu_bytes(mcs, max_data))
            self._max_psdu[key] = max_psdu
        return max_psdu

    def _build(self, e: Edcaf, now: int, txop_start: int) -> Transmission | None:
        if e.mu is not None:
            tx: Transmission = e.mu.build(e, now)
            return tx
        if e.bar_pending is not None:
            tx = Transmission(e, [], txop_start, 0)
            tx.success_ns = tx.failure_ns = self.timing.bar_exchange_ns()
            return tx
        ring = e.ring
        first = ring.first()
        dst = first.dst
        mcs = self._mcs[e.station.idx][dst.idx]
        # None: no TXOP limit (one exchange per access). 0 is a used-up TXOP, not "none".
        txop_left = e.txop_limit - (now - txop_start) if e.txop_limit else None
        # -1: no airtime budget (AirtimeBudgetHooks), else when the exchange must be over.
        deadline = e.deadline
        packets = [first]
        n = 1
        psdu = 4 + first.mpdu
        if e.aggregation:
            max_data = MAX_PPDU_NS
            if txop_left is not None:
                max_data = min(max_data, txop_left - self._ampdu_overhead)
            if deadline >= 0:
                budget = deadline - now - self._ampdu_overhead
                budget = budget - budget % self._quantum if budget > 0 else 0
                if budget < max_data:
                    max_data = budget
            max_psdu = self._max_psdu.get(_psdu_key(mcs, max_data), -1)
            if max_psdu < 0:
                max_psdu = self._max_psdu_for(mcs, max_data)
            limit = self.max_mpdus
            ac = e.ac
            # Per receiver and TID from a per-AC ring: runs to other receivers are
            # skipped, not an end (ns-3's PeekNextMpdu by TID and address).
            skip = self.per_receiver and not e.shared
            # Take MPDUs one run at a time: each further MPDU of size m adds its padded
            # predecessor's tail, a delimiter and m; within a run the step is constant.
            run = first
            avail = first.count - 1  # MPDUs of ``run`` not yet taken
            idx = 0
            while True:
                if avail:
                    m = run.mpdu
                    nxt = ((psdu + 3) & ~3) + 4 + m
                    if n >= limit or nxt > max_psdu:
                        break
                    step = ((m + 3) & ~3) + 4
                    j = _min3(avail, limit - n, 1 + (max_psdu - nxt) // step)
                    psdu = nxt + (j - 1) * step
                    n += j
                    avail -= j
                    if avail:
                        break
                if n >= limit:
                    break
                idx += 1
                if idx >= len(ring):
                    break
                run = ring[idx]
                if run.dst is not dst or run.ac is not ac:
                    if skip:
                        continue
                    break
                packets.append(run)
                avail = run.count
            if avail:
                taken = run.count - avail
                if taken == 0:
                    packets.pop()
                else:
                    ring.insert(idx + 1, run.split(taken))
            scattered = skip and ring[len(packets) - 1] is not packets[-1]
        else:
            scattered = False
            if first.count > 1:
                ring.insert(1, first.split(1))
        for p in packets:
            p.sealed = True
        block_ack = n > 1
        durations = self._durations.get(_exchange_key(psdu, mcs, block_ack))
        if durations is None:
            durations = self._exchange(psdu, mcs, block_ack)
        if txop_left is not None and durations[1] > txop_left and now != txop_start:
            return None  # a continuation that does not fit ends the TXOP
        if deadline >= 0 and now + durations[1] > deadline:
            return None  # a continuation that does not fit the airtime budget, likewise
        tx = Transmission(e, packets, txop_start, n, psdu, durations)
        tx.scattered = scattered
        return tx

    # -- exchanges -----------------------------------------------------------------------
    def _transmit(self, now: int, txs: list[Transmission]) -> None:
        if not txs:
            self._go_idle(now, [])
            return
        stats = self.stats
        if len(txs) == 1 and stats.trace is None:  # the common case, without the trace
            tx = txs[0]
            st = tx.edcaf.station
            st.tx_attempts += 1
            dur = tx.success_ns
            st.airtime_ns += dur
            stats.exchanges += 1
            stats.success_ns += dur
            if not tx.packets and tx.edcaf.mu is None:
                stats.bar_exchanges += 1
            self._on_air = txs
            self._on_air_start = now
            self._on_air_collided = False
            self._counted_until = now + dur
            self.loop.set_slot(self._slot, now + dur, PRIO_MEDIUM, _END, txs)
            return
        collided = len(txs) > 1
        for tx in txs:
            st = tx.edcaf.station
            st.tx_attempts += 1
            st.airtime_ns += tx.failure_ns if collided else tx.success_ns
        dur = max(tx.failure_ns for tx in txs) if collided else txs[0].success_ns
        stats.exchanges += 1
        if collided:
            stats.collisions += 1
            stats.failure_ns += dur
        else:
            stats.success_ns += dur
        if not txs[0].packets and not collided and txs[0].edcaf.mu is None:
            stats.bar_exchanges += 1
        if stats.trace is not None:
            stats.trace.append((
                now, now + dur, collided, tuple(tx.edcaf.station.name for tx in txs),
                tuple(tx.edcaf.ac.value for tx in txs), tuple(tx.mpdus for tx in txs),
                tuple(tx.psdu for tx in txs), tuple(tx.txop_start for tx in txs),
            ))  # fmt: skip
        self._on_air = txs
        self._on_air_start = now
        self._on_air_collided = collided
        self._counted_until = now + dur
        kind = _END_COLLIDED if collided else _END
        self.loop.set_slot(self._slot, now + dur, PRIO_MEDIUM, kind, txs)

    def _end(self, txs: list[Transmission], collided: bool) -> None:
        now = self.loop.now_ns
        if collided:
            for tx in txs:
                if tx.edcaf.mu is None:
                    self._fail(tx)
                else:
                    tx.edcaf.mu.failed(tx, now)
            self._go_idle(now, txs)
            return
        tx = txs[0]
        if tx.edcaf.mu is not None:
            self._end_mu(tx, now)
            return
        if not self._succeed(tx, now):
            self._go_idle(now, txs)
            return
        e = tx.edcaf
        if e.txop_limit and tx.packets and e.bar_pending is None and e.station.head_ac(e.ac):
            if e.station.airtime_budget is not None:
                self._ask_budget(e, now)
            nxt = self._build(e, now + SIFS_NS, tx.txop_start)
            if nxt is not None:
                # The SIFS gap counts as busy: no other EDCAF can see AIFS of idle inside
                # a TXOP.
                self.stats.success_ns += SIFS_NS
                self._on_air = []
                self._on_air_collided = False
                self._counted_until = now + SIFS_NS
                self.loop.set_slot(self._slot, now + SIFS_NS, PRIO_MEDIUM, _CONTINUE, nxt)
                return
        e.backoff = e.station.draw(e.cw + 1)
        self._go_idle(now, txs)

    def _end_mu(self, tx: Transmission, now: int) -> None:
        """An access function's own exchange ended: it delivers what was sent and says
        which stations' rings changed, and what follows after SIFS (its next exchange)
        or nothing (the medium goes idle)."""
        changed, nxt = tx.edcaf.mu.end(tx, now)
        if nxt is not None:
            self.stats.success_ns += SIFS_NS
            self._on_air = []
            self._on_air_collided = False
            self._counted_until = now + SIFS_NS
            self.loop.set_slot(self._slot, now + SIFS_NS, PRIO_MEDIUM, _CONTINUE, nxt)
            return
        self._go_idle(now, [tx, *changed])

    def _continue_txop(self, tx: Transmission) -> None:
        self._transmit(self.loop.now_ns, [tx])

    def _go_idle(self, now: int, txs: list[Transmission]) -> None:
        for tx in txs:
            e = tx.edcaf
            if e.shared:
                h = e.ring.head
                if h is not None and h.ac is not e.ac:
                    # The exchange's outcome took the packets ahead out of a shared ring:
                    # the new head's EDCAF got its frame while the medium was still busy,
                    # which invokes a backoff if its counter is 0 (10.22.2.2 a).
                    self.frame_arrived(e.station.edcafs[h.ac], now)
        self.busy = False
        self.idle_since = now
        self.stats.busy_ns += now - self._busy_start
        for tx in txs:
            tx.edcaf.station.refill()
        self._schedule_access()

    # -- counters at a horizon ------------------------------------------------------------
    def stats_at(self, horizon: int) -> ChannelStats:
        """A copy of the counters with every time counter clipped at ``horizon`` (no
        earlier than the last event processed): the busy period in progress counts up to
        the horizon, and so does the exchange (or SIFS gap) on the air, in ``success_ns``
        or ``failure_ns``. ``busy_ns == success_ns + failure_ns`` then holds exactly."""
        out = replace(self.stats)
        if self.busy:
            out.busy_ns += horizon - self._busy_start
            beyond = self._counted_until - horizon
            if beyond > 0:
                if self._on_air_collided:
                    out.failure_ns -= beyond
                else:
                    out.success_ns -= beyond
        return out

    def airtime_beyond(self, horizon: int) -> dict[Station, int]:
        """Airtime each station was credited (when its exchange started) past ``horizon``."""
        out: dict[Station, int] = {}
        if self.busy:
            collided = self._on_air_collided
            for tx in self._on_air:
                own = tx.failure_ns if collided else tx.success_ns
                beyond = self._on_air_start + own - horizon
                if beyond > 0:
                    out[tx.edcaf.station] = beyond
        return out

    # -- outcomes ------------------------------------------------------------------------
    def _succeed(self, tx: Transmission, now: int) -> bool:
        e = tx.edcaf
        st = e.station
        if not tx.packets:  # BlockAck answered our BlockAckReq
            self._end_bar(e, now)
            e.backoff = st.draw(e.cw + 1)
            return False
        ring = st.rings[e.ac]
        if self.links.packet_errors:
            return self._succeed_with_errors(tx, ring, now)
        if tx.scattered:
            _remove_runs(ring, tx.packets)
        else:
            for _ in tx.packets:
                ring.popleft()
        ring.n -= tx.mpdus
        rx = self.receiver
        run_hooks = st.run_hooks
        if run_hooks is not None:
            for p in tx.packets:
                self._complete_run(st, run_hooks, p, p.pid, p.count, now)
        elif st.per_packet:
            complete = st.hooks.on_hw_complete
            for p in tx.packets:
                ac = p.ac
                for pid in range(p.pid, p.pid + p.count):
                    complete(st, pid, ac, now, True)
                    rx.delivered(p, pid, 1, now)
        else:
            for p in tx.packets:
                rx.delivered(p, p.pid, p.count, now)
        st.tx_success += 1
        e.cw = e.cw_min
        return True

    def _succeed_with_errors(self, tx: Transmission, ring: Ring, now: int) -> bool:
        """Some MPDUs may be lost: one draw per MPDU, in order; the lost ones stay at the
        head of the ring (in order) for a retry, the others are delivered."""
        e = tx.edcaf
        st = e.station
        per = self.links.error_prob
        rnd = self.rng.random
        # Per run: the outcome of each of its MPDUs (True: lost).
        lost = [
            [rnd() < prob for _ in range(p.count)]
            for p in tx.packets
            for prob in (per(st.idx, p.dst.idx, p.mpdu),)
        ]
        n_lost = sum(sum(flags) for flags in lost)
        if n_lost == tx.mpdus:
            self.stats.per_failures += 1
            self._fail(tx)
            return False
        if tx.scattered:
            _remove_runs(ring, tx.packets)
        else:
            for _ in tx.packets:
                ring.popleft()
        ring.n -= tx.mpdus
        # Segments of consecutive MPDUs with one outcome: (run, first pid, count, lost).
        segments: list[tuple[Packet, int, int, bool]] = []
        for p, flags in zip(tx.packets, lost, strict=True):
            i = 0
            while i < p.count:
                j = i + 1
                while j < p.count and flags[j] == flags[i]:
                    j += 1
                segments.append((p, p.pid + i, j - i, flags[i]))
                i = j
        retry_runs: list[Packet] = []
        for p, pid, k, failed in segments:
            if failed:
                r = p.part(pid, k)
                r.sealed = True  # its packets are retried one by one below
                retry_runs.append(r)
        for r in reversed(retry_runs):
            ring.appendleft(r)
        ring.n += n_lost
        rx = self.receiver
        complete = st.hooks.on_hw_complete
        per_packet = st.per_packet
        run_hooks = st.run_hooks
        it = iter(retry_runs)
        for p, pid, k, failed in segments:
            if failed:
                self._count_retry(next(it), now)
            elif run_hooks is not None:
                self._complete_run(st, run_hooks, p, pid, k, now)
            elif per_packet:
                for q in range(pid, pid + k):
                    complete(st, q, p.ac, now, True)
                    rx.delivered(p, q, 1, now)
            else:
                rx.delivered(p, pid, k, now)
        st.tx_success += 1
        e.cw = e.cw_min
        return True

    def _complete_run(
        self, st: Station, hooks: RunHooks, p: Packet, pid: int, k: int, now: int
    ) -> None:
        """Packets ``pid .. pid + k - 1`` of run ``p`` were acknowledged: the hooks hear
        of them (one call), then they are delivered. As one by one (each packet's
        completion, then its delivery), because nothing delivering them triggers can
        reach the hooks before the last one: only a transfer's completion can, and it
        comes with the run's last packet — unless the run goes past it (a transfer whose
        dropped bytes were sent again), which is then taken one by one."""
        t = p.transfer
        if (
            k > 1
            and isinstance(t, BulkTransfer)
            and t.on_complete is not None
            and t.total_bytes is not None
            and t.total_bytes - t.delivered_bytes <= (k - 1) * p.ip_bytes
        ):
            for q in range(pid, pid + k):
                hooks.on_hw_complete_run(st, q, 1, p.ac, now, True)
                self.receiver.delivered(p, q, 1, now)
            return
        hooks.on_hw_complete_run(st, pid, k, p.ac, now, True)
        self.receiver.delivered(p, pid, k, now)

    def _fail(self, tx: Transmission) -> None:
        e = tx.edcaf
        st = e.station
        st.tx_failed += 1
        now = self.loop.now_ns
        e.cw = min(2 * e.cw + 1, e.cw_max)
        if not tx.packets:  # the BlockAckReq itself failed
            e.bar_retries += 1
            if e.bar_retries > self.retry_limit:
                self._end_bar(e, now)
        elif tx.block_ack and self.ns3_retry and not tx.rts:
            # A BlockAck was expected and missed. After a failed RTS the A-MPDU never
            # went out, so there is nothing to ask a BlockAck for: retry it instead.
            e.bar_pending = list(tx.packets)
        else:
            dropped = False
            for p in tx.packets:
                dropped |= self._count_retry(p, now)
            if dropped:
                e.cw = e.cw_min
        e.backoff = st.draw(e.cw + 1)

    def _end_bar(self, e: Edcaf, now: int) -> None:
        """The BlockAckReq exchange is over (answered, or out of retries): CW back to
        CWmin, and one more failed attempt for each MPDU it was asking about."""
        pending = e.bar_pending or []
        e.bar_pending = None
        e.bar_retries = 0
        e.cw = e.cw_min
        for p in pending:
            self._count_retry(p, now)

    def _fail_internal(self, e: Edcaf) -> None:
        """The lower category lost an internal collision: as a failed attempt of its head."""
        if e.mu is not None:
            e.mu.lost_internal(e)
            return
        st = e.station
        e.cw = min(2 * e.cw + 1, e.cw_max)
        if e.bar_pending is None:
            ring = st.rings[e.ac]
            head = ring.first()
            if head.count > 1:
                ring.insert(1, head.split(1))
            if self._count_retry(head, self.loop.now_ns):
                e.cw = e.cw_min
        e.backoff = st.draw(e.cw + 1)

    def _count_retry(self, p: Packet, now: int) -> bool:
        """One more failed attempt for every packet of run ``p``; drop them past the retry
        limit (one by one, each followed by what a single drop triggers). True if dropped.
        """
        p.retries += 1
        if p.retries <= self.retry_limit:
            return False
        st = p.src
        ring = st.rings[p.ac]
        hooks = st.hooks
        per_packet = st.per_packet
        flow = p.flow
        while p.count:
            pid = p.pid
            if p.count == 1:
                ring.remove(p)
            p.count -= 1
            p.pid += 1
            ring.n -= 1
            st.dropped_packets += 1
            flow.dropped_packets += 1
            if per_packet:
                hooks.on_hw_complete(st, pid, p.ac, now, False)
            self.receiver.dropped(p, now)
        return True


def _exchange_key(psdu: int, mcs: int, block_ack: bool) -> int:
    """``Channel._durations``' key for ``(psdu, mcs, block_ack)`` (one to one: MCS
    indices are far below 2**20)."""
    return (psdu << 21) | (mcs << 1) | (1 if block_ack else 0)


def _psdu_key(mcs: int, max_data: int) -> int:
    """``Channel._max_psdu``' key for ``(mcs, max_data)`` (one to one, for any ``max_data``
    and MCS indices below 2**20)."""
    return (max_data << 20) | mcs


def _remove_runs(ring: Ring, runs: list[Packet]) -> None:
    """Take ``runs`` (in ring order, the first at the head) out of ``ring``, keeping the
    order of the runs between them."""
    kept: list[Packet] = []
    i = 0
    k = len(runs)
    while i < k:
        if not ring:
            raise InvariantError("an acknowledged run is no longer in its ring")
        r = ring.popleft()
        if r is runs[i]:
            i += 1
        else:
            kept.append(r)
    ring.extendleft(reversed(kept))


class RingDrain:
    """A best-case drain model of one station's rings (see :meth:`Channel.ring_drain`).

    ``closed_ns`` is when the frames closed so far would be over; the open frame (the
    model's last, which appended packets may still join) adds AIFS and its exchange.
    ``add`` appends a run exactly as the MAC would aggregate it (same receiver and
    category, at most ``max_ampdu_mpdus`` MPDUs and ``max_ampdu_bytes``, a PPDU of at
    most 5.484 ms; one MPDU per exchange where aggregation is off). With A-MPDUs per
    receiver and TID from a per-AC ring (``Channel.per_receiver``), each receiver and
    category has an open frame of its own: a packet joins its receiver's, whatever was
    appended between them, as the MAC would take it.
    """

    __slots__ = ("_aggregate", "_aifs", "_ch", "_frames", "_max_psdu", "_mcs", "_n", "_psdu",
                 "_st", "ac", "closed_ns", "dst")  # fmt: skip

    def __init__(self, channel: Channel, station: Station, now: int) -> None:
        self._ch = channel
        self._st = station
        self.closed_ns = now
        #: The open frame: MPDUs (0: none), PSDU bytes, receiver, category, its link's
        #: MCS, AIFS, largest PSDU, whether its category aggregates.
        self._n = 0
        self._psdu = 0
        self.dst: Station | None = None
        self.ac = AccessCategory.BE
        self._mcs = 0
        self._aifs = 0
        self._max_psdu = 0
        self._aggregate = False
        #: The open frames by receiver and category when the MAC aggregates per receiver
        #: from this station's rings; None: one open frame (the fields above).
        self._frames: dict[tuple[Station, AccessCategory], _Frame] | None = (
            {} if channel.per_receiver and not station.shared else None
        )

    def copy(self) -> RingDrain:
        d = RingDrain(self._ch, self._st, self.closed_ns)
        d._n, d._psdu, d.dst, d.ac = self._n, self._psdu, self.dst, self.ac
        d._mcs, d._aifs, d._max_psdu, d._aggregate = (
            self._mcs, self._aifs, self._max_psdu, self._aggregate,
        )  # fmt: skip
        frames = self._frames
        if frames is not None:
            d._frames = {k: f.copy() for k, f in frames.items()}
        return d

    def end_ns(self) -> int:
        """When every frame, the open ones included, would be over."""
        frames = self._frames
        if frames is not None:
            end = self.closed_ns
            for f in frames.values():
                end += f.aifs + self._frame_ns(f.psdu, f.mcs, f.n)
            return end
        if self._n == 0:
            return self.closed_ns
        return self.closed_ns + self._aifs + self._open_exchange_ns()

    def _open_exchange_ns(self) -> int:
        return self._frame_ns(self._psdu, self._mcs, self._n)

    def _frame_ns(self, psdu: int, mcs: int, n: int) -> int:
        return self._ch._exchange(psdu, mcs, n > 1)[1]

    def close(self) -> None:
        """End the open frames: nothing appended later joins them."""
        frames = self._frames
        if frames is not None:
            self.closed_ns = self.end_ns()
            frames.clear()
            return
        if self._n:
            self.closed_ns += self._aifs + self._open_exchange_ns()
            self._n = 0

    def extend_until(self, p: Packet, count: int, until_ns: int) -> int:
        """Append run ``p`` (one packet) up to ``count`` times, each only if every frame,
        the open one included, would still be over by ``until_ns``; how many were.
        (``copy``, ``add``, ``end_ns`` per packet, without the copies.)"""
        frames = self._frames
        if frames is not None:
            return self._extend_frames_until(frames, p, count, until_ns)
        n = 0
        while n < count:
            closed, n_open, psdu, dst, ac = self.closed_ns, self._n, self._psdu, self.dst, self.ac
            mcs, aifs, max_psdu, aggregate = self._mcs, self._aifs, self._max_psdu, self._aggregate
            self.add(p)
            if self.end_ns() > until_ns:  # it would not be over in time: undo
                self.closed_ns, self._n, self._psdu, self.dst, self.ac = (
                    closed, n_open, psdu, dst, ac,
                )  # fmt: skip
                self._mcs, self._aifs, self._max_psdu, self._aggregate = (
                    mcs, aifs, max_psdu, aggregate,
                )  # fmt: skip
                break
            n += 1
        return n

    def _extend_frames_until(
        self, frames: dict[tuple[Station, AccessCategory], _Frame], p: Packet, count: int,
        until_ns: int,
    ) -> int:  # fmt: skip
        """``extend_until`` with a frame per receiver: a packet changes only its own
        receiver's frame (and ``closed_ns`` when it closes it), so only those are undone."""
        key = (p.dst, p.ac)
        n = 0
        while n < count:
            closed, dst, ac = self.closed_ns, self.dst, self.ac
            f = frames.get(key)
            saved = None if f is None else f.copy()
            self.add(p)
            if self.end_ns() > until_ns:
                self.closed_ns, self.dst, self.ac = closed, dst, ac
                if saved is None:
                    del frames[key]
                else:
                    frames[key] = saved
                break
            n += 1
        return n

    def _add_by_receiver(
        self, frames: dict[tuple[Station, AccessCategory], _Frame], p: Packet
    ) -> None:
        """``add`` with a frame per receiver and category (see the class docstring)."""
        ch = self._ch
        limit = ch.max_mpdus
        m = p.mpdu
        key = (p.dst, p.ac)
        self.dst = p.dst
        self.ac = p.ac
        left = p.count
        while left:
            f = frames.get(key)
            if f is not None:
                if f.aggregate:
                    nxt = ((f.psdu + 3) & ~3) + 4 + m
                    if f.n < limit and nxt <= f.max_psdu:
                        step = ((m + 3) & ~3) + 4
                        j = _min3(left, limit - f.n, 1 + (f.max_psdu - nxt) // step)
                        f.psdu = nxt + (j - 1) * step
                        f.n += j
                        left -= j
                        continue
                self.closed_ns += f.aifs + self._frame_ns(f.psdu, f.mcs, f.n)
            st = self._st
            params = st.edca_params(p.ac)
            mcs = ch._mcs[st.idx][p.dst.idx]
            frames[key] = _Frame(
                1, 4 + m, mcs, aifs_ns(params.aifsn), ch._max_psdu_for(mcs, MAX_PPDU_NS),
                params.aggregation,
            )  # fmt: skip
            left -= 1

    def add(self, p: Packet) -> None:
        """Append the ``p.count`` MPDUs of run ``p``."""
        frames = self._frames
        if frames is not None:
            self._add_by_receiver(frames, p)
            return
        ch = self._ch
        limit = ch.max_mpdus
        m = p.mpdu
        left = p.count
        while left:
            n = self._n
            if n and self._aggregate and p.dst is self.dst and p.ac is self.ac:
                nxt = ((self._psdu + 3) & ~3) + 4 + m
                if n < limit and nxt <= self._max_psdu:
                    step = ((m + 3) & ~3) + 4
                    j = _min3(left, limit - n, 1 + (self._max_psdu - nxt) // step)
                    self._psdu = nxt + (j - 1) * step
                    self._n = n + j
                    left -= j
                    continue
            self.close()
            st = self._st
            ac = p.ac
            params = st.edca_params(ac)
            self.dst = p.dst
            self.ac = ac
            self._mcs = ch._mcs[st.idx][p.dst.idx]
            self._aifs = aifs_ns(params.aifsn)
            self._aggregate = params.aggregation
            self._max_psdu = ch._max_psdu_for(self._mcs, MAX_PPDU_NS)
            self._n = 1
            self._psdu = 4 + m
            left -= 1


class _Frame:
    """An open frame of a drain model: MPDUs, PSDU bytes, its link's MCS, AIFS, largest
    PSDU, whether its category aggregates."""

    __slots__ = ("aggregate", "aifs", "max_psdu", "mcs", "n", "psdu")

    def __init__(
        self, n: int, psdu: int, mcs: int, aifs: int, max_psdu: int, aggregate: bool
    ) -> None:
        self.n = n
        self.psdu = psdu
        self.mcs = mcs
        self.aifs = aifs
        self.max_psdu = max_psdu
        self.aggregate = aggregate

    def copy(self) -> _Frame:
        return _Frame(self.n, self.psdu, self.mcs, self.aifs, self.max_psdu, self.aggregate)
