"""IP packets for the emulator's tests: IPv4/UDP with a sequence number in the payload."""

from __future__ import annotations

import struct

from coorp.emulate import Air


def udp(src: str, dst: str, *, size: int = 1500, dscp: int = 0, seq: int = 0) -> bytes:
    """An IPv4 packet of ``size`` bytes (UDP, checksums left 0: the emulator never reads
    them) carrying ``seq`` in its first payload bytes."""
    body = struct.pack("!HHHHQ", 40000, 7000, size - 20, 0, seq)
    head = struct.pack(
        "!BBHHHBBH4s4s", 0x45, dscp << 2, size, 0, 0, 64, 17, 0,
        bytes(map(int, src.split("."))), bytes(map(int, dst.split("."))),
    )  # fmt: skip
    return head + body + bytes(size - len(head) - len(body))


def seq_of(packet: bytes) -> int:
    return int(struct.unpack_from("!Q", packet, 28)[0])


def addr(air: Air, station: str) -> str:
    return air.addresses[station]
