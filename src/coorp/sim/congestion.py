"""How a simulated TCP sender's window changes: Reno and CUBIC growth, and its reductions
(fast recovery with PRR, the RTO and its estimator, idle restart, undo), as Linux does them.

Both work on the sender's state in :class:`~coorp.sim.tcp.TcpConnection` (``cwnd``,
``cwnd_cnt``, ``ssthresh``, in segments) through the calls Linux's ``tcp_congestion_ops``
get: ``cong_avoid`` for acked segments (only while the window limits the sender,
``tcp_is_cwnd_limited``), ``ssthresh`` at a loss, ``pkts_acked`` with each RTT sample,
``on_loss`` when an RTO puts the sender in the Loss state, ``on_tx_start`` when it sends
with nothing in flight. Integer arithmetic throughout, in Linux's units (jiffies of
1 ms, microseconds for HyStart), so a run is exact and reproducible.

* Reno (``tcp_reno_cong_avoid``, RFC 5681): slow start adds every acked segment to the
  window (Linux's ``tcp_slow_start``: with delayed ACKs every 2 segments it still
  doubles per RTT), congestion avoidance one segment per window of acked segments
  (``tcp_cong_avoid_ai``), ``ssthresh = max(cwnd / 2, 2)``.
* CUBIC (``net/ipv4/tcp_cubic.c``, RFC 8312 / RFC 9438): ``W(t) = C (t - K)^3 + W_max``
  with C = 0.4 (``bic_scale`` 41/1024 · 10), beta = 717/1024, fast convergence, the
  TCP-friendly region (``tcp_friendliness``), at most 5% growth per RTT before the first
  loss (``cnt`` ≤ 20), and HyStart: slow start ends when ACK trains last longer than
  half the minimum RTT (plus Linux's pacing allowance) or the RTT of a round grows by
  ``clamp(min_rtt / 8, 4 ms, 16 ms)``. The cube root is exact (Linux approximates it
  with a table and one Newton step: off by at most one unit of 1/1024 s).

Reductions (module functions on the connection, Linux's ``tcp_input.c``): the third
duplicate ACK starts fast recovery (``tcp_enter_recovery``; NewReno, RFC 6582, or with
``[tcp] sack`` the scoreboard of ``coorp.sim.sack``), during which proportional rate
reduction sets the window (``tcp_cwnd_reduction``, RFC 6937); an RTO marks every
outstanding segment lost with a window of one (``tcp_enter_loss``); an ACK showing the
reduction was spurious restores the window (``tcp_undo_cwnd_reduction``); data written
after an idle period longer than the RTO restarts the window (``tcp_cwnd_restart``).
The RTO is RFC 6298's or Linux's (``rto_linux``).

The one import circle kept on purpose (speed): ``packets``, ``station``, ``mac``,
``_ungated``, ``_txq``, ``tcp``, ``congestion`` and ``sack`` name each other's classes so
that mypyc compiles every access between them to a native field access.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from coorp.sim.tcp import TcpConnection

__all__ = ["CONGESTION_CONTROLS", "CongestionControl", "Cubic", "Reno", "TcpParams"]

# Congestion states (Linux's TCP_CA_*).
OPEN: Final = 0
DISORDER: Final = 1
RECOVERY: Final = 3
LOSS: Final = 4
#: Duplicate ACKs that start fast recovery (``tcp_reordering``).
DUPACK_THRESHOLD: Final = 3
# Per-segment flags (``TcpConnection.flags``).
LOST: Final = 1  # marked lost, not yet acknowledged
RETRANS: Final = 2  # a retransmission of it is outstanding
EVER_RETX: Final = 4  # sent more than once (Karn: no RTT sample)
SACKED: Final = 8  # selectively acknowledged (``coorp.sim.sack``)

#: Linux's jiffies: ``CONFIG_HZ = 1000``.
HZ: Final = 1000
_NS_PER_JIFFY: Final = 1_000_000
#: ``BICTCP_BETA_SCALE`` and CUBIC's beta (717/1024 ≈ 0.7).
_BETA_SCALE: Final = 1024
_BETA: Final = 717
#: ``cube_rtt_scale = bic_scale * 10`` (bic_scale = 41): C = 410/1024 ≈ 0.4.
_CUBE_RTT_SCALE: Final = 410
#: ``BICTCP_HZ``: CUBIC's time unit is 1/1024 s.
_BICTCP_HZ: Final = 10
_CUBE_FACTOR: Final = (1 << (10 + 3 * _BICTCP_HZ)) // _CUBE_RTT_SCALE
#: ``beta_scale = 8 * (BETA_SCALE + beta) / 3 / (BETA_SCALE - beta)``: Reno's slope.
_FRIENDLY_SCALE: Final = 8 * (_BETA_SCALE + _BETA) // 3 // (_BETA_SCALE - _BETA)
#: HyStart (Linux defaults): low window, ACK spacing of a train, delay samples per round,
#: the delay threshold's bounds, GSO_LEGACY_MAX_SIZE for the pacing allowance.
_HYSTART_LOW_WINDOW: Final = 16
_HYSTART_ACK_DELTA_US: Final = 2000
_HYSTART_MIN_SAMPLES: Final = 8
_HYSTART_DELAY_MIN_US: Final = 4000
_HYSTART_DELAY_MAX_US: Final = 16000
_GSO_MAX_SIZE: Final = 65536


class TcpParams:
    """The scenario's ``[tcp]`` table in integer units."""

    def __init__(
        self, *, initial_window: int, receive_window_bytes: int, delayed_ack_ns: int,
        initial_rto_ns: int, min_rto_ns: int, max_rto_ns: int, granularity_ns: int,
        slow_start_after_idle: bool, quickacks: int = 0, gro_segments: int = 0,
        sack: bool = False, rto_linux: bool = False, loss_probe: bool = False,
        comp_sack_nr: int = 0,
    ) -> None:  # fmt: skip
        self.initial_window = initial_window
        self.receive_window_bytes = receive_window_bytes
        self.delayed_ack_ns = delayed_ack_ns
        self.initial_rto_ns = initial_rto_ns
        self.min_rto_ns = min_rto_ns
        self.max_rto_ns = max_rto_ns
        self.granularity_ns = granularity_ns
        self.slow_start_after_idle = slow_start_after_idle
        self.quickacks = quickacks
        self.gro_segments = gro_segments
        self.sack = sack
        self.rto_linux = rto_linux  # Linux's tcp_rtt_estimator (rtt_sample), not RFC 6298's
        self.loss_probe = loss_probe  # tail loss probes (coorp.sim.sack), with sack only
        self.comp_sack_nr = comp_sack_nr  # the receiver's SACK compression (sack.ofo_ack)


