"""A paced UDP blaster and sink across namespaces: the saturated senders of the
validation (``python PATH/_blast.py ...``; the standard library only, so it starts in
a blink and costs little CPU beside the emulator).

One process serves every sender: for each sending namespace a thread joins it
(``setns``) just long enough to open a UDP socket there (a socket keeps the namespace
it was made in), and the main loop sends from all of them in turns, each at ``--pps``
packets a second (a token bucket refilled every millisecond), with ``--dscp`` set. The
sink is one socket in the receiving namespace, read in the same loop; it counts payload
bytes per sender after ``--warmup`` seconds. At the end one JSON line: packets sent and
refused by the kernel per sender, bytes received per sender in the window, the window.

Why not iperf3: it is not on every machine (a Debian package), and N iperf3 clients
are N processes competing for the two cores the emulator needs; this blaster is one.
"""

from __future__ import annotations

import argparse
import ctypes
import errno
import json
import os
import socket
import threading
import time

_CLONE_NEWNET = 0x40000000


def _socket_in(ns: str, factory: object) -> socket.socket:
    box: dict[str, object] = {}

    def work() -> None:
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            fd = os.open(f"/run/netns/{ns}", os.O_RDONLY | os.O_CLOEXEC)
            try:
                if libc.setns(fd, _CLONE_NEWNET) != 0:
                    raise OSError(ctypes.get_errno(), f"setns {ns}")
            finally:
                os.close(fd)
            box["s"] = factory()  # type: ignore[operator]
        except BaseException as exc:
            box["e"] = exc

    t = threading.Thread(target=work)
    t.start()
    t.join()
    if "e" in box:
        raise box["e"]  # type: ignore[misc]
    s = box["s"]
    assert isinstance(s, socket.socket)
    return s


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--flow",
        action="append",
        required=True,
        metavar="SRC_NS,DST_NS,DST_ADDR",
        help="one saturated sender: its namespace, the receiver's, its address",
    )
    ap.add_argument("--port", type=int, default=5201)
    ap.add_argument("--pps", type=float, required=True, help="packets/s per flow")
    ap.add_argument("--size", type=int, default=1472, help="UDP payload bytes")
    ap.add_argument("--dscp", type=int, default=0)
    ap.add_argument("--duration", type=float, required=True, help="seconds")
    ap.add_argument("--warmup", type=float, default=0.0, help="seconds not counted")
    ap.add_argument("--rt", type=int, default=0, help="SCHED_FIFO priority (0: none)")
    a = ap.parse_args(argv)
    if a.rt > 0:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(a.rt))
    flows = [tuple(f.split(",")) for f in a.flow]
    if any(len(f) != 3 for f in flows):
        ap.error("--flow takes SRC_NS,DST_NS,DST_ADDR")

    def sink() -> socket.socket:
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 22)
        s.bind(("0.0.0.0", a.port))
        s.setblocking(False)
        return s

    def sender(dst: str) -> object:
        def make() -> socket.socket:
            s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            s.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, a.dscp << 2)
            s.connect((dst, a.port))
            s.setblocking(False)
            return s

        return make

    sinks: dict[str, socket.socket] = {}
    for _, dst_ns, _ in flows:
        if dst_ns not in sinks:
            sinks[dst_ns] = _socket_in(dst_ns, sink)
    tx = [_socket_in(src_ns, sender(addr)) for src_ns, _, addr in flows]
    # A receiver tells flows apart by the sender's address.
    flow_of = {(dst_ns, s.getsockname()[0]): i for i, ((_, dst_ns, _), s) in
               enumerate(zip(flows, tx, strict=True))}  # fmt: skip
    payload = bytes(a.size)
    n = len(tx)
    sent, refused, got = [0] * n, [0] * n, [0] * n
    credit = [1.0] * n  # one packet at once, then the rate
    t0 = time.monotonic()
    warm = t0 + a.warmup
    end = t0 + a.duration
    last = t0
    window_start: float | None = None
    window_end = t0
    buf = bytearray(65536)
    burst = max(a.pps * 0.1, 2.0)  # a late turn catches up at most 100 ms
    while True:
        now = time.monotonic()
        if now >= end:
            break
        dt = now - last
        last = now
        for i, s in enumerate(tx):
            c = min(credit[i] + dt * a.pps, burst)
            while c >= 1.0:
                try:
                    s.send(payload)
                    sent[i] += 1
                except OSError as exc:
                    if exc.errno not in (errno.EAGAIN, errno.ENOBUFS):
                        raise
                    refused[i] += 1
                c -= 1.0
            credit[i] = c
        counting = now >= warm
        if counting and window_start is None:
            window_start = now
        for dst_ns, rx in sinks.items():
            while True:
                try:
                    k, (src, _) = rx.recvfrom_into(buf)
                except BlockingIOError:
                    break
                if counting:
                    i = flow_of.get((dst_ns, src), -1)
                    if i >= 0:
                        got[i] += k
        if counting:
            window_end = now
        time.sleep(0.001)
    print(json.dumps({
        "flows": [list(f) for f in flows], "sent": sent, "refused": refused,
        "rx_payload_bytes": got, "size": a.size,
        "window_s": (window_end - window_start) if window_start is not None else 0.0,
    }), flush=True)  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
