"""What a station drops when it leaves a BSS (the queued traffic of some of its flows), and
an AP's NIC rings laid out apart from the robots' (both reach into ``Station``'s state
from outside its compiled hot path: they run once per hand-over or per run)."""

from __future__ import annotations

from collections.abc import Callable

from coorp._errors import InvariantError
from coorp.scenario import AccessCategory, HwQueueMode
from coorp.sim.packets import FlowState, Packet, Ring
from coorp.sim.station import Station

__all__ = ["lay_out_rings", "purge"]


def lay_out_rings(st: Station, mode: HwQueueMode, group_ls: bool) -> None:
    """Lay ``st``'s NIC rings out as ``mode`` says (an AP's per-AC rings beside the
    robots' shared ones); ``group_ls``: the driver's per-receiver bursts, which only a
    shared ring takes (``Station.group_ls``). Only before the station carried traffic."""
    if st.edcafs or any(st.rings.values()) or any(st.ls_queues.values()):
        raise InvariantError(f"{st.name!r}: rings laid out again after traffic started")
    st.shared = mode is HwQueueMode.SHARED
    st.group_ls = group_ls and st.shared
    shared_ring = Ring()
    st.rings = {ac: (shared_ring if st.shared else Ring()) for ac in AccessCategory}


def purge(st: Station, drop: Callable[[FlowState], bool], now: int) -> int:
    """Drop every queued packet and bulk transfer of ``st``'s flows that ``drop`` selects,
    as a NIC does when a station leaves a BSS (mac80211 flushes the station's queues at
    disassociation): LS packets and acks waiting for the ring, the rings' packets (the
    hooks hear of each as not delivered; a lost message's fragments are not repaired),
    bulk transfers not yet handed over (their bytes are never sent, their completion
    never runs). Only while none of its frames is on the air (:class:`Cells` purges on
    an idle medium). Returns the packets dropped."""
    dropped = 0
    for ac, q in st.ls_queues.items():
        gone = [p for p in q if drop(p.flow)]
        if gone:
            keep = [p for p in q if not drop(p.flow)]
            q.clear()
            q.extend(keep)
            left = st._ls_left[ac]
            for p in gone:
                dropped += _dropped(st, p)
                if st.group_ls:  # (the per-receiver count of packets still queued)
                    left[p.dst] -= p.count
    rings: list[Ring] = []
    for ring in st.rings.values():
        if all(r is not ring for r in rings):
            rings.append(ring)
    hooks = st.hooks
    for ring in rings:
        gone = [p for p in ring if drop(p.flow)]
        if not gone:
            continue
        kept = [p for p in ring if not drop(p.flow)]
        ring.clear()
        ring.extend(kept)
        ring.n = sum(p.count for p in kept)
        for p in gone:
            dropped += _dropped(st, p)
            if st.per_packet:
                for pid in range(p.pid, p.pid + p.count):
                    hooks.on_hw_complete(st, pid, p.ac, now, False)
    for e in st.edcafs.values():
        if e.bar_pending is not None and any(drop(p.flow) for p in e.bar_pending):
            e.bar_pending = None
            e.bar_retries = 0
    _drop_transfers(st, drop)
    if st.fifo:  # hw_queue.kernel_queue_fifo: purged segments are no longer ahead
        for ac in AccessCategory:
            queued = sum(
                run[1]
                for q in (st.transfers, st.free_transfers)
                for t in q
                if t.tcp is not None and t.flow.ac is ac
                for run in t.tcp._queue
            )
            st.tcp_in[ac] = st.tcp_out[ac] + queued
            for p in st.ls_queues[ac]:
                p.ticket = min(p.ticket, st.tcp_in[ac])
    if st.kernel_limit:  # hw_queue.kernel_queue_packets: count what is left again
        for ac in AccessCategory:
            st.kernel_n[ac] = sum(p.count for p in st.ls_queues[ac]) + sum(
                run[1]
                for q in (st.transfers, st.free_transfers)
                for t in q
                if t.tcp is not None and t.flow.ac is ac
                for run in t.tcp._queue
            )
    return dropped


def _drop_transfers(st: Station, drop: Callable[[FlowState], bool]) -> None:
    """Forget the bulk transfers of the flows ``drop`` selects (their bytes not yet
    handed to the NIC are never sent; their completion never runs)."""
    for queue in (st.transfers, st.free_transfers):
        keep = [t for t in queue if not drop(t.flow)]
        if len(keep) < len(queue):
            if drop(queue[0].flow):
                st._burst_used = 0  # the head's burst ends with it
            queue.clear()
            queue.extend(keep)


def _dropped(st: Station, p: Packet) -> int:
    st.dropped_packets += p.count
    p.flow.dropped_packets += p.count
    if p.message is not None:
        p.message.lost = True
    return p.count
