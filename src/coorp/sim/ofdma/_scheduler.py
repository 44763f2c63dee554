"""Trigger-based uplink OFDMA (802.11ax-2021 26.5.2): an AP that schedules its stations.

The AP's scheduler (:class:`UlOfdma`) is one more access function on the channel: it
contends with the EDCA parameters of ``access_ac`` (its own backoff, as ns-3's
``MultiUserScheduler`` requests access on an AC), whenever it knows of buffered uplink
data or a poll is due (every ``access_interval_ns``, ns-3's ``AccessReqInterval``).
Having won the medium it runs one cascade, each step a SIFS after the last:

1. (``bsrp``) a **Buffer Status Report Poll** trigger frame to up to ``max_users``
   stations, round robin; each answers in its RU with a QoS Null carrying a buffer
   status report (an HE TB PPDU); the AP learns every polled station's queue;
2. a **Basic trigger frame** to up to ``max_users`` stations with buffered data (round
   robin), equal-sized RUs (``coorp.phy.equal_ru_tones``), UL Length for the largest
   report, at most ``max_tb_ns`` (aPPDUMaxTime) and what the access category's TXOP
   leaves;
3. every solicited station's **HE TB PPDU**: an A-MPDU built from its NIC ring(s) for
   its RU, all of the same length; frames only to the AP, at most ``max_ampdu_mpdus``
   per access category (multi-TID aggregation). With ``per_ac`` rings the highest
   category goes first (the Preferred AC is only a floor); a ``shared`` ring is a FIFO,
   sent from its head as it is - the NIC cannot reorder it;
4. a **multi-STA BlockAck** from the AP, in the all-ack context (every MPDU of every TB
   PPDU was received: TB PPDUs do not collide and packet errors are not modelled here),
   2 bytes per station that sent data.

Trigger frames and the multi-STA BlockAck are non-HT PPDUs at the basic rate (trigger
frames at ``trigger_rate_mbps`` if set: ns-3 sends them at 6 Mb/s); the TB
PPDUs use the TB formats' guard interval and HE-LTF (2x HE-LTF + 1.6 µs GI with a 0.8
or 1.6 µs ``phy.he_guard_interval_ns``, 4x + 3.2 µs with 3.2 µs). The RU's HE-MCS is the
link's (its spatial streams too); in ``distance`` mode the link budget is read again at
the RU's width (a narrower RU concentrates the station's power: +3 dB per halving, the
same rule as the channel widths; below 242 tones scaled by data subcarriers, and at
most HE-MCS 9). A station answers a trigger with QoS Nulls when it has nothing for the
AP.

**MU EDCA** (26.2.7): with ``mu_edca_timer_ns`` set, a station that sent QoS data of an
access category in a TB PPDU stops contending with that category's EDCAF for that long
(the AP's MU EDCA Parameter Set with AIFSN 0, "EDCA disabled"), restarted by every such
TB PPDU: its uplink then goes out on triggers only. ``None``: no MU EDCA Parameter Set,
stations keep contending as before.

Not modelled: DL OFDMA and MU-MIMO (the AP's downlink is SU EDCA), UORA random access,
packet errors in TB PPDUs (a scenario with ``links.packet_errors`` is refused), power
control, and the padding a station adds after its last frame (it costs nothing here:
the TB PPDU's length is the AP's).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from coorp._errors import UsageError
from coorp.phy import (
    HE_QOS_NULL_BSR_BYTES,
    SIFS_NS,
    HeMode,
    LinkBudget,
    PhyStandard,
    basic_trigger_bytes,
    bsrp_trigger_bytes,
    equal_ru_tones,
    he_max_psdu_bytes,
    he_tb_ppdu_duration_ns,
    legacy_duration_ns,
    min_sensitivity_dbm,
    multi_sta_block_ack_bytes,
)
from coorp.scenario import AccessCategory
from coorp.sim.events import PRIO_CONTROL, Event
from coorp.sim.mac import Transmission
from coorp.sim.ofdma._config import UlOfdmaConfig, UlOfdmaStats
from coorp.sim.packets import FlowState, Packet
from coorp.sim.station import Edcaf, Ring, Station
from coorp.sim.timing import edca_params, rate_code_mcs, rate_code_streams

if TYPE_CHECKING:
    from coorp.sim.engine import Simulation

__all__ = ["UlOfdma", "UlOfdmaConfig", "UlOfdmaStats"]

#: Categories in the order a station fills its RU from per-AC rings: highest first.
_FILL_ORDER = (AccessCategory.VO, AccessCategory.VI, AccessCategory.BE, AccessCategory.BK)
#: The channel width whose sensitivity an RU of this many tones has (RUs of 242 tones and
#: more are whole 20/40/80/160 MHz channels' worth of subcarriers).
_RU_WIDTH = {242: 20, 484: 40, 996: 80, 1992: 160}
#: Data subcarriers of the RUs narrower than 20 MHz, and of 242 tones (for the scaling).
_RU_DATA_SC = {26: 24, 52: 48, 106: 102, 242: 234}
#: A reported queue with no known end (bulk data still in the kernel queue).
UNLIMITED = -1


class _User:
    """One solicited station in a trigger's TB PPDUs: its mode and the runs it sends
    (each at the head of its category's ring, in ring order per ring), by category."""

    __slots__ = ("acs", "mode", "mpdus", "runs", "station")

    def __init__(self, station: Station, mode: HeMode) -> None:
        self.station = station
        self.mode = mode
        self.runs: list[Packet] = []
        self.acs: list[AccessCategory] = []  # categories with data, first seen first
        self.mpdus = 0

    def add(self, run: Packet, count: int) -> None:
        self.runs.append(run)
        self.mpdus += count
        if run.ac not in self.acs:
            self.acs.append(run.ac)


class _Step:
    """The exchange on the air: a BSRP or a Basic trigger, and its users."""

    __slots__ = ("basic", "txop_start", "users")

    def __init__(self, basic: bool, txop_start: int, users: list[_User]) -> None:
        self.basic = basic
        self.txop_start = txop_start
        self.users = users


class UlOfdma:
    """An AP's trigger-based UL OFDMA scheduler on a simulated channel.

    Build it before traffic starts: ``UlOfdma(sim, "leader", ["r1", "r2"], config)``.
    ``stations`` are the associated stations it triggers (every other station is not in
    its BSS and keeps plain EDCA).
    """

    def __init__(
        self, sim: Simulation, ap: str, stations: Sequence[str], config: UlOfdmaConfig
    ) -> None:
        sc = sim.scenario
        if sc.phy.standard is not PhyStandard.AX:
            raise UsageError(
                'UL OFDMA needs an 802.11ax channel: set phy.standard = "ax" '
                f"(this one is {sc.phy.standard.value!r})"
            )
        if sc.links.packet_errors:
            raise UsageError("UL OFDMA does not model packet errors: set links.packet_errors false")
        if not stations:
            raise UsageError("UL OFDMA needs at least one station to trigger")
        self.sim = sim
        self.config = config
        self.stats = UlOfdmaStats()
        self.channel = sim.channel
        self.ap = sim.station(ap)
        self.stations = [sim.station(s) for s in stations if s != ap]
        for st in (self.ap, *self.stations):
            if st.airtime_budget is not None:
                raise UsageError(
                    f"station {st.name!r}: driver hooks with an airtime budget cannot be "
                    "combined with UL OFDMA (both hold EDCAFs)"
                )
        phy = sc.phy
        self.width = phy.width_mhz
        self.basic_rate = phy.basic_rate_mbps
        self.trigger_rate = config.trigger_rate_mbps or phy.basic_rate_mbps
        gi = 3200 if phy.he_guard_interval_ns == 3200 else 1600
        self.tb_gi, self.tb_ltf = gi, (4 if gi == 3200 else 2)
        self.padding_us = phy.he_packet_padding_us
        self.mpdu_window = sc.mac.max_ampdu_mpdus
        self.max_ampdu_bytes = sc.mac.max_ampdu_bytes
        self.packet_bytes = sc.packet_bytes
        pl = sc.links.pathloss
        self._budget = LinkBudget(pl.tx_power_dbm, pl.reference_loss_db, pl.exponent, pl.margin_db)
        self._distance = sc.links.mode == "distance"
        self._sifs = SIFS_NS
        self.n_users = min(config.max_users, len(self.stations))
        self.ru_tones = equal_ru_tones(self.width, self.n_users)
        params = edca_params(sc.mac)[config.access_ac]
        # The scheduler's access function: an EDCAF of the AP with its own "ring", which
        # holds one placeholder entry while the scheduler wants the medium.
        self.edcaf = Edcaf(self.ap, config.access_ac, params)
        self.edcaf.ring = Ring()
        self.edcaf.shared = False
        self.edcaf.mu = self
        self.channel.add_edcaf(self.edcaf)
        # Only its presence in the access function's ring matters: never sent.
        token_flow = FlowState("ul-ofdma:access", self.ap, self.ap, config.access_ac, False)
        self._token = Packet(-1, token_flow, 0)
        # Two round robins: who is polled next (BSRP) and who is triggered next (Basic).
        self._poll_order: list[Station] = list(self.stations)
        self._order: list[Station] = list(self.stations)
        #: Buffer status reports: station -> (bytes or UNLIMITED, when reported).
        self._bsr: dict[Station, tuple[int, int]] = {}
        self._step: _Step | None = None
        self._poll_event: Event | None = None
        #: MU EDCA: (station, AC) -> when its suspension ends, and the pending event.
        self._mu_until: dict[Edcaf, int] = {}
        self._mu_event: dict[Edcaf, Event] = {}
        self._mode_cache: dict[tuple[int, int], HeMode] = {}
        self.txop_limit = params.txop_limit_ns
        self._schedule_poll(0)

    # -- wanting the medium -----------------------------------------------------------------
    def _known_data(self, now: int) -> bool:
        """Whether a valid report says some station has data for the AP."""
        for st in self.stations:
            b = self._report(st, now)
            if b is not None and b != 0:
                return True
        return False

    def _want(self, *, arrive: bool = True) -> None:
        """Contend for the medium (the placeholder stays until a cascade starts).
        ``arrive=False`` right after a backoff was drawn for this access function (its
        own exchange just ended): the frame is there, no further backoff is invoked."""
        e = self.edcaf
        if e.ring:
            return
        e.ring.append(self._token)
        if arrive:
            self.channel.frame_arrived(e, self.sim.loop.now_ns)

    def _unwant(self) -> None:
        self.edcaf.ring.clear()

    def _schedule_poll(self, after: int) -> None:
        interval = self.config.access_interval_ns
        if interval <= 0:
            return
        if self._poll_event is not None:
            self._poll_event.cancel()
        self._poll_event = self.sim.loop.call_at(after + interval, PRIO_CONTROL, self._poll_due)

    def _poll_due(self) -> None:
        self._poll_event = None
        self._want()

    # -- buffer status ---------------------------------------------------------------------
    def _queue_bytes(self, st: Station) -> int:
        """What a station reports: the bytes for the AP in its queues, or UNLIMITED while
        a bulk transfer to the AP still has data to hand over (more than the largest
        queue size a report can carry)."""
        for t in st.transfers:
            if t.flow.dst is self.ap and (t.remaining_bytes is None or t.remaining_bytes > 0):
                return UNLIMITED
        total = 0
        seen: list[Ring] = []
        for ring in st.rings.values():
            if any(ring is r for r in seen):
                continue
            seen.append(ring)
            for p in ring:
                if p.dst is self.ap:
                    total += p.count * p.ip_bytes
        for q in st.ls_queues.values():
            for p in q:
                if p.dst is self.ap:
                    total += p.count * p.ip_bytes
        return total

    def _learn(self, st: Station, now: int) -> None:
        self._bsr[st] = (self._queue_bytes(st), now)

    def _report(self, st: Station, now: int) -> int | None:
        """The station's last report if still valid, else None (unknown)."""
        r = self._bsr.get(st)
        if r is None or now - r[1] > self.config.bsr_lifetime_ns:
            return None
        return r[0]

    # -- modes and durations ---------------------------------------------------------------
    def _mode(self, st: Station) -> HeMode:
        """The HE TB transmit vector of ``st`` in this scheduler's RU size."""
        code = self.sim.links.mcs_table[st.idx][self.ap.idx]
        nss = rate_code_streams(code, self.sim.scenario.phy.spatial_streams)
        mcs = rate_code_mcs(code)
        if self._distance:
            mcs = self._ru_mcs(st, nss, mcs)
        if self.ru_tones < 242:
            mcs = min(mcs, 9)  # 1024-QAM needs >= 242 tones
        key = (mcs, nss)
        m = self._mode_cache.get(key)
        if m is None:
            m = HeMode(
                mcs, nss, self.width, self.tb_gi, self.tb_ltf, ru_tones=self.ru_tones, tb=True,
                packet_padding_us=self.padding_us,
            )  # fmt: skip
            self._mode_cache[key] = m
        return m

    def _ru_mcs(self, st: Station, nss: int, link_mcs: int) -> int:
        """The fastest HE-MCS whose sensitivity at the RU's bandwidth the link meets."""
        rx = self.sim.links.rx_power_dbm(st.idx, self.ap.idx)
        tones = self.ru_tones
        width = _RU_WIDTH.get(tones, 20)
        offset = 0.0
        if tones < 242:
            offset = 10 * math.log10(_RU_DATA_SC[tones] / _RU_DATA_SC[242])
        best = link_mcs
        for mcs in range(11, -1, -1):
            if rx >= min_sensitivity_dbm(mcs, width) + offset + self._budget.margin_db:
                best = max(best, mcs)
                break
        return best

    def _legacy(self, nbytes: int) -> int:
        return legacy_duration_ns(nbytes, self.basic_rate)

    # -- the channel's calls -----------------------------------------------------------------
    def build(self, e: Edcaf, now: int) -> Transmission:
        """The scheduler won the medium at ``now``: the first exchange of its cascade."""
        self.stats.cascades += 1
        self._unwant()
        if self.config.bsrp:
            return self._bsrp(now, now)
        return self._basic(now, now)

    def _pick(self, now: int, *, need_data: bool) -> list[Station]:
        """Up to ``n_users`` stations, round robin: for a BSRP trigger the next ones in
        turn; for a Basic trigger the next ones whose last valid report is not an empty
        queue (an unknown queue counts as data, as in ns-3's scheduler)."""
        if not need_data:
            return self._poll_order[: self.n_users]
        return [st for st in self._order if self._report(st, now) != 0][: self.n_users]

    @staticmethod
    def _rotated(order: list[Station], stations: list[Station]) -> list[Station]:
        """``order`` with ``stations`` moved to its end (round robin)."""
        done = set(stations)
        return [s for s in order if s not in done] + [s for s in order if s in done]

    def _bsrp(self, now: int, txop_start: int) -> Transmission:
        self.stats.bsrp_triggers += 1
        polled = self._pick(now, need_data=False)
        self._poll_order = self._rotated(self._poll_order, polled)
        tf = legacy_duration_ns(bsrp_trigger_bytes(len(polled)), self.trigger_rate)
        null_psdu = 4 + HE_QOS_NULL_BSR_BYTES
        tb = he_tb_ppdu_duration_ns([(null_psdu, self._mode(st)) for st in polled])
        users = [_User(st, self._mode(st)) for st in polled]
        dur = tf + self._sifs + tb
        self._step = _Step(False, txop_start, users)
        self.stats.tb_ppdus += len(users)
        self.stats.qos_null_answers += len(users)
        self.stats.tb_airtime_ns += tb
        for st in polled:
            st.airtime_ns += dur
            st.tx_attempts += 1
        return self._tx(now, txop_start, 0, 0, dur, tf)

    def _tx(
        self, now: int, txop_start: int, mpdus: int, psdu: int, dur: int, tf: int
    ) -> Transmission:
        # A failed trigger: the trigger frame, then SIFS and the time the AP waits for the
        # TB PPDUs to start (taken as an Ack's duration, the channel's rule for a missing
        # response).
        failure = tf + self._sifs + self.channel.timing.ack_ns
        return Transmission(
            self.edcaf, [], txop_start, mpdus, psdu, (0, dur, failure, False, False)
        )

    def _need_psdu(self, reported: int | None) -> int:
        """PSDU bytes for a report: MTU-sized MPDUs with their delimiters and padding,
        at most the Block Ack window's worth (the AP knows each agreement's window: a
        longer TB PPDU would only carry padding)."""
        per = ((self.packet_bytes + 38 + 3) & ~3) + 4
        most = self.mpdu_window * per
        if reported is None:
            nbytes = self.config.ul_psdu_bytes
        elif reported == UNLIMITED:
            return most
        else:
            nbytes = reported
        return min(most, max(1, math.ceil(nbytes / self.packet_bytes)) * per)

    def _basic(self, now: int, txop_start: int) -> Transmission:
        self.stats.basic_triggers += 1
        users_st = self._pick(now, need_data=True)
        if not users_st:  # nothing known anywhere: poll everybody's first RUs for data
            users_st = self._pick(now, need_data=False)
        modes = [self._mode(st) for st in users_st]
        tf = legacy_duration_ns(basic_trigger_bytes(len(users_st)), self.trigger_rate)
        # The TB PPDU's length: what the largest report needs, at most max_tb_ns and what
        # the TXOP leaves after the trigger, SIFS, SIFS and the multi-STA BlockAck.
        ba_max = self._legacy(multi_sta_block_ack_bytes(len(users_st), all_ack=True))
        limit = self.config.max_tb_ns
        if self.txop_limit:
            limit = min(limit, txop_start + self.txop_limit - now - tf - 2 * self._sifs - ba_max)
        needs = [
            (self._need_psdu(self._report(st, now)), m)
            for st, m in zip(users_st, modes, strict=True)
        ]
        tb = self._tb_length(needs, limit)
        users = []
        acked = 0
        total_mpdus = 0
        total_psdu = 0
        common_pre = max(m.preamble_ns() for m in modes)
        for st, m in zip(users_st, modes, strict=True):
            user = _User(st, m)
            cap = he_max_psdu_bytes(tb - (common_pre - m.preamble_ns()), m)
            psdu = self._fill(user, cap)
            users.append(user)
            acked += 1 if user.runs else 0
            total_mpdus += user.mpdus
            total_psdu += psdu
            if not user.runs:
                self.stats.qos_null_answers += 1
        self.stats.tb_ppdus += len(users)
        self.stats.tb_airtime_ns += tb
        self.stats.mpdus += total_mpdus
        dur = tf + self._sifs + tb
        if acked:
            dur += self._sifs + self._legacy(multi_sta_block_ack_bytes(acked, all_ack=True))
        for user in users:
            user.station.airtime_ns += dur
            user.station.tx_attempts += 1
            self._learn(user.station, now)  # Queue Size in every QoS Control field
        self._step = _Step(True, txop_start, users)
        self._order = self._rotated(self._order, users_st)
        return self._tx(now, txop_start, total_mpdus, total_psdu, dur, tf)

    def _tb_length(self, needs: list[tuple[int, HeMode]], limit: int) -> int:
        """TXTIME of the TB PPDUs for these (PSDU, mode) needs, capped at ``limit`` (then
        the longest whole number of symbols that fits, packet extension included)."""
        m0 = needs[0][1]
        pre = max(m.preamble_ns() for _, m in needs)
        pe_max = 1000 * m0.packet_padding_us  # the largest packet extension
        cap_sym = max(1, (limit - pre - pe_max) // m0.symbol_ns)
        longest = pre + cap_sym * m0.symbol_ns + pe_max
        capped = []
        for psdu, m in needs:
            room = he_max_psdu_bytes(longest - (pre - m.preamble_ns()), m)
            capped.append((min(psdu, max(room, 1)), m))
        return he_tb_ppdu_duration_ns(capped)

    def _fill(self, user: _User, cap: int) -> int:
        """Take the frames ``user``'s NIC sends in a TB PPDU of ``cap`` PSDU bytes: from
        the head of each ring (a shared ring: in its FIFO order, whatever the category;
        per-AC rings: the highest category first), only frames for the AP, at most
        ``max_ampdu_mpdus`` per category. Returns the PSDU length."""
        st = user.station
        window = self.mpdu_window
        counts: dict[AccessCategory, int] = {}
        psdu = 0
        rings: list[Ring] = []
        if st.shared:
            rings.append(st.rings[AccessCategory.BE])
        else:
            rings.extend(st.rings[ac] for ac in _FILL_ORDER)
        for ring in rings:
            idx = 0
            while idx < len(ring):
                run = ring[idx]
                if run.dst is not self.ap:
                    break
                left = window - counts.get(run.ac, 0)
                take, psdu = self._take(run, psdu, cap, left)
                if take == 0:
                    break
                full = take == run.count
                if not full:
                    ring.insert(idx + 1, run.split(take))
                run.sealed = True
                user.add(run, take)
                counts[run.ac] = counts.get(run.ac, 0) + take
                idx += 1
                if not full:
                    break
            if psdu and cap - psdu < 4 + 64:
                break  # not even a small MPDU fits any more
        return psdu

    def _take(self, run: Packet, psdu: int, cap: int, left: int) -> tuple[int, int]:
        """How many of ``run``'s MPDUs fit after ``psdu`` bytes (A-MPDU subframes: a
        delimiter each, padding to 4 bytes between them), and the new length."""
        m = run.mpdu
        n = 0
        while n < run.count and n < left:
            nxt = ((psdu + 3) & ~3) + 4 + m if psdu else 4 + m
            if nxt > cap or nxt > self.max_ampdu_bytes:
                break
            psdu = nxt
            n += 1
        return n, psdu

    def end(self, tx: Transmission, now: int) -> tuple[list[Transmission], Transmission | None]:
        """The exchange ended well: deliver, learn, go on (or let the medium go idle)."""
        step = self._step
        assert step is not None
        self._step = None
        changed: list[Transmission] = []
        if not step.basic:
            for user in step.users:
                self._learn(user.station, now)
            if self._known_data(now):
                return [], self._basic(now + self._sifs, step.txop_start)
        else:
            for user in step.users:
                if user.runs:
                    changed.append(self._deliver(user, now))
        e = self.edcaf
        e.cw = e.cw_min
        e.backoff = self.ap.rng.randrange(e.cw + 1)  # post-backoff, as after any success
        self._schedule_poll(now)
        if self._known_data(now):
            self._want(arrive=False)
        return changed, None

    def _deliver(self, user: _User, now: int) -> Transmission:
        """The multi-STA BlockAck acknowledged ``user``'s frames: out of the rings (each
        run is at the head of its ring, in order), delivered, hooks told."""
        st = user.station
        rx = self.channel.receiver
        per_packet = st.per_packet
        hooks = st.hooks
        for p in user.runs:
            ring = st.rings[p.ac]
            ring.popleft()
            ring.n -= p.count
        for p in user.runs:
            if per_packet:
                for pid in range(p.pid, p.pid + p.count):
                    hooks.on_hw_complete(st, pid, p.ac, now, True)
                    rx.delivered(p, pid, 1, now)
            else:
                rx.delivered(p, p.pid, p.count, now)
        for ac in user.acs:
            self._suspend(st, ac, now)
        st.tx_success += 1
        self.stats.served[st.name] = self.stats.served.get(st.name, 0) + 1
        self._learn(st, now)
        # What the channel needs to let the station's rings move on (refill, and a new
        # head of a shared ring invoking its backoff).
        first = user.acs[0]
        edcaf = st.edcafs.get(first) or st.edcaf(first)
        return Transmission(edcaf, user.runs, now, user.mpdus)

    def failed(self, tx: Transmission, now: int) -> None:
        """The trigger frame collided: nobody answered (the frames taken for the TB
        PPDUs stay at the head of their rings). Try again after a backoff."""
        self._step = None
        self.stats.failed_triggers += 1
        e = self.edcaf
        e.cw = min(2 * e.cw + 1, e.cw_max)
        e.backoff = self.ap.rng.randrange(e.cw + 1)
        self._want(arrive=False)

    def lost_internal(self, e: Edcaf) -> None:
        """Another EDCAF of the AP won an internal collision: as a failed attempt."""
        self.stats.internal_losses += 1
        e.cw = min(2 * e.cw + 1, e.cw_max)
        e.backoff = self.ap.rng.randrange(e.cw + 1)

    # -- MU EDCA ------------------------------------------------------------------------------
    def _suspend(self, st: Station, ac: AccessCategory, now: int) -> None:
        timer = self.config.mu_edca_timer_ns
        if timer is None:
            return
        e = st.edcafs.get(ac) or st.edcaf(ac)
        until = now + timer
        self._mu_until[e] = until
        e.held = True
        if e not in self._mu_event:
            self._mu_event[e] = self.sim.loop.call_at(until, PRIO_CONTROL, self._mu_expired, e)

    def _mu_expired(self, e: Edcaf) -> None:
        del self._mu_event[e]
        now = self.sim.loop.now_ns
        until = self._mu_until.get(e, now)
        if until > now:
            self._mu_event[e] = self.sim.loop.call_at(until, PRIO_CONTROL, self._mu_expired, e)
            return
        e.held = False
        if e.station.head_ac(e.ac):
            self.channel.frame_arrived(e, now)

    def summary(self) -> dict[str, Any]:
        s = self.stats
        return {
            "cascades": s.cascades,
            "bsrp_triggers": s.bsrp_triggers,
            "basic_triggers": s.basic_triggers,
            "failed_triggers": s.failed_triggers,
            "internal_losses": s.internal_losses,
            "tb_ppdus": s.tb_ppdus,
            "qos_null_answers": s.qos_null_answers,
            "mpdus": s.mpdus,
            "tb_airtime_ns": s.tb_airtime_ns,
            "ru_tones": self.ru_tones,
            "users_per_trigger": self.n_users,
            "served": dict(s.served),
        }
