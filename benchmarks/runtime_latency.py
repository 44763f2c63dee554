"""Runtime overhead on loopback: LS one-way latency, BH throughput, permit round trip.

* LS: one-way latency (sender's clock before ``send`` -> receiver's clock after
  ``recv`` returns, same host) of Coorp LS channels vs a raw UDP socket, p50/p99.
  Target: Coorp adds at most 50 µs at p50.
* BH: throughput of a Coorp bulk stream (with a leader granting the permit, no LS
  flow so not paced) vs raw TCP ``sendall`` into ``recv_into``; target >= 90 %. Both
  receivers allocate a fresh buffer for the message inside the timed region.
* Permit: round trip request -> grant on a local leader (and the release).

Usage::

    python benchmarks/runtime_latency.py [--count 3000] [--bulk-mb 256] [--json out.json]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import mmap
import os
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console
from rich.table import Table

from coorp.runtime import BulkStream, LeaderSettings, PermitService, TeamKey, join
from coorp.runtime.robot._threaded import _LoopThread

KEY_HEX = os.urandom(32).hex()
KEY = TeamKey.from_hex(KEY_HEX)


def pct(values: list[int], q: float) -> float:
    return float(np.percentile(np.array(values) / 1e3, q))  # ns -> µs


# -- LS latency -------------------------------------------------------------------------------
# The receiver runs in its own process (as on another robot): the sender's work after
# a send must not compete with the receiver for the GIL. CLOCK_MONOTONIC is shared.
def raw_receive(count: int) -> dict[int, int]:
    """Bind a UDP socket on loopback, print its port, and receive up to ``count``
    datagrams (5 s timeout each): each one's 4-byte big-endian number -> arrival ns."""
    got: dict[int, int] = {}
    rx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    rx.bind(("127.0.0.1", 0))
    rx.settimeout(5)
    print(rx.getsockname()[1], flush=True)
    with contextlib.suppress(TimeoutError):
        for _ in range(count):
            data = rx.recv(65536)
            got[int.from_bytes(data[:4], "big")] = time.monotonic_ns()
    rx.close()
    return got


def _receiver_main(kind: str, count: int, key_hex: str) -> None:
    got: dict[int, int] = {}
    if kind == "raw":
        got = raw_receive(count)
    else:
        team = join(None, "rx", TeamKey.from_hex(key_hex))
        inbox = team.listen("127.0.0.1:0")
        print(inbox.address[1], flush=True)
        with contextlib.suppress(TimeoutError):
            for _ in range(count):
                msg = inbox.recv(timeout=5)
                got[msg.seq] = time.monotonic_ns()
        team.close()
    print(json.dumps(got), flush=True)


