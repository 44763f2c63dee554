"""The driver's queues in front of the NIC ring: per-receiver bursts into a shared ring
(A-MPDUs per receiver and TID), the kernel queue's bound and order, held acks.

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

The kernel queue (``hw_queue.kernel_queue_packets``, ``kernel_queue_fifo``; off by
default, and then none of this runs): with a bound ``Station.kernel_limit`` a station
holds at most that many packets per category in front of its ring — TCP segments
(``coorp.sim.tcp`` counts them in and out), LS datagrams and acks together — and drops
what arrives at a full queue (:func:`kernel_admit`; a tail drop, as Linux's qdisc or
``coorp emulate``'s queue). With ``Station.fifo`` an LS packet carries a ticket, the
station's count of TCP segments of its category queued when it arrived, and reaches the
ring only once as many have left (``Station.tcp_in``, ``tcp_out``): one FIFO, not
fq_codel's sparse-flow priority. The bulk stops at the oldest waiting LS packet's place
(:func:`fifo_room`) and the LS go on when the segments ahead have left
(:func:`fifo_refill`). :func:`hold_acks`: what the driver does when hooks hold acks.

A TCP connection's packets between the two drivers: :func:`tcp_dequeued` hands a run of
segments from the kernel queue to the MAC, which the receiver's MAC then expects in that
order; :func:`mac_done` and :func:`release_held` are its reordering buffer (802.11-2016
10.24.4): packets delivered ahead of one still on its way wait for it, or for its drop.

The one import circle kept on purpose (speed): ``packets``, ``station``, ``mac``,
``_ungated``, ``_txq``, ``tcp``, ``congestion`` and ``sack`` name each other's classes
(mostly for typing only) so that mypyc compiles every access between packets, stations,
TCP connections and the channel to a native field access.
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING

from coorp._errors import InvariantError
from coorp.scenario import AccessCategory
from coorp.sim.driver import FOREVER
from coorp.sim.events import PRIO_CONTROL
from coorp.sim.packets import FlowState, Packet

if TYPE_CHECKING:
    from coorp.sim.station import BulkTransfer, Station
    from coorp.sim.tcp import TcpConnection

__all__ = [
    "fifo_refill", "fifo_room", "hold_acks", "in_host", "kernel_admit", "kernel_out",
    "kernel_segments", "ls_burst", "mac_done", "release_held", "tcp_dequeued",
]  # fmt: skip


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


def hold_acks(st: Station, until: int, now: int) -> None:
    """The hooks held ``st``'s acks back: ask again by ``until`` (``FOREVER``: at the
    next refill only)."""
    if until <= now:
        raise InvariantError(
            f"{type(st._hooks).__name__}.admit_acks held acks at {now} ns with "
            f"a time to ask again, {until} ns, that is not in the future"
        )
    st.ack_holds += 1
    event = st._ack_event
    if event is not None and not event.cancelled and event.time_ns <= until:
        return  # already asked again no later than that
    if event is not None:
        event.cancel()
        st._ack_event = None
    if until < FOREVER:
        st._ack_event = st.loop.call_at(until, PRIO_CONTROL, st._ack_timer)


def kernel_admit(st: Station, p: Packet, limit: int) -> bool:
    """Room for ``p`` in ``st``'s kernel queue of its category (bounded at ``limit``)?
    What does not fit is dropped there: a message's packet is lost (as after the MAC's
    last retry), an ack never sent (the next acknowledges as much). False when none of
    ``p`` fits; else ``p`` keeps what fits, counted in."""
    n = st.kernel_n[p.ac]
    if n + p.count > limit:
        if n >= limit:
            _kernel_drop(st, p)
            return False
        _kernel_drop(st, p.split(limit - n))
    st.kernel_n[p.ac] = n + p.count
    return True


def _kernel_drop(st: Station, p: Packet) -> None:
    st.kernel_drops += p.count
    st.dropped_packets += p.count
    p.flow.dropped_packets += p.count
    if p.message is not None:
        assert st.channel is not None
        st.channel.receiver.dropped(p, st.loop.now_ns)


def fifo_room(st: Station, transfer: BulkTransfer) -> int:
    """How many of ``transfer``'s segments may move before an LS packet of their category
    waiting behind them; -1: no limit (no LS waiting, or no TCP: the endless queue of a
    transfer without the TCP model never holds one)."""
    if transfer.tcp is None:
        return -1
    ac = transfer.flow.ac
    ls = st.ls_queues[ac]
    if not ls:
        return -1
    room = ls[0].ticket - st.tcp_out[ac]
    return room if room > 0 else 0


def fifo_refill(st: Station) -> None:
    """After a refill: again while an LS packet the bulk has let through can move (the
    segments ahead of it gone, room in its ring); stop when a pass moves nothing (the
    hooks may hold a packet that could otherwise go: asking again would never end)."""
    while any(
        ls and ls[0].ticket <= st.tcp_out[ac] and st.rings[ac].n < st.capacity
        for ac, ls in st.ls_queues.items()
    ):
        before = _ring_packets(st)
        st._refill_once()
        if _ring_packets(st) == before:
            return


def _ring_packets(st: Station) -> int:
    rings = st.rings
    return rings[AccessCategory.BE].n if st.shared else sum(r.n for r in rings.values())


def kernel_segments(flow: FlowState, n: int) -> int:
    """``n`` new segments of TCP flow ``flow`` enter its station's kernel queue: with a
    bound, those that do not fit are dropped there (sent, so lost to TCP: the ACKs reveal
    it); with a FIFO, counted in. How many entered."""
    st = flow.src
    ac = flow.ac
    limit = st.kernel_limit
    if limit:
        room = limit - st.kernel_n[ac]
        if n > room:
            lost = n - room if room > 0 else n
            st.kernel_drops += lost
            st.dropped_packets += lost
            flow.dropped_packets += lost
            n -= lost
        st.kernel_n[ac] += n
    if st.fifo:
        st.tcp_in[ac] += n
    return n


def tcp_dequeued(conn: TcpConnection, pkt: Packet) -> None:
    """The driver took ``pkt`` (a run of ``conn.head_run``) from ``conn``'s kernel queue:
    its sequence numbers, the receiver's MAC expects its pids (``conn._mac``), and a
    bounded or FIFO queue counts them out."""
    head = conn._queue[0]
    pkt.seq_base = head[0] - pkt.pid
    head[0] += pkt.count
    head[1] -= pkt.count
    if head[1] == 0:
        conn._queue.popleft()
    mac = conn._mac
    end = pkt.pid + pkt.count
    if mac and mac[-1][1] == pkt.pid:
        mac[-1][1] = end
    else:
        mac.append([pkt.pid, end])
    st = pkt.src
    if st.kernel_limit or st.fifo:
        kernel_out(st, pkt)


def mac_done(conn: TcpConnection, pid: int, k: int) -> None:
    """Packets ``pid .. pid + k - 1`` of ``conn`` are no longer outstanding at the MAC
    (delivered or dropped): the receiver's MAC stops waiting for them."""
    mac = conn._mac
    for i, iv in enumerate(mac):
        lo, hi = iv
        if lo <= pid < hi:
            if pid == lo:
                iv[0] = pid + k
            elif pid + k == hi:
                iv[1] = pid
            else:
                mac.insert(i + 1, [pid + k, hi])
                iv[1] = pid
            if iv[0] == iv[1]:
                del mac[i]
            return


