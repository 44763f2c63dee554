"""Selective acknowledgments for the simulated TCP connections (``[tcp] sack = true``).

Off by default (the senders then recover as Linux's reno emulation does: NewReno, one
hole per round trip). On, both ends do what Linux does with ``net.ipv4.tcp_sack = 1`` and
``net.ipv4.tcp_recovery = 0`` (RACK off: loss is inferred from the SACK scoreboard, as
RFC 6675 and ns-3's ``TcpTxBuffer`` do):

* **The receiver** (RFC 2018, ``tcp_sack_new_ofo_skb``) keeps up to four blocks of
  out-of-order segments, the one the latest segment joined first, and every ack it sends
  while a hole is open carries the first three (what fits beside the timestamps option:
  4 + 8 bytes per block on the ack). No D-SACK.
* **The sender** (``tcp_sacktag_write_queue``) marks each segment a block covers SACKED
  (it no longer counts as in flight, nor as lost or retransmitted); blocks the previous
  ack carried are skipped, as Linux's ``recv_sack_cache`` does.
* **Recovery** (``tcp_fastretrans_alert``): three SACKed segments (``tcp_reordering``)
  start it; each duplicate ack then marks lost every segment with at least three SACKed
  segments above it (``tcp_update_scoreboard`` → ``tcp_mark_head_lost``, walked from a
  hint so an ack costs only what moved), every lost segment is sent again in order while
  PRR's window allows, and recovery ends when ``high_seq`` is acknowledged. An RTO keeps
  the SACKed segments (``tcp_timeout_mark_lost``). An ack whose cumulative part gives no
  RTT sample takes the SACKed segments' (sent once: Karn), as ``tcp_ack_update_rtt``
  does. Not modelled: RACK, D-SACK undo, reneging.
* **Tail loss probes** (``[tcp] loss_probe``; Linux's TLP, ``tcp_early_retrans = 3``):
  in the Open state every ack that acknowledges data and every send arms the timer for
  a probe 2 SRTT later (+ 2 ms, or + the minimum RTO with one segment out; never later
  than the RTO) instead of the RTO (:func:`schedule_probe`). If it fires, one segment
  goes out past the window — the next new one, or the last sent again — and the RTO is
  armed from then (:func:`loss_probe`); an ack beyond a resent probe means it repaired a
  loss: the window is reduced as by a CWR (``tcp_process_tlp_ack``).
* **SACK compression** (``[tcp] comp_sack_nr``; Linux's ``tcp_comp_sack_nr``, 44): a
  receiver holding out-of-order data acks the first three segments past each
  ``rcv_nxt`` at once (``dup_ack_counter``), then one ack for up to ``comp_sack_nr`` of
  them, or after min(1 ms, SRTT / 20) (:func:`ofo_ack`); any ack sent ends the wait.

Functions on :class:`~coorp.sim.tcp.TcpConnection`'s state, like ``congestion``'s. The one
import circle kept on purpose (speed): ``packets``, ``station``, ``mac``, ``_ungated``,
``_txq``, ``tcp``, ``congestion`` and this module name each other's classes for mypyc's
native access.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from coorp.sim._txq import in_host
from coorp.sim.congestion import (
    DISORDER,
    DUPACK_THRESHOLD,
    EVER_RETX,
    LOSS,
    LOST,
    OPEN,
    RECOVERY,
    RETRANS,
    SACKED,
    enter_recovery,
    mark_lost,
    prr,
    rto_now,
    rtt_sample,
    to_open,
    undo,
)  # fmt: skip
from coorp.sim.events import PRIO_TRAFFIC

if TYPE_CHECKING:
    from coorp.sim.tcp import TcpConnection

__all__ = [
    "MAX_BLOCKS", "ack_blocks", "loss_probe", "ofo_ack", "on_sack_ack", "received_ahead",
    "sack_ack_bytes", "schedule_probe", "tag",
]  # fmt: skip

#: A tail loss probe's allowance beside 2 SRTT with more than one segment out
#: (``TCP_TIMEOUT_MIN_US``, 2 ms).
_TLP_MIN_NS: Final = 2_000_000
#: How long a receiver holds a compressed SACK at most (``tcp_comp_sack_delay_ns``).
_COMP_SACK_DELAY_NS: Final = 1_000_000
#: Blocks an ack carries beside the timestamps option (Linux: 3), and the receiver keeps
#: (``TCP_NUM_SACKS``: 4).
MAX_BLOCKS: Final = 3
_KEPT_BLOCKS: Final = 4


# -- the receiver -----------------------------------------------------------------------------
def received_ahead(c: TcpConnection, s: int, ooo: set[int]) -> None:
    """Segment ``s``, beyond a hole, joined ``ooo``: the block it joins goes first."""
    if not c.sack:
        return
    blocks = c.sack_blocks
    hit: list[int] | None = None
    for b in blocks:
        if b[1] == s:
            b[1] = s + 1
            hit = b
            break
        if b[0] == s + 1:
            b[0] = s
            hit = b
            break
    if hit is None:
        hit = [s, s + 1]
    while hit[0] - 1 in ooo:
        hit[0] -= 1
    while hit[1] in ooo:
        hit[1] += 1
    lo, hi = hit[0], hit[1]
    kept = [hit]
    for b in blocks:  # the others, oldest last, without those the block now covers
        if b is not hit and (b[1] < lo or b[0] > hi) and len(kept) < _KEPT_BLOCKS:
            kept.append(b)
    c.sack_blocks = kept


def ack_blocks(c: TcpConnection) -> tuple[int, ...]:
    """The blocks the next ack carries, flat ``(first, end, ...)``: those above ``rcv_nxt``."""
    rcv = c.rcv_nxt
    blocks = [b for b in c.sack_blocks if b[1] > rcv]
    c.sack_blocks = blocks
    out: list[int] = []
    for b in blocks[:MAX_BLOCKS]:
        out.append(b[0])
        out.append(b[1])
    return tuple(out)


def sack_ack_bytes(base: int, blocks: tuple[int, ...]) -> int:
    """An ack's IP bytes with its SACK option (kind, length and two NOPs, 8 per block)."""
    return base + 4 + 4 * len(blocks) if blocks else base


