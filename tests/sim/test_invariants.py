"""Invariants that must hold for any scenario, checked on random small ones (hypothesis).

Nothing here knows what a particular run should produce; every check is a rule of the
model: packets are conserved, A-MPDUs and TXOPs respect their limits, exchanges never
overlap, each trace entry lasts exactly what the PHY says, the channel counters add up.
Packet bookkeeping is observed through the public driver hooks (``DriverHooks``), and a
run with per-packet hooks must equal the default (batched) run of the same scenario.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from coorp.phy import (
    ACK_BYTES,
    BAR_BYTES,
    BLOCK_ACK_BYTES,
    CTS_BYTES,
    MAX_PPDU_NS,
    RTS_BYTES,
    SIFS_NS,
    SLOT_NS,
    LinkBudget,
    VhtMode,
    legacy_duration_ns,
    valid_vht_mcs,
    vht_ppdu_duration_ns,
)
from coorp.scenario import AccessCategory, Scenario, parse_scenario
from coorp.sim import DriverView, SimResult, Simulation, simulate

ACS = ("BK", "BE", "VI", "VO")
# 802.11-2016 Table 9-137 (OFDM): AIFSN, TXOP limit (µs), aggregation default of the model.
STD_AIFSN = {"BK": 7, "BE": 3, "VI": 2, "VO": 2}
STD_TXOP_US = {"BK": 0, "BE": 0, "VI": 3008, "VO": 1504}
STD_AGG = {"BK": True, "BE": True, "VI": True, "VO": False}


@dataclass
class Recorder:
    """Driver hooks that admit everything and record every packet's life."""

    enqueued: dict[int, str] = field(default_factory=dict)
    completed: dict[int, bool] = field(default_factory=dict)
    depths: list[tuple[str, int]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    last_now: int = 0

    def _time(self, now_ns: int) -> None:
        if now_ns < self.last_now:
            self.errors.append(f"hook time went back: {now_ns} < {self.last_now}")
        self.last_now = now_ns

    def admit_bulk(self, station: DriverView, now_ns: int) -> int | None:
        self._time(now_ns)
        return None

    def on_ls_send(self, station: DriverView, flow: str, now_ns: int) -> None:
        self._time(now_ns)

    def on_hw_enqueue(
        self, station: DriverView, pid: int, ac: AccessCategory, depth: int, now_ns: int
    ) -> None:
        self._time(now_ns)
        if pid in self.enqueued:
            self.errors.append(f"pid {pid} enqueued twice")
        self.enqueued[pid] = ac.value
        self.depths.append((ac.value, depth))

    def on_hw_complete(
        self, station: DriverView, pid: int, ac: AccessCategory, now_ns: int, delivered: bool
    ) -> None:
        self._time(now_ns)
        if pid not in self.enqueued:
            self.errors.append(f"pid {pid} completed but never enqueued")
        elif self.enqueued[pid] != ac.value:
            self.errors.append(f"pid {pid} enqueued as {self.enqueued[pid]}, completed as {ac}")
        if pid in self.completed:
            self.errors.append(f"pid {pid} completed twice")
        self.completed[pid] = delivered


# -- random scenarios ----------------------------------------------------------------------


@st.composite
def scenarios(draw: st.DrawFn) -> dict[str, Any]:
    n = draw(st.integers(2, 6))
    names = [f"s{i}" for i in range(n)]
    coord = st.floats(0, 14, allow_nan=False).map(lambda v: round(v, 2))
    stations = [{"name": nm, "position_m": [draw(coord), draw(coord)]} for nm in names]
    width = draw(st.sampled_from([20, 40, 80]))
    nss = draw(st.integers(1, 2))
    links_mode = draw(st.sampled_from(["fixed", "distance"]))
    flows: list[dict[str, Any]] = []
    for i in range(draw(st.integers(2, 5))):
        src, dst = draw(st.permutations(names))[:2]
        cat = draw(st.sampled_from(ACS))
        if draw(st.booleans()):
            flows.append({
                "kind": "bulk", "name": f"f{i}", "src": src, "dst": dst, "category": cat,
                "total_bytes": draw(st.none() | st.integers(1, 300_000)),
                "start_us": draw(st.integers(0, 5_000)), "tcp_acks": draw(st.booleans()),
            })  # fmt: skip
        else:
            flows.append({
                "kind": "datagram", "name": f"f{i}", "src": src, "dst": dst, "category": cat,
                "size_bytes": draw(st.integers(1, 20_000)),
                "period_us": draw(st.integers(2_000, 20_000)),
                "jitter_us": draw(st.sampled_from([0, 300])),
            })  # fmt: skip
    edca = {}
    for ac in ACS:
        if draw(st.booleans()):
            over: dict[str, Any] = {"aggregation": draw(st.booleans())}
            if draw(st.booleans()):
                over["txop_limit_us"] = draw(st.sampled_from([0, 500, 1504, 3008]))
            edca[ac] = over
    return {
        "duration_s": draw(st.sampled_from([0.02, 0.04])),
        "seed": draw(st.integers(0, 2**32)),
        "packet_bytes": draw(st.sampled_from([1500, 600])),
        "phy": {"width_mhz": width, "spatial_streams": nss,
                "guard_interval": draw(st.sampled_from(["long", "short"])),
                "basic_rate_mbps": draw(st.sampled_from([6, 24]))},
        "links": {"mode": links_mode, "mcs": draw(st.sampled_from(valid_vht_mcs(nss, width))),
                  "packet_errors": draw(st.booleans())},
        "mac": {"retry_limit": draw(st.sampled_from([0, 1, 7])),
                "retry_policy": draw(st.sampled_from(["classic", "ns3"])),
                "rts_threshold_bytes": draw(st.sampled_from([0, 4000, 1_048_576])),
                "max_ampdu_mpdus": draw(st.sampled_from([2, 8, 64])),
                "max_ampdu_bytes": draw(st.sampled_from([8191, 65535, 1_048_575])),
                "ampdu_grouping": draw(st.sampled_from(["consecutive", "per_receiver_tid"])),
                "edca": edca},
        "hw_queue": {"mode": draw(st.sampled_from(["shared", "per_ac"])),
                     "capacity_packets": draw(st.sampled_from([1, 8, 128]))},
        "stations": stations,
        "flows": flows,
    }  # fmt: skip


def _run(data: dict[str, Any]) -> tuple[Scenario, Simulation, SimResult, dict[str, Recorder]]:
    sc = parse_scenario(data)
    sim = Simulation(sc, trace=True)
    recs = {name: Recorder() for name in sim.stations}
    for name, rec in recs.items():
        sim.set_hooks(name, rec)
    return sc, sim, sim.run(), recs


def _same_results(a: SimResult, b: SimResult) -> None:
    """Identical results, implementation metrics (wall time, event count) aside."""
    sa, sb = a.summary(), b.summary()
    for s in (sa, sb):
        for key in ("wall_s", "sim_s_per_wall_s", "events_processed"):
            s.pop(key)
    assert sa == sb
    assert a.trace == b.trace
    for col in a.messages:
        assert np.array_equal(a.messages[col], b.messages[col]), col
    for name in a.ls_hw_depths:
        assert np.array_equal(a.ls_hw_depths[name], b.ls_hw_depths[name]), name


# -- independent expectations ----------------------------------------------------------------


def _edca(sc: Scenario, ac: str) -> tuple[int, int, bool]:
    """(AIFS ns, TXOP limit ns, aggregation) of ``ac`` after overrides."""
    o = sc.mac.edca.get(AccessCategory(ac))
    aifsn = STD_AIFSN[ac] if o is None or o.aifsn is None else o.aifsn
    txop = STD_TXOP_US[ac] if o is None or o.txop_limit_us is None else o.txop_limit_us
    agg = STD_AGG[ac] if o is None or o.aggregation is None else o.aggregation
    return SIFS_NS + aifsn * SLOT_NS, txop * 1000, agg


def _mcs_candidates(sc: Scenario) -> dict[str, set[int]]:
    """MCS of every link a station may send on (to its flows' receivers, and TCP acks back)."""
    pos = {s.name: s.position_m for s in sc.stations}
    pl = sc.links.pathloss
    lb = LinkBudget(pl.tx_power_dbm, pl.reference_loss_db, pl.exponent, pl.margin_db)

    def mcs(a: str, b: str) -> int:
        if sc.links.mode == "fixed":
            return sc.links.mcs
        m = lb.best_mcs(math.dist(pos[a], pos[b]), sc.phy.spatial_streams, sc.phy.width_mhz)
        assert m is not None
        return m

    out: dict[str, set[int]] = defaultdict(set)
    for f in sc.flows:
        out[f.src].add(mcs(f.src, f.dst))
        out[f.dst].add(mcs(f.dst, f.src))
    return out


def _check_trace(sc: Scenario, res: SimResult) -> None:
    trace = res.trace
    assert trace is not None
    phy, mac = sc.phy, sc.mac
    rate = phy.basic_rate_mbps
    ack, ba = legacy_duration_ns(ACK_BYTES, rate), legacy_duration_ns(BLOCK_ACK_BYTES, rate)
    rts, cts = legacy_duration_ns(RTS_BYTES, rate), legacy_duration_ns(CTS_BYTES, rate)
    bar_ex = legacy_duration_ns(BAR_BYTES, rate) + SIFS_NS + ba
    cands = _mcs_candidates(sc)
    min_aifs = min(_edca(sc, ac)[0] for ac in ACS)

    def outcomes(name: str, n: int, psdu: int) -> set[tuple[int, int]]:
        """Possible (success, failure) durations of one transmission."""
        if n == 0:  # BlockAckReq
            assert psdu == 0
            return {(bar_ex, bar_ex)}
        out = set()
        for m in cands[name]:
            mode = VhtMode(m, phy.spatial_streams, phy.width_mhz, phy.guard_interval)
            data = vht_ppdu_duration_ns(psdu, mode)
            resp = ba if n > 1 else ack
            if psdu > mac.rts_threshold_bytes:
                out.add((rts + cts + data + resp + 3 * SIFS_NS, rts + SIFS_NS + cts))
            else:
                out.add((data + SIFS_NS + resp, data + SIFS_NS + resp))
        return out

    # Every time counter covers [0, horizon]: an exchange on the air at the end counts
    # up to the horizon only.
    horizon = res.duration_ns
    success_ns = failure_ns = 0
    prev: tuple[Any, ...] | None = None
    txops: dict[tuple[str, str, int], list[tuple[int, int]]] = defaultdict(list)
    for entry in trace:
        start, end, collided, names, acs, ns, psdus, txop_starts = entry
        assert isinstance(start, int) and isinstance(end, int)
        assert 0 <= start < end
        assert start <= res.duration_ns
        # One station = success, two or more (distinct) = collision.
        assert collided == (len(names) >= 2)
        assert len(set(names)) == len(names)
        for ac, n, psdu, t0 in zip(acs, ns, psdus, txop_starts, strict=True):
            # A-MPDU limits.
            assert 0 <= n <= mac.max_ampdu_mpdus
            assert n <= 1 or psdu <= mac.max_ampdu_bytes
            if not _edca(sc, ac)[2]:
                assert n <= 1, f"{ac} aggregated although aggregation is off"
            assert t0 <= start
        # Each entry lasts exactly what the PHY says (some MCS of the sender's links).
        options = [outcomes(nm, n, p) for nm, n, p in zip(names, ns, psdus, strict=True)]
        if collided:
            assert start == txop_starts[0]
            longest = {max(f) for f in _product([{o[1] for o in opt} for opt in options])}
            assert end - start in longest, entry
            failure_ns += min(end, horizon) - start
        else:
            assert end - start in {o[0] for o in options[0]}, entry
            success_ns += min(end, horizon) - start
            if ns[0]:
                mode_data = [
                    vht_ppdu_duration_ns(psdus[0], VhtMode(m, phy.spatial_streams,
                                         phy.width_mhz, phy.guard_interval))
                    for m in cands[names[0]]
                ]  # fmt: skip
                assert min(mode_data) <= MAX_PPDU_NS
            txops[(names[0], acs[0], txop_starts[0])].append((start, end))
        # Time never goes back; exchanges never overlap; gaps are SIFS inside a TXOP and at
        # least the shortest AIFS otherwise.
        if prev is not None:
            gap = start - prev[1]
            continuation = (
                not collided and not prev[2] and names == prev[3] and acs == prev[4]
                and txop_starts == prev[7] and start != txop_starts[0]
            )  # fmt: skip
            if continuation:
                assert gap == SIFS_NS, (prev, entry)
                success_ns += SIFS_NS
            else:
                assert start == txop_starts[0]
                assert gap >= min_aifs, (prev, entry)
        else:
            assert start >= min_aifs
        prev = entry

    # TXOP limits (VO/VI): a TXOP's exchanges end within the limit, unless it is a single
    # exchange (the first frame of a TXOP may exceed it).
    for (_, ac, t0), spans in txops.items():
        limit = _edca(sc, ac)[1]
        if limit == 0:
            assert len(spans) == 1
        elif len(spans) > 1:
            assert spans[-1][1] - t0 <= limit, (ac, t0, spans)

    ch = res.channel
    # The run may stop in the SIFS gap after the last exchange in the trace, before a TXOP
    # continuation that never started: that part of the gap is busy too.
    gap_options = {0}
    if trace and not trace[-1][2] and 0 < horizon - trace[-1][1] < SIFS_NS:
        gap_options.add(horizon - trace[-1][1])
    assert ch.success_ns - success_ns in gap_options
    assert ch.failure_ns == failure_ns
    assert ch.exchanges == len(trace)
    assert ch.collisions == sum(1 for e in trace if e[2])
    assert ch.busy_ns == ch.success_ns + ch.failure_ns
    assert ch.busy_ns <= horizon
    for station in res.stations.values():
        assert station.airtime_ns <= horizon


def _product(sets: list[set[int]]) -> list[tuple[int, ...]]:
    out: list[tuple[int, ...]] = [()]
    for s in sets:
        out = [(*o, v) for o in out for v in s]
    return out


def _check_accounting(sc: Scenario, sim: Simulation, res: SimResult, recs: dict[str, Any]) -> None:
    cap = sc.hw_queue.capacity_packets
    shared = sc.hw_queue.mode == "shared"
    for name, rec in recs.items():
        assert not rec.errors, rec.errors[:5]
        mine = [f for f in res.flows.values() if f.src == name]
        sent = sum(f.sent_packets for f in mine)
        delivered = sum(f.delivered_packets for f in mine)
        dropped = sum(f.dropped_packets for f in mine)
        for f in mine:
            assert f.delivered_packets + f.dropped_packets <= f.sent_packets, f
            assert f.messages_delivered + f.messages_lost <= f.messages_sent, f
        ok = sum(1 for v in rec.completed.values() if v)
        assert ok == delivered
        assert len(rec.completed) - ok == dropped == res.stations[name].dropped_packets
        in_rings = len(rec.enqueued) - len(rec.completed)
        not_yet_in_ring = sent - len(rec.enqueued)  # LS packets waiting for ring room
        assert in_rings >= 0 and not_yet_in_ring >= 0
        # sent = delivered + dropped + still queued, every term observed independently.
        assert sent == delivered + dropped + in_rings + not_yet_in_ring
        # Rings are bounded; the driver view reports the ring a bulk packet would join.
        if shared:
            assert all(d < cap for _, d in rec.depths)
            assert sim.station(name).hw_queue_length() == in_rings
        else:
            assert all(d < cap for _, d in rec.depths)
            left = Counter(rec.enqueued[p] for p in rec.enqueued if p not in rec.completed)
            # Per-AC rings: the ring of the bulk flow's category (BE with no bulk flow).
            bulk_acs = {f.category.value for f in sc.flows if f.kind == "bulk" and f.src == name}
            assert sim.station(name).hw_queue_length() in ({left[ac] for ac in bulk_acs}
                                                           or {left["BE"]})  # fmt: skip
        st = res.stations[name]
        assert st.tx_success + st.tx_failed <= st.tx_attempts


@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow],
    derandomize=True,
)  # fmt: skip
@given(scenarios())
def test_random_scenarios_keep_every_invariant(data: dict[str, Any]) -> None:
    sc, sim, res, recs = _run(data)
    _check_trace(sc, res)
    _check_accounting(sc, sim, res, recs)
    # Hooks that observe every packet (per_packet) and the default batched driver path
    # must produce the same run: the recorder admits everything and changes nothing.
    _same_results(res, simulate(sc, trace=True))
    for name in res.messages["flow"]:
        assert name in res.flows
    lat = res.messages["latency_ns"]
    done = res.messages["delivered_ns"] >= 0
    assert (lat[done] > 0).all()
    assert (res.messages["delivered_ns"][done] <= res.duration_ns).all()
    assert not (done & res.messages["lost"]).any()


