"""A station's transmit path: kernel (bulk) queue -> driver -> hardware rings -> EDCAFs.

LS packets (and TCP acknowledgements) skip the kernel queue, as fq_codel's sparse-flow
priority does, but they still wait for room in the hardware ring. In ``shared`` mode one
FIFO ring serves every access category, so an LS packet waits behind the bulk packets
already handed to the NIC — the "local congestion" of commodity NICs. In ``per_ac`` mode
each category has its own ring (ns-3's ideal model).

This module owns the driver view a policy sees (:class:`Station` implements
:class:`~coorp.sim.driver.DriverView`).

The one import circle kept on purpose (speed): ``packets``, ``station``, ``mac``,
``_ungated``, ``_txq``, ``tcp``, ``congestion`` and ``sack`` name each other's classes
(mostly for typing only) so that mypyc compiles every access between packets, stations,
TCP connections and the channel to a native field access.
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

from coorp._errors import InvariantError
from coorp.scenario import AccessCategory, HwQueueMode
from coorp.sim._txq import fifo_refill, fifo_room, hold_acks, kernel_admit, ls_burst, tcp_dequeued
from coorp.sim._ungated import refill_mixed, ungated_in
from coorp.sim.driver import FOREVER, AckGateHooks, AdmitAll, DriverHooks, RunHooks
from coorp.sim.events import PRIO_CONTROL, Event, EventLoop
from coorp.sim.packets import BulkTransfer, Packet, Ring, mergeable
from coorp.sim.timing import EdcaParams, aifs_ns

if TYPE_CHECKING:
    from mypy_extensions import i64

    from coorp.sim.mac import Channel

__all__ = ["BulkTransfer", "Edcaf", "Station"]

#: Service order of the priority queues.
_AC_ORDER: Final = (AccessCategory.VO, AccessCategory.VI, AccessCategory.BE, AccessCategory.BK)
_PRIORITY: Final = {ac: i for i, ac in enumerate(reversed(_AC_ORDER))}  # BK 0 ... VO 3


#: (A final name: compiled, a C static, where ``random.Random`` is a lookup by name.)
_RANDOM: Final = random.Random


class Edcaf:
    """One EDCA function: the backoff state of one access category of one station.

    ``backoff`` is the counter value at slot boundary 0 of the current idle period (the
    medium's idle start + AIFS); it counts down even with no frame (post-backoff).
    """

    __slots__ = (
        "ac", "aggregation", "aifs", "backoff", "bar_pending", "bar_retries", "cw", "cw_max",
        "cw_min", "deadline", "epoch", "held", "mu", "not_before", "priority", "ring", "shared",
        "station", "txop_limit",
    )  # fmt: skip

    def __init__(self, station: Station, ac: AccessCategory, params: EdcaParams) -> None:
        self.station = station
        self.ac = ac
        #: The ring this category's frames wait in (shared with other categories or not).
        self.ring = station.rings[ac]
        self.shared = station.shared
        self.priority = _PRIORITY[ac]
        self.aifs: i64 = aifs_ns(params.aifsn)
        self.cw_min = params.cw_min
        self.cw_max = params.cw_max
        self.txop_limit = params.txop_limit_ns
        self.aggregation = params.aggregation
        self.cw = params.cw_min
        self.backoff: i64 = 0
        self.not_before: i64 = 0
        #: The channel's busy period this EDCAF's counter is up to date with.
        self.epoch: i64 = 0
        #: Packets of an A-MPDU whose BlockAck was missed (ns-3 policy: a BAR is due).
        self.bar_pending: list[Packet] | None = None
        self.bar_retries = 0
        #: The instant by which this access's bulk exchange must be over (an airtime
        #: budget, ``AirtimeBudgetHooks``); -1: no limit.
        self.deadline = -1
        #: Holding its frame because not even one MPDU fitted the budget.
        self.held = False
        #: Set on an access function that is not a plain EDCAF: an AP's UL MU scheduler
        #: (``coorp.sim.ofdma``) contending for the medium to send trigger frames. The
        #: channel lets it build, end and fail its own exchanges (``build``, ``end``,
        #: ``failed``, ``lost_internal``); None for every EDCAF of a station's rings.
        self.mu: Any = None

    def has_frame(self) -> bool:
        return self.station.head_ac(self.ac)


class Station:
    """A node on the channel: queues, driver, EDCAFs. Implements the driver view."""

    def __init__(
        self,
        idx: int,
        name: str,
        position_m: tuple[float, float],
        *,
        loop: EventLoop,
        mode: HwQueueMode,
        capacity: int,
        edca: dict[AccessCategory, EdcaParams],
        packet_bytes: int,
        rng: random.Random,
    ) -> None:
        self.idx = idx
        #: Backoff draws of this station's EDCAFs (its own stream: see Simulation).
        self.rng = rng
        #: ``rng.getrandbits`` (None: an rng of a subclass) and the rng it belongs to.
        self._bits_of: object = None
        self._bits: Callable[[int], int] | None = None
        self.name = name
        self.position_m = position_m
        self.loop = loop
        self.shared = mode is HwQueueMode.SHARED
        self.capacity = capacity
        self._edca_params = edca
        self.packet_bytes = packet_bytes
        shared_ring = Ring()
        self.rings: dict[AccessCategory, Ring] = {
            ac: (shared_ring if self.shared else Ring()) for ac in AccessCategory
        }
        #: The priority (sparse-flow) queues, one per category and served VO first: a
        #: TCP ack waiting for room in a full BE ring must not hold back a VO message
        #: (fq_codel schedules flows independently; one FIFO would block the head).
        self.ls_queues: dict[AccessCategory, deque[Packet]] = {ac: deque() for ac in _AC_ORDER}
        self._ls_list = list(self.ls_queues.values())  # (what ``refill`` walks)
        self.transfers: deque[BulkTransfer] = deque()
        #: Ungated transfers (``BulkTransfer.gated = False``) of a station whose hooks
        #: decide: served beside ``transfers`` in turns of one burst, never asking the
        #: hooks, never paused (``coorp.sim._ungated``). Empty on a station without hooks,
        #: where every transfer is admitted anyway and stays in ``transfers``.
        self.free_transfers: deque[BulkTransfer] = deque()
        #: Gated bursts still due before the next ungated one (per-transfer turns).
        self._gated_turns = 0
        self._free_burst_used = 0
        self._had_free = False
        #: Packets one transfer may hand to the NIC before the next transfer's turn.
        self.bulk_burst = 64
        #: A shared ring with A-MPDUs per receiver and TID: the NIC's FIFO is not reordered;
        #: the driver hands the priority queues over in per-receiver bursts (``_txq``).
        self.group_ls = False
        self._ls_left: dict[AccessCategory, dict[Station, int]] = {ac: {} for ac in _AC_ORDER}
        self._burst_used = 0
        #: The category of the last bulk packet handed to the NIC (see hw_queue_length).
        self._bulk_ac = AccessCategory.BE
        self.edcafs: dict[AccessCategory, Edcaf] = {}
        self._hooks: DriverHooks = AdmitAll()
        #: Whether the hooks are called for every packet (see ``DriverHooks.per_packet``).
        self.per_packet = False
        #: The hooks again when they take those calls a run at a time (``RunHooks``).
        self.run_hooks: RunHooks | None = None
        self._admit_all = True
        #: The hooks' optional ``max_bulk_airtime_ns`` (``AirtimeBudgetHooks``), or None.
        self.airtime_budget: Callable[[Any, int], object] | None = None
        #: The hooks' optional ``bulk_hold_until_ns`` (``AirtimeBudgetHooks``), or None.
        self.hold_until: Callable[[Any, int], object] | None = None
        #: Channel accesses at which a bulk frame was held (no MPDU fitted the budget).
        self.bulk_holds = 0
        #: The hooks again when they hold the team's TCP acks (``AckGateHooks``).
        self.ack_hooks: AckGateHooks | None = None
        #: When held acks are asked again at the latest (None: none held).
        self._ack_event: Event | None = None
        #: Refills at which the hooks held acks back.
        self.ack_holds = 0
        self.channel: Channel | None = None
        self._paused = False
        self._resume_event: Event | None = None
        #: Allocates ``k`` consecutive packet ids and returns the first.
        self._alloc_pids: Callable[[int], int] = lambda k: 0
        # Statistics.
        self.airtime_ns = 0
        self.tx_attempts = 0
        self.tx_success = 0
        self.tx_failed = 0
        self.dropped_packets = 0
        self.ls_depths: list[int] = []
        #: The kernel queue's bound and order (``coorp.sim._txq``): ``kernel_limit``
        #: (0: none), its packets and drops; ``fifo``, TCP segments in and out per category.
        self.kernel_limit = 0
        self.kernel_n: dict[AccessCategory, int] = dict.fromkeys(AccessCategory, 0)
        self.kernel_drops = 0
        self.fifo = False
        self.tcp_in: dict[AccessCategory, int] = dict.fromkeys(AccessCategory, 0)
        self.tcp_out: dict[AccessCategory, int] = dict.fromkeys(AccessCategory, 0)

    @property
    def hooks(self) -> DriverHooks:
        return self._hooks

    @hooks.setter
    def hooks(self, hooks: DriverHooks) -> None:
        self._hooks = hooks
        self.per_packet = bool(getattr(hooks, "per_packet", True))
        # Read from the class: a wrapper that forwards unknown attributes to the hooks it
        # wraps (to intercept their per-packet calls) must not opt into runs unawares.
        runs = self.per_packet and bool(getattr(type(hooks), "per_run", False))
        self.run_hooks = hooks if runs else None  # type: ignore[assignment]
        self._admit_all = type(hooks) is AdmitAll
        budget = getattr(hooks, "max_bulk_airtime_ns", None)
        self.airtime_budget = budget if callable(budget) else None
        hold = getattr(hooks, "bulk_hold_until_ns", None)
        self.hold_until = hold if callable(hold) and self.airtime_budget is not None else None
        gates_acks = bool(getattr(hooks, "gates_acks", False))
        self.ack_hooks = hooks if gates_acks else None  # type: ignore[assignment]
        for e in self.edcafs.values():
            e.deadline = -1  # a deadline is asked again at every access

    # -- driver view -------------------------------------------------------------------
    def hw_queue_length(self) -> int:
        """Packets in the ring the next bulk packet would join: the shared ring, or (per-AC
        rings) the ring of the next transfer's category, the one ``refill`` checks for
        room. With no bulk data waiting: the ring of the last bulk packet handed over
        (BE before any)."""
        transfers = self.transfers
        ac = transfers[0].flow.ac if transfers else self._bulk_ac
        return self.rings[ac].n

    def pause_bulk(self, until_ns: int | None) -> None:
        self._paused = True
        if self._resume_event is not None:
            self._resume_event.cancel()
            self._resume_event = None
        if until_ns is not None:
            self._resume_event = self.loop.call_at(
                max(until_ns, self.loop.now_ns), PRIO_CONTROL, self._resume_timer
            )

    def resume_bulk(self) -> None:
        if self._resume_event is not None:
            self._resume_event.cancel()
            self._resume_event = None
        self._paused = False
        self.refill()

    @property
    def bulk_backlog(self) -> bool:
        return bool(self.transfers)

    @property
    def bulk_paused(self) -> bool:
        return self._paused

    def _hold_acks(self, until: int, now: int) -> None:
        hold_acks(self, until, now)  # (coorp.sim._txq)

    def _ack_timer(self) -> None:
        self._ack_event = None
        self.refill()

    def _resume_timer(self) -> None:
        self._resume_event = None
        self._paused = False
        self.refill()

    # -- MAC side ----------------------------------------------------------------------
    def edca_params(self, ac: AccessCategory) -> EdcaParams:
        """The EDCA parameters of category ``ac`` (its EDCAF need not exist yet)."""
        return self._edca_params[ac]

    def edcaf(self, ac: AccessCategory) -> Edcaf:
        e = self.edcafs.get(ac)
        if e is None:
            e = Edcaf(self, ac, self._edca_params[ac])
            self.edcafs[ac] = e
            assert self.channel is not None
            self.channel.add_edcaf(e)
        return e

    def draw(self, n: int) -> int:
        """A backoff draw, ``self.rng.randrange(n)`` for ``n >= 1``. The rng's
        ``getrandbits`` is looked up once per rng (by name at every draw, it was most of a
        draw's cost); an rng of a subclass (a test's recording one) has its own
        ``randrange`` called."""
        rng = self.rng
        if rng is not self._bits_of:
            self._bits_of = rng
            self._bits = rng.getrandbits if type(rng) is _RANDOM else None
        bits = self._bits
        if bits is None:
            return rng.randrange(n)
        # CPython's ``Random._randbelow_with_getrandbits``: the same calls and numbers,
        # without its argument checks in interpreted Python (tests/sim/test_backoff_draw.py).
        k = n.bit_length()
        r = bits(k)
        while r >= n:
            r = bits(k)
        return r

    def head_ac(self, ac: AccessCategory) -> bool:
        """Whether the EDCAF of ``ac`` has a frame to send now."""
        h = self.rings[ac].head
        if h is None:
            return False
        return h.ac is ac if self.shared else True

    # -- driver ------------------------------------------------------------------------
    def send_ls(self, packets: list[Packet]) -> None:
        """Hand LS packets (or TCP acks) to the stack: priority queue, then the NIC."""
        queues = self.ls_queues
        limit = self.kernel_limit
        for p in packets:
            if limit and not kernel_admit(self, p, limit):
                continue
            if self.fifo:
                p.ticket = self.tcp_in[p.ac]
            queues[p.ac].append(p)
            if self.group_ls:
                self._ls_left[p.ac][p.dst] = self._ls_left[p.ac].get(p.dst, 0) + p.count
        self.refill()

    def kernel_queued(self, ac: AccessCategory) -> int:
        """Packets in the kernel queue of ``ac``: the priority queue's, and with a bound
        (``kernel_limit``) the TCP segments' too."""
        return self.kernel_n[ac] if self.kernel_limit else sum(p.count for p in self.ls_queues[ac])

    def add_transfer(self, transfer: BulkTransfer) -> None:
        self._queue_of(transfer).append(transfer)
        self.refill()

    def ungated_in_ring(self, ac: AccessCategory) -> int:
        """Packets of ungated transfers in the ring of category ``ac`` (0 at once on a
        station that never had any): what a policy's own limits need not count."""
        if not self._had_free:
            return 0
        return ungated_in(self.rings[ac])

    def _queue_of(self, transfer: BulkTransfer) -> deque[BulkTransfer]:
        """Where a transfer waits: ungated ones apart only when hooks decide (without
        hooks every transfer is admitted, and one queue keeps the plain behaviour)."""
        if transfer.gated or self._admit_all:
            return self.transfers
        self._had_free = True
        return self.free_transfers

    def refill(self) -> None:
        """:meth:`_refill_once`, and again for a FIFO kernel queue's LS (``_txq``)."""
        self._refill_once()
        if self.fifo:
            fifo_refill(self)

    def _refill_once(self) -> None:
        """Move packets to the hardware rings while they have room: LS first, then bulk.

        Without per-packet hooks, bulk packets move in runs (as many as the ring, the
        transfer's burst and its remaining bytes allow); the result is the same as moving
        them one by one, since nothing observes the steps in between.
        """
        now = self.loop.now_ns
        rings = self.rings
        cap = self.capacity
        group = self.group_ls
        for ls in self._ls_list:
            while ls:
                head = ls[0]
                room = cap - rings[head.ac].n
                if room <= 0:
                    break
                if head.ticket > self.tcp_out[head.ac] and self.fifo:
                    break  # TCP segments queued before it go first
                if self.ack_hooks is not None and head.flow.gate_acks:
                    want = head.count if head.count <= room else room
                    n, until = self.ack_hooks.admit_acks(self, now, want, rings[head.ac].n)
                    if n < want:
                        if n > 0:
                            ls[0] = head.split(n)
                            self._enqueue_ls(head, now)
                        self._hold_acks(until, now)
                        break
                if head.count > room:
                    ls[0] = head.split(room)
                    self._enqueue_ls(head, now)
                    break
                ls.popleft()
                self._enqueue_ls(head, now)
                if group and ls and self._edca_params[head.ac].aggregation:
                    ls_burst(self, ls, head, now)
        if self.free_transfers:
            refill_mixed(self, now)
            return
        transfers = self.transfers
        run_hooks = self.run_hooks
        if run_hooks is not None:
            # As below, one packet at a time, but each run asked in one call: the hooks
            # admit a prefix of it (and have seen it enqueued).
            while transfers and not self._paused:
                ac = transfers[0].flow.ac
                depth = rings[ac].n
                if depth >= cap:
                    break
                fifo = fifo_room(self, transfers[0]) if self.fifo else -1
                if fifo == 0:
                    break
                k = self._bulk_run_length(cap - depth if fifo < 0 else min(cap - depth, fifo))
                n, until = run_hooks.admit_bulk_run(self, now, self._alloc_pids(0), k, ac, depth)
                if n:
                    self._enqueue_hw(self._next_bulk_run(n), now, announce=False)
                if n < k:
                    self._deny(until, now)
                    break
            return
        if self.per_packet:
            # The ring the next bulk packet would join: its own category's (a bulk flow
            # may use any category; checking the BE ring only would never stop for VI).
            while transfers and not self._paused and rings[transfers[0].flow.ac].n < cap:
                if self.fifo and fifo_room(self, transfers[0]) == 0:
                    break
                resume = self._hooks.admit_bulk(self, now)
                if resume is not None:
                    self._deny(resume, now)
                    break
                self._enqueue_hw(self._next_bulk_run(1), now)
            return
        while transfers and not self._paused:
            room = cap - rings[transfers[0].flow.ac].n
            if room <= 0:
                break
            if self.fifo:
                fifo = fifo_room(self, transfers[0])
                if fifo == 0:
                    break
                if fifo > 0:
                    room = min(room, fifo)
            if not self._admit_all:
                resume = self._hooks.admit_bulk(self, now)
                if resume is not None:
                    self._deny(resume, now)
                    break
            self._enqueue_hw(self._next_bulk_run(room), now)

    def _enqueue_ls(self, p: Packet, now: int) -> None:
        if self.group_ls:  # (packets left in the priority queue, by receiver)
            self._ls_left[p.ac][p.dst] -= p.count
        if self.kernel_limit:
            self.kernel_n[p.ac] -= p.count
        self._enqueue_hw(p, now)

    def _deny(self, resume: int, now: int) -> None:
        if resume <= now:
            raise InvariantError(
                f"{type(self._hooks).__name__}.admit_bulk denied at {now} ns with "
                f"resume time {resume} ns, which is not in the future"
            )
        self.pause_bulk(None if resume >= FOREVER else resume)

    def _bulk_run_length(self, room: int) -> int:
        """How many packets ``_next_bulk_run(room)`` would take (no side effect)."""
        k = min(room, self.bulk_burst - self._burst_used)
        head = self.transfers[0]
        if head.tcp is not None:
            return head.tcp.head_run(k)[0]
        remaining = head.remaining_bytes
        if remaining is not None:
            full = remaining // self.packet_bytes
            if full == 0:
                return 1
            if k > full:
                return full
        return k

    def _next_bulk_run(self, room: int) -> Packet:
        """Up to ``room`` packets of the head transfer, all of one size, as one run.

        Transfers take turns in bursts of up to one A-MPDU, as mac80211's per-station
        TXQs feed the driver: packet-by-packet round robin across destinations would
        leave nothing to aggregate.
        """
        transfers = self.transfers
        transfer = transfers[0]
        size = self.packet_bytes
        k = min(room, self.bulk_burst - self._burst_used)
        remaining = transfer.remaining_bytes
        tcp = transfer.tcp
        if tcp is not None and remaining is not None:
            # The connection's kernel queue: one run of segments of one size at a time.
            k, size = tcp.head_run(k)
            remaining -= k * size
            transfer.remaining_bytes = remaining
        elif remaining is not None:
            full = remaining // size
            if full == 0:  # the transfer's last packet, shorter than the MTU
                size = remaining
                k = 1
            elif k > full:
                k = full
            remaining -= k * size
            transfer.remaining_bytes = remaining
        self._burst_used += k
        if remaining == 0:
            transfers.popleft()
            self._burst_used = 0
        if self._burst_used >= self.bulk_burst and transfers and transfers[0] is transfer:
            transfers.rotate(-1)
            self._burst_used = 0
        transfer.flow.sent_packets += k
        self._bulk_ac = transfer.flow.ac
        pkt = Packet(self._alloc_pids(k), transfer.flow, size, transfer=transfer, count=k)
        if tcp is not None:
            tcp_dequeued(tcp, pkt)  # the segments it carries, out of the kernel queue
        return pkt

    def next_bulk_packet(self) -> Packet | None:
        """The bulk packet the driver would hand to the NIC next (not allocated, no side
        effect): what an admission decision is about. None without bulk data."""
        transfers = self.transfers
        if not transfers:
            return None
        transfer = transfers[0]
        size = self.packet_bytes
        remaining = transfer.remaining_bytes
        if transfer.tcp is not None:
            size = transfer.tcp.head_run(1)[1]
        elif remaining is not None and remaining < size:
            size = remaining
        return Packet(-1, transfer.flow, size, transfer=transfer)

    def _enqueue_hw(self, pkt: Packet, now: int, announce: bool = True) -> None:
        """Append a run to its ring; tell the hooks about each packet (unless ``announce``
        is False: they admitted it with ``admit_bulk_run``), the MAC if needed."""
        run_hooks = self.run_hooks
        if run_hooks is not None:
            ac = pkt.ac
            ring = self.rings[ac]
            depth = ring.n
            pkt.hw_enq_ns = now
            pkt.hw_depth = depth
            if pkt.message is not None:
                self.ls_depths.append(depth)
                if pkt.message.first_depth < 0:
                    pkt.message.first_depth = depth
            ring.n = depth + pkt.count
            if ring and mergeable(ring[-1], pkt):
                ring[-1].count += pkt.count
            else:
                ring.append(pkt)
            edcaf = self.edcafs.get(ac) or self.edcaf(ac)
            if announce:
                if self.ack_hooks is not None and pkt.flow.gate_acks:
                    self.ack_hooks.on_acks_enqueued(self, pkt.pid, pkt.count, depth, now)
                else:
                    run_hooks.on_hw_enqueue_run(self, pkt.pid, pkt.count, ac, depth, now)
            if depth == 0:
                assert self.channel is not None
                self.channel.frame_arrived(edcaf, now)
            return
        if self.per_packet and pkt.count > 1:
            while pkt.count > 1:
                rest = pkt.split(1)
                self._enqueue_hw(pkt, now, announce)
                pkt = rest
        ac = pkt.ac
        ring = self.rings[ac]
        depth = ring.n
        pkt.hw_enq_ns = now
        pkt.hw_depth = depth
        if pkt.message is not None:
            self.ls_depths.append(depth)
            if pkt.message.first_depth < 0:
                pkt.message.first_depth = depth
        ring.n = depth + pkt.count
        # With per-packet hooks every packet stays its own run, so the ring's tail is the
        # packet just announced to the hooks.
        if not self.per_packet and ring and mergeable(ring[-1], pkt):
            ring[-1].count += pkt.count
        else:
            ring.append(pkt)
        # The EDCAF must exist even when the packet is not at the head: in a shared ring
        # it becomes the head later, when the packets ahead of it are gone.
        edcaf = self.edcafs.get(ac) or self.edcaf(ac)
        if self.per_packet and announce:
            if self.ack_hooks is not None and pkt.flow.gate_acks:
                self.ack_hooks.on_acks_enqueued(self, pkt.pid, pkt.count, depth, now)
            else:
                self._hooks.on_hw_enqueue(self, pkt.pid, ac, depth, now)
        if depth == 0:
            assert self.channel is not None
            self.channel.frame_arrived(edcaf, now)

    def requeue_bulk_bytes(self, pkt: Packet) -> None:
        """A bulk packet dropped by the MAC is resent by TCP: no byte is lost."""
        transfer = pkt.transfer
        if isinstance(transfer, BulkTransfer) and transfer.remaining_bytes is not None:
            queue = self._queue_of(transfer)
            if transfer.remaining_bytes == 0 and transfer not in queue:
                queue.append(transfer)
            transfer.remaining_bytes += pkt.ip_bytes
            pkt.flow.retransmitted_packets += 1