def release_held(conn: TcpConnection, now: int) -> None:
    """The receiver's MAC passes up the held packets ahead of the oldest outstanding one,
    in order (its reordering buffer, 802.11-2016 10.24.4)."""
    oldest = conn._mac[0][0] if conn._mac else -1
    held = conn._held
    for pid in sorted(held):
        if 0 <= oldest < pid:
            break
        seq, k, size = held.pop(pid)
        conn._receive(seq, k, size, now)


def in_host(conn: TcpConnection, seq: int) -> bool:
    """Whether a copy of TCP segment ``seq`` waits in its station's kernel queue or NIC
    ring (Linux's ``skb_still_in_host_queue``: such a segment is not resent)."""
    for first, count, _ in conn._queue:
        if first <= seq < first + count:
            return True
    flow = conn.flow
    for p in flow.src.rings[flow.ac]:
        if p.flow is flow:
            lo = p.seq_base + p.pid
            if lo <= seq < lo + p.count:
                return True
    return False


def kernel_out(st: Station, pkt: Packet) -> None:
    """The driver took TCP segments ``pkt`` from ``st``'s kernel queue to the ring."""
    if st.kernel_limit:
        st.kernel_n[pkt.ac] -= pkt.count
    if st.fifo:
        st.tcp_out[pkt.ac] += pkt.count
