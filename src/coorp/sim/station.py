"""A station's transmit path: kernel (bulk) queue -> driver -> hardware rings -> EDCAFs.

LS packets (and TCP acknowledgements) skip the kernel queue, as fq_codel's sparse-flow
priority does, but they still wait for room in the hardware ring. In ``shared`` mode one
FIFO ring serves every access category, so an LS packet waits behind the bulk packets
already handed to the NIC — the "local congestion" of commodity NICs. In ``per_ac`` mode
each category has its own ring (ns-3's ideal model).

This module owns the driver view a policy sees (:class:`Station` implements
:class:`~coorp.sim.driver.DriverView`).
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING

from coorp._errors import InvariantError
from coorp.scenario import AccessCategory, HwQueueMode
from coorp.sim.driver import FOREVER, AdmitAll, DriverHooks
from coorp.sim.events import PRIO_CONTROL, Event, EventLoop
from coorp.sim.packets import FlowState, Packet
from coorp.sim.timing import EdcaParams, aifs_ns

if TYPE_CHECKING:
    from coorp.sim.mac import Channel

__all__ = ["BulkTransfer", "Edcaf", "Station"]

_PRIORITY = {AccessCategory.BK: 0, AccessCategory.BE: 1, AccessCategory.VI: 2, AccessCategory.VO: 3}


class Edcaf:
    """One EDCA function: the backoff state of one access category of one station.

    ``backoff`` is the counter value at slot boundary 0 of the current idle period (the
    medium's idle start + AIFS); it counts down even with no frame (post-backoff).
    """

    __slots__ = (
        "ac",
        "aggregation",
        "aifs",
        "backoff",
        "bar_pending",
        "bar_retries",
        "cw",
        "cw_max",
        "cw_min",
        "not_before",
        "priority",
        "station",
        "txop_limit",
    )  # fmt: skip

    def __init__(self, station: Station, ac: AccessCategory, params: EdcaParams) -> None:
        self.station = station
        self.ac = ac
        self.priority = _PRIORITY[ac]
        self.aifs = aifs_ns(params.aifsn)
        self.cw_min = params.cw_min
        self.cw_max = params.cw_max
        self.txop_limit = params.txop_limit_ns
        self.aggregation = params.aggregation
        self.cw = params.cw_min
        self.backoff = 0
        self.not_before = 0
        #: Packets of an A-MPDU whose BlockAck was missed (ns-3 policy: a BAR is due).
        self.bar_pending: list[Packet] | None = None
        self.bar_retries = 0

    def has_frame(self) -> bool:
        return self.station.head_ac(self.ac)


class BulkTransfer:
    """Bytes a bulk flow still has to hand to the NIC (``None``: unlimited)."""

    __slots__ = ("delivered_bytes", "flow", "on_complete", "remaining_bytes", "total_bytes")

    def __init__(
        self,
        flow: FlowState,
        total_bytes: int | None,
        on_complete: Callable[[BulkTransfer, int], None] | None,
    ) -> None:
        self.flow = flow
        self.total_bytes = total_bytes
        self.remaining_bytes = total_bytes
        self.delivered_bytes = 0
        self.on_complete = on_complete


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
        self.name = name
        self.position_m = position_m
        self.loop = loop
        self.shared = mode is HwQueueMode.SHARED
        self.capacity = capacity
        self._edca_params = edca
        self.packet_bytes = packet_bytes
        shared_ring: deque[Packet] = deque()
        self.rings: dict[AccessCategory, deque[Packet]] = {
            ac: (shared_ring if self.shared else deque()) for ac in AccessCategory
        }
        self.ls_queue: deque[Packet] = deque()
        self.transfers: deque[BulkTransfer] = deque()
        #: Packets one transfer may hand to the NIC before the next transfer's turn.
        self.bulk_burst = 64
        self._burst_used = 0
        self.edcafs: dict[AccessCategory, Edcaf] = {}
        self.hooks: DriverHooks = AdmitAll()
        self.channel: Channel | None = None
        self._paused = False
        self._resume_event: Event | None = None
        self._next_pid: Callable[[], int] = lambda: 0
        # Statistics.
        self.airtime_ns = 0
        self.tx_attempts = 0
        self.tx_success = 0
        self.tx_failed = 0
        self.dropped_packets = 0
        self.ls_depths: list[int] = []

    # -- driver view -------------------------------------------------------------------
    def hw_queue_length(self) -> int:
        return len(self.rings[AccessCategory.BE])

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

    def _resume_timer(self) -> None:
        self._resume_event = None
        self._paused = False
        self.refill()

    # -- MAC side ----------------------------------------------------------------------
    def edcaf(self, ac: AccessCategory) -> Edcaf:
        e = self.edcafs.get(ac)
        if e is None:
            e = Edcaf(self, ac, self._edca_params[ac])
            self.edcafs[ac] = e
            assert self.channel is not None
            self.channel.add_edcaf(e)
        return e

    def head_ac(self, ac: AccessCategory) -> bool:
        """Whether the EDCAF of ``ac`` has a frame to send now."""
        ring = self.rings[ac]
        if not ring:
            return False
        return ring[0].ac is ac if self.shared else True

    # -- driver ------------------------------------------------------------------------
    def send_ls(self, packets: list[Packet]) -> None:
        """Hand LS packets (or TCP acks) to the stack: priority queue, then the NIC."""
        self.ls_queue.extend(packets)
        self.refill()

    def add_transfer(self, transfer: BulkTransfer) -> None:
        self.transfers.append(transfer)
        self.refill()

    def refill(self) -> None:
        """Move packets to the hardware rings while they have room: LS first, then bulk."""
        now = self.loop.now_ns
        rings = self.rings
        cap = self.capacity
        ls = self.ls_queue
        while ls and len(rings[ls[0].ac]) < cap:
            self._enqueue_hw(ls.popleft(), now)
        transfers = self.transfers
        # The ring the next bulk packet would join: its own category's (a bulk flow may
        # use any category; checking the BE ring only would never stop for a VI flow).
        while transfers and not self._paused and len(rings[transfers[0].flow.ac]) < cap:
            resume = self.hooks.admit_bulk(self, now)
            if resume is not None:
                if resume <= now:
                    raise InvariantError(
                        f"{type(self.hooks).__name__}.admit_bulk denied at {now} ns with "
                        f"resume time {resume} ns, which is not in the future"
                    )
                self.pause_bulk(None if resume >= FOREVER else resume)
                break
            self._enqueue_hw(self._next_bulk_packet(), now)

    def _next_bulk_packet(self) -> Packet:
        # Transfers take turns in bursts of up to one A-MPDU, as mac80211's per-station
        # TXQs feed the driver: packet-by-packet round robin across destinations would
        # leave nothing to aggregate.
        transfer = self.transfers[0]
        size = self.packet_bytes
        self._burst_used += 1
        if transfer.remaining_bytes is not None:
            size = min(size, transfer.remaining_bytes)
            transfer.remaining_bytes -= size
            if transfer.remaining_bytes == 0:
                self.transfers.popleft()
                self._burst_used = 0
        if self._burst_used >= self.bulk_burst and self.transfers and self.transfers[0] is transfer:
            self.transfers.rotate(-1)
            self._burst_used = 0
        transfer.flow.sent_packets += 1
        return Packet(self._next_pid(), transfer.flow, size, transfer=transfer)

    def _enqueue_hw(self, pkt: Packet, now: int) -> None:
        ring = self.rings[pkt.ac]
        depth = len(ring)
        pkt.hw_enq_ns = now
        pkt.hw_depth = depth
        if pkt.message is not None:
            self.ls_depths.append(depth)
            if pkt.message.first_depth < 0:
                pkt.message.first_depth = depth
        ring.append(pkt)
        # The EDCAF must exist even when the packet is not at the head: in a shared ring
        # it becomes the head later, when the packets ahead of it are gone.
        edcaf = self.edcafs.get(pkt.ac) or self.edcaf(pkt.ac)
        self.hooks.on_hw_enqueue(self, pkt.pid, pkt.ac, depth, now)
        if depth == 0:
            assert self.channel is not None
            self.channel.frame_arrived(edcaf, now)

    def requeue_bulk_bytes(self, pkt: Packet) -> None:
        """A bulk packet dropped by the MAC is resent by TCP: no byte is lost."""
        transfer = pkt.transfer
        if isinstance(transfer, BulkTransfer) and transfer.remaining_bytes is not None:
            if transfer.remaining_bytes == 0 and transfer not in self.transfers:
                self.transfers.append(transfer)
            transfer.remaining_bytes += pkt.ip_bytes
            pkt.flow.retransmitted_packets += 1
