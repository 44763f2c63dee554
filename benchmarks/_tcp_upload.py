"""A plain TCP upload and its sink, for measuring the emulated air's ceiling by hand.

``sink PORT`` accepts any number of connections and reads them to the end; ``send HOST
PORT SECONDS`` writes 64 KB buffers for SECONDS and prints what it wrote after the first
2 s, in Mb/s (bytes still unacknowledged at the end included: a few hundred kB against
hundreds of MB). docs/emulate.md, "The runtime on the air", ran it as::

    sudo .venv/bin/coorp emulate crl-5 -q --json one.json \\
        --run leader='.venv/bin/python benchmarks/_tcp_upload.py sink 9000' \\
        --at r1 -- .venv/bin/python benchmarks/_tcp_upload.py send leader 9000 10

(four at once: ``--run r2='sleep 0.5; … send leader 9000 10 > r2.out'`` and the same for
r3 and r4 beside it; ``--trace DIR`` for the frames table that counts the leader's acks).
"""

from __future__ import annotations

import socket
import sys
import threading
import time

WARMUP_S = 2.0


def sink(port: int) -> None:
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("0.0.0.0", port))
    srv.listen(16)

    def drain(conn: socket.socket) -> None:
        with conn:
            while conn.recv(1 << 20):
                pass

    while True:
        conn, _ = srv.accept()
        threading.Thread(target=drain, args=(conn,), daemon=True).start()


def send(host: str, port: int, seconds: float) -> None:
    conn = socket.create_connection((host, port))
    buf = b"x" * (1 << 16)
    t0 = time.monotonic()
    sent = at_warmup = 0
    while (now := time.monotonic()) - t0 < seconds:
        sent += conn.send(buf)
        if now - t0 < WARMUP_S:
            at_warmup = sent
    mbps = (sent - at_warmup) * 8 / (seconds - WARMUP_S) / 1e6
    print(f"SENT {mbps:.1f} Mb/s (after {WARMUP_S:.0f} s)", flush=True)


def main() -> int:
    args = sys.argv[1:]
    if args[:1] == ["sink"] and len(args) == 2:
        sink(int(args[1]))
    elif args[:1] == ["send"] and len(args) == 4 and float(args[3]) > WARMUP_S:
        send(args[1], int(args[2]), float(args[3]))
    else:
        print("usage: _tcp_upload.py sink PORT | send HOST PORT SECONDS (> 2)", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
