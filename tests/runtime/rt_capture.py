"""A packet capture on one interface of the namespace it runs in (root), for tests
that check the DSCP the kernel put on packets: prints ``READY``, counts TCP packets to
or from ``--port`` until a line ``stop`` arrives on stdin (or ``--timeout``), then
prints ``RESULT {json}``: the TOS bytes of the pure acks that left and of the data
segments that arrived, with their counts. :func:`tcp_segment` reads one packet's TCP
header (the loopback tests use it too).

    python rt_capture.py --iface eth0 --port 9002
"""

from __future__ import annotations

import argparse
import json
import select
import socket
import sys
import time
from collections import Counter

_OUTGOING = 4  # PACKET_OUTGOING
_ETH_P_ALL, _ETH_P_IP = 0x0003, 0x0800


def tcp_segment(pkt: bytes) -> tuple[int, int, int, bool] | None:
    """Source port, destination port, payload bytes and whether it is a pure ack (flags
    fin, syn, rst, ack: only ack) of an IPv4 TCP packet (None: not one)."""
    if len(pkt) < 40 or pkt[0] >> 4 != 4 or pkt[9] != socket.IPPROTO_TCP:
        return None
    ihl = (pkt[0] & 0x0F) * 4
    sport = int.from_bytes(pkt[ihl : ihl + 2], "big")
    dport = int.from_bytes(pkt[ihl + 2 : ihl + 4], "big")
    payload = int.from_bytes(pkt[2:4], "big") - ihl - (pkt[ihl + 12] >> 4) * 4
    return sport, dport, payload, payload == 0 and pkt[ihl + 13] & 0x17 == 0x10


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--iface", required=True)
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--timeout", type=float, default=60.0)
    args = ap.parse_args()
    # ETH_P_ALL: only such taps see the packets a host sends, not only those it receives.
    s = socket.socket(socket.AF_PACKET, socket.SOCK_DGRAM, socket.htons(_ETH_P_ALL))
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16 << 20)
    s.bind((args.iface, _ETH_P_ALL))
    acks_out: Counter[int] = Counter()
    data_in: Counter[int] = Counter()
    print("READY", flush=True)
    deadline = time.monotonic() + args.timeout
    while time.monotonic() < deadline:
        ready = select.select([s, sys.stdin], [], [], 0.5)[0]
        if sys.stdin in ready:
            break  # "stop" (or stdin closed)
        if s not in ready:
            continue
        pkt, addr = s.recvfrom(70_000)
        seg = tcp_segment(pkt) if addr[1] == _ETH_P_IP else None
        if seg is None:
            continue
        sport, dport, payload, pure_ack = seg
        if addr[2] == _OUTGOING and dport == args.port and pure_ack:
            acks_out[pkt[1]] += 1
        elif addr[2] != _OUTGOING and sport == args.port and payload > 0:
            data_in[pkt[1]] += 1
    out = {"acks_out": dict(acks_out), "data_in": dict(data_in)}
    print("RESULT " + json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