def ls_latency(kind: str, count: int, size: int, gap_s: float) -> list[int]:
    key_hex = os.urandom(32).hex()
    proc = subprocess.Popen(
        [sys.executable, __file__, "--receiver", kind, "--count", str(count), "--key-hex", key_hex],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    port = int(proc.stdout.readline())
    sent: dict[int, int] = {}
    if kind == "raw":
        tx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        tx.connect(("127.0.0.1", port))
        pad = bytes(size - 4)
        for i in range(1, count + 1):
            sent[i] = time.monotonic_ns()
            tx.send(i.to_bytes(4, "big") + pad)
            time.sleep(gap_s)
        tx.close()
    else:
        team = join(None, "tx", TeamKey.from_hex(key_hex))
        ch = team.latency_sensitive("bench", f"127.0.0.1:{port}", deadline_ms=100)
        payload = bytes(size)
        for i in range(1, count + 1):
            sent[i] = time.monotonic_ns()  # ch's sequence numbers are 1, 2, ...
            ch.send(payload)
            time.sleep(gap_s)
        team.close()
    got = {int(k): v for k, v in json.loads(proc.stdout.readline() or "{}").items()}
    proc.wait(timeout=30)
    return [got[i] - sent[i] for i in sent if i in got]


# -- BH throughput ----------------------------------------------------------------------------
# Receivers run in their own processes; both confirm the whole message back to the
# sender (raw: one byte; Coorp: its BulkDone), and the sender times until then.
def _bulk_receiver_main(kind: str, count: int, key_hex: str) -> None:
    if kind == "raw":
        lst = socket.create_server(("127.0.0.1", 0))
        print(lst.getsockname()[1], flush=True)
        for _ in range(count):
            conn, _ = lst.accept()
            conn.settimeout(60)
            size = int.from_bytes(conn.recv(8, socket.MSG_WAITALL), "big")
            buf = mmap.mmap(-1, size)  # a fresh buffer per message, as Coorp allocates
            view, got = memoryview(buf), 0
            while got < size:
                n = conn.recv_into(view[got:])
                if not n:
                    break
                got += n
            conn.sendall(b"k")
            conn.close()
    else:
        team = join(None, "rx", TeamKey.from_hex(key_hex))
        inbox = team.listen("127.0.0.1:0")
        print(inbox.address[1], flush=True)
        for _ in range(count):
            inbox.recv(timeout=120)
        team.close()


def bh_raw(data: bytes, port: int) -> float:
    s = socket.create_connection(("127.0.0.1", port))
    s.settimeout(120)
    t0 = time.perf_counter()
    s.sendall(len(data).to_bytes(8, "big"))
    s.sendall(data)
    s.recv(1)
    elapsed = time.perf_counter() - t0
    s.close()
    return len(data) / elapsed / 1e6


def bh_coorp(data: bytes, stream: BulkStream) -> float:
    t0 = time.perf_counter()
    stream.send(data, timeout_s=120)  # returns once the receiver confirmed all of it
    return len(data) / (time.perf_counter() - t0) / 1e6


def bh_compare(data: bytes, leader: str, repeat: int) -> tuple[list[float], list[float]]:
    key_hex = KEY_HEX
    procs = {
        kind: subprocess.Popen(
            [
                sys.executable,
                __file__,
                "--bulk-receiver",
                kind,
                "--count",
                str(repeat + (kind == "coorp")),
                "--key-hex",
                key_hex,
            ],
            stdout=subprocess.PIPE,
            text=True,
        )
        for kind in ("raw", "coorp")
    }
    ports = {k: int(p.stdout.readline()) for k, p in procs.items()}  # type: ignore[union-attr]
    team = join(leader, "tx", KEY)
    try:
        stream = team.bulk("bench", f"127.0.0.1:{ports['coorp']}")
        stream.send(b"warm-up", timeout_s=10)
        raw, coorp = [], []
        for _ in range(repeat):  # interleaved, so both see the same machine load
            raw.append(bh_raw(data, ports["raw"]))
            coorp.append(bh_coorp(data, stream))
    finally:
        team.close()
        for p in procs.values():
            p.wait(timeout=30)
    return raw, coorp


# -- permit round trip ------------------------------------------------------------------------
def permit_rtt(leader: str, count: int) -> list[int]:
    team = join(leader, "tx", KEY)
    try:
        coord = team.asyncio_team.coordinator

        async def cycles() -> list[int]:
            out = []
            for _ in range(count):
                t0 = time.monotonic_ns()
                coord.begin()
                ok = await coord.wait_permitted(5.0)
                out.append(time.monotonic_ns() - t0)
                coord.end()
                if not ok:
                    raise RuntimeError("no grant within 5 s")
            return out

        result: list[int] = team._runner.run(cycles(), 120)
        return result
    finally:
        team.close()


def start_leader() -> tuple[_LoopThread, PermitService, str]:
    runner = _LoopThread("bench-leader")
    svc = PermitService(["tx", "rx"], KEY, LeaderSettings())

    async def go() -> int:
        return (await svc.start(("127.0.0.1", 0)))[1]

    port = runner.run(go(), 10)
    return runner, svc, f"127.0.0.1:{port}"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--count", type=int, default=3000, help="LS messages per variant")
    p.add_argument("--size", type=int, default=1000, help="LS payload bytes")
    p.add_argument("--gap-ms", type=float, default=0.5, help="gap between LS messages")
    p.add_argument("--bulk-mb", type=int, default=128, help="bulk message size (MB)")
    p.add_argument("--repeat", type=int, default=5, help="bulk runs per variant (interleaved)")
    p.add_argument("--permits", type=int, default=500, help="permit round trips")
    p.add_argument("--json", type=Path, help="also write the results here")
    p.add_argument("--receiver", choices=["raw", "coorp"], help=argparse.SUPPRESS)
    p.add_argument("--bulk-receiver", choices=["raw", "coorp"], help=argparse.SUPPRESS)
    p.add_argument("--key-hex", default="", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.receiver:
        _receiver_main(args.receiver, args.count, args.key_hex)
        return
    if args.bulk_receiver:
        _bulk_receiver_main(args.bulk_receiver, args.count, args.key_hex)
        return
    if args.count < 10 or args.size < 4 or args.bulk_mb < 1:
        p.error("--count >= 10, --size >= 4 and --bulk-mb >= 1 are required")

    gap = args.gap_ms / 1e3
    raw_lat = ls_latency("raw", args.count, args.size, gap)
    coorp_lat = ls_latency("coorp", args.count, args.size, gap)
    runner, service, leader = start_leader()
    try:
        data = os.urandom(args.bulk_mb * 1_000_000)
        raw_runs, coorp_runs = bh_compare(data, leader, args.repeat)
        # Medians of interleaved runs: robust to a shared, busy machine.
        raw_bw, coorp_bw = statistics.median(raw_runs), statistics.median(coorp_runs)
        rtt = permit_rtt(leader, args.permits)
    finally:
        runner.run(service.close(), 10)
        runner.stop()

    results: dict[str, Any] = {
        "ls": {
            "payload_bytes": args.size,
            "count": args.count,
            "raw_udp_us": {"p50": pct(raw_lat, 50), "p99": pct(raw_lat, 99)},
            "coorp_us": {"p50": pct(coorp_lat, 50), "p99": pct(coorp_lat, 99)},
        },
        "bh": {
            "bytes": len(data),
            "raw_tcp_MBps": raw_bw,
            "coorp_MBps": coorp_bw,
            "ratio": coorp_bw / raw_bw,
            "best_ratio": max(coorp_runs) / max(raw_runs),
            "raw_runs": raw_runs,
            "coorp_runs": coorp_runs,
        },
        "permit_rtt_us": {
            "p50": pct(rtt, 50),
            "p99": pct(rtt, 99),
            "mean": statistics.fmean(rtt) / 1e3,
        },
        "machine": {
            "cpus": os.cpu_count(),
            "python": sys.version.split()[0],
            "loadavg": os.getloadavg(),
        },
    }
    results["ls"]["overhead_p50_us"] = (
        results["ls"]["coorp_us"]["p50"] - results["ls"]["raw_udp_us"]["p50"]
    )

    table = Table(title="coorp runtime on loopback")
    for col in ("measure", "raw socket", "coorp", "coorp − raw / ratio", "target"):
        table.add_column(col, justify="right" if col != "measure" else "left")
    ls = results["ls"]
    table.add_row(
        f"LS one-way p50 ({args.size} B)",
        f"{ls['raw_udp_us']['p50']:.1f} µs",
        f"{ls['coorp_us']['p50']:.1f} µs",
        f"{ls['overhead_p50_us']:+.1f} µs",
        "≤ +50 µs",
    )
    table.add_row(
        "LS one-way p99",
        f"{ls['raw_udp_us']['p99']:.1f} µs",
        f"{ls['coorp_us']['p99']:.1f} µs",
        f"{ls['coorp_us']['p99'] - ls['raw_udp_us']['p99']:+.1f} µs",
        "",
    )
    bh = results["bh"]
    table.add_row(
        f"BH throughput ({args.bulk_mb} MB), median",
        f"{bh['raw_tcp_MBps']:.0f} MB/s",
        f"{bh['coorp_MBps']:.0f} MB/s",
        f"{bh['ratio']:.1%}",
        "≥ 90 %",
    )
    table.add_row(
        "BH throughput, best run",
        f"{max(raw_runs):.0f} MB/s",
        f"{max(coorp_runs):.0f} MB/s",
        f"{bh['best_ratio']:.1%}",
        "",
    )
    pr = results["permit_rtt_us"]
    table.add_row(
        "permit request → grant", "", f"p50 {pr['p50']:.0f} µs / p99 {pr['p99']:.0f} µs", "", ""
    )
    Console().print(table)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