def slow_start(c: TcpConnection, acked: int) -> int:
    """``tcp_slow_start``: grow by the acked segments up to ssthresh; return the rest."""
    cwnd = min(c.cwnd + acked, c.ssthresh)
    acked -= cwnd - c.cwnd
    c.cwnd = cwnd
    return acked


def cong_avoid_ai(c: TcpConnection, w: int, acked: int) -> None:
    """``tcp_cong_avoid_ai``: one more segment per ``w`` acked segments."""
    if c.cwnd_cnt >= w:
        c.cwnd_cnt = 0
        c.cwnd += 1
    c.cwnd_cnt += acked
    if c.cwnd_cnt >= w:
        delta = c.cwnd_cnt // w
        c.cwnd_cnt -= delta * w
        c.cwnd += delta


class CongestionControl:
    """What a congestion control does at each of the sender's events (defaults: nothing)."""

    name = "none"

    def init(self, c: TcpConnection, now: int) -> None:
        """The connection starts."""

    def ssthresh(self, c: TcpConnection) -> int:
        """The slow-start threshold after a loss (``ssthresh`` op)."""
        return max(c.cwnd >> 1, 2)

    def cong_avoid(self, c: TcpConnection, acked: int, now: int) -> None:
        """``acked`` segments were newly acknowledged (``cong_avoid`` op)."""

    def pkts_acked(self, c: TcpConnection, rtt_us: int, now: int) -> None:
        """An RTT sample from the newest newly acknowledged segment (``pkts_acked``)."""

    def on_loss(self, c: TcpConnection, now: int) -> None:
        """An RTO put the sender in the Loss state."""

    def on_tx_start(self, c: TcpConnection, now: int) -> None:
        """The sender sends with nothing in flight (``CA_EVENT_TX_START``)."""

    def undo_cwnd(self, c: TcpConnection) -> int:
        """The window to restore when a reduction proves spurious (``undo_cwnd``)."""
        return max(c.cwnd, c.prior_cwnd)


