"""TCP connections for bulk flows (``[tcp] sender = "reno" | "cubic"``; off by default).
One :class:`TcpConnection` per bulk flow with TCP acks, in segments numbered from 0: a sender
whose window gates the station's kernel queue (Linux's ``tcp_write_xmit``; its bound and order:
``coorp.sim._txq``), a receiver whose delayed ACKs (and quickacks) clock it, ``tcp_ack``'s
growth, fast recovery with PRR, the RTO with F-RTO undo (with SACK, tail loss probes:
``coorp.sim.sack``) and slow start after idle. The model and what it leaves out:
docs/simulator.md, "TCP senders". The one import circle kept on purpose (speed): this module,
``congestion``, ``sack``, ``packets``, ``station``, ``mac``, ``_ungated`` and ``_txq`` name
each other's classes for mypyc's native access."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Final

from coorp._errors import UsageError
from coorp.sim._txq import in_host, kernel_segments, mac_done, release_held
from coorp.sim.congestion import (
    EVER_RETX,
    LOST,
    OPEN,
    RECOVERY,
    RETRANS,
    SACKED,
    CongestionControl,
    TcpParams,
    cwnd_restart,
    cwnd_validate,
    enter_loss,
    on_dupack,
    on_new_ack,
    rto_now,
    rtt_sample,
)  # fmt: skip
from coorp.sim.events import PRIO_MEDIUM, PRIO_TRAFFIC, Event, EventLoop
from coorp.sim.packets import TCP_ACK_BYTES, FlowState, Packet
from coorp.sim.sack import (
    ack_blocks,
    loss_probe,
    ofo_ack,
    on_sack_ack,
    received_ahead,
    sack_ack_bytes,
    schedule_probe,
    tag,
)  # fmt: skip
from coorp.sim.station import BulkTransfer

__all__ = ["ACK_STEP", "TCP_IP_HEADER_BYTES", "TcpConnection"]

#: IPv4 (20) + TCP (20) + timestamps option (12).
TCP_IP_HEADER_BYTES: Final = 52
#: In-order segments per ACK; a run of ACKs acknowledges ``seq_base + ACK_STEP * pid``.
ACK_STEP: Final = 2
#: A window that has not been reduced yet (Linux's TCP_INFINITE_SSTHRESH).
INFINITE_SSTHRESH: Final = 0x7FFFFFFF


class TcpConnection:
    """The sender and the receiver of one bulk flow (see the module docstring)."""

    def __init__(
        self, flow: FlowState, ack_flow: FlowState, params: TcpParams, cc: CongestionControl,
        *, loop: EventLoop, packet_bytes: int, alloc_pids: Callable[[int], int],
        trace: bool = False,
    ) -> None:  # fmt: skip
        self.flow = flow
        self.ack_flow = ack_flow
        self.params = params
        self.cc = cc
        self.loop = loop
        self.packet_bytes = packet_bytes
        self.mss = packet_bytes - TCP_IP_HEADER_BYTES
        self._alloc_pids = alloc_pids
        #: What the station sees: the segments in the kernel queue.
        self.sock = BulkTransfer(flow, None, None, True)
        self.sock.remaining_bytes = 0
        self.sock.tcp = self
        #: Transfers with bytes not yet segmented (their ``remaining_bytes``).
        self._app: deque[BulkTransfer] = deque()
        #: [first seq, end seq (-1: open), bytes of its last segment, transfer] in order.
        self._spans: deque[tuple[int, int, int, BulkTransfer]] = deque()
        self._open_span_start = -1
        self.snd_una = 0
        self.snd_nxt = 0
        self.cwnd = params.initial_window
        self.cwnd_cnt = 0
        self.ssthresh = INFINITE_SSTHRESH
        self.rwnd = max(params.receive_window_bytes // self.mss, 1)
        self.prior_cwnd = self.prior_ssthresh = 0
        self.ca_state = OPEN
        self.high_seq = 0
        self.sacked_out = 0  # SACKed segments, or duplicate ACKs standing for them (no SACK)
        self.sack = params.sack  # the scoreboard's state: coorp.sim.sack
        self.sack_blocks: list[list[int]] = []
        self.sack_seen: tuple[int, ...] = ()
        self.newly_sacked = self.lost_hint = self.lost_cnt = self.high_sacked = 0
        self.sack_first_t = self.sack_last_t = -1  # send times of what an ack newly SACKed
        self.lost_out = self.retrans_out = 0
        self.prr_delivered = self.prr_out = 0
        self.retx_hint = 0
        #: Per segment from ``base``: bytes, last send time, flags.
        self.base = 0
        self.seg_size: list[int] = []
        self.seg_sent: list[int] = []
        self.flags: list[int] = []
        #: The kernel queue: [first seq, count, bytes each] runs in send order.
        self._queue: deque[list[int]] = deque()
        self.is_cwnd_limited_flag = False
        self.max_packets_out = 0
        self.cwnd_usage_seq = 0
        self.lsndtime = -1
        self.srtt_ns = 0  # RTO (RFC 6298 or Linux's: congestion.rtt_sample) from here
        self.rttvar_ns = self.mdev_ns = self.mdev_max_ns = self.rtt_seq = 0
        self.rto_ns = params.initial_rto_ns
        self.backoff = 0
        #: Timeouts since the last ACK of new data (Linux's icsk_retransmits).
        self.rto_count = 0
        self._rto_deadline = -1
        self._rto_event: Event | None = None
        self.probe_pending = False  # the timer is a tail loss probe's (coorp.sim.sack)
        self.tlp_high_seq = self.loss_probes = self.probe_recoveries = 0
        self.tlp_retrans = False
        self.rcv_nxt = 0
        self._ooo: set[int] = set()
        #: The receiver's MAC reordering (802.11-2016 10.24.4): [first, end) pid ranges
        #: handed to the NIC and neither delivered nor dropped, oldest first; packets
        #: delivered ahead of them wait in ``_held`` (first pid -> (seq, count, bytes)).
        self._mac: deque[list[int]] = deque()
        self._held: dict[int, tuple[int, int, int]] = {}
        self._pending = 0  # in-order segments not yet acknowledged
        self._quick = 0  # quickack mode (icsk_ack.quick): ACKs left to send one per segment
        q = max(params.receive_window_bytes // (2 * self.mss), 2)
        self._quick_max = min(q, params.quickacks)
        self._gro = params.gro_segments  # 0: an ACK per ACK_STEP segments
        self._gro_seq = self._gro_k = 0  # GRO's batch at this instant: first, how many
        self._lrcv = -1  # when in-order data last arrived (icsk_ack.lrcvtime)
        self._delack_deadline = -1
        self._delack_event: Event | None = None
        self.compressed_acks = self.dup_ack_counter = self.comp_rcv_nxt = 0  # sack.ofo_ack
        self.comp_deadline = -1
        self.comp_event: Event | None = None
        self.segments_sent = self.retransmits = self.fast_recoveries = self.timeouts = 0
        self.spurious_timeouts = self.idle_restarts = self.duplicate_segments = 0
        self.dupacks_received = self.delayed_acks = 0
        self.max_cwnd = self.cwnd
        #: (time, cwnd, ssthresh) at every change, if traced.
        self.trace: list[tuple[int, int, int]] | None = [] if trace else None
        self.cc.init(self, loop.now_ns)

    # -- state the congestion control reads ------------------------------------------------
    @property
    def packets_out(self) -> int:
        return self.snd_nxt - self.snd_una

    def in_flight(self) -> int:
        """``tcp_packets_in_flight``: segments out in the network by the sender's count."""
        return self.snd_nxt - self.snd_una - self.sacked_out - self.lost_out + self.retrans_out

    # -- the application -------------------------------------------------------------------
    def add_transfer(self, t: BulkTransfer, now: int) -> None:
        """The application writes ``t``'s bytes to the socket."""
        sock = self.sock
        if sock.remaining_bytes and t.gated != sock.gated:
            raise UsageError(
                f"flow {self.flow.name!r}: a {'' if t.gated else 'un'}gated transfer while "
                f"{'' if sock.gated else 'un'}gated data of the same TCP connection waits"
            )
        sock.gated = t.gated
        if (
            self.params.slow_start_after_idle
            and self.packets_out == 0
            and self.lsndtime >= 0
            and now - self.lsndtime > self.rto_ns
        ):
            cwnd_restart(self, now - self.lsndtime)
            self.record(now)
        t.remaining_bytes = t.total_bytes
        self._app.append(t)
        self._push(now)

    # -- sending ---------------------------------------------------------------------------
    def _push(self, now: int) -> None:
        """Send what the window allows: lost segments first, then new data."""
        was_empty = not self.sock.remaining_bytes
        sent = 0
        if self.ca_state >= RECOVERY:
            sent += self._retransmit(now)
        app = self._app
        rwnd = self.rwnd
        while app and self.in_flight() < self.cwnd:
            room = rwnd - (self.snd_nxt - self.snd_una)
            if room <= 0:
                break
            n = self._new_segments(app[0], min(room, self.cwnd - self.in_flight()), now)
            if n == 0:
                break
            sent += n
        if app or sent:
            limited = self.in_flight() >= self.cwnd and bool(app)
            if sent or limited:
                cwnd_validate(self, limited)
                if self.params.loss_probe:
                    schedule_probe(self, now, False)  # tcp_write_xmit's, after sending
        if was_empty and self.sock.remaining_bytes:
            self.flow.src.add_transfer(self.sock)

    def _new_segments(self, t: BulkTransfer, quota: int, now: int) -> int:
        """Up to ``quota`` new segments of transfer ``t`` into the kernel queue."""
        size = self.packet_bytes
        left = t.remaining_bytes
        if left is None:
            n = quota
        else:
            full = left // size
            if full == 0:
                size = left
                n = 1
            else:
                n = min(quota, full)
        seq = self.snd_nxt
        if self._open_span_start < 0:
            self._open_span_start = seq
        if left is not None:
            left -= n * size
            t.remaining_bytes = left
            if left == 0:
                self._app.popleft()
                self._spans.append((self._open_span_start, seq + n, size, t))
                self._open_span_start = -1
        self._send_event(now)
        if self.packets_out == 0:
            self.arm_timer(now + self.rto_ns)
        self.seg_size.extend([size] * n)
        self.seg_sent.extend([now] * n)
        self.flags.extend([0] * n)
        self.snd_nxt = seq + n
        self.segments_sent += n
        if self.ca_state == RECOVERY:
            self.prr_out += n
        self._enqueue(seq, n, size)
        return n

    def _send_event(self, now: int) -> None:
        if self.in_flight() == 0:
            self.cc.on_tx_start(self, now)
        self.lsndtime = now

    def _enqueue(self, seq: int, n: int, size: int) -> None:
        if self.flow.src.kernel_limit or self.flow.src.fifo:  # hw_queue's kernel queue
            n = kernel_segments(self.flow, n)  # what fits (the rest is lost to TCP)
            if n == 0:
                return
        queue = self._queue
        if queue:
            last = queue[-1]
            if last[0] + last[1] == seq and last[2] == size:
                last[1] += n
                self.sock.remaining_bytes = (self.sock.remaining_bytes or 0) + n * size
                return
        queue.append([seq, n, size])
        self.sock.remaining_bytes = (self.sock.remaining_bytes or 0) + n * size

    def _retransmit(self, now: int) -> int:
        """Resend lost segments in order while the window allows (Recovery: the head)."""
        sent = 0
        seq = max(self.retx_hint, self.snd_una)
        newreno = self.ca_state == RECOVERY and not self.sack  # the head only
        end = self.snd_una + 1 if newreno else self.snd_nxt if self.sack else self.high_seq
        while seq < min(end, self.snd_nxt):
            i = seq - self.base
            f = self.flags[i]
            if not f & LOST or f & RETRANS:
                seq += 1
                continue
            if self.in_flight() >= self.cwnd:
                break
            if in_host(self, seq):
                break  # still in the station's queues: Linux does not resend it
            self.flags[i] = f | RETRANS | EVER_RETX
            self.retrans_out += 1
            self._send_event(now)
            self.seg_sent[i] = now
            self.retransmits += 1
            self.flow.retransmitted_packets += 1
            if self.ca_state == RECOVERY:
                self.prr_out += 1
            self._enqueue(seq, 1, self.seg_size[i])
            sent += 1
            seq += 1
        self.retx_hint = seq
        return sent

    # -- the station's driver --------------------------------------------------------------
    def head_run(self, k: int) -> tuple[int, int]:
        """(count, bytes each) of the next run the driver may take, at most ``k``."""
        head = self._queue[0]
        return (head[1] if head[1] < k else k), head[2]

    # -- the receiver ----------------------------------------------------------------------
    def on_data(self, p: Packet, pid: int, k: int, now: int) -> None:
        """Packets ``pid .. pid + k - 1`` of run ``p`` reached the receiver's MAC, which
        passes them up in the order they were sent (its reordering buffer): those ahead
        of one still on its way wait for it, or for its drop."""
        mac = self._mac
        head = mac[0]
        if pid == head[0]:  # the oldest outstanding: the common case
            head[0] += k
            if head[0] == head[1]:
                mac.popleft()
            self._receive(p.seq_base + pid, k, p.ip_bytes, now)
            if self._held:
                release_held(self, now)
            return
        mac_done(self, pid, k)
        self._held[pid] = (p.seq_base + pid, k, p.ip_bytes)

    def on_mac_drop(self, pid: int, now: int) -> None:
        """The MAC gave up on packet ``pid`` (its retry limit): the segment is lost, and
        the receiver's MAC passes up the ones it held behind it."""
        mac_done(self, pid, 1)
        if self._held:
            release_held(self, now)

    def _receive(self, seq: int, k: int, size: int, now: int) -> None:
        """Segments ``seq .. seq + k - 1`` (``size`` bytes each) reached TCP."""
        flow = self.flow
        ooo = self._ooo
        if seq == self.rcv_nxt and not ooo:
            # In order, no hole: the common case, one step.
            flow.delivered_packets += k
            flow.delivered_bytes += k * size
            if self._quick_max:
                self._data_recv(now)
            self._advance(seq + k, now)
            q = self._quick
            if q:  # quickack mode (tcp_in_quickack_mode): each segment acked at once
                j = q if q < k else k
                self._pending = 0
                self._send_acks(seq + 1, j, 1)
                seq, k = seq + j, k - j
                if not k:
                    return
            if self._gro:
                if not self._gro_k:  # flushed after the exchange's other runs (its poll)
                    self._gro_seq = seq
                    self.loop.call_at(now, PRIO_MEDIUM, self._gro_acks)
                self._gro_k += k
                return
            total = self._pending + k
            m = total // ACK_STEP
            self._pending = total - m * ACK_STEP
            if m:
                self._send_acks(seq + k - self._pending - ACK_STEP * (m - 1), m)
            if self._pending:
                self._arm_delack(now)
            return
        self._gro_acks()  # what GRO's batch holds is acked before this segment's ack
        for s in range(seq, seq + k):
            if s < self.rcv_nxt or s in ooo:
                self.duplicate_segments += 1
                if s < self.rcv_nxt and self._quick < self._quick_max:
                    self._quick = self._quick_max  # tcp_enter_quickack_mode: old data
                self._ack_now()
                continue
            flow.delivered_packets += 1
            flow.delivered_bytes += size
            if s > self.rcv_nxt:
                ooo.add(s)
                received_ahead(self, s, ooo)
                ofo_ack(self, now) if self.params.comp_sack_nr else self._ack_now()  # a dupack
                continue
            end = s + 1
            filled = bool(ooo)
            while end in ooo:
                ooo.discard(end)
                end += 1
            if self._quick_max:
                self._data_recv(now)
            self._advance(end, now)
            if filled or self._quick:
                self._ack_now()
            else:
                self._pending += 1
                if self._pending >= ACK_STEP:
                    self._ack_now()
                else:
                    self._arm_delack(now)

    def _gro_acks(self) -> None:
        """GRO's batch (the in-order segments delivered together) reaches TCP as super-
        segments of up to ``_gro``: each of more than one segment, or one with a segment
        pending, is acked at once (``__tcp_ack_snd_check``: more than one MSS received); a
        lone segment waits for the next or for the delayed-ACK timer."""
        seq, k, g, now = self._gro_seq, self._gro_k, self._gro, self.loop.now_ns
        if not k:
            return
        self._gro_k = 0
        full, rest = divmod(k, g)
        if full == 0 and rest + self._pending < 2:
            self._pending += rest
            self._arm_delack(now)
            return
        if full:
            self._pending = 0
            self._send_acks(seq + g, full, g)
        if rest >= 2 or (rest == 1 and not full):  # not full: a segment was pending
            self._pending = 0
            self._send_acks(seq + k, 1, g)
        elif rest == 1:
            self._pending = 1
            self._arm_delack(now)

    def _data_recv(self, now: int) -> None:
        """``tcp_event_data_recv``: first data, or data after a gap > RTO: quickack mode."""
        last = self._lrcv
        self._lrcv = now
        if (last < 0 or now - last > self.params.min_rto_ns) and self._quick < self._quick_max:
            self._quick = self._quick_max

    def _advance(self, end: int, now: int) -> None:
        """Segments up to ``end`` are in order: the application has their bytes."""
        start = self.rcv_nxt
        self.rcv_nxt = end
        spans = self._spans
        while spans and spans[0][0] < end:
            first, last, last_size, t = spans[0]
            lo = max(first, start)
            if end >= last:
                t.delivered_bytes += (last - lo - 1) * self.packet_bytes + last_size
                spans.popleft()
                if t.on_complete is not None:
                    t.on_complete(t, now)
            else:
                t.delivered_bytes += (end - lo) * self.packet_bytes
                break
        if not spans and self._app and self._open_span_start >= 0:
            t = self._app[0]
            lo = max(self._open_span_start, start)
            if end > lo:
                t.delivered_bytes += (end - lo) * self.packet_bytes

    def _ack_now(self) -> None:
        self._pending = 0
        self._send_acks(self.rcv_nxt, 1)

    def _send_acks(self, first_ack: int, m: int, step: int = ACK_STEP) -> None:
        """``m`` ACKs of ``first_ack``, ``first_ack + step``, ...: one run for ``ACK_STEP``,
        a packet each for quickacks (``step`` 1); each counts against quickack mode."""
        q = self._quick
        if q:
            self._quick = q - m if q > m else 0
        self._delack_deadline = -1  # any ACK sent clears it (tcp_event_ack_sent; ns-3 too)
        self.compressed_acks, self.comp_deadline = 0, -1  # and the compressed SACKs
        pid = self._alloc_pids(m)
        self.ack_flow.sent_packets += m
        if step == ACK_STEP:
            blocks = ack_blocks(self) if self.sack_blocks else ()
            ack = Packet(pid, self.ack_flow, sack_ack_bytes(TCP_ACK_BYTES, blocks), count=m)
            ack.seq_base = first_ack - ACK_STEP * pid
            ack.sack = blocks
            self.ack_flow.src.send_ls([ack])
            return
        acks: list[Packet] = []
        for i in range(m):
            ack = Packet(pid + i, self.ack_flow, TCP_ACK_BYTES)
            ack.seq_base = first_ack + step * i - ACK_STEP * (pid + i)
            acks.append(ack)
        self.ack_flow.src.send_ls(acks)

    def _arm_delack(self, now: int) -> None:
        if self._delack_deadline >= 0:
            return
        self._delack_deadline = now + self.params.delayed_ack_ns
        if self._delack_event is None:
            self._delack_event = self.loop.call_at(
                self._delack_deadline, PRIO_TRAFFIC, self._delack_timer
            )

    def _delack_timer(self) -> None:
        self._delack_event = None
        deadline = self._delack_deadline
        if deadline < 0:
            return
        now = self.loop.now_ns
        if now < deadline:
            self._delack_event = self.loop.call_at(deadline, PRIO_TRAFFIC, self._delack_timer)
            return
        self._delack_deadline = -1
        if self._pending:
            self.delayed_acks += 1
            self._ack_now()

    # -- the sender's ACKs -----------------------------------------------------------------
    def on_acks(self, p: Packet, pid: int, k: int, now: int) -> None:
        """ACKs ``pid .. pid + k - 1`` of run ``p`` reached the sender."""
        ack_flow = self.ack_flow
        ack_flow.delivered_packets += k
        ack_flow.delivered_bytes += k * p.ip_bytes
        if p.sack:
            tag(self, p.sack)
        for q in range(pid, pid + k):
            self._ack(p.seq_base + ACK_STEP * q, now)
        self._push(now)
        self.record(now)

    def _ack(self, ackno: int, now: int) -> None:
        una = self.snd_una
        if ackno < una:
            return  # an old ACK, overtaken
        if ackno == una:
            if self.snd_nxt > una:
                on_sack_ack(self, 0, 0, False, False, now) if self.sack else on_dupack(self)
            return
        acked = ackno - una
        first_t = last_t = -1
        sacked = 0
        head_retx = False
        base = self.base
        flags = self.flags
        sent = self.seg_sent
        for i in range(una - base, ackno - base):
            f = flags[i]
            if f:
                if f & LOST:
                    self.lost_out -= 1
                if f & RETRANS:
                    self.retrans_out -= 1
                if f & SACKED:
                    sacked += 1  # its ack gave no sample (Linux: its SACK's would)
                if f & (EVER_RETX | SACKED):
                    if f & EVER_RETX and i == una - base:
                        head_retx = True
                    continue
            if first_t < 0:
                first_t = sent[i]
            last_t = sent[i]
        self.snd_una = ackno
        self.rto_count = 0
        if ackno - base >= 1024:
            cut = ackno - base
            del self.seg_size[:cut], self.seg_sent[:cut], self.flags[:cut]
            self.base = ackno
        if first_t >= 0:
            rtt_sample(self, now - first_t)
        if last_t >= 0:
            self.cc.pkts_acked(self, (now - last_t) // 1000, now)
        if self.sack:
            on_sack_ack(self, acked, sacked, head_retx, first_t >= 0, now)
        else:
            on_new_ack(self, acked, head_retx, now)
        if self.cwnd > self.max_cwnd:
            self.max_cwnd = self.cwnd
        if self.snd_nxt > self.snd_una:
            if not (self.params.loss_probe and schedule_probe(self, now, True)):
                self.arm_timer(now + rto_now(self))
        else:
            self._rto_deadline = -1

    # -- RTO and tail loss probe ------------------------------------------------------------
    def arm_timer(self, deadline: int, probe: bool = False) -> None:
        """The retransmission timer at ``deadline``: a tail loss probe's or the RTO."""
        self._rto_deadline = deadline
        self.probe_pending = probe
        ev = self._rto_event
        if ev is not None and ev.time_ns <= deadline:
            return  # fires early, finds the later deadline and waits again
        if ev is not None:
            ev.cancel()
        self._rto_event = self.loop.call_at(deadline, PRIO_TRAFFIC, self._rto_timer)

    def _rto_timer(self) -> None:
        self._rto_event = None
        deadline = self._rto_deadline
        if deadline < 0:
            return
        now = self.loop.now_ns
        if now < deadline:
            self._rto_event = self.loop.call_at(deadline, PRIO_TRAFFIC, self._rto_timer)
            return
        self._rto_deadline = -1
        if self.probe_pending and self.snd_nxt > self.snd_una:
            loss_probe(self, now)
        elif self.snd_nxt > self.snd_una:
            self.timeouts += 1  # tcp_retransmit_timer
            enter_loss(self, now)
            self._push(now)
            self.backoff += 1
            self.arm_timer(now + rto_now(self))
            self.record(now)

    # -- results ---------------------------------------------------------------------------
    def record(self, now: int) -> None:
        tr = self.trace
        if tr is not None and (not tr or tr[-1][1] != self.cwnd or tr[-1][2] != self.ssthresh):
            tr.append((now, self.cwnd, self.ssthresh))
