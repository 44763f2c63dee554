"""The emulator's GRO (``coorp.emulate._gro``): which segments a NAPI driver would merge,
and the GSO packets it writes — checked by segmenting them again as the kernel would
(checksums completed from the partial one) and comparing with the segments given."""

from __future__ import annotations

import struct

from hypothesis import given, settings
from hypothesis import strategies as st

from coorp.emulate._gro import MAX_FLOWS, PLAIN, VNET_HDR_BYTES, coalesce

ACK, PSH, FIN, SYN, CWR = 0x10, 0x08, 0x01, 0x02, 0x80
MSS = 1448


def _fold(s: int) -> int:
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return s


def _sum(b: bytes) -> int:
    if len(b) % 2:
        b += b"\0"
    return sum(struct.unpack(f"!{len(b) // 2}H", b))


def _tcp_checksum(ip: bytes) -> int:
    """The complemented checksum of ``ip``'s TCP segment (its checksum field as zero)."""
    seg = bytearray(ip[20:])
    seg[16:18] = b"\0\0"
    pseudo = ip[12:20] + struct.pack("!HH", 6, len(seg))
    return ~_fold(_sum(pseudo) + _sum(bytes(seg))) & 0xFFFF


def seg(
    seq: int,
    size: int = MSS,
    *,
    flags: int = ACK,
    ack: int = 1,
    window: int = 500,
    tsval: int = 7,
    sport: int = 40000,
    ip_id: int = 0,
    df: bool = True,
    src: bytes = b"\x0a\x4d\x00\x0b",
    dst: bytes = b"\x0a\x4d\x00\x01",
    fill: int | None = None,
) -> bytes:
    """An IPv4 TCP segment with a timestamp option and correct checksums."""
    opts = struct.pack("!BBBBII", 1, 1, 8, 10, tsval, 0)
    payload = bytes([(seq + k) & 0xFF if fill is None else fill for k in range(size)])
    tcp = bytearray(struct.pack("!HHIIBBHHH", sport, 5001, seq, ack, (5 + 3) << 4, flags,
                                window, 0, 0) + opts + payload)  # fmt: skip
    n = 20 + len(tcp)
    ip = bytearray(struct.pack("!BBHHHBBH4s4s", 0x45, 0, n, ip_id, 0x4000 if df else 0, 64, 6,
                               0, src, dst))  # fmt: skip
    ip[10:12] = (~_fold(_sum(bytes(ip))) & 0xFFFF).to_bytes(2, "big")
    pkt = bytes(ip) + bytes(tcp)
    return pkt[:36] + _tcp_checksum(pkt).to_bytes(2, "big") + pkt[38:]


def checksum_ok(ip: bytes) -> bool:
    """Whether ``ip``'s TCP checksum verifies, as the receiving stack checks it."""
    pseudo = ip[12:20] + struct.pack("!HH", 6, len(ip) - 20)
    return _fold(_sum(pseudo) + _sum(ip[20:])) == 0xFFFF


def resegment(write: bytes) -> list[bytes]:
    """What the kernel would make of one write: its segments, checksums completed."""
    flags, gso_type, hdr_len, gso_size, start, off = struct.unpack_from("<BBHHHH", write)
    pkt = write[VNET_HDR_BYTES:]
    if gso_type == 0:
        assert (flags, hdr_len, gso_size, start, off) == (0, 0, 0, 0, 0)
        return [pkt]
    assert (flags, gso_type & 0x7F, start, off) == (0, 1, 0, 0)  # no NEEDS_CSUM
    assert _fold(_sum(pkt[:20])) == 0xFFFF  # the rewritten IP header checksums
    assert int.from_bytes(pkt[2:4], "big") == len(pkt)
    assert checksum_ok(pkt), "the coalesced packet's TCP checksum is not its own"
    head, data = pkt[:hdr_len], pkt[hdr_len:]
    seq0 = int.from_bytes(head[24:28], "big")
    out = []
    for k in range(0, len(data), gso_size):
        piece = data[k : k + gso_size]
        ip = bytearray(head[:20])
        ip[2:4] = (hdr_len + len(piece)).to_bytes(2, "big")
        ip[10:12] = b"\0\0"
        ip[10:12] = (~_fold(_sum(bytes(ip))) & 0xFFFF).to_bytes(2, "big")
        tcp = bytearray(head[20:])
        tcp[4:8] = ((seq0 + k) & 0xFFFFFFFF).to_bytes(4, "big")
        if k + gso_size < len(data):
            tcp[13] &= ~(PSH | FIN) & 0xFF  # only the last segment keeps PSH/FIN
        p = bytes(ip) + bytes(tcp) + piece
        out.append(p[:36] + _tcp_checksum(p).to_bytes(2, "big") + p[38:])
    return out