# -- finite traffic: everything accounted for at the end ---------------------------------------


def test_finite_traffic_is_fully_delivered_or_dropped() -> None:
    # Finite bulk transfers and early datagrams on a lossy, collision-prone channel with few
    # retries: at the end nothing is queued, every packet is delivered or dropped, and TCP
    # resends what the MAC dropped, so every bulk byte arrives.
    data = {
        "duration_s": 1.5, "seed": 3,
        "links": {"mode": "distance", "packet_errors": True},
        "phy": {"width_mhz": 40, "spatial_streams": 1},
        "mac": {"retry_limit": 1, "edca": {ac: {"cw_min": 1, "cw_max": 3} for ac in ACS}},
        "hw_queue": {"mode": "shared", "capacity_packets": 16},
        "stations": [{"name": "ap", "position_m": [0, 0]}]
        + [{"name": f"s{i}", "position_m": [9.0 * i, 4.0]} for i in range(1, 5)],
        "flows": [
            {"kind": "bulk", "name": f"up{i}", "src": f"s{i}", "dst": "ap",
             "total_bytes": 150_000 + 1_111 * i}
            for i in range(1, 5)
        ] + [
            {"kind": "datagram", "name": f"ls{i}", "src": f"s{i}", "dst": "ap",
             "size_bytes": 12288, "times_us": [1000.0 * k for k in range(10)]}
            for i in range(1, 5)
        ],
    }  # fmt: skip
    sc, sim, res, recs = _run(data)
    _check_trace(sc, res)
    _check_accounting(sc, sim, res, recs)
    _same_results(res, simulate(sc, trace=True))
    assert res.channel.collisions > 0
    total_dropped = 0
    for f in res.flows.values():
        assert f.sent_packets == f.delivered_packets + f.dropped_packets, f
        total_dropped += f.dropped_packets
    assert total_dropped > 0  # the test exercised the drop path
    for name, rec in recs.items():
        assert len(rec.enqueued) == len(rec.completed), name
    for i in range(1, 5):
        up = res.flows[f"up{i}"]
        assert up.delivered_bytes == 150_000 + 1_111 * i
        assert up.retransmitted_packets == up.dropped_packets
        ls = res.flows[f"ls{i}"]
        assert ls.messages_sent == 10
        assert ls.messages_delivered + ls.messages_lost == 10
        # A message is lost exactly when one of its fragments was dropped.
        assert (ls.messages_lost > 0) == (ls.dropped_packets > 0)
