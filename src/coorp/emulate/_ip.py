"""What the emulator reads in a real IP packet: its DSCP, its destination, and whether
that destination is a group (multicast or broadcast).

Only the fixed header is read (IPv4 or IPv6); nothing is parsed beyond it, nothing is
copied. A packet too short for its header, or of another IP version, is malformed.
"""

from __future__ import annotations

import ipaddress

__all__ = ["Header", "address_key", "parse_header"]

#: (dscp, destination key, group): the key is the 4 or 16 address bytes.
Header = tuple[int, bytes, bool]


def parse_header(frame: bytes) -> Header | None:
    """The DSCP, destination and group flag of an IP packet; None if malformed."""
    n = len(frame)
    if n < 20:
        return None
    v = frame[0] >> 4
    if v == 4:
        dst = frame[16:20]
        first = dst[0]
        # 224/4 multicast, 240/4 reserved and 255.255.255.255: never one station.
        return frame[1] >> 2, dst, first >= 224
    if v == 6 and n >= 40:
        dst = frame[24:40]
        tc = ((frame[0] & 0x0F) << 4) | (frame[1] >> 4)
        return tc >> 2, dst, dst[0] == 0xFF
    return None


def address_key(address: str) -> bytes:
    """The key :func:`parse_header` gives a packet to ``address`` (IPv4 or IPv6 text)."""
    return ipaddress.ip_address(address).packed
