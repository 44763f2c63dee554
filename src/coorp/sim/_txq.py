"""The driver's per-receiver bursts into a shared NIC ring (A-MPDUs per receiver and TID).

A shared ring is one FIFO that the NIC consumes in order: it aggregates consecutive
packets of one receiver and category, and cannot reach past another receiver's. Linux
groups above it: mac80211 keeps a queue per station and TID (its TXQs) and the driver
pulls a burst from one before the next (mt76's ``mt76_txq_send_burst``), so each
station's frames reach the ring together. With ``mac.ampdu_grouping =
"per_receiver_tid"`` and a shared ring (``Station.group_ls``), :func:`ls_burst` does that
for a station's priority queues (LS datagrams, TCP acks) of the categories that
aggregate: after the oldest packet, the later ones to the same receiver. Bulk transfers
already reach the ring in bursts of one A-MPDU per transfer (``Station.refill``).

Only shared rings with that grouping take this path, so it stays apart from the
compiled hot one, as ``_ungated`` does.

The one import circle kept on purpose (speed): ``packets``, ``station``, ``mac``,
``_ungated``, ``_txq``, ``tcp`` and ``congestion`` name each other's classes (mostly for
typing only) so that mypyc compiles every access between packets, stations, TCP
connections and the channel to a native field access.
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING

from coorp.sim.packets import Packet

if TYPE_CHECKING:
    from coorp.sim.station import Station

__all__ = ["ls_burst"]


def ls_burst(st: Station, ls: deque[Packet], head: Packet, now: int) -> None:
    """``head`` just left priority queue ``ls`` for its ring: hand over the queue's later
    packets to the same receiver too, in their order, skipping the others', up to one
    A-MPDU (``bulk_burst`` packets with ``head``) and the room in the ring. The driver
    serves the queue of the oldest packet's receiver this way, then the next oldest's:
    first come, first served between receivers, as ns-3's queue scheduler. TCP acks the
    hooks gate (``AckGateHooks``) end a burst: they are asked about at the head only."""
    left = st._ls_left[head.ac]
    dst = head.dst
    ring = st.rings[head.ac]
    budget = st.bulk_burst - head.count
    gated = st.ack_hooks is not None
    i = 0
    while budget > 0 and left.get(dst, 0) > 0 and i < len(ls):
        p = ls[i]
        if p.dst is not dst:
            i += 1
            continue
        if gated and p.flow.gate_acks:
            return
        if p.ticket > st.tcp_out[p.ac] and st.fifo:
            return  # a FIFO kernel queue: TCP segments queued before it go first
        room = st.capacity - ring.n
        if room <= 0:
            return
        k = min(p.count, room, budget)
        if k < p.count:
            ls[i] = p.split(k)  # the rest stays in place; the ring or the budget is full
        else:
            del ls[i]
        st._enqueue_ls(p, now)
        budget -= k
