"""What a receiving station's NIC driver hands its network stack: the TCP segments one
exchange delivers coalesced as Linux's Generic Receive Offload does, written to the
station's TUN device as one GSO packet each (``IFF_VNET_HDR``).

Why: a NIC driver with NAPI (mt76, iwlwifi, ath) passes every received frame through
``napi_gro_receive``, which merges a flow's in-order segments into one super-segment of
up to 64 KiB before IP and TCP see them; TCP then handles (and decides whether to ack)
one packet per super-segment. A TUN device written frame by frame hands the stack each
segment on its own, so the emulated receivers ran their TCP (and their acks) once per
frame, on a host busy with exactly that work. The simulator's ``[tcp] gro_segments``
models the same coalescing on its side.

The rules are ``tcp_gro_receive``'s and ``inet_gro_receive``'s (Linux 6.x): a segment
merges into the flow's held super-segment when it continues its sequence, carries the
same ack, window, flags (but CWR, FIN, PSH), TCP options (timestamps included), TOS, TTL
and DF bit, its IP ID increments (or DF is set), it is no longer than the first
segment (the super-segment's ``gso_size``), it is not CWR-marked and the total stays
below 64 KiB. A segment that does not merge flushes the held one and starts its own; a
segment shorter than ``gso_size`` or carrying URG, PSH, RST, SYN or FIN ends the
super-segment it joined; at most 8 flows are held (``MAX_GRO_SKBS``), the oldest
flushed first; what is held is flushed at the end of the batch (the end of the driver's
NAPI poll). Anything else (UDP, IPv6, IP options, fragments, pure acks) goes up at once,
unchanged.

A coalesced packet is the first segment's IP and TCP headers (IP total length and
checksum rewritten, the PSH/FIN seen added to the flags) followed by every segment's
payload, with a ``virtio_net_hdr`` giving ``gso_type`` TCPv4 at ``gso_size`` and its TCP
checksum complete, computed from the segments' own checksums without reading their
payloads: the receiving stack verifies it as it verifies any packet (no ``NEEDS_CSUM``,
which would make it trust the payload). Why not trust it: a program in a station may
send segments with wrong checksums (a raw socket), which a NIC's GRO would not merge and
the receiving stack would drop; here such a segment spoils the checksum of the packet it
joined, and the stack drops that packet (its good segments with it: the one departure
from GRO, for senders that corrupt their own segments). A single packet goes with an
all-zero header (no offload: the stack checks its checksums itself, as before).
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

__all__ = ["MAX_FLOWS", "MAX_GRO_BYTES", "PLAIN", "VNET_HDR_BYTES", "coalesce", "vnet_header"]

#: ``sizeof(struct virtio_net_hdr)``: a TUN device's default ``vnet_hdr_sz``.
VNET_HDR_BYTES = 10
#: The header of a packet written as it is (no offload, no checksum help).
PLAIN = bytes(VNET_HDR_BYTES)
#: ``GRO_LEGACY_MAX_SIZE``: a super-segment's IP length stays below it.
MAX_GRO_BYTES = 65536
#: ``MAX_GRO_SKBS``: flows held at once in one NAPI instance.
MAX_FLOWS = 8

_GSO_TCPV4 = 1  # VIRTIO_NET_HDR_GSO_TCPV4
_GSO_ECN = 0x80  # VIRTIO_NET_HDR_GSO_ECN
_FIN, _SYN, _RST, _PSH, _URG, _CWR = 0x01, 0x02, 0x04, 0x08, 0x20, 0x80
_ENDS = _URG | _PSH | _RST | _SYN | _FIN  # a segment with one of these is passed up
_FREE = ~(_CWR | _FIN | _PSH) & 0xFF  # flag bits a merged segment must share
_HDR = struct.Struct("<BBHHHH")  # virtio_net_hdr, little-endian (x86 and TUN's default)


def vnet_header(gso_size: int, header_bytes: int, *, ecn: bool = False) -> bytes:
    """The ``virtio_net_hdr`` of a TCPv4 GSO packet with ``header_bytes`` of IP and TCP
    headers and segments of ``gso_size`` payload bytes, its checksum complete (no
    ``NEEDS_CSUM``: the receiving stack verifies it)."""
    return _HDR.pack(0, _GSO_TCPV4 | (_GSO_ECN if ecn else 0), header_bytes, gso_size, 0, 0)


class _Held:
    """One flow's super-segment in the making."""

    __slots__ = (
        "first", "header", "indices", "ip_len", "mss", "next_seq", "odd_at", "parts", "pushed",
        "vsum", "wsum",
    )  # fmt: skip

    def __init__(self, packet: bytes, header: int, payload: int, index: int) -> None:
        self.first = packet
        self.header = header
        self.mss = payload
        self.ip_len = len(packet)
        self.next_seq = (int.from_bytes(packet[24:28], "big") + payload) & 0xFFFFFFFF
        self.parts = [packet]
        self.indices = [index]
        self.pushed = packet[33] & (_FIN | _PSH)
        # For the checksum: the segments' varying words (``_vary``), each weighted 1 at
        # an even payload offset and 256 at an odd one; the weights' sum; the next
        # segment's parity.
        self.vsum = _vary(packet)
        self.wsum = 1
        self.odd_at = payload & 1

    def takes(self, p: bytes, header: int, payload: int) -> bool:
        """Whether segment ``p`` merges (``tcp_gro_receive``'s flush conditions)."""
        f = self.first
        flags = p[33]
        if flags & _CWR or header != self.header or payload > self.mss:
            return False
        if self.ip_len + payload >= MAX_GRO_BYTES:
            return False
        if int.from_bytes(p[24:28], "big") != self.next_seq:
            return False
        if p[28:33] != f[28:33] or (flags ^ f[33]) & _FREE or p[34:36] != f[34:36]:
            return False  # ack, data offset, flags, window
        if p[40:header] != f[40:header] or p[1] != f[1] or p[8] != f[8]:
            return False  # TCP options (timestamps), TOS, TTL
        if (p[6] ^ f[6]) & 0x40:
            return False  # DF differs
        if not p[6] & 0x40:  # without DF the IDs must increment
            first_id = (f[4] << 8) | f[5]
            if (p[4] << 8) | p[5] != (first_id + len(self.parts)) & 0xFFFF:
                return False
        return True

    def add(self, p: bytes, header: int, payload: int, index: int) -> None:
        self.parts.append(p)
        self.indices.append(index)
        self.ip_len += payload
        self.next_seq = (self.next_seq + payload) & 0xFFFFFFFF
        self.pushed |= p[33] & (_FIN | _PSH)
        w = 256 if self.odd_at else 1
        self.vsum += w * _vary(p)
        self.wsum += w
        self.odd_at ^= payload & 1

    def packet(self) -> bytes:
        """The write: the virtio header and the (coalesced) packet."""
        f = self.first
        if len(self.parts) == 1:
            return PLAIN + f
        n = self.ip_len
        ip = bytearray(f[:20])
        ip[2] = n >> 8
        ip[3] = n & 0xFF
        ip[10] = ip[11] = 0
        ip[10:12] = (-_sum16(bytes(ip)) % 65535).to_bytes(2, "big")
        tcp = bytearray(f[20 : self.header])
        tcp[13] |= self.pushed
        tcp[16] = tcp[17] = 0
        # The TCP checksum of the whole packet, from the segments' own, without reading
        # a payload. One's complement sums are sums mod 65535. A segment's checksum
        # makes its pseudo-header, header and payload sum to 0, so its payload sums to
        # -(pseudo-header + header); merged segments differ only in the words ``_vary``
        # reads (the rest, k, is the first's), and a payload at an odd offset counts
        # byte-swapped (times 256). A segment whose checksum was wrong leaves the total
        # wrong, and the receiving stack drops the packet.
        h = self.header
        addr = _sum16(f[12:20])
        k = _sum16(f[20:h]) + addr + 6 - _vary_words(f)
        payload = -(self.vsum + self.wsum * k)
        total = _sum16(bytes(tcp)) + addr + 6 + (n - 20) + payload
        tcp[16:18] = ((-total) % 65535).to_bytes(2, "big")
        head = vnet_header(self.mss, self.header, ecn=bool(f[33] & _CWR))
        return b"".join((head, ip, tcp, f[h:], *(p[h:] for p in self.parts[1:])))