# -- the sender -------------------------------------------------------------------------------
def tag(c: TcpConnection, blocks: tuple[int, ...]) -> None:
    """An ack's blocks reached the sender: mark what they newly cover SACKED."""
    una, nxt, base, flags = c.snd_una, c.snd_nxt, c.base, c.flags
    seen = c.sack_seen
    newly = 0
    lo_seq = hi_seq = -1  # the lowest and highest newly SACKed segments sent once
    for j in range(0, len(blocks), 2):
        seq = max(blocks[j], una)
        hi = min(blocks[j + 1], nxt)
        while seq < hi:
            skip = seq
            for k in range(0, len(seen), 2):  # already tagged from the previous ack
                if seen[k] <= seq < seen[k + 1]:
                    skip = seen[k + 1]
            if skip > seq:
                seq = skip
                continue
            i = seq - base
            f = flags[i]
            if not f & SACKED:
                if f & LOST:
                    c.lost_out -= 1
                if f & RETRANS:
                    c.retrans_out -= 1
                flags[i] = (f | SACKED) & ~(LOST | RETRANS)
                newly += 1
                if not f & EVER_RETX:  # Karn: a sample only from a segment sent once
                    if lo_seq < 0 or seq < lo_seq:
                        lo_seq = seq
                    if seq > hi_seq:
                        hi_seq = seq
                if seq < c.lost_hint:
                    c.lost_cnt += 1
                if seq >= c.high_sacked:
                    c.high_sacked = seq + 1
            seq += 1
    c.sack_seen = blocks
    c.sacked_out += newly
    c.newly_sacked += newly
    if lo_seq >= 0:  # Linux's first_sackt and last_sackt, in sequence order
        c.sack_first_t = c.seg_sent[lo_seq - base]
        c.sack_last_t = c.seg_sent[hi_seq - base]


def _mark_head_lost(c: TcpConnection, packets: int) -> int:
    """``tcp_mark_head_lost``: mark lost each segment below the point where more than
    ``packets`` SACKed segments lie under it; how many were newly marked."""
    base, flags, nxt = c.base, c.flags, c.snd_nxt
    seq = c.lost_hint
    cnt = c.lost_cnt
    marked = 0
    while seq < nxt:
        f = flags[seq - base]
        if f & SACKED:
            if cnt + 1 > packets:
                break
            cnt += 1
        elif not f & LOST:
            mark_lost(c, seq)
            marked += 1
        seq += 1
    c.lost_hint = seq
    c.lost_cnt = cnt
    return marked


