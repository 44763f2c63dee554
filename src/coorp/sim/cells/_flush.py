"""What a station drops when it leaves a BSS: the queued traffic of some of its flows."""

from __future__ import annotations

from collections.abc import Callable

from coorp.sim.packets import FlowState, Packet
from coorp.sim.station import Ring, Station

__all__ = ["purge"]


def purge(st: Station, drop: Callable[[FlowState], bool], now: int) -> int:
    """Drop every queued packet and bulk transfer of ``st``'s flows that ``drop`` selects,
    as a NIC does when a station leaves a BSS (mac80211 flushes the station's queues at
    disassociation): LS packets and acks waiting for the ring, the rings' packets (the
    hooks hear of each as not delivered; a lost message's fragments are not repaired),
    bulk transfers not yet handed over (their bytes are never sent, their completion
    never runs). Only while none of its frames is on the air (:class:`Cells` purges on
    an idle medium). Returns the packets dropped."""
    dropped = 0
    for q in st.ls_queues.values():
        gone = [p for p in q if drop(p.flow)]
        if gone:
            keep = [p for p in q if not drop(p.flow)]
            q.clear()
            q.extend(keep)
            for p in gone:
                dropped += _dropped(st, p)
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
    st.drop_transfers(drop)
    return dropped


def _dropped(st: Station, p: Packet) -> int:
    st.dropped_packets += p.count
    p.flow.dropped_packets += p.count
    if p.message is not None:
        p.message.lost = True
    return p.count