def _sum16(b: bytes) -> int:
    """The sum of ``b``'s 16-bit big-endian words (``b`` of even length)."""
    return sum(struct.unpack(f"!{len(b) // 2}H", b))


def _vary_words(p: bytes) -> int:
    """The sum of the TCP header words merged segments may differ in: the sequence
    number, the data offset and flags, the checksum, the urgent pointer (the ports, ack,
    window and options are equal, or they would not merge)."""
    return (
        ((p[24] << 8) | p[25]) + ((p[26] << 8) | p[27]) + ((p[32] << 8) | p[33])
        + ((p[36] << 8) | p[37]) + ((p[38] << 8) | p[39])
    )  # fmt: skip


def _vary(p: bytes) -> int:
    """``_vary_words`` and the segment's length in its pseudo-header."""
    return _vary_words(p) + len(p) - 20


def _tcp(p: bytes) -> int:
    """The header bytes (IP and TCP) of an IPv4 TCP packet GRO could merge, 0 if it is
    not one (IPv6, IP options, a fragment, not TCP, inconsistent lengths)."""
    if len(p) < 40 or p[0] != 0x45 or p[9] != 6 or (p[6] & 0x3F) or p[7]:
        return 0
    if (p[2] << 8) | p[3] != len(p):
        return 0
    header = 20 + (p[32] >> 4) * 4
    return header if 40 <= header <= len(p) else 0


def coalesce(packets: Sequence[bytes]) -> list[tuple[bytes, list[int]]]:
    """The writes for ``packets``, delivered to one station in one batch (in order): each
    a ``virtio_net_hdr`` and a packet, with the indices in ``packets`` of those it
    carries. A flow's packets keep their order."""
    out: list[tuple[bytes, list[int]]] = []
    held: dict[bytes, _Held] = {}
    for i, p in enumerate(packets):
        header = _tcp(p)
        if not header:
            out.append((PLAIN + p, [i]))
            continue
        payload = len(p) - header
        key = p[12:24]  # addresses and ports
        h = held.get(key)
        if h is not None:
            if payload and h.takes(p, header, payload):
                h.add(p, header, payload, i)
                if payload < h.mss or p[33] & _ENDS:
                    del held[key]
                    out.append((h.packet(), h.indices))
                continue
            del held[key]  # not merged: the held one goes up first
            out.append((h.packet(), h.indices))
        if not payload or p[33] & _ENDS:
            out.append((PLAIN + p, [i]))  # a pure ack, or a segment that flushes
            continue
        if len(held) >= MAX_FLOWS:
            g = held.pop(next(iter(held)))
            out.append((g.packet(), g.indices))
        held[key] = _Held(p, header, payload, i)
    for h in held.values():
        out.append((h.packet(), h.indices))
    return out
