"""Where an LS message's one-way time goes, Coorp vs a raw UDP socket, by send rate.

Sender and receiver are separate processes on loopback (CLOCK_MONOTONIC is shared).
For Coorp each message is stamped at four points: ``LatencySensitiveChannel.send``
called, the ``sendmsg`` system call entered, the inbox's ``recvfrom`` returned, and
``Inbox.recv`` returned. That splits its one-way time into

* ``pre-send``: the channel's own work before the datagram leaves (lock, header, MAC);
* ``kernel+wake``: the system call, loopback and the receiving thread's wake-up;
* ``accept``: the inbox's checks (header, MAC, session, freshness) before returning.

A raw socket has only the middle part. At a high rate the code runs warm; at a
robot-like 100 Hz (10 ms gaps) every message runs it cold, and that is where Coorp's
round trip lost to raw UDP in ``coorp bench team`` (docs/sizing.md)::

    python benchmarks/ls_path_breakdown.py --gaps-ms 0.5,10 --count 200 --runs 3

Median per run, µs. The sockets are wrapped (one Python call each) to take the stamps;
that adds well under a microsecond to the Coorp rows.

``--decoder`` instead times the inbox's check alone, in one process, after the same
pauses: the fast path (a datagram in the senders' own layout, from an open session) and
the full parse (the same datagrams as ``bytearray``, which always take it), alternated::

    python benchmarks/ls_path_breakdown.py --decoder --gaps-ms 0.5,10 --count 400

``--cold`` times what any code pays after such a pause, with nothing of Coorp in it:
copying 1 kB, and one keyed BLAKE2b-256 MAC of 1 kB (the datagram MAC), each after its
own pause (median µs)::

    python benchmarks/ls_path_breakdown.py --cold --gaps-ms 0.5,10 --count 400
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import socket
import subprocess
import sys
import time
from typing import Any

import numpy as np

from coorp.runtime import TeamKey, join

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from runtime_latency import raw_receive  # a sibling benchmark module


class _Stamped:
    """A socket whose ``sendmsg`` / ``recvfrom`` append a timestamp to ``log``."""

    def __init__(self, sock: socket.socket, log: list[int]) -> None:
        self._sock, self._log = sock, log

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sock, name)

    def sendmsg(self, *args: Any) -> int:
        self._log.append(time.monotonic_ns())
        return self._sock.sendmsg(*args)

    def recvfrom(self, *args: Any) -> Any:
        out = self._sock.recvfrom(*args)
        self._log.append(time.monotonic_ns())
        return out


def _receiver(kind: str, count: int, key_hex: str) -> None:
    got: dict[int, tuple[int, int]] = {}
    if kind == "raw":
        got = {seq: (t, t) for seq, t in raw_receive(count).items()}
    else:
        stamps: list[int] = []
        team = join(None, "rx", TeamKey.from_hex(key_hex))
        inbox = team.listen("127.0.0.1:0")
        inbox._udp = _Stamped(inbox._udp, stamps)  # type: ignore[assignment]
        print(inbox.address[1], flush=True)
        with contextlib.suppress(TimeoutError):
            for _ in range(count):
                msg = inbox.recv(timeout=5)
                got[msg.seq] = (stamps[-1], time.monotonic_ns())
        team.close()
    print(json.dumps(got), flush=True)


def one_run(kind: str, count: int, gap_s: float, size: int) -> dict[str, float]:
    key_hex = os.urandom(32).hex()
    proc = subprocess.Popen(
        [sys.executable, __file__, "--receiver", kind, str(count), key_hex],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    port = int(proc.stdout.readline())
    sent: dict[int, tuple[int, int]] = {}
    if kind == "raw":
        tx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        tx.connect(("127.0.0.1", port))
        pad = bytes(size - 4)
        for i in range(1, count + 1):
            t = time.monotonic_ns()
            tx.send(i.to_bytes(4, "big") + pad)
            sent[i] = (t, t)
            time.sleep(gap_s)
        tx.close()
    else:
        stamps: list[int] = []
        team = join(None, "tx", TeamKey.from_hex(key_hex))
        ch = team.latency_sensitive("bench", f"127.0.0.1:{port}", deadline_ms=100)
        ch._sock = _Stamped(ch._sock, stamps)  # type: ignore[assignment]
        payload = bytes(size)
        for i in range(1, count + 1):  # the channel's sequence numbers are 1, 2, ...
            t = time.monotonic_ns()
            ch.send(payload)
            sent[i] = (t, stamps[-1])
            time.sleep(gap_s)
        team.close()
    got = {int(k): v for k, v in json.loads(proc.stdout.readline() or "{}").items()}
    proc.wait(timeout=30)
    keys = [i for i in sent if i in got]
    if not keys:
        raise SystemExit(f"{kind}: no message arrived")

    def med(values: list[int]) -> float:
        return float(np.median(values)) / 1e3

    return {
        "pre-send": med([sent[i][1] - sent[i][0] for i in keys]),
        "kernel+wake": med([got[i][0] - sent[i][1] for i in keys]),
        "accept": med([got[i][1] - got[i][0] for i in keys]),
        "one-way": med([got[i][1] - sent[i][0] for i in keys]),
        "received": len(keys) / count,
    }


def decoder_ab(gap_s: float, count: int, size: int) -> dict[str, float]:
    """Median µs of ``LsDecoder.decode`` on the fast path and on the full parse, each
    call after a pause of ``gap_s`` (alternated, so both see the same machine)."""
    from coorp.runtime.inbox._receiver import LsDecoder
    from coorp.runtime.wire._format import ls_datagram_head, ls_header_prefix

    key = TeamKey(os.urandom(32))
    decoder = LsDecoder(key, "rx")
    prefix = ls_header_prefix("tx", "rx", "bench", decoder.open_session("tx", "bench", 0))
    mac, payload = key.mac("tx", "rx"), bytes(size)
    times: dict[str, list[int]] = {"fast path": [], "full parse": []}
    for i in range(1, count + 1):
        now = time.monotonic_ns()
        for seq, (path, kind) in enumerate(
            zip(times, (bytes, bytearray), strict=True), start=2 * i
        ):
            head = ls_datagram_head(prefix, seq, now, now + 10**8, size)
            data = kind(head + payload + mac.datagram_mac2(head, payload))
            time.sleep(gap_s)
            t0 = time.perf_counter_ns()
            decoder.decode(data, "bench")
            times[path].append(time.perf_counter_ns() - t0)
    return {path: float(np.median(v)) / 1e3 for path, v in times.items()}


def cold_costs(gap_s: float, count: int, size: int) -> dict[str, float]:
    """Median µs of a ``size``-byte copy and of a keyed BLAKE2b-256 MAC over it, each
    right after a pause of ``gap_s`` (alternated)."""
    import hashlib

    mac = hashlib.blake2b(key=os.urandom(32), digest_size=32)
    data = bytearray(size)
    times: dict[str, list[int]] = {"copy": [], "MAC": []}
    for i in range(count):
        data[0] = i & 0xFF  # a new message each time
        time.sleep(gap_s)
        t0 = time.perf_counter_ns()
        bytes(data)
        times["copy"].append(time.perf_counter_ns() - t0)
        time.sleep(gap_s)
        t0 = time.perf_counter_ns()
        h = mac.copy()
        h.update(data)
        h.digest()
        times["MAC"].append(time.perf_counter_ns() - t0)
    return {what: float(np.median(v)) / 1e3 for what, v in times.items()}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gaps-ms", default="0.5,10", help="pauses between messages, ms")
    ap.add_argument("--count", type=int, default=200, help="messages per run")
    ap.add_argument("--runs", type=int, default=3, help="interleaved runs per gap")
    ap.add_argument("--size", type=int, default=1000, help="payload bytes")
    ap.add_argument("--json", help="write the rows here")
    ap.add_argument("--decoder", action="store_true", help="time the inbox's check alone")
    ap.add_argument("--cold", action="store_true", help="time a 1 kB copy and MAC after pauses")
    args = ap.parse_args(argv)
    try:
        gaps = [float(g) / 1e3 for g in args.gaps_ms.split(",")]
    except ValueError:
        ap.error(f"--gaps-ms {args.gaps_ms!r}: expected comma-separated numbers")
    if args.count < 1 or args.runs < 1 or not 4 <= args.size <= 1400:
        ap.error("--count and --runs must be >= 1, --size within 4..1400 bytes")
    in_process = cold_costs if args.cold else decoder_ab if args.decoder else None
    if in_process is not None:  # one process, medians per pause
        for gap in gaps:
            for run in range(args.runs):
                got = in_process(gap, args.count, args.size)
                print(
                    f"gap {gap * 1e3:g} ms, run {run}: "
                    + ", ".join(f"{k} {v:.1f} µs" for k, v in got.items()),
                    flush=True,
                )
        return 0
    rows = []
    print(f"{'gap ms':>7} {'run':>3} {'kind':>6} {'pre-send':>9} {'kernel+wake':>12} "
          f"{'accept':>7} {'one-way':>8}  (median µs)")  # fmt: skip
    for gap in gaps:
        for run in range(args.runs):
            for kind in ("raw", "coorp"):  # interleaved: a load change hits both
                row = {"gap_ms": gap * 1e3, "run": run, "kind": kind,
                       **one_run(kind, args.count, gap, args.size)}  # fmt: skip
                rows.append(row)
                print(f"{row['gap_ms']:7.1f} {run:3d} {kind:>6} {row['pre-send']:9.1f} "
                      f"{row['kernel+wake']:12.1f} {row['accept']:7.1f} "
                      f"{row['one-way']:8.1f}", flush=True)  # fmt: skip
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["--receiver"]:
        _receiver(sys.argv[2], int(sys.argv[3]), sys.argv[4])
    else:
        raise SystemExit(main())
