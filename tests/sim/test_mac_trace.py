"""Exact MAC traces of tiny scenarios, every time worked out by hand.

Backoff draws come from each station's own RNG; setting ``cw_min = cw_max = 0`` makes
every draw 0, so every instant below follows from the standard's timing alone.

Common PHY of this file: 20 MHz, 1 spatial stream, VHT MCS 7, long GI, control frames
at 24 Mb/s (802.11-2016 Tables 21-30, 17-4):

* VHT data: N_DBPS = 260, one BCC encoder, preamble 36 + 4 (one VHT-LTF) = 40 µs,
  ``TXTIME = 40 + 4·ceil((8·PSDU + 22) / 260)`` µs.
* Ack/CTS (14 B) and RTS (20 B) 28 µs, BlockAck (32 B) and BlockAckReq (24 B) 32 µs.
* SIFS 16 µs, slot 9 µs; AIFS = SIFS + AIFSN·slot: VO/VI 34, BE 43, BK 79 µs.
* TXOP limits: VO 1504 µs, VI 3008 µs, BE/BK none (Table 9-137).

Frames: a datagram of S bytes gets an 8-byte UDP header and is cut into IP fragments of
1480 payload bytes (1500-byte MTU minus the 20-byte IP header). MPDU = IP packet + 38
bytes (QoS header 26, LLC/SNAP 8, FCS 4); every VHT PSDU is an A-MPDU: 4-byte delimiter
per subframe, subframes but the last padded to 4 bytes.

* 12288-byte datagram: 12296 bytes = 8 fragments of 1500 B + one of 456 + 20 = 476 B.
  Full fragment: MPDU 1538, PSDU 1542, 12358 bits -> 48 symbols: 232 µs.
  Last fragment: MPDU 514, PSDU 518, 4166 bits -> 17 symbols: 108 µs.
* 1000-byte datagram: one 1028-byte fragment, MPDU 1066, PSDU 1070, 8582 bits
  -> 34 symbols: 176 µs.

Trace entries are ``(start, end, collided, stations, acs, n_mpdus, psdus, txop_starts)``.
"""

from __future__ import annotations

import math
from collections import Counter
from typing import Any

import pytest

from coorp.scenario import Scenario, parse_scenario
from coorp.sim import SimResult, simulate

US = 1_000

# Independent re-derivation of the numbers in the module docstring (µs).
SIFS, SLOT, ACK, BA, RTS, CTS, BAR = 16, 9, 28, 32, 28, 28, 32
AIFS = {"VO": 34, "VI": 34, "BE": 43, "BK": 79}


def data_us(psdu: int) -> int:
    return 40 + 4 * math.ceil((8 * psdu + 22) / 260)


FULL, LAST, SMALL = 232, 108, 176
assert (data_us(1542), data_us(518), data_us(1070)) == (FULL, LAST, SMALL)


def _scenario(
    flows: list[dict[str, Any]],
    *,
    stations: tuple[str, ...] = ("ap", "sta"),
    edca: dict[str, dict[str, Any]] | None = None,
    duration_s: float = 0.02,
    hw_queue: str = "per_ac",
    packet_bytes: int = 1500,
    **mac: Any,
) -> Scenario:
    zero_cw = {"cw_min": 0, "cw_max": 0}
    edca_cfg = {ac: dict(zero_cw) for ac in ("VO", "VI", "BE", "BK")}
    for ac, over in (edca or {}).items():
        edca_cfg[ac].update(over)
    return parse_scenario({
        "duration_s": duration_s,
        "packet_bytes": packet_bytes,
        "hw_queue": {"mode": hw_queue},
        "phy": {"width_mhz": 20, "spatial_streams": 1, "guard_interval": "long"},
        "links": {"mode": "fixed", "mcs": 7},
        "mac": {"edca": edca_cfg, **mac},
        "stations": [{"name": n} for n in stations],
        "flows": flows,
    })  # fmt: skip


