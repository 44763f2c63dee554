"""Bulk traffic a station's policy does not coordinate: ungated transfers.

A transfer started with ``gated=False`` (``Simulation.start_transfer``; traffic outside
the team, ``coordinated = false`` in a scenario) never asks the station's driver hooks
and is never held by their pauses. On a station whose hooks decide, such transfers wait
in ``Station.free_transfers`` and :func:`refill_mixed` serves them beside the gated ones
(a station without hooks keeps one queue and the plain ``refill``). Only scenarios with
traffic outside the team take this path, so it stays apart from the hot one.

The one import circle kept on purpose (speed): ``packets``, ``station``, ``mac``,
``_ungated``, ``_txq``, ``tcp``, ``congestion`` and ``sack`` name each other's classes
(mostly for typing only) so that mypyc compiles every access between packets, stations,
TCP connections and the channel to a native field access.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from coorp.sim._txq import tcp_dequeued
from coorp.sim.packets import Packet

if TYPE_CHECKING:
    from coorp.sim.station import Ring, Station

__all__ = ["refill_mixed", "ungated_in"]


def ungated_in(ring: Ring) -> int:
    """Packets of ungated bulk transfers in ``ring``."""
    n = 0
    for p in ring:
        t = p.transfer
        if t is not None and not getattr(t, "gated", True):
            n += p.count
    return n


def refill_mixed(st: Station, now: int) -> None:
    """``refill``'s bulk part with ungated transfers waiting too: the gated transfers
    (through the hooks, as in ``refill``) and the ungated ones (straight to the NIC)
    take turns of up to one burst per transfer, as ``refill`` serves transfers and
    mac80211 its per-destination queues; a pause of the hooks holds only the gated
    ones, and while gated data waits the ungated transfers hold at most their share
    of the ring (``F / (F + G)`` of it for ``F`` ungated and ``G`` gated transfers).
    The hooks see the ungated packets only as ring depth and as completions (ids
    they never admitted)."""
    rings = st.rings
    cap = st.capacity
    free = st.free_transfers
    transfers = st.transfers
    while True:
        gated_ok = bool(transfers) and not st._paused and rings[transfers[0].flow.ac].n < cap
        free_room = 0
        if free:
            ring = rings[free[0].flow.ac]
            free_room = cap - ring.n
            if transfers:
                # Gated data waits too: the ungated transfers' share of the ring.
                share = cap * len(free) // (len(free) + len(transfers))
                free_room = min(free_room, share - ungated_in(ring))
        free_ok = free_room > 0
        if not gated_ok and not free_ok:
            return
        if free_ok and (st._gated_turns <= 0 or not gated_ok):
            st._enqueue_hw(_next_free_run(st, free_room), now, announce=False)
            continue
        _gated_turn(st, now)
        st._gated_turns -= 1


def _gated_turn(st: Station, now: int) -> None:
    """Up to the head gated transfer's burst, admitted by the hooks as ``refill``
    admits it (a denial pauses the gated transfers)."""
    transfers = st.transfers
    ac = transfers[0].flow.ac
    depth = st.rings[ac].n
    k = st._bulk_run_length(st.capacity - depth)
    run_hooks = st.run_hooks
    if run_hooks is not None:
        n, until = run_hooks.admit_bulk_run(st, now, st._alloc_pids(0), k, ac, depth)
        if n:
            st._enqueue_hw(st._next_bulk_run(n), now, announce=False)
        if n < k:
            st._deny(until, now)
        return
    if st.per_packet:
        for _ in range(k):
            if not transfers or st._paused:
                return
            if st.rings[transfers[0].flow.ac].n >= st.capacity:
                return
            resume = st._hooks.admit_bulk(st, now)
            if resume is not None:
                st._deny(resume, now)
                return
            st._enqueue_hw(st._next_bulk_run(1), now)
        return
    resume = st._hooks.admit_bulk(st, now)
    if resume is not None:
        st._deny(resume, now)
        return
    st._enqueue_hw(st._next_bulk_run(k), now)


def _next_free_run(st: Station, room: int) -> Packet:
    """Up to ``room`` packets of the head ungated transfer, as ``_next_bulk_run``;
    its turn ends with its burst or the transfer."""
    free = st.free_transfers
    transfer = free[0]
    size = st.packet_bytes
    k = min(room, st.bulk_burst - st._free_burst_used)
    remaining = transfer.remaining_bytes
    tcp = transfer.tcp
    if tcp is not None and remaining is not None:
        k, size = tcp.head_run(k)
        remaining -= k * size
        transfer.remaining_bytes = remaining
    elif remaining is not None:
        full = remaining // size
        if full == 0:
            size = remaining
            k = 1
        elif k > full:
            k = full
        remaining -= k * size
        transfer.remaining_bytes = remaining
    st._free_burst_used += k
    if remaining == 0:
        free.popleft()
        st._free_burst_used = 0
        st._gated_turns = len(st.transfers)
    elif st._free_burst_used >= st.bulk_burst:
        free.rotate(-1)
        st._free_burst_used = 0
        st._gated_turns = len(st.transfers)
    transfer.flow.sent_packets += k
    pkt = Packet(st._alloc_pids(k), transfer.flow, size, transfer=transfer, count=k)
    if tcp is not None:
        tcp_dequeued(tcp, pkt)
    return pkt
