"""Programs the namespace tests run inside their namespaces (``python rt_roles.py ROLE``).

* ``sink``   — the leader robot's inbox: records LS latencies and bulk checksums.
* ``worker`` — a robot: a periodic LS flow on a common time grid (all robots send at
  the same instants, like an MPC loop) and one bulk transfer once the LS flow runs.
* ``stats``  — print a leader's counters as JSON.
* ``forge``  — send the leader garbage, an oversized frame and a wrong-key join.

Every program prints ``READY``/``RESULT {json}`` lines on stdout and is bounded in
time by ``--timeout``.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import random
import socket
import sys
import threading
import time

from coorp.runtime import BulkSettings, TeamKey, TeamSettings, join, query_leader_stats


def sink(args: argparse.Namespace) -> None:
    team = join(None, args.robot, TeamKey.from_hex(args.key_hex))
    inbox = team.listen(args.listen)
    stalls: list[tuple[int, int]] = []
    stop = threading.Event()
    if args.stall_ticker:
        threading.Thread(target=_ticker, args=(stalls, stop), daemon=True).start()
    print("READY", flush=True)
    bulk, ls = [], []
    deadline = time.monotonic() + args.timeout
    while (len(bulk) < args.expect_bulk or inbox.stats()["dropped"] < args.expect_drops) and (
        time.monotonic() < deadline
    ):
        try:
            # Short rounds: the loop condition also watches the drop counter.
            msg = inbox.recv(timeout=min(max(deadline - time.monotonic(), 0.01), 0.2))
        except TimeoutError:
            continue
        if msg.kind == "ls":
            ls.append([msg.robot, msg.seq, msg.sent_ns, msg.received_ns])
        else:
            bulk.append(
                {
                    "robot": msg.robot,
                    "channel": msg.channel,
                    "nbytes": len(msg.payload),
                    "sha": hashlib.sha256(msg.payload).hexdigest(),
                    "first_ns": msg.first_byte_ns,
                    "done_ns": msg.received_ns,
                }
            )
            print(f"BULK {msg.robot} {msg.channel}", flush=True)
    stop.set()
    out = {"bulk": bulk, "ls": ls, "stats": inbox.stats(), "stalls": stalls}
    print("RESULT " + json.dumps(out), flush=True)
    team.close()


def worker(args: argparse.Namespace) -> None:
    budget = BulkSettings().inflight_budget_ns
    if args.inflight_budget_ms is not None:
        budget = round(args.inflight_budget_ms * 1e6) if args.inflight_budget_ms > 0 else None
    settings = TeamSettings(
        local_preemption=not args.no_local,
        fallback_ns=900_000_000,
        bulk=BulkSettings(inflight_budget_ns=budget),
    )
    team = join(args.leader, args.robot, TeamKey.from_hex(args.key_hex), settings=settings)
    print(f"READY mode={team.mode}", flush=True)
    ls = None
    if not args.no_ls:
        ls = team.latency_sensitive(
            "perception", args.dest, deadline_ms=args.ls_period_ms, period_ms=args.ls_period_ms
        )
    period = round(args.ls_period_ms * 1e6)
    warm = threading.Event()
    stop = threading.Event()
    payload = bytes(args.ls_bytes)
    sent = [0]

    def periodic() -> None:
        assert ls is not None
        # The LS workload: send at grid + k·period (the same instants on every robot).
        k = max(0, -(-(time.monotonic_ns() - args.grid_ns) // period))
        for _ in range(100_000):
            if stop.is_set():
                return
            target = args.grid_ns + k * period
            stop.wait(max(target - time.monotonic_ns(), 0) / 1e9)
            ls.send(payload)
            sent[0] += 1
            if sent[0] == args.warmup:
                warm.set()
            k += 1

    lt = threading.Thread(target=periodic, daemon=True)
    if ls is None:
        warm.set()  # a bulk-only robot: nothing to warm up
    else:
        lt.start()
    data = random.Random(args.seed).randbytes(args.bh_bytes)
    if not warm.wait(timeout=args.timeout):
        raise SystemExit("LS flow did not start")
    if args.start_msg:
        team.bulk("start", args.dest).send(b"s", timeout_s=args.timeout)
        print("STARTED", flush=True)
    if args.announce_bulk:
        print("BULK-START", flush=True)
    bh = team.bulk("params", args.dest)
    trace: list[tuple[int, int]] = []
    if args.trace_outq:
        threading.Thread(target=_trace_outq, args=(bh, trace, stop), daemon=True).start()
    receipt = bh.send(data, timeout_s=args.timeout)
    stop.set()
    if ls is not None:
        lt.join(timeout=5)
    if args.leader:
        # The permit's release goes out after the receipt: once the leader has handled
        # it, its counters (read after RESULT) include it.
        team.sync_leader(timeout_s=10)
    result = {
        "robot": args.robot,
        "sha": hashlib.sha256(data).hexdigest(),
        "started_ns": receipt.started_ns,
        "finished_ns": receipt.finished_ns,
        "permit_wait_ns": receipt.permit_wait_ns,
        "first_write_ns": receipt.first_write_ns,
        "preempted_ns": receipt.preempted_ns,
        "preemptions": receipt.preemptions,
        "ls_sent": sent[0],
        "ls": None if ls is None else dataclasses.asdict(ls.stats),
        "bulk": team.stats()["bulk"]["params"],
        "link": team.stats().get("link", {}),
        "permits": team.stats()["permits"],
        "intervals": team.asyncio_team.coordinator.intervals,
        "reconnects": receipt.reconnects,
    }
    if args.trace_outq:
        result["outq"] = trace
    print("RESULT " + json.dumps(result), flush=True)
    team.close()


def _ticker(stalls: list[tuple[int, int]], stop: threading.Event) -> None:
    """Tick every millisecond; record (start, end) of every tick that came more than
    3 ms late: this process was not running (diagnostics: a late LS message received
    inside such a stretch waited for the receiver's CPU, not for the network)."""
    last = time.monotonic_ns()
    for _ in range(10_000_000):
        if stop.wait(0.001):
            return
        now = time.monotonic_ns()
        if now - last > 4_000_000:
            stalls.append((last, now))
        last = now


def _trace_outq(bh: object, trace: list[tuple[int, int]], stop: threading.Event) -> None:
    """Sample the bulk socket's bytes outstanding (SIOCOUTQ) every millisecond
    (diagnostics for benchmarks: where a late LS message waited)."""
    from coorp.runtime._sockets import bytes_outstanding

    for _ in range(1_000_000):
        if stop.wait(0.001):
            return
        conn = getattr(getattr(bh, "_stream", None), "_conn", None)
        if conn is None or conn.closed:
            continue
        try:
            trace.append((time.monotonic_ns(), bytes_outstanding(conn.sock)))
        except OSError:
            continue


def flood(args: argparse.Namespace) -> None:
    """Open ``--count`` TCP connections to the leader and hold them (never speak)."""
    import resource

    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    host, port = args.leader.rsplit(":", 1)
    socks = []
    for _ in range(args.count):
        s = socket.socket()
        s.setblocking(False)
        try:
            s.connect((host, int(port)))
        except BlockingIOError:
            pass
        except OSError:
            s.close()
            continue
        socks.append(s)
    print(f"FLOODED {len(socks)}", flush=True)
    time.sleep(args.timeout)  # hold them until killed (the test kills this process)


def joinprobe(args: argparse.Namespace) -> None:
    """Join as ``--robot`` and print how long it took (ms) and the mode."""
    t0 = time.monotonic()
    settings = TeamSettings(join_timeout_s=args.timeout)
    team = join(args.leader, args.robot, TeamKey.from_hex(args.key_hex), settings=settings)
    ms = (time.monotonic() - t0) * 1e3
    print(f"JOINED {team.mode} {ms:.1f}", flush=True)
    team.close()


def sniff(args: argparse.Namespace) -> None:
    """Capture ``--count`` UDP datagrams to ``--port`` on ``--ifname`` (AF_PACKET; an
    on-path attacker's view) and print them as hex."""
    raw = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.ntohs(0x0003))
    raw.bind((args.ifname, 0))
    raw.settimeout(args.timeout)
    got: list[str] = []
    print("SNIFFING", flush=True)
    deadline = time.monotonic() + args.timeout
    while len(got) < args.count and time.monotonic() < deadline:
        frame = raw.recv(65535)
        if len(frame) < 42 or frame[12:14] != b"\x08\x00" or frame[23] != 17:
            continue  # not IPv4/UDP
        ihl = (frame[14] & 0x0F) * 4
        udp = 14 + ihl
        if int.from_bytes(frame[udp + 2 : udp + 4], "big") == args.port:
            got.append(frame[udp + 8 :].hex())
    print("CAPTURED " + ",".join(got), flush=True)