def _datagram(name: str, size: int, at_us: float, src: str = "sta", cat: str = "VO") -> dict:
    return {"kind": "datagram", "name": name, "src": src, "dst": "ap", "size_bytes": size,
            "times_us": [at_us], "category": cat}  # fmt: skip


def _times(result: SimResult) -> list[tuple[int, int]]:
    assert result.trace is not None
    return [(int(t[0]) // US, int(t[1]) // US) for t in result.trace]


def _column(result: SimResult, i: int) -> list[object]:
    assert result.trace is not None
    return [t[i] for t in result.trace]


# -- one station, one VO datagram --------------------------------------------------------


def test_vo_datagram_fragments_in_txops() -> None:
    r = simulate(_scenario([_datagram("m", 12288, 0)]), trace=True)
    # The medium is idle from t = 0: first access after AIFS(VO) = 34 µs. Each exchange is
    # DATA + SIFS + Ack = 232 + 16 + 28 = 276 µs; the next MPDU follows after SIFS while
    # the whole exchange still ends within TXOP start + 1504 µs. TXOP 1 (from 34, limit
    # 1538): 34-310, 326-602, 618-894, 910-1186, 1202-1478; a sixth would end at 1770.
    # Then AIFS again (backoff 0): TXOP 2 from 1478 + 34 = 1512 (limit 3016) carries
    # fragments 6-8 and the short last one (108 + 16 + 28 = 152 µs): 2388-2540.
    ex = FULL + SIFS + ACK
    assert ex == 276
    txop1 = [(34 + k * (ex + SIFS), 34 + k * (ex + SIFS) + ex) for k in range(5)]
    t2 = txop1[-1][1] + AIFS["VO"]
    txop2 = [(t2 + k * (ex + SIFS), t2 + k * (ex + SIFS) + ex) for k in range(3)]
    last_start = txop2[-1][1] + SIFS
    expected = [*txop1, *txop2, (last_start, last_start + LAST + SIFS + ACK)]
    assert expected[-1] == (2388, 2540)
    assert _times(r) == expected

    assert _column(r, 2) == [False] * 9
    assert _column(r, 3) == [("sta",)] * 9
    assert _column(r, 4) == [("VO",)] * 9
    assert _column(r, 5) == [(1,)] * 9  # VO does not aggregate by default
    assert _column(r, 6) == [(1542,)] * 8 + [(518,)]
    assert _column(r, 7) == [(34 * US,)] * 5 + [(1512 * US,)] * 4

    f = r.flows["m"]
    assert (f.sent_packets, f.delivered_packets, f.dropped_packets) == (9, 9, 0)
    assert f.delivered_bytes == 12288 + 8 + 9 * 20  # payload + UDP + 9 IP headers
    assert (f.messages_sent, f.messages_delivered, f.messages_lost) == (1, 1, 0)
    assert f.latency_ms_p50 == pytest.approx(2.540)
    assert r.messages["latency_ns"].tolist() == [2_540_000]
    assert r.messages["hw_depth_first"].tolist() == [0]

    ch = r.channel
    assert (ch.exchanges, ch.collisions) == (9, 0)
    # Busy periods: the two TXOPs, SIFS gaps included.
    assert ch.busy_ns == (1478 - 34 + 2540 - 1512) * US
    assert ch.success_ns == ch.busy_ns and ch.failure_ns == 0
    st = r.stations["sta"]
    assert (st.tx_attempts, st.tx_success, st.tx_failed) == (9, 9, 0)
    assert st.airtime_ns == (8 * ex + LAST + SIFS + ACK) * US


@pytest.mark.parametrize(
    ("arrival_us", "first_start_us"),
    [
        (0, 34),  # medium idle since 0: wait AIFS(VO)
        (20, 34),  # AIFS counts from the start of the idle period, not the arrival
        (34, 34),
        (1000, 1000),  # idle for longer than AIFS, backoff 0: immediate access
        (1000.5, 1000.5),
    ],
)
def test_first_access_after_aifs_of_idle_medium(arrival_us: float, first_start_us: float) -> None:
    r = simulate(_scenario([_datagram("m", 1000, arrival_us)]), trace=True)
    assert r.trace is not None and len(r.trace) == 1
    start, end = r.trace[0][0], r.trace[0][1]
    assert start == round(first_start_us * US)
    assert end - start == (SMALL + SIFS + ACK) * US


def test_rts_cts_exchanges_fill_the_txop_to_the_nanosecond() -> None:
    r = simulate(_scenario([_datagram("m", 12288, 0)], rts_threshold_bytes=0), trace=True)
    # Each exchange: RTS + SIFS + CTS + SIFS + DATA + SIFS + Ack = 28+16+28+16+232+16+28
    # = 364 µs (240 µs for the short last fragment). TXOP 1 from 34: 34-398, 414-778,
    # 794-1158, 1174-1538: the fourth ends exactly at the limit 34 + 1504 = 1538 and is
    # allowed. TXOP 2 from 1538 + 34 = 1572 ends exactly at its limit 3076 after four more;
    # the last fragment needs a third TXOP at 3076 + 34 = 3110.
    ex = RTS + SIFS + CTS + SIFS + FULL + SIFS + ACK
    assert ex == 364
    expected = []
    for t0 in (34, 1572):
        expected += [(t0 + k * (ex + SIFS), t0 + k * (ex + SIFS) + ex) for k in range(4)]
    assert expected[3][1] == 34 + 1504 and expected[7][1] == 1572 + 1504
    short = RTS + SIFS + CTS + SIFS + LAST + SIFS + ACK
    expected.append((3110, 3110 + short))
    assert _times(r) == expected
    assert _column(r, 7) == [(34 * US,)] * 4 + [(1572 * US,)] * 4 + [(3110 * US,)]
    assert r.messages["latency_ns"].tolist() == [(3110 + short) * US]


def test_txop_limit_zero_means_one_exchange_per_access() -> None:
    sc = _scenario([_datagram("m", 3000, 0)], edca={"VO": {"txop_limit_us": 0}})
    r = simulate(sc, trace=True)
    # 3008 bytes = 1480 + 1480 + 48: two 1500-byte fragments and one of 68 B (MPDU 106,
    # PSDU 110: 902 bits -> 4 symbols = 56 µs). No TXOP: AIFS before every exchange.
    short = data_us(110)
    assert short == 56
    e1 = 34 + FULL + SIFS + ACK
    e2 = e1 + 34 + FULL + SIFS + ACK
    assert _times(r) == [(34, e1), (e1 + 34, e2), (e2 + 34, e2 + 34 + short + SIFS + ACK)]


# -- A-MPDU aggregation ----------------------------------------------------------------------


def test_be_datagram_goes_out_as_one_ampdu_with_blockack() -> None:
    r = simulate(_scenario([_datagram("m", 12288, 0, cat="BE")]), trace=True)
    # Nine subframes: 8 x (4 + 1538 = 1542, padded to 1544) but the last unpadded, then
    # 4 + 514: PSDU = 7·1544 + 1542 + 2 (pad) + 518 = 12870 bytes; 102982 bits
    # -> 397 symbols = 1588 µs + 40 = 1628 µs; + SIFS + BlockAck = 1676 µs. From AIFS(BE).
    psdu = 8 * 1544 + 518
    assert psdu == 12870 and data_us(psdu) == 1628
    assert _times(r) == [(43, 43 + 1628 + SIFS + BA)]
    assert r.trace is not None
    assert r.trace[0][5:7] == ((9,), (12870,))
    assert r.flows["m"].delivered_packets == 9


@pytest.mark.parametrize(
    ("mac", "sizes", "expected"),
    [
        # 4 MPDUs: PSDU 3·1544 + 1542 = 6174, 49414 bits -> 191 symbols = 804 µs; + 48.
        # Then 4 again, then the short fragment alone (S-MPDU, normal Ack): 108 + 44.
        ({"max_ampdu_mpdus": 4}, [4, 4, 1], [(43, 895), (938, 1790), (1833, 1985)]),
        # 5000 bytes fit 3 full subframes (4630) but not 4 (6174): 612 + 48 = 660 µs;
        # the last A-MPDU is 2·1544 + 518 = 3606 bytes: 112 symbols = 488 µs; + 48.
        ({"max_ampdu_bytes": 5000}, [3, 3, 3], [(43, 703), (746, 1406), (1449, 1985)]),
    ],
)
def test_ampdu_limits(
    mac: dict[str, int], sizes: list[int], expected: list[tuple[int, int]]
) -> None:
    assert data_us(6174) == 804 and data_us(4630) == 612 and data_us(3606) == 488
    r = simulate(_scenario([_datagram("m", 12288, 0, cat="BE")], **mac), trace=True)
    assert [t[0] for t in _column(r, 5)] == sizes
    assert _times(r) == expected


def test_vi_ampdu_is_sized_to_fit_the_txop() -> None:
    # VI aggregates within its 3008 µs TXOP: the PPDU may last 3008 - SIFS - BlockAck =
    # 2960 µs, i.e. (2960 - 40) / 4 = 730 symbols = 189800 bits: a PSDU of at most
    # (189800 - 22) // 8 = 23722 bytes. k full subframes take 1544·(k-1) + 1542 bytes:
    # k = 15 (23158 B; 16 would be 24702). 185286 bits -> 713 symbols = 2892 µs, so the
    # exchange is 2892 + 16 + 32 = 2940 µs. The 52 µs left cannot hold another exchange:
    # the TXOP ends and the next one starts AIFS(VI) later. 30 packets = 2 x 15.
    assert 14 * 1544 + 1542 == 23158 and data_us(23158) == 2892
    flows = [{"kind": "bulk", "name": "up", "src": "sta", "dst": "ap", "category": "VI",
              "total_bytes": 30 * 1500, "tcp_acks": False}]  # fmt: skip
    r = simulate(_scenario(flows), trace=True)
    ex = 2892 + SIFS + BA
    assert _times(r) == [(34, 34 + ex), (34 + ex + 34, 34 + 2 * ex + 34)]
    assert _column(r, 5) == [(15,), (15,)]
    assert _column(r, 7) == [(34 * US,), ((34 + ex + 34) * US,)]


def test_bulk_transfer_and_its_tcp_ack() -> None:
    flows = [{"kind": "bulk", "name": "up", "src": "sta", "dst": "ap", "total_bytes": 3000}]
    r = simulate(_scenario(flows), trace=True)
    # Two 1500-byte packets -> one A-MPDU of 1544 + 1542 = 3086 bytes: 24710 bits
    # -> 96 symbols = 424 µs; + SIFS + BlockAck: 43-515. Every second delivered segment
    # triggers a 52-byte TCP ack from the AP (MPDU 90, PSDU 94: 774 bits -> 3 symbols
    # = 52 µs; + SIFS + Ack): it contends after AIFS(BE) from 515: 558-654.
    assert data_us(3086) == 424 and data_us(94) == 52
    assert _times(r) == [(43, 515), (558, 654)]
    assert _column(r, 3) == [("sta",), ("ap",)]
    assert _column(r, 6) == [(3086,), (94,)]
    up, ack = r.flows["up"], r.flows["up:ack"]
    assert (up.kind, up.sent_packets, up.delivered_packets, up.delivered_bytes) == (
        "bulk", 2, 2, 3000,
    )  # fmt: skip
    assert (ack.kind, ack.src, ack.dst, ack.delivered_packets) == ("tcp-ack", "ap", "sta", 1)


def test_bulk_without_tcp_acks_sends_nothing_back() -> None:
    flows = [{"kind": "bulk", "name": "up", "src": "sta", "dst": "ap", "total_bytes": 3100,
              "tcp_acks": False, "start_us": 500}]  # fmt: skip
    r = simulate(_scenario(flows), trace=True)
    # 1500 + 1500 + 100 bytes: 1544 + 1544 + 4 + 138 = 3230-byte A-MPDU at 500 µs
    # (medium idle since 0, backoff 0: immediate access).
    psdu = 2 * 1544 + 4 + 100 + 38
    assert _times(r) == [(500, 500 + data_us(psdu) + SIFS + BA)]
    assert "up:ack" not in r.flows
    assert r.flows["up"].delivered_bytes == 3100


@pytest.mark.parametrize("mode", ["per_ac", "shared"])
def test_vo_message_behind_bulk_packets(mode: str) -> None:
    # At t = 0 a 20-packet bulk transfer fills the BE queue; at 10 µs a 1000-byte VO
    # message arrives. The BE A-MPDU (1544·19 + 1542 = 30878 B: 247046 bits -> 951
    # symbols = 3844 µs, + SIFS + BlockAck = 3892 µs) would start at AIFS(BE) = 43 µs.
    # per_ac: the VO frame has its own ring and reaches AIFS(VO) = 34 µs first: 34-254,
    #         then the A-MPDU at 254 + 43 = 297.
    # shared: the VO frame is behind 20 bulk packets in the one ring: the A-MPDU goes
    #         at 43-3935, the VO frame at 3935 + 34 = 3969.
    assert data_us(19 * 1544 + 1542) == 3844
    flows = [
        {"kind": "bulk", "name": "bh", "src": "sta", "dst": "ap", "total_bytes": 20 * 1500,
         "tcp_acks": False},
        _datagram("ls", 1000, 10),
    ]  # fmt: skip
    r = simulate(_scenario(flows, hw_queue=mode), trace=True)
    ampdu, vo = 3844 + SIFS + BA, SMALL + SIFS + ACK
    if mode == "per_ac":
        expected = [(34, 34 + vo), (34 + vo + 43, 34 + vo + 43 + ampdu)]
        depth = 0
    else:
        expected = [(43, 43 + ampdu), (43 + ampdu + 34, 43 + ampdu + 34 + vo)]
        depth = 20
    assert _times(r) == expected
    assert r.messages["hw_depth_first"].tolist() == [depth]
    assert r.messages["latency_ns"].tolist() == [(expected[0 if depth == 0 else 1][1] - 10) * US]


# -- collisions, retries, internal collisions ------------------------------------------------


@pytest.mark.parametrize("retry_limit", [0, 3, 7])
def test_two_stations_collide_until_they_drop(retry_limit: int) -> None:
    flows = [_datagram("a", 1000, 0, src="s1"), _datagram("b", 1000, 0, src="s2")]
    sc = _scenario(flows, stations=("ap", "s1", "s2"), retry_limit=retry_limit)
    r = simulate(sc, trace=True)
    # Both reach AIFS(VO) at 34 µs with backoff 0 and collide. A failed exchange keeps
    # the medium busy for DATA + SIFS + Ack timeout (176 + 16 + 28 = 220 µs); CW stays 0,
    # so both retry at the same boundary again, until retry_limit + 1 attempts.
    attempts = retry_limit + 1
    fail = SMALL + SIFS + ACK
    expected = [(34 + k * (fail + 34), 34 + k * (fail + 34) + fail) for k in range(attempts)]
    assert _times(r) == expected
    assert _column(r, 2) == [True] * attempts
    assert _column(r, 3) == [("s1", "s2")] * attempts
    for name, flow in (("s1", "a"), ("s2", "b")):
        s = r.stations[name]
        assert (s.tx_attempts, s.tx_success, s.tx_failed, s.dropped_packets) == (
            attempts, 0, attempts, 1,
        )  # fmt: skip
        f = r.flows[flow]
        assert (f.sent_packets, f.delivered_packets, f.dropped_packets) == (1, 0, 1)
        assert (f.messages_sent, f.messages_delivered, f.messages_lost) == (1, 0, 1)
        assert f.latency_ms_p50 is None
    ch = r.channel
    assert (ch.exchanges, ch.collisions) == (attempts, attempts)
    assert ch.failure_ns == attempts * fail * US
    assert ch.success_ns == 0 and ch.busy_ns == ch.failure_ns
    assert r.messages["lost"].tolist() == [True, True]
    assert r.messages["delivered_ns"].tolist() == [-1, -1]


@pytest.mark.parametrize("retry_limit", [0, 7])
def test_internal_collision_goes_to_the_higher_category(retry_limit: int) -> None:
    # One station, a VO and a BE frame at t = 0; BE gets AIFSN 2 so both count down to the
    # same boundary (34 µs): an internal collision (10.22.2.3). VO transmits; BE behaves as
    # after a failed attempt (one retry; dropped at once with retry_limit 0).
    flows = [_datagram("vo", 1000, 0), _datagram("be", 1000, 0, cat="BE")]
    sc = _scenario(flows, edca={"BE": {"aifsn": 2}}, retry_limit=retry_limit)
    r = simulate(sc, trace=True)
    ex = SMALL + SIFS + ACK
    expected = [(34, 34 + ex)]
    if retry_limit > 0:
        expected.append((34 + ex + 34, 34 + ex + 34 + ex))
    assert _times(r) == expected
    assert _column(r, 4)[0] == ("VO",)
    assert r.channel.internal_collisions == 1
    assert r.channel.collisions == 0
    be = r.flows["be"]
    if retry_limit == 0:
        assert (be.delivered_packets, be.dropped_packets, be.messages_lost) == (0, 1, 1)
    else:
        assert (be.delivered_packets, be.dropped_packets, be.messages_lost) == (1, 0, 0)
    assert r.flows["vo"].delivered_packets == 1


@pytest.mark.parametrize("policy", ["classic", "ns3"])
def test_retry_policies_after_a_collided_ampdu(policy: str) -> None:
    # s1: 2000-byte BE datagram -> fragments of 1500 and 548 B (MPDUs 1538, 586):
    # A-MPDU of 1544 + 590 = 2134 bytes, 17094 bits -> 66 symbols = 304 µs.
    # s2: 1000-byte BK datagram (S-MPDU, 176 µs). Both arrive at 100 µs on a medium idle
    # since 0 (longer than AIFS(BE) = 43 and AIFS(BK) = 79 µs): both transmit at once and
    # collide; the failure lasts max(304 + 16 + 32, 176 + 16 + 28) = 352 µs -> 452.
    assert data_us(2134) == 304
    flows = [_datagram("a", 2000, 100, src="s1", cat="BE"),
             _datagram("b", 1000, 100, src="s2", cat="BK")]  # fmt: skip
    sc = _scenario(flows, stations=("ap", "s1", "s2"), retry_policy=policy)
    r = simulate(sc, trace=True)
    ampdu = 304 + SIFS + BA
    bk = SMALL + SIFS + ACK
    coll = (100, 100 + max(ampdu, bk))
    if policy == "ns3":
        # s1 first sends a BlockAckReq (32 + 16 + 32 = 80 µs) after AIFS(BE); its BlockAck
        # resets CW, then the A-MPDU is retransmitted; s2 (AIFS 79 µs) waits each time.
        bar = (452 + 43, 452 + 43 + BAR + SIFS + BA)
        amp = (bar[1] + 43, bar[1] + 43 + ampdu)
        expected = [coll, bar, amp, (amp[1] + 79, amp[1] + 79 + bk)]
        assert expected[1:] == [(495, 575), (618, 970), (1049, 1269)]
        assert _column(r, 5) == [(2, 1), (0,), (2,), (1,)]
        assert r.channel.bar_exchanges == 1
    else:
        amp = (452 + 43, 452 + 43 + ampdu)
        expected = [coll, amp, (amp[1] + 79, amp[1] + 79 + bk)]
        assert _column(r, 5) == [(2, 1), (2,), (1,)]
        assert r.channel.bar_exchanges == 0
    assert _times(r) == expected
    assert r.messages["delivered_ns"].tolist() == [expected[-2][1] * US, expected[-1][1] * US]
    assert r.channel.collisions == 1


# -- the shared ring and the standard's backoff rule -------------------------------------------


def test_shared_ring_head_promotion_invokes_a_backoff() -> None:
    # 802.11-2016 10.22.2.2 a): a frame queued for an EDCAF while the medium is busy and the
    # backoff counter is 0 invokes a backoff, uniform in [0, CW]. In a shared ring a VO
    # frame becomes the EDCAF's frame when the BE packets ahead of it have been
    # acknowledged, i.e. while the medium is busy. With CW(VO) = 3 (standard default)
    # the first VO access of each TXOP should follow AIFS(VO) + k slots for k in 0..3, not
    # always k = 0 (probability 4^-n for n messages).
    sc = parse_scenario({
        "duration_s": 1.0, "seed": 1,
        "hw_queue": {"mode": "shared", "capacity_packets": 128},
        "stations": [{"name": "ap"}, {"name": "sta"}],
        "flows": [
            {"kind": "datagram", "name": "ls", "src": "sta", "dst": "ap", "size_bytes": 12288,
             "period_us": 33333.3, "start_us": 1000, "category": "VO"},
            {"kind": "bulk", "name": "bh", "src": "sta", "dst": "ap"},
        ],
    })  # fmt: skip
    r = simulate(sc, trace=True)
    assert r.trace is not None
    gaps: Counter[int] = Counter()
    for prev, cur in zip(r.trace, r.trace[1:], strict=False):
        if cur[4] == ("VO",) and cur[0] == cur[7][0]:
            gaps[(int(cur[0]) - int(prev[1])) // US] += 1
    assert sum(gaps.values()) >= 20
    assert all(g >= 34 and (g - 34) % 9 == 0 for g in gaps)  # AIFS(VO) + k slots
    assert len(gaps) > 1


@pytest.mark.parametrize("mode", ["shared", "per_ac"])
def test_backoff_of_a_frame_promoted_to_the_head_of_a_shared_ring(mode: str) -> None:
    # A 2-packet BE A-MPDU (1544 + 1542 = 3086 B: 424 µs) is in the ring at t = 0; a
    # 1000-byte VO datagram arrives at 10 µs. CW(VO) = 3, every other CW = 0.
    # shared: the VO frame waits behind the A-MPDU (43-515 µs) and becomes the VO EDCAF's
    #         frame when the BlockAck ends it, with the medium busy: its backoff is drawn
    #         from [0, 3], so it starts at 515 + AIFS(VO) + k slots, k = 0..3 (10.22.2.2 a).
    # per_ac: the VO frame arrives in its own empty ring on a medium idle for less than
    #         AIFS(VO): no backoff, it goes at 34 µs, for every seed.
    flows = [
        {"kind": "bulk", "name": "bh", "src": "sta", "dst": "ap", "total_bytes": 3000,
         "tcp_acks": False},
        _datagram("ls", 1000, 10),
    ]  # fmt: skip
    sc = _scenario(flows, hw_queue=mode, edca={"VO": {"cw_min": 3, "cw_max": 3}})
    ampdu_end = 43 + data_us(3086) + SIFS + BA
    assert ampdu_end == 515
    slots: Counter[int] = Counter()
    for seed in range(40):
        r = simulate(sc, seed=seed, trace=True)
        vo = [t for t in _times(r) if t[1] - t[0] == SMALL + SIFS + ACK]
        assert len(vo) == 1 and len(_times(r)) == 2
        if mode == "per_ac":
            assert vo[0][0] == 34
            continue
        k, rest = divmod(vo[0][0] - ampdu_end - AIFS["VO"], SLOT)
        assert rest == 0
        slots[k] += 1
    if mode == "shared":
        assert sorted(slots) == [0, 1, 2, 3]  # uniform over [0, CW]; 40 fixed seeds


# -- the TXOP limit, to the nanosecond -------------------------------------------------------


def test_continuation_starting_exactly_at_the_txop_limit_is_refused() -> None:
    # MTU 650: a full fragment is 650 B IP, MPDU 688, PSDU 692: 5558 bits -> 22 symbols
    # = 128 µs; exchange 128 + 16 + 28 = 172 µs, so exchange + SIFS = 188 µs and eight of
    # them fill the 1504 µs VO TXOP exactly: the 8th ends at 34 + 1504 - 16 = 1522 µs.
    # A ninth exchange would start at 1538 = the TXOP's end, so the TXOP must end there
    # and the remaining two fragments need a new access at 1522 + 34 = 1556 µs.
    assert data_us(692) == 128
    r = simulate(_scenario([_datagram("m", 630 * 10 - 8, 0)], packet_bytes=650), trace=True)
    ex = 172
    expected = [(34 + k * (ex + SIFS), 34 + k * (ex + SIFS) + ex) for k in range(8)]
    assert expected[-1][1] == 1522
    expected += [(1556, 1556 + ex), (1556 + ex + SIFS, 1556 + 2 * ex + SIFS)]
    assert _times(r) == expected


# -- counters at the horizon: every time counter covers [0, horizon] -------------------------


def test_busy_equals_success_plus_failure_when_the_run_stops_mid_exchange() -> None:
    r = simulate(_scenario([_datagram("m", 12288, 0)]), duration_ns=1_000_000, trace=True)
    # Horizon 1000 µs falls inside the 4th exchange (910-1186 µs) of the first TXOP.
    assert _times(r)[-1] == (910, 1186)
    ch = r.channel
    assert ch.busy_ns == ch.success_ns + ch.failure_ns
    # The busy period from 34 µs, three SIFS gaps included, up to the horizon.
    assert ch.busy_ns == (1000 - 34) * US
    assert ch.exchanges == 4  # exchanges started before the horizon
    assert r.stations["sta"].airtime_ns == (3 * (FULL + SIFS + ACK) + 1000 - 910) * US


def test_a_run_stopping_in_the_sifs_gap_of_a_txop_counts_the_gap_up_to_the_horizon() -> None:
    # The first exchange is 34-310 µs; the next one of the TXOP would start at 326.
    r = simulate(_scenario([_datagram("m", 12288, 0)]), duration_ns=315_000, trace=True)
    assert _times(r) == [(34, 310)]
    ch = r.channel
    assert (ch.busy_ns, ch.success_ns, ch.failure_ns) == ((315 - 34) * US, (315 - 34) * US, 0)
    assert r.stations["sta"].airtime_ns == (310 - 34) * US


def test_a_run_stopping_in_a_collision_counts_it_up_to_the_horizon() -> None:
    flows = [_datagram("a", 1000, 0, src="s1"), _datagram("b", 1000, 0, src="s2")]
    sc = _scenario(flows, stations=("ap", "s1", "s2"))
    r = simulate(sc, duration_ns=100_000, trace=True)
    # Both transmit at 34 µs and collide (34-254 µs); the run stops at 100 µs.
    assert _times(r) == [(34, 34 + SMALL + SIFS + ACK)]
    ch = r.channel
    assert (ch.busy_ns, ch.success_ns, ch.failure_ns) == (66 * US, 0, 66 * US)
    assert (ch.exchanges, ch.collisions) == (1, 1)
    for name in ("s1", "s2"):
        st = r.stations[name]
        assert (st.airtime_ns, st.tx_attempts, st.tx_success, st.tx_failed) == (66 * US, 1, 0, 0)


def test_counters_of_a_finished_run_do_not_depend_on_a_later_horizon() -> None:
    # Nothing is on the air after 2540 µs: any later horizon gives the same counters.
    sc = _scenario([_datagram("m", 12288, 0)])
    a, b = simulate(sc, duration_ns=2_540_000), simulate(sc, duration_ns=20_000_000)
    assert (a.channel.busy_ns, a.channel.success_ns) == (b.channel.busy_ns, b.channel.success_ns)
    assert a.stations["sta"].airtime_ns == b.stations["sta"].airtime_ns