class Reno(CongestionControl):
    """``tcp_reno_cong_avoid``: slow start, then one segment per window (RFC 5681)."""

    name = "reno"

    def cong_avoid(self, c: TcpConnection, acked: int, now: int) -> None:
        if not cwnd_limited(c):
            return
        if c.cwnd < c.ssthresh:
            acked = slow_start(c, acked)
            if not acked:
                return
        cong_avoid_ai(c, c.cwnd, acked)


def _cube_root(a: int) -> int:
    """The largest integer ``x`` with ``x**3 <= a``."""
    if a <= 0:
        return 0
    x = 1 << ((a.bit_length() + 2) // 3)  # >= cbrt(a)
    while True:
        y = (2 * x + a // (x * x)) // 3
        if y >= x:
            break
        x = y
    while x * x * x > a:
        x -= 1
    while (x + 1) * (x + 1) * (x + 1) <= a:
        x += 1
    return x


class Cubic(CongestionControl):
    """``tcp_cubic.c`` (Linux 6.x): the CUBIC window, TCP-friendly region and HyStart."""

    name = "cubic"

    def __init__(self, hystart: bool = True) -> None:
        self.hystart = hystart
        self.cnt = 0
        self.last_max_cwnd = 0
        self.last_cwnd = 0
        self.last_time = 0
        self.origin_point = 0
        self.k = 0
        self.delay_min_us = 0
        self.epoch_start = -1  # jiffies; -1: no epoch (Linux: 0)
        self.ack_cnt = 0
        self.tcp_cwnd = 0
        self.found = False
        self.round_start_us = 0
        self.last_ack_us = 0
        self.curr_rtt_us = 0
        self.sample_cnt = 0
        self.end_seq = 0
        # slow starts HyStart ended, their windows summed (Linux: TCPHystart*Detect, *Cwnd)
        self.hystart_exits = 0
        self.hystart_cwnd = 0

    def _reset(self) -> None:
        """``bictcp_reset``."""
        self.cnt = 0
        self.last_max_cwnd = 0
        self.last_cwnd = 0
        self.last_time = 0
        self.origin_point = 0
        self.k = 0
        self.delay_min_us = 0
        self.epoch_start = -1
        self.ack_cnt = 0
        self.tcp_cwnd = 0
        self.found = False

    def _hystart_reset(self, c: TcpConnection, now: int) -> None:
        self.round_start_us = self.last_ack_us = now // 1000
        self.end_seq = c.snd_nxt
        self.curr_rtt_us = 0x7FFFFFFF
        self.sample_cnt = 0

    def init(self, c: TcpConnection, now: int) -> None:
        self._reset()
        if self.hystart:
            self._hystart_reset(c, now)

    def on_loss(self, c: TcpConnection, now: int) -> None:
        self._reset()
        self._hystart_reset(c, now)

    def on_tx_start(self, c: TcpConnection, now: int) -> None:
        # Idle (application-limited) for a while: shift the epoch to stay on the curve.
        jnow = now // _NS_PER_JIFFY
        delta = jnow - c.lsndtime // _NS_PER_JIFFY
        if self.epoch_start >= 0 and delta > 0:
            self.epoch_start = min(self.epoch_start + delta, jnow)

    def ssthresh(self, c: TcpConnection) -> int:
        self.epoch_start = -1
        cwnd = c.cwnd
        if cwnd < self.last_max_cwnd:  # fast convergence
            self.last_max_cwnd = cwnd * (_BETA_SCALE + _BETA) // (2 * _BETA_SCALE)
        else:
            self.last_max_cwnd = cwnd
        return max(cwnd * _BETA // _BETA_SCALE, 2)

    def cong_avoid(self, c: TcpConnection, acked: int, now: int) -> None:
        if not cwnd_limited(c):
            return
        if c.cwnd < c.ssthresh:
            acked = slow_start(c, acked)
            if not acked:
                return
        self._update(c.cwnd, acked, now)
        cong_avoid_ai(c, self.cnt, acked)

    def _update(self, cwnd: int, acked: int, now: int) -> None:
        """``bictcp_update``: the number of acks per window increment, ``cnt``."""
        jnow = now // _NS_PER_JIFFY
        self.ack_cnt += acked
        if self.last_cwnd == cwnd and jnow - self.last_time <= HZ // 32:
            return
        if not (self.epoch_start >= 0 and jnow == self.last_time):
            self.last_cwnd = cwnd
            self.last_time = jnow
            if self.epoch_start < 0:
                self.epoch_start = jnow
                self.ack_cnt = acked
                self.tcp_cwnd = cwnd
                if self.last_max_cwnd <= cwnd:
                    self.k = 0
                    self.origin_point = cwnd
                else:
                    self.k = _cube_root(_CUBE_FACTOR * (self.last_max_cwnd - cwnd))
                    self.origin_point = self.last_max_cwnd
            # t = now - epoch + min RTT, in 1/1024 s (usecs_to_jiffies rounds up).
            t = jnow - self.epoch_start + -(-self.delay_min_us // 1000)
            t = (t << _BICTCP_HZ) // HZ
            offs = self.k - t if t < self.k else t - self.k
            delta = (_CUBE_RTT_SCALE * offs * offs * offs) >> (10 + 3 * _BICTCP_HZ)
            target = self.origin_point - delta if t < self.k else self.origin_point + delta
            self.cnt = cwnd // (target - cwnd) if target > cwnd else 100 * cwnd
            if self.last_max_cwnd == 0 and self.cnt > 20:
                self.cnt = 20  # at most 5% per RTT before the first loss
        # TCP-friendly region: grow at least as fast as Reno would (RFC 8312 4.2).
        d = (cwnd * _FRIENDLY_SCALE) >> 3
        if d > 0 and self.ack_cnt > d:
            n = (self.ack_cnt - 1) // d
            self.ack_cnt -= n * d
            self.tcp_cwnd += n
        if self.tcp_cwnd > cwnd:
            max_cnt = cwnd // (self.tcp_cwnd - cwnd)
            if self.cnt > max_cnt:
                self.cnt = max_cnt
        self.cnt = max(self.cnt, 2)

    def pkts_acked(self, c: TcpConnection, rtt_us: int, now: int) -> None:
        """``bictcp_acked``: minimum RTT and HyStart."""
        if rtt_us < 0:
            return
        # Discard delay samples right after a window reduction.
        if self.epoch_start >= 0 and now // _NS_PER_JIFFY - self.epoch_start < HZ:
            return
        delay = max(rtt_us, 1)
        if self.delay_min_us == 0 or self.delay_min_us > delay:
            self.delay_min_us = delay
        if self.hystart and not self.found and c.cwnd < c.ssthresh:
            self._hystart_update(c, delay, now)

    def _hystart_update(self, c: TcpConnection, delay: int, now: int) -> None:
        if c.snd_una > self.end_seq:
            self._hystart_reset(c, now)
        if c.cwnd < _HYSTART_LOW_WINDOW:
            return
        now_us = now // 1000
        if now_us - self.last_ack_us <= _HYSTART_ACK_DELTA_US:  # an ACK train
            self.last_ack_us = now_us
            # Without an fq qdisc (no pacing) the train may last half the minimum RTT.
            threshold = (self.delay_min_us + self._ack_delay_us(c)) >> 1
            if now_us - self.round_start_us > threshold:
                self._found(c)
                return
        if self.curr_rtt_us > delay:
            self.curr_rtt_us = delay
        if self.sample_cnt < _HYSTART_MIN_SAMPLES:
            self.sample_cnt += 1
        else:
            thresh = min(max(self.delay_min_us >> 3, _HYSTART_DELAY_MIN_US), _HYSTART_DELAY_MAX_US)
            if self.curr_rtt_us > self.delay_min_us + thresh:
                self._found(c)

    def _found(self, c: TcpConnection) -> None:
        """Slow start ends here, without a loss: ssthresh is the window."""
        self.found = True
        c.ssthresh = c.cwnd
        self.hystart_exits += 1
        self.hystart_cwnd += c.cwnd

    @staticmethod
    def _ack_delay_us(c: TcpConnection) -> int:
        """``hystart_ack_delay``: the time 4 GSO packets take at Linux's pacing rate
        (bytes/s: 200% of cwnd / srtt in slow start), at most 1 ms."""
        srtt_us = c.srtt_ns // 1000
        rate = 2 * c.mss * max(c.cwnd, c.packets_out) * 1_000_000 // srtt_us if srtt_us > 0 else 0
        return min(1000, 4 * _GSO_MAX_SIZE * 1_000_000 // rate) if rate > 0 else 0


#: The congestion controls by scenario name (``[tcp] sender``).
CONGESTION_CONTROLS: Final[dict[str, type[CongestionControl]]] = {"reno": Reno, "cubic": Cubic}


# -- using the window ---------------------------------------------------------------------------
def cwnd_limited(c: TcpConnection) -> bool:
    """``tcp_is_cwnd_limited``: the window is what holds the sender back (in slow start:
    it has not grown to twice what was in flight). Only then does it grow."""
    if c.is_cwnd_limited_flag:
        return True
    return c.cwnd < c.ssthresh and c.cwnd < 2 * c.max_packets_out


def cwnd_validate(c: TcpConnection, limited: bool) -> None:
    """``tcp_cwnd_validate``: remember whether this window was used up."""
    packets_out = c.snd_nxt - c.snd_una
    if (
        c.snd_una >= c.cwnd_usage_seq
        or limited
        or (not c.is_cwnd_limited_flag and packets_out > c.max_packets_out)
    ):
        c.is_cwnd_limited_flag = limited
        c.max_packets_out = packets_out
        c.cwnd_usage_seq = c.snd_nxt


# -- window reductions and recovery --------------------------------------------------------
def current_ssthresh(c: TcpConnection) -> int:
    """``tcp_current_ssthresh``: outside a reduction, at least 3/4 of the window."""
    if c.ca_state == RECOVERY:
        return c.ssthresh
    return max(c.ssthresh, (c.cwnd >> 1) + (c.cwnd >> 2))


def cwnd_restart(c: TcpConnection, idle: int) -> None:
    """``tcp_cwnd_restart``: halve the window per RTO of idleness, down to the initial one."""
    c.idle_restarts += 1
    restart = min(c.params.initial_window, c.cwnd)
    c.ssthresh = current_ssthresh(c)
    cwnd = c.cwnd
    idle -= c.rto_ns
    while idle > 0 and cwnd > restart:
        cwnd >>= 1
        idle -= c.rto_ns
    c.cwnd = max(cwnd, restart)


def on_dupack(c: TcpConnection) -> None:
    """A duplicate ACK: one more segment received beyond a hole (``tcp_add_reno_sack``);
    the third starts fast recovery (``tcp_time_to_recover``)."""
    c.dupacks_received += 1
    packets_out = c.snd_nxt - c.snd_una
    holes = min(max(c.lost_out, 1), packets_out)
    c.sacked_out = min(c.sacked_out + 1, packets_out - holes)
    state = c.ca_state
    if state == OPEN:
        c.ca_state = state = DISORDER
    if state == DISORDER and c.sacked_out >= DUPACK_THRESHOLD:
        enter_recovery(c)
        mark_lost(c, c.snd_una)
        prr(c, 1, 1, False)
    elif state == RECOVERY:
        prr(c, 1, 0, False)


def enter_recovery(c: TcpConnection) -> None:
    """``tcp_enter_recovery``: the window's reduction starts (PRR from here)."""
    c.fast_recoveries += 1
    c.prior_ssthresh = current_ssthresh(c)
    c.prior_cwnd = c.cwnd
    c.high_seq = c.snd_nxt
    c.cwnd_cnt = 0
    c.prr_delivered = 0
    c.prr_out = 0
    c.ssthresh = c.cc.ssthresh(c)
    c.ca_state = RECOVERY
    c.tlp_high_seq = 0  # tcp_init_cwnd_reduction: a probe's episode ends


def prr(c: TcpConnection, delivered: int, newly_lost: int, una_advanced: bool) -> None:
    """``tcp_cwnd_reduction`` (proportional rate reduction, RFC 6937)."""
    if delivered <= 0 or c.prior_cwnd == 0:
        return
    c.prr_delivered += delivered
    pipe = c.in_flight()
    delta = c.ssthresh - pipe
    if delta < 0:
        dividend = c.ssthresh * c.prr_delivered + c.prior_cwnd - 1
        sndcnt = dividend // c.prior_cwnd - c.prr_out
    else:
        sndcnt = max(c.prr_delivered - c.prr_out, delivered)
        if una_advanced and not newly_lost:
            sndcnt += 1
        sndcnt = min(delta, sndcnt)
    sndcnt = max(sndcnt, 0 if c.prr_out else 1)  # the fast retransmit goes out at once
    c.cwnd = pipe + sndcnt


def to_open(c: TcpConnection) -> None:
    """Back to the Open state: no segment marked lost or retransmitted (with SACK the
    scoreboard stays, as Linux's ``tcp_try_undo_recovery`` leaves it)."""
    c.ca_state = OPEN
    if c.sack:
        return
    c.sacked_out = 0
    flags = c.flags
    for i in range(c.snd_una - c.base, c.snd_nxt - c.base):
        flags[i] &= ~(LOST | RETRANS)
    c.lost_out = 0
    c.retrans_out = 0


def undo(c: TcpConnection) -> None:
    """``tcp_undo_cwnd_reduction``: the reduction was spurious."""
    c.spurious_timeouts += 1
    if c.prior_ssthresh:
        c.cwnd = c.cc.undo_cwnd(c)
        if c.prior_ssthresh > c.ssthresh:
            c.ssthresh = c.prior_ssthresh
    if c.sack:  # the loss marks go (unmark_loss), the SACKed segments stay
        flags = c.flags
        for i in range(c.snd_una - c.base, c.snd_nxt - c.base):
            flags[i] &= ~LOST
        c.lost_out = 0
        c.lost_hint, c.lost_cnt = c.snd_una, 0
    to_open(c)


def mark_lost(c: TcpConnection, seq: int) -> None:
    """Segment ``seq`` is lost (``tcp_mark_skb_lost``): counted once, a resend forgotten."""
    i = seq - c.base
    f = c.flags[i]
    if f & RETRANS:
        c.retrans_out -= 1
    c.flags[i] = (f | LOST) & ~RETRANS
    if not f & LOST:
        c.lost_out += 1
    c.retx_hint = min(c.retx_hint, seq)


def enter_loss(c: TcpConnection, now: int) -> None:
    """``tcp_enter_loss``: an RTO; every outstanding segment lost (but a SACKed one), a
    window of one."""
    state = c.ca_state
    if state <= DISORDER or c.high_seq <= c.snd_una or (state == LOSS and c.rto_count == 0):
        c.prior_ssthresh = current_ssthresh(c)
        c.prior_cwnd = c.cwnd
        c.ssthresh = c.cc.ssthresh(c)
        c.cc.on_loss(c, now)
    flags = c.flags
    for i in range(c.snd_una - c.base, c.snd_nxt - c.base):
        if not flags[i] & SACKED:
            flags[i] = (flags[i] | LOST) & ~RETRANS
    c.sacked_out = c.sacked_out if c.sack else 0
    c.lost_out = c.snd_nxt - c.snd_una - c.sacked_out
    c.retrans_out = 0
    c.lost_hint, c.lost_cnt = c.snd_una, 0
    c.cwnd = 1
    c.cwnd_cnt = 0
    c.ca_state = LOSS
    c.high_seq = c.snd_nxt
    c.tlp_high_seq = 0
    c.retx_hint = c.snd_una
    c.rto_count += 1


def rtt_sample(c: TcpConnection, r: int) -> None:
    """An RTT sample ``r``: SRTT, the variation and the RTO, and the backoff ends (RFC 6298
    5.7). RFC 6298 (2.2, 2.3): RTO = max(SRTT + max(G, 4 RTTVAR), min). Linux's
    ``tcp_rtt_estimator`` (``rto_linux``): RTO = SRTT + ``rttvar``, where ``rttvar`` is the
    largest 4 x mean deviation of the last round trip but at least the minimum RTO (so
    about SRTT + 200 ms), decaying by a quarter per round; a sample below SRTT moves the
    deviation by 1/32 rather than 1/4."""
    p = c.params
    if p.rto_linux:
        if c.srtt_ns == 0:
            c.srtt_ns = max(r, 1)
            c.mdev_ns = 2 * r  # 4 x the mean deviation (Linux's mdev_us): r / 2
            c.rttvar_ns = c.mdev_max_ns = max(c.mdev_ns, p.min_rto_ns)
            c.rtt_seq = c.snd_nxt
        else:
            err = r - c.srtt_ns
            c.srtt_ns = max(c.srtt_ns + (err >> 3), 1)
            e = abs(err) - (c.mdev_ns >> 2)
            c.mdev_ns += e >> 3 if err < 0 and e > 0 else e
            if c.mdev_ns > c.mdev_max_ns:
                c.mdev_max_ns = c.mdev_ns
                c.rttvar_ns = max(c.rttvar_ns, c.mdev_max_ns)
            if c.snd_una > c.rtt_seq:  # a round trip since the last: the variation decays
                if c.mdev_max_ns < c.rttvar_ns:
                    c.rttvar_ns -= (c.rttvar_ns - c.mdev_max_ns) >> 2
                c.rtt_seq = c.snd_nxt
                c.mdev_max_ns = p.min_rto_ns
        c.rto_ns = min(c.srtt_ns + c.rttvar_ns, p.max_rto_ns)
    else:
        if c.srtt_ns == 0:
            c.srtt_ns = max(r, 1)
            c.rttvar_ns = r // 2
        else:
            c.rttvar_ns = (3 * c.rttvar_ns + abs(c.srtt_ns - r)) // 4
            c.srtt_ns = max((7 * c.srtt_ns + r) // 8, 1)
        rto = c.srtt_ns + max(p.granularity_ns, 4 * c.rttvar_ns)
        c.rto_ns = min(max(rto, p.min_rto_ns), p.max_rto_ns)
    c.backoff = 0


def rto_now(c: TcpConnection) -> int:
    """The RTO with its backoff (RFC 6298 5.5), at most the maximum."""
    return min(c.rto_ns << c.backoff, c.params.max_rto_ns)


def on_new_ack(c: TcpConnection, acked: int, head_retx: bool, now: int) -> None:
    """An ACK moved ``snd_una`` on by ``acked`` segments (``head_retx``: the first of them
    had been sent again): the recovery states (``tcp_fastretrans_alert``, NewReno), then
    the window (``tcp_cong_control``)."""
    # Duplicate ACKs that stood for segments now cumulatively acknowledged.
    delivered = max(acked - c.sacked_out, 1)
    c.sacked_out = 0 if acked - 1 >= c.sacked_out else c.sacked_out - (acked - 1)
    state = c.ca_state
    newly_lost = 0
    if state == LOSS:
        if not head_retx:
            undo(c)  # the original arrived: the timeout was spurious (F-RTO)
        elif c.snd_una >= c.high_seq:
            to_open(c)
    elif state == RECOVERY:
        if c.snd_una >= c.high_seq:
            c.cwnd = c.ssthresh  # tcp_end_cwnd_reduction
            to_open(c)
        elif not c.flags[c.snd_una - c.base] & LOST:
            mark_lost(c, c.snd_una)  # a partial ACK: the next hole (NewReno)
            newly_lost = 1
    elif state == DISORDER and c.sacked_out == 0:
        c.ca_state = OPEN
    if c.ca_state == RECOVERY:
        prr(c, delivered, newly_lost, True)
    else:
        c.cc.cong_avoid(c, delivered, now)