def replay(args: argparse.Namespace) -> None:
    """Send captured datagrams (hex, comma-separated) to every ``--to`` address."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        for dest in args.to:
            host, port = dest.rsplit(":", 1)
            for h in args.hex.split(","):
                s.sendto(bytes.fromhex(h), (host, int(port)))
    print("REPLAYED", flush=True)


def stats(args: argparse.Namespace) -> None:
    st = query_leader_stats(args.leader, TeamKey.from_hex(args.key_hex), timeout_s=3)
    print(
        json.dumps(
            {"counters": st.counters, "holders": list(st.holders), "waiting": list(st.waiting)}
        ),
        flush=True,
    )


def forge(args: argparse.Namespace) -> None:
    host, port = args.leader.rsplit(":", 1)
    junk = [
        b"\x00\x00\x00\x05hello",  # not msgpack
        b"\x7f\xff\xff\xff" + b"x" * 64,
    ]  # announces a 2 GiB frame
    for data in junk:
        with socket.create_connection((host, int(port)), timeout=3) as s:
            s.settimeout(3)
            s.recv(4096)  # the greeting
            s.sendall(data)
            with_eof(s)
    # A well-formed Join made with the wrong key.
    from coorp.runtime._auth import CLIENT_TO_SERVER, LEADER, FrameSealer, new_nonce, open_hello
    from coorp.runtime._wire import Join, decode_envelope

    with socket.create_connection((host, int(port)), timeout=3) as s:
        s.settimeout(3)
        raw = s.recv(4096)
        hello = open_hello(decode_envelope(raw[4:]))
        wrong = TeamKey(b"not-the-team-key" * 2).mac("a1", LEADER)
        sealer = FrameSealer(wrong, CLIENT_TO_SERVER, hello.nonce)
        s.sendall(sealer.seal(Join("a1", new_nonce(), "agent")))
        with_eof(s)
    print("FORGED", flush=True)


def with_eof(s: socket.socket) -> None:
    """Read until the leader closes on us (it drops bad peers)."""
    for _ in range(100):
        try:
            if not s.recv(4096):
                return
        except (ConnectionResetError, TimeoutError):
            return


def main() -> None:
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="role", required=True)
    s = sub.add_parser("sink")
    s.add_argument("--listen", required=True)
    s.add_argument("--expect-bulk", type=int, required=True)
    s.add_argument("--expect-drops", type=int, default=0)
    s.add_argument("--robot", default="ld")
    s.add_argument("--stall-ticker", action="store_true")
    sn = sub.add_parser("sniff")
    sn.add_argument("--ifname", required=True)
    sn.add_argument("--port", type=int, required=True)
    sn.add_argument("--count", type=int, default=20)
    rp = sub.add_parser("replay")
    rp.add_argument("--to", action="append", required=True)
    rp.add_argument("--hex", required=True)
    w = sub.add_parser("worker")
    w.add_argument("--robot", required=True)
    w.add_argument("--dest", required=True)
    w.add_argument("--leader")
    w.add_argument("--no-local", action="store_true")
    w.add_argument("--ls-period-ms", type=float, default=33.3)
    w.add_argument("--no-ls", action="store_true", help="no LS channel: a bulk-only robot")
    w.add_argument("--ls-bytes", type=int, default=4000)
    w.add_argument("--bh-bytes", type=int, required=True)
    w.add_argument("--seed", type=int, default=1)
    w.add_argument("--grid-ns", type=int, required=True)
    w.add_argument("--warmup", type=int, default=8)
    w.add_argument("--start-msg", action="store_true")
    w.add_argument("--announce-bulk", action="store_true")
    w.add_argument("--trace-outq", action="store_true")
    w.add_argument(
        "--inflight-budget-ms", type=float, help="BulkSettings.inflight_budget_ns; 0: none"
    )
    fl = sub.add_parser("flood")
    fl.add_argument("--leader", required=True)
    fl.add_argument("--count", type=int, default=2000)
    jp = sub.add_parser("joinprobe")
    jp.add_argument("--leader", required=True)
    jp.add_argument("--robot", required=True)
    st = sub.add_parser("stats")
    st.add_argument("--leader", required=True)
    f = sub.add_parser("forge")
    f.add_argument("--leader", required=True)
    for q in (s, w, st, f, fl, jp, sn, rp):
        q.add_argument("--key-hex", default="")
        q.add_argument("--timeout", type=float, default=60)
    args = p.parse_args()
    roles = {"sink": sink, "worker": worker, "stats": stats, "forge": forge}
    roles |= {"flood": flood, "joinprobe": joinprobe, "sniff": sniff, "replay": replay}
    roles[args.role](args)


if __name__ == "__main__":
    sys.exit(main())