def _payload(p: bytes) -> bytes:
    return p[20 + (p[32] >> 4) * 4 :]


def test_a_burst_of_one_flow_is_one_gso_packet_that_segments_back_into_it() -> None:
    segs = [seg(1000 + k * MSS) for k in range(10)]
    out = coalesce(segs)
    assert [w for _, w in out] == [list(range(10))]
    data = out[0][0]
    assert struct.unpack_from("<BBHHHH", data) == (0, 1, 52, MSS, 0, 0)
    assert resegment(data) == segs  # headers, payloads and checksums, bit for bit


def test_a_single_packet_goes_as_it_is_behind_an_empty_header() -> None:
    p = seg(5)
    assert coalesce([p]) == [(PLAIN + p, [0])]


def test_a_gap_a_new_ack_a_new_window_or_a_new_timestamp_starts_a_new_packet() -> None:
    base = [seg(0), seg(MSS)]
    cases = {
        "gap": seg(3 * MSS),
        "ack": seg(2 * MSS, ack=99),
        "window": seg(2 * MSS, window=501),
        "timestamp": seg(2 * MSS, tsval=8),
    }
    for why, third in cases.items():
        out = coalesce([*base, third, seg(2 * MSS + MSS if why != "gap" else 4 * MSS,
                                          ack=99 if why == "ack" else 1,
                                          window=501 if why == "window" else 500,
                                          tsval=8 if why == "timestamp" else 7)])  # fmt: skip
        assert [w for _, w in out] == [[0, 1], [2, 3]], why


def test_psh_ends_the_packet_it_joins_and_the_packet_carries_it() -> None:
    segs = [seg(0), seg(MSS), seg(2 * MSS, flags=ACK | PSH), seg(3 * MSS), seg(4 * MSS)]
    out = coalesce(segs)
    assert [w for _, w in out] == [[0, 1, 2], [3, 4]]
    assert out[0][0][VNET_HDR_BYTES + 33] == ACK | PSH
    assert resegment(out[0][0]) == segs[:3]


def test_a_short_segment_ends_it_and_a_longer_one_does_not_join() -> None:
    out = coalesce([seg(0), seg(MSS, 600), seg(MSS + 600)])
    assert [w for _, w in out] == [[0, 1], [2]]
    out = coalesce([seg(0, 1000), seg(1000, 1200)])
    assert [w for _, w in out] == [[0], [1]]  # 1200 > the first's 1000 (gso_size)


def test_syn_fin_rst_go_up_alone_and_cwr_does_not_join() -> None:
    assert [w for _, w in coalesce([seg(0, flags=SYN), seg(1)])] == [[0], [1]]
    out = coalesce([seg(0), seg(MSS), seg(2 * MSS, flags=ACK | FIN)])
    assert [w for _, w in out] == [[0, 1, 2]]  # FIN joins, then ends it
    out = coalesce([seg(0), seg(MSS, flags=ACK | CWR), seg(2 * MSS)])
    assert [w for _, w in out] == [[0], [1, 2]]


def test_the_packet_stays_below_64_kib() -> None:
    segs = [seg(k * MSS) for k in range(50)]
    out = coalesce(segs)
    assert [len(w) for _, w in out] == [45, 5]
    assert all(len(d) - VNET_HDR_BYTES < 65536 for d, _ in out)
    assert [s for d, _ in out for s in resegment(d)] == segs


def test_flows_are_held_apart_and_other_packets_pass_at_once() -> None:
    a = [seg(k * MSS, sport=1) for k in range(3)]
    b = [seg(k * MSS, sport=2) for k in range(3)]
    udp = bytes([0x45, 0, 0, 28]) + bytes(5) + b"\x11" + bytes(18)
    out = coalesce([a[0], b[0], a[1], udp, b[1], a[2], b[2]])
    assert [w for _, w in out] == [[3], [0, 2, 5], [1, 4, 6]]
    assert out[0][0] == PLAIN + udp


