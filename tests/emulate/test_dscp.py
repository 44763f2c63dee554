"""The access category of a packet: RFC 8325's DSCP -> UP table, 802.11's UP -> AC, and
the header fields the emulator reads."""

from __future__ import annotations

import struct

import pytest

from coorp.emulate import AC_OF_DSCP, ac_of_up, parse_header, up_of_dscp
from coorp.scenario import AccessCategory as AC


@pytest.mark.parametrize(
    ("dscp", "up", "ac"),
    [
        (46, 6, AC.VO),  # EF: telephony
        (44, 6, AC.VO),  # VOICE-ADMIT
        (48, 7, AC.VO),  # CS6: network control
        (56, 7, AC.VO),  # CS7
        (40, 5, AC.VI),  # CS5: signaling
        (34, 4, AC.VI),  # AF41: multimedia conferencing
        (32, 4, AC.VI),  # CS4: real-time interactive
        (26, 4, AC.VI),  # AF31: multimedia streaming
        (24, 4, AC.VI),  # CS3: broadcast video
        (18, 3, AC.BE),  # AF21: low-latency data
        (16, 0, AC.BE),  # CS2: OAM
        (10, 0, AC.BE),  # AF11: high-throughput data
        (0, 0, AC.BE),  # DF
        (8, 1, AC.BK),  # CS1: low-priority data
        (1, 1, AC.BK),  # LE (RFC 8622)
        (63, 0, AC.BE),  # unused code point: best effort
    ],
)
def test_rfc8325(dscp: int, up: int, ac: AC) -> None:
    assert up_of_dscp(dscp) == up
    assert AC_OF_DSCP[dscp] is ac
    assert ac_of_up(up) is ac


def test_out_of_range_values_are_refused_with_the_allowed_range() -> None:
    with pytest.raises(ValueError, match="0-63"):
        up_of_dscp(64)
    with pytest.raises(ValueError, match="0-7"):
        ac_of_up(8)


def test_ipv4_header() -> None:
    pkt = struct.pack("!BBHHHBBH4s4s", 0x45, 46 << 2, 20, 0, 0, 64, 17, 0,
                      bytes([10, 0, 0, 2]), bytes([10, 0, 0, 1]))  # fmt: skip
    assert parse_header(pkt) == (46, bytes([10, 0, 0, 1]), False)
    mc = pkt[:16] + bytes([239, 255, 0, 1])
    assert parse_header(mc) == (46, bytes([239, 255, 0, 1]), True)


def test_ipv6_header() -> None:
    tc = 34 << 2  # AF41, traffic class split across the first two bytes
    first = struct.pack("!I", (6 << 28) | (tc << 20))
    dst = bytes([0xFD] + [0] * 14 + [1])
    pkt = first + bytes(4) + bytes(16) + dst
    assert parse_header(pkt) == (34, dst, False)
    assert parse_header(first + bytes(4) + bytes(16) + bytes([0xFF, 2] + [0] * 14))[2]


@pytest.mark.parametrize(
    "pkt", [b"", bytes(19), bytes([0x50]) + bytes(40), bytes([0x60]) + bytes(30)]
)
def test_malformed_headers(pkt: bytes) -> None:
    assert parse_header(pkt) is None
