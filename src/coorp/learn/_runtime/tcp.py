"""Plain TCP, the uncoordinated baseline (``--modes tcp``): length-prefixed frames on one
connection per worker, no permits, no pacing, no marking."""

from __future__ import annotations

import contextlib
import queue
import socket
import struct
import threading
import time

__all__ = ["LEN", "Delivery", "read_exact", "read_frame", "reader", "send_frame"]

LEN = struct.Struct("<Q")
#: (robot, payload, received_ns): a sync message as a role's queue holds it.
Delivery = tuple[str, bytes | bytearray | memoryview, int]


def read_exact(sock: socket.socket, n: int) -> bytearray | None:
    """``n`` bytes, or None if the peer closed first."""
    buf = bytearray(n)
    view = memoryview(buf)
    got = 0
    while got < n:
        k = sock.recv_into(view[got:])
        if k == 0:
            return None
        got += k
    return buf


def read_frame(sock: socket.socket) -> bytearray | None:
    """One length-prefixed frame, or None if the peer closed first."""
    head = read_exact(sock, LEN.size)
    return None if head is None else read_exact(sock, LEN.unpack(head)[0])


def reader(sock: socket.socket, robot: str, out: queue.Queue[Delivery]) -> None:
    """Put every frame from ``robot`` on ``out`` until the connection ends."""
    with contextlib.suppress(OSError):
        while True:
            payload = read_frame(sock)
            if payload is None:
                return
            out.put((robot, payload, time.monotonic_ns()))


def send_frame(sock: socket.socket, lock: threading.Lock, payload: bytes | bytearray) -> None:
    with lock:
        sock.sendall(LEN.pack(len(payload)))
        sock.sendall(payload)