def test_a_pure_ack_of_a_held_flow_flushes_it_first() -> None:
    ack = seg(2 * MSS, 0)
    out = coalesce([seg(0), seg(MSS), ack, seg(2 * MSS)])
    assert [w for _, w in out] == [[0, 1], [2], [3]]


def test_at_most_eight_flows_are_held_the_oldest_goes_first() -> None:
    segs = [seg(0, sport=p) for p in range(MAX_FLOWS + 1)]
    out = coalesce(segs)
    assert out[0][1] == [0]  # the first flow, flushed for the ninth
    assert sorted(i for _, w in out for i in w) == list(range(MAX_FLOWS + 1))


def test_without_df_the_ip_ids_must_increment() -> None:
    out = coalesce([seg(0, ip_id=7, df=False), seg(MSS, ip_id=8, df=False)])
    assert [w for _, w in out] == [[0, 1]]
    out = coalesce([seg(0, ip_id=7, df=False), seg(MSS, ip_id=7, df=False)])
    assert [w for _, w in out] == [[0], [1]]
    out = coalesce([seg(0, ip_id=7), seg(MSS, ip_id=300)])  # DF: any ID
    assert [w for _, w in out] == [[0, 1]]


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 2), st.integers(0, 3), st.sampled_from([MSS, MSS, 700, 0])),
        min_size=1,
        max_size=60,
    )
)
def test_every_packet_goes_up_once_in_its_flows_order_and_unchanged(
    plan: list[tuple[int, int, int]],
) -> None:
    """Random segments of three flows (some skipped, some short, some pure acks): the
    writes carry each packet once, keep each flow's order, and segment back into the
    packets given."""
    nxt = [0, 0, 0]
    packets = []
    for flow, skip, size in plan:
        nxt[flow] += skip * MSS
        packets.append(seg(nxt[flow], size, sport=flow + 1))
        nxt[flow] += size
    out = coalesce(packets)
    order = [i for _, w in out for i in w]
    assert sorted(order) == list(range(len(packets)))
    for f in range(3):
        mine = [i for i in order if packets[i][20:22] == (f + 1).to_bytes(2, "big")]
        assert mine == sorted(mine)
    for data, w in out:
        again = resegment(data)
        assert [_payload(p) for p in again] == [_payload(packets[i]) for i in w]
        if len(w) == 1:
            assert again == [packets[w[0]]]


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.binary(min_size=0, max_size=120),
            st.integers(0, 15),
            st.sampled_from([0x10, 0x18, 0x02, 0x80, 0xFF]),
            st.integers(0, 3),
        ),
        max_size=30,
    )
)
def test_any_bytes_a_station_sends_go_up_once_and_never_raise(
    raw: list[tuple[bytes, int, int, int]],
) -> None:
    """A program in a station may send anything: IPv4/TCP-looking packets with any data
    offset, flags and lengths (some consistent, most not) are each written once, never
    raise, and a write never reaches 64 KiB."""
    packets = []
    for body, doff, flags, n in raw:
        p = bytearray(seg(n * 10, len(body), flags=flags))
        p[40:] = body
        p[32] = doff << 4
        packets.append(bytes(p))
    out = coalesce(packets)
    assert sorted(i for _, w in out for i in w) == list(range(len(packets)))
    assert all(len(d) - VNET_HDR_BYTES < 65536 for d, _ in out)
    for d, w in out:
        if len(w) == 1:
            assert d == PLAIN + packets[w[0]]


def test_a_segment_with_a_wrong_checksum_spoils_the_packet_it_joins() -> None:
    """The coalesced packet's checksum comes from the segments' own: one corrupted
    payload byte (its checksum no longer matching) makes the whole packet fail the
    receiving stack's check, where the clean batch passes; odd payload lengths too."""
    good = [seg(k * MSS) for k in range(5)]
    assert checksum_ok(coalesce(good)[0][0][VNET_HDR_BYTES:])
    bad = list(good)
    b = bytearray(bad[2])
    b[100] ^= 0x5A
    bad[2] = bytes(b)
    out = coalesce(bad)
    assert [w for _, w in out] == [[0, 1, 2, 3, 4]]
    assert not checksum_ok(out[0][0][VNET_HDR_BYTES:])
    odd = [seg(0, 999), seg(999, 999), seg(1998, 501)]  # 999 bytes: odd offsets follow
    out = coalesce(odd)
    assert [w for _, w in out] == [[0, 1, 2]] and checksum_ok(out[0][0][VNET_HDR_BYTES:])