def on_sack_ack(
    c: TcpConnection, acked: int, sacked_acked: int, head_retx: bool, sampled: bool, now: int
) -> None:
    """An ack (``acked`` segments newly acknowledged, ``sacked_acked`` of them SACKed
    before; 0 for a duplicate ack; ``sampled``: the cumulative ack gave an RTT sample)
    after its blocks were tagged: the SACK's RTT sample if the cumulative ack gave none
    (``tcp_ack_update_rtt``), the recovery states, then the window
    (``tcp_fastretrans_alert``, ``tcp_cong_control``)."""
    newly = c.newly_sacked
    c.newly_sacked = 0
    first_t, last_t = c.sack_first_t, c.sack_last_t
    c.sack_first_t = c.sack_last_t = -1
    if first_t >= 0 and not sampled:
        rtt_sample(c, now - first_t)
        c.cc.pkts_acked(c, (now - last_t) // 1000, now)
    c.sacked_out -= sacked_acked
    if c.snd_una >= c.lost_hint:
        c.lost_hint = c.snd_una
        c.lost_cnt = 0
    else:
        c.lost_cnt -= sacked_acked
    delivered = acked - sacked_acked + newly
    if c.tlp_high_seq and c.snd_una >= c.tlp_high_seq:
        _probe_acked(c, acked == 0 and newly == 0)
    if c.ca_state == LOSS:  # the lost segments go out as the window opens
        if not acked:
            return
        if not head_retx:
            undo(c)  # the original arrived: the timeout was spurious (F-RTO)
        elif c.snd_una >= c.high_seq:
            to_open(c)
        if c.ca_state == LOSS:
            c.cc.cong_avoid(c, delivered, now)  # slow start from one segment
            return
    if c.ca_state == RECOVERY and c.snd_una >= c.high_seq:
        c.cwnd = c.ssthresh  # tcp_end_cwnd_reduction
        to_open(c)
    # tcp_force_fast_retransmit: the highest SACKed segment starts beyond snd_una + 3
    force = newly > 0 and c.high_sacked - 1 > c.snd_una + DUPACK_THRESHOLD
    do_lost = acked == 0 or force
    newly_lost = 0
    if c.ca_state != RECOVERY:
        if c.lost_out == 0 and c.sacked_out < DUPACK_THRESHOLD:  # tcp_time_to_recover
            left = c.sacked_out or c.lost_out or c.retrans_out
            c.ca_state = DISORDER if left else OPEN  # tcp_try_keep_open
            if acked:
                c.cc.cong_avoid(c, delivered, now)
            return
        enter_recovery(c)
        do_lost = True
        if c.sacked_out < DUPACK_THRESHOLD:  # entered on lost_out: the head at least
            f = c.flags[c.snd_una - c.base]
            if not f & (SACKED | LOST):
                mark_lost(c, c.snd_una)
                newly_lost = 1
            do_lost = False
    if do_lost:
        newly_lost += _mark_head_lost(c, c.sacked_out - DUPACK_THRESHOLD)
    prr(c, delivered, newly_lost, acked > 0)


def _probe_acked(c: TcpConnection, dupack: bool) -> None:
    """``tcp_process_tlp_ack`` (no D-SACK): an ack at or beyond the probe's ``snd_nxt``."""
    if not c.tlp_retrans:
        c.tlp_high_seq = 0  # a new segment's probe, acknowledged
    elif c.snd_una > c.tlp_high_seq:  # the resent segment repaired a loss: CWR, at once
        c.tlp_high_seq = 0
        c.probe_recoveries += 1
        c.high_seq = c.snd_nxt
        c.cwnd_cnt = 0
        c.ssthresh = c.cc.ssthresh(c)
        c.cwnd = c.ssthresh
    elif dupack:
        c.tlp_high_seq = 0  # the original and the probe both arrived: no loss


def schedule_probe(c: TcpConnection, now: int, advancing: bool) -> bool:
    """``tcp_schedule_loss_probe``: in the Open state with data out, the timer becomes a
    probe's, 2 SRTT from now (+ 2 ms, or + the minimum RTO with one segment out: the
    receiver's delayed ack) and no later than the RTO (from now when an ack ``advancing``
    it, else from the oldest segment's send); False otherwise (the RTO stays)."""
    out = c.snd_nxt - c.snd_una
    if out == 0 or c.ca_state != OPEN:
        return False
    if c.srtt_ns:
        pto = 2 * c.srtt_ns + (c.params.min_rto_ns if out == 1 else _TLP_MIN_NS)
    else:
        pto = c.params.initial_rto_ns
    rto = rto_now(c) if advancing else c.seg_sent[c.snd_una - c.base] + rto_now(c) - now
    c.arm_timer(now + (min(pto, rto) if rto > 0 else pto), True)
    return True


def loss_probe(c: TcpConnection, now: int) -> None:
    """``tcp_send_loss_probe``: one probe per episode, past the window: a new segment if
    the application has one and the receive window room, else the last one sent again
    (not if a copy still waits in the station). The RTO then runs from now; without a
    probe it runs from the oldest segment's send."""
    if not c.tlp_high_seq:
        c.tlp_retrans = False
        sent = 0
        was_empty = not c.sock.remaining_bytes
        if c._app and c.snd_nxt - c.snd_una < c.rwnd:
            sent = c._new_segments(c._app[0], 1, now)
        elif not in_host(c, c.snd_nxt - 1):
            s = c.snd_nxt - 1
            i = s - c.base
            c.flags[i] |= EVER_RETX  # not RETRANS: Linux's probe is not in retrans_out
            c.seg_sent[i] = now
            c.retransmits += 1
            c.flow.retransmitted_packets += 1
            c._send_event(now)
            c._enqueue(s, 1, c.seg_size[i])
            c.tlp_retrans = True
            sent = 1
        if was_empty and c.sock.remaining_bytes:
            c.flow.src.add_transfer(c.sock)
        if sent:
            c.tlp_high_seq = c.snd_nxt
            c.loss_probes += 1
            c.arm_timer(now + rto_now(c))
            return
    c.arm_timer(max(c.seg_sent[c.snd_una - c.base] + rto_now(c), now + 1))


def ofo_ack(c: TcpConnection, now: int) -> None:
    """``__tcp_ack_snd_check`` for a segment that arrived out of order, with SACK
    compression: the first three past each ``rcv_nxt`` are acked at once (the sender's
    duplicate-ack threshold), later ones wait for the ``comp_sack_nr``-th or for the timer,
    min(1 ms, SRTT / 20) after the first of them (the receiver's RTT taken as the path's:
    Linux's ``rcv_rtt_est``); any ack sent meanwhile takes them along."""
    if c.compressed_acks >= c.params.comp_sack_nr:
        c._ack_now()
        return
    if c.comp_rcv_nxt != c.rcv_nxt:
        c.comp_rcv_nxt = c.rcv_nxt
        c.dup_ack_counter = 0
    if c.dup_ack_counter < DUPACK_THRESHOLD:
        c.dup_ack_counter += 1
        c._ack_now()
        return
    c.compressed_acks += 1
    if c.comp_deadline >= 0:
        return  # the timer is running
    c.comp_deadline = now + min(_COMP_SACK_DELAY_NS, c.srtt_ns // 20)
    ev = c.comp_event
    if ev is None or ev.time_ns > c.comp_deadline:
        if ev is not None:
            ev.cancel()
        c.comp_event = c.loop.call_at(c.comp_deadline, PRIO_TRAFFIC, _comp_sack_timer, c)


def _comp_sack_timer(c: TcpConnection) -> None:
    """``tcp_compressed_ack_kick``: the compressed SACKs go out as one ack."""
    c.comp_event = None
    deadline = c.comp_deadline
    if deadline < 0:
        return  # an ack went out meanwhile
    now = c.loop.now_ns
    if now < deadline:  # an earlier timer, since cancelled by an ack and armed again
        c.comp_event = c.loop.call_at(deadline, PRIO_TRAFFIC, _comp_sack_timer, c)
        return
    c.comp_deadline = -1
    if c.compressed_acks:
        c._ack_now()
