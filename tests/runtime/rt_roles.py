"""Programs the namespace tests run inside their namespaces (``python rt_roles.py ROLE``).

* ``sink``   — the leader robot's inbox: records LS latencies and bulk checksums.
* ``worker`` — a robot: a periodic LS flow on a common time grid (all robots send at
  the same instants, like an MPC loop) and one bulk transfer once the LS flow runs.
* ``stats``  — print a leader's counters as JSON.
* ``forge``  — send the leader garbage, an oversized frame and a wrong-key join.
* ``member`` — join and stay joined (until a line on stdin); its link counters.
* ``dflood`` — hold ``--count`` connections from many source addresses, reopening
  every one the server closes (a distributed flood).
* ``evict``  — a member opening LS sessions at another robot's inbox as fast as it can.
* ``reqflood`` — a member holding observer connections and sending Request frames
  as fast as it can.
* ``lsflow`` — an LS flow at ``--hz`` until a line on stdin; its channel counters.
* ``impair`` — a user-space impaired link (``rt_impair.ImpairedLink``).

Every program prints ``READY``/``RESULT {json}`` lines on stdout and is bounded in
time by ``--timeout``.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import hashlib
import json
import random
import socket
import sys
import threading
import time
from typing import Any

from coorp._errors import PeerError
from coorp.runtime import BulkSettings, TeamKey, TeamSettings, join, query_leader_stats


def _log_to_stderr() -> None:
    """Warnings with a wall-clock timestamp (benchmarks count lines per second)."""
    import logging

    logging.basicConfig(
        level=logging.WARNING, format="%(created).3f %(levelname)s %(name)s: %(message)s"
    )


def _take_cpu_share(text: str | None) -> None:
    """``--scheduling``: this process's CPU share, as ``coorp agent`` takes
    ``agent.scheduling`` at start (docs/runtime.md, "Busy CPUs")."""
    if text:
        from coorp.runtime import apply_scheduling, parse_scheduling

        apply_scheduling(parse_scheduling(text))


def sink(args: argparse.Namespace) -> None:
    _log_to_stderr()
    _take_cpu_share(args.scheduling)
    team = join(None, args.robot, TeamKey.from_hex(args.key_hex))
    inbox = team.listen(args.listen)
    stalls: list[tuple[int, int]] = []
    stop = threading.Event()
    if args.stall_ticker:
        threading.Thread(target=_ticker, args=(stalls, stop), daemon=True).start()
    print("READY", flush=True)
    bulk, ls = [], []
    deadline = time.monotonic() + args.timeout
    stop_line = _stdin_line() if args.until_stdin else None
    while (
        (stop_line is not None and not stop_line.is_set())
        or len(bulk) < args.expect_bulk
        or inbox.stats()["dropped"] < args.expect_drops
    ) and (time.monotonic() < deadline):
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
    out = {
        "bulk": bulk,
        "ls": ls,
        "stats": inbox.stats(),
        "stalls": stalls,
        "flows": inbox.flows(),
    }
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
        kernel_lease_mark=args.kernel_lease_mark,
    )
    if args.fleet:  # no fixed leader: the leader of the cell this robot is in
        from coorp.runtime import load_team_config, team_settings

        cfg = load_team_config(args.fleet)
        roaming = team_settings(cfg).roaming
        settings = dataclasses.replace(settings, roaming=roaming)
        # The robot's CPU share, as `coorp agent` takes it from the same team file.
        _take_cpu_share(args.scheduling or cfg.agent.scheduling)
    else:
        _take_cpu_share(args.scheduling)
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
    if args.go_stdin:  # joined and warm: the bulk goes when told (a line on stdin)
        print("WARM", flush=True)
        _stdin_line().wait(args.timeout)
    if args.announce_bulk:
        print("BULK-START", flush=True)
    if args.announce_writing:
        threading.Thread(
            target=_announce_writing, args=(team.asyncio_team.coordinator, stop, args.timeout),
            daemon=True,
        ).start()  # fmt: skip
    bh = team.bulk("params", args.dest)
    trace: list[tuple[int, int]] = []
    if args.trace_outq:
        threading.Thread(target=_trace_outq, args=(bh, trace, stop), daemon=True).start()
    receipt = bh.send(data, timeout_s=args.timeout)
    guard = team.asyncio_team.coordinator.guard
    stop.set()
    if ls is not None:
        lt.join(timeout=5)
    if args.leader or args.fleet:
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
        "cell": team.stats().get("cell"),
        "moves": team.stats().get("moves", []),
        "kernel_lease_updates": guard.updates if guard is not None else None,
    }
    if args.trace_outq:
        result["outq"] = trace
    print("RESULT " + json.dumps(result), flush=True)
    team.close()


def _announce_writing(coordinator: Any, stop: threading.Event, timeout_s: float) -> None:
    """Print ``WRITING`` once the robot has written bulk under its first permit (its
    counters read every 2 ms from this thread: a driver waiting for the line needs no
    process of its own, which a loaded machine starts slower than the robot sends)."""
    deadline = time.monotonic() + timeout_s
    while not stop.wait(0.002) and time.monotonic() < deadline:
        if coordinator.counters["grants"] >= 1 and coordinator.intervals:
            print("WRITING", flush=True)
            return


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
    from coorp.runtime.wire._sockets import bytes_outstanding

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
    link = team.stats().get("link", {})
    print(f"JOINED {team.mode} {ms:.1f} {json.dumps(link)}", flush=True)
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
    """The leader's counters; with ``--each-line``, once per line on stdin (one process
    for many queries: starting Python takes seconds on a saturated machine). A query
    that times out (a starved leader or observer) is asked again, up to 5 times, and
    then answered ``STATS-FAILED`` (the caller asks again, bounded)."""
    for _ in range(100_000 if args.each_line else 1):
        if args.each_line and not sys.stdin.readline():
            return
        st = None
        for attempt in range(5 if args.each_line else 1):
            try:
                st = query_leader_stats(args.leader, TeamKey.from_hex(args.key_hex), timeout_s=5)
                break
            except (TimeoutError, OSError, PeerError) as exc:
                if not args.each_line:
                    raise
                print(f"stats attempt {attempt}: {exc!r}", file=sys.stderr, flush=True)
        if st is None:
            print("STATS-FAILED", flush=True)
            continue
        out = {"counters": st.counters, "holders": list(st.holders), "waiting": list(st.waiting)}
        print(("STATS " if args.each_line else "") + json.dumps(out), flush=True)


def lease_server(args: argparse.Namespace) -> None:
    """Accept one connection, send it ``--download`` bytes while reading everything it
    sends; print when each distinct byte value first arrived (monotonic ns)."""
    host, port = args.listen.rsplit(":", 1)
    srv = socket.create_server((host, int(port)))
    srv.settimeout(args.timeout)
    print("READY", flush=True)
    conn, _ = srv.accept()
    conn.settimeout(args.timeout)
    sender = threading.Thread(target=conn.sendall, args=(b"d" * args.download,), daemon=True)
    sender.start()
    got = bytearray()
    first: dict[str, int] = {}
    while chunk := conn.recv(1 << 16):
        now = time.monotonic_ns()
        for v in set(chunk):
            first.setdefault(chr(v), now)
        got += chunk
    sender.join(args.timeout)
    print("GOT " + json.dumps({"data": got.decode(), "first": first}), flush=True)


def lease_probe(args: argparse.Namespace) -> None:
    """A robot's bulk socket under a :class:`KernelLease`: bytes before the deadline,
    bytes written after it (a holder that woke too late), a download acknowledged
    meanwhile, then the deadline lifted (its next permit)."""
    import asyncio

    from coorp.runtime.wire import KernelLease

    async def main() -> dict[str, int]:
        lease = KernelLease("a1", 4242)
        await lease.install()
        host, port = args.dest.rsplit(":", 1)
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_MARK, lease.mark)
        sock.connect((host, int(port)))
        sock.sendall(b"a" * 1000)
        lease.request(time.monotonic_ns() - 1)  # the deadline is past
        for _ in range(1000):
            if lease.applied is not None:
                break
            await asyncio.sleep(0.01)
        sock.sendall(b"b" * 1000)  # written too late: must not leave before the lift
        sock.settimeout(args.timeout)
        down = 0
        while down < args.download:  # acknowledging a download is not bulk of ours
            down += len(await asyncio.to_thread(sock.recv, 1 << 16))
        dropped = 0
        for _ in range(1000):  # the kernel tried to send the late bytes, and dropped them
            dropped = await lease.dropped()
            if dropped:
                break
            await asyncio.sleep(0.01)
        lifted = time.monotonic_ns()
        lease.request(None)
        for _ in range(1000):
            if lease.applied is None:
                break
            await asyncio.sleep(0.01)
        sock.sendall(b"c" * 10)
        sock.shutdown(socket.SHUT_WR)
        await asyncio.to_thread(sock.recv, 1)
        lease.close()
        return {"lifted_ns": lifted, "dropped": dropped, "download": down}

    print("PROBED " + json.dumps(asyncio.run(main())), flush=True)


def watch(args: argparse.Namespace) -> None:
    """What went onto the medium: TCP segments with payload to ``--port`` leaving
    ``--ifname`` (a packet socket, kernel timestamps), per source address as stretches
    ``[first_ns, last_ns, payload bytes]`` (packets closer than 1 ms merged), until a
    line on stdin or ``--timeout``. Prints ``WATCHED`` + JSON, with the socket's drops."""
    import select
    import struct

    raw = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.ntohs(0x0003))
    raw.setsockopt(socket.SOL_SOCKET, 33, 64 << 20)  # SO_RCVBUFFORCE
    raw.setsockopt(socket.SOL_SOCKET, 35, 1)  # SO_TIMESTAMPNS
    raw.bind((args.ifname, 0))
    got: dict[str, list[list[int]]] = {}
    print("WATCHING", flush=True)
    deadline = time.monotonic() + args.timeout
    done = False
    while not done and time.monotonic() < deadline:
        ready, _, _ = select.select([raw, sys.stdin], [], [], 0.2)
        if sys.stdin in ready:
            sys.stdin.readline()
            done = True  # what is queued on the socket is still read below
        if raw not in ready:
            continue
        for _ in range(100_000):
            try:
                frame, anc, _, addr = raw.recvmsg(128, 64, socket.MSG_DONTWAIT)
            except BlockingIOError:
                break
            if addr[2] != socket.PACKET_OUTGOING or len(frame) < 54 or frame[12:14] != b"\x08\x00":
                continue
            ip = frame[14:]
            ihl = (ip[0] & 0x0F) * 4
            if ip[9] != 6 or int.from_bytes(ip[ihl + 2 : ihl + 4], "big") != args.port:
                continue
            payload = int.from_bytes(ip[2:4], "big") - ihl - (ip[ihl + 12] >> 4) * 4
            if payload <= 0:
                continue
            ts = next(
                (s * 1_000_000_000 + ns for lvl, typ, d in anc
                 if lvl == socket.SOL_SOCKET and typ == 35  # SCM_TIMESTAMPNS
                 for s, ns in [struct.unpack("qq", d[:16])]),
                time.time_ns(),
            )  # fmt: skip
            runs = got.setdefault(socket.inet_ntoa(ip[12:16]), [])
            if runs and ts - runs[-1][1] <= 1_000_000:
                runs[-1][1] = max(runs[-1][1], ts)
                runs[-1][2] += payload
            elif len(runs) < 20_000:
                runs.append([ts, ts, payload])
    _packets, drops = struct.unpack("II", raw.getsockopt(263, 6, 8))  # PACKET_STATISTICS
    print("WATCHED " + json.dumps({"stretches": got, "drops": drops}), flush=True)


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
    from coorp.runtime.wire._auth import (
        CLIENT_TO_SERVER,
        LEADER,
        FrameSealer,
        new_nonce,
        open_hello,
    )
    from coorp.runtime.wire._format import Join, decode_envelope

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


def _stdin_line() -> threading.Event:
    """An event set when a line (or EOF) arrives on stdin."""
    ev = threading.Event()

    def read() -> None:
        sys.stdin.readline()
        ev.set()

    threading.Thread(target=read, daemon=True).start()
    return ev


def _member_key(args: argparse.Namespace) -> object:
    """Only ``--robot``'s own keys (what a member holds), derived from the team key."""
    team = TeamKey.from_hex(args.key_hex)
    return team.robot_key(args.robot, [args.robot, *args.peers.split(",")])


def member(args: argparse.Namespace) -> None:
    """Join and stay joined until a line on stdin; the link's counters."""
    settings = TeamSettings(join_timeout_s=args.timeout)
    team = join(args.leader, args.robot, _member_key(args), settings=settings)  # type: ignore[arg-type]
    print(f"READY {team.mode}", flush=True)
    _stdin_line().wait(args.timeout)
    out = {"mode": team.mode, "link": team.stats().get("link", {})}
    print("RESULT " + json.dumps(out), flush=True)
    team.close()


def dflood(args: argparse.Namespace) -> None:
    """Hold ``--count`` TCP connections to ``--to`` from the source addresses
    ``--sources PREFIX.LO-HI`` (round robin); every connection the server closes is
    opened again at once, until a line on stdin or ``--timeout``. Never speaks."""
    import resource
    import selectors

    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    host, port = args.to.rsplit(":", 1)
    prefix, rng = args.sources.rsplit(".", 1)
    lo, hi = (int(x) for x in rng.split("-"))
    sources = [f"{prefix}.{i}" for i in range(lo, hi + 1)]
    sel = selectors.DefaultSelector()
    opened = failed = 0

    def open_one(k: int) -> None:
        nonlocal opened, failed
        s = socket.socket()
        s.setblocking(False)
        try:
            s.bind((sources[k % len(sources)], 0))
            s.connect_ex((host, int(port)))
        except OSError:
            failed += 1
            s.close()
            return
        opened += 1
        sel.register(s, selectors.EVENT_READ, k)

    for k in range(args.count):
        open_one(k)
    print(f"FLOODED {opened} from {len(sources)} addresses", flush=True)
    stop = _stdin_line()
    deadline = time.monotonic() + args.timeout
    reopened = 0
    for _ in range(100_000_000):
        if stop.is_set() or time.monotonic() > deadline:
            break
        for key, _ev in sel.select(0.05):
            s = key.fileobj
            try:
                data = s.recv(4096)  # type: ignore[union-attr]
            except OSError:
                data = b""
            if not data:  # closed by the server: open another one
                sel.unregister(s)
                s.close()  # type: ignore[union-attr]
                open_one(key.data)
                reopened += 1
    out = {"opened": opened, "reopened": reopened, "failed": failed}
    print("RESULT " + json.dumps(out), flush=True)


def evict(args: argparse.Namespace) -> None:
    """As member ``--robot`` (its own keys only), open ``--count`` LS sessions at the
    inbox ``--dest``, each on a new connection dropped once accepted, as fast as the
    inbox lets it (``--concurrency`` at once)."""
    import asyncio

    from coorp.runtime.wire._format import LsOpen
    from coorp.runtime.wire._framing import client_handshake, connect_framed, recv_first_reply

    key = _member_key(args)
    host, port = args.dest.rsplit(":", 1)
    counts = {"accepted": 0, "refused": 0, "errors": 0}

    async def one(i: int) -> None:
        conn = None
        try:
            conn = await connect_framed((host, int(port)), timeout_s=5)
            await client_handshake(conn, key, robot=args.robot, role="ls", service="receiver")  # type: ignore[arg-type]
            await conn.send(LsOpen(f"evict{i}", time.monotonic_ns()))
            await recv_first_reply(conn)
            counts["accepted"] += 1
        except Exception as exc:  # count every way it failed
            counts["refused" if "refused" in type(exc).__name__.lower() else "errors"] += 1
        finally:
            if conn is not None:
                conn.close()

    async def run() -> None:
        todo = iter(range(args.count))

        async def lane() -> None:
            for i in todo:
                await one(i)

        async with asyncio.timeout(args.timeout):
            await asyncio.gather(*(lane() for _ in range(args.concurrency)))

    t0 = time.monotonic()
    print("EVICTING", flush=True)
    try:
        asyncio.run(run())
    except TimeoutError:
        counts["errors"] += 1
    out = dict(counts, seconds=round(time.monotonic() - t0, 3))
    print("RESULT " + json.dumps(out), flush=True)


def reqflood(args: argparse.Namespace) -> None:
    """As member ``--robot``: hold ``--observers`` observer connections to the leader,
    then join as an agent and send Request and Ping frames as fast as the socket
    takes them, until a line on stdin or ``--timeout``."""
    sys.path.insert(0, str(__import__("pathlib").Path(__file__).parent))
    from rt_helpers import RawClient

    from coorp.runtime.wire._format import Ping, Refused, Request

    key = _member_key(args)
    agent = RawClient(args.leader, timeout=5)
    agent.handshake(args.robot, key=key)  # type: ignore[arg-type]
    agent.recv()  # Welcome
    held, refused = [], 0
    last_ping = time.monotonic()
    for k in range(args.observers):
        if time.monotonic() - last_ping > 0.1:  # the agent stays alive meanwhile
            agent.send(Ping(k))
            last_ping = time.monotonic()
        try:
            c = RawClient(args.leader, timeout=5)
            c.handshake(args.robot, key=key, role="observer")  # type: ignore[arg-type]
            c.send(Ping(1))
            if isinstance(c.recv(), Refused):
                refused += 1
                c.close()
                continue
            held.append(c)
        except Exception:  # refused and closed, timed out...: not held
            refused += 1
    print(f"FLOODING observers={len(held)} refused={refused}", flush=True)
    stop = _stdin_line()
    sent = [0]
    agent.sock.settimeout(None)  # blocking: a timeout mid-frame would break the framing

    def blast() -> None:
        with contextlib.suppress(OSError):
            while not stop.is_set():
                agent.send(Request() if sent[0] % 2 else Ping(sent[0]))
                sent[0] += 1

    t = threading.Thread(target=blast, daemon=True)
    t.start()
    stop.wait(args.timeout)
    stop.set()
    agent.sock.shutdown(socket.SHUT_RDWR)  # unblocks a send the leader is not reading
    t.join(timeout=5)
    sent_n = sent[0]
    out = {"observers_held": len(held), "observers_refused": refused, "frames_sent": sent_n}
    print("RESULT " + json.dumps(out), flush=True)
    for c in held:
        c.close()
    agent.close()


def lsflow(args: argparse.Namespace) -> None:
    """An LS flow of ``--bytes`` at ``--hz`` to ``--dest`` until a line on stdin (or
    ``--timeout``); then one more keep-alive, so the receiver's counts are complete."""
    settings = TeamSettings(ls_keepalive_s=args.keepalive_s)
    team = join(None, args.robot, _member_key(args), settings=settings)  # type: ignore[arg-type]
    ch = team.latency_sensitive("control", args.dest, deadline_ms=1000 / args.hz)
    print(f"READY {ch.has_session}", flush=True)
    stop = _stdin_line()
    period = 1.0 / args.hz
    t0 = time.monotonic()
    k, outcomes = 0, {"sent": 0, "parked": 0, "failed": 0}
    deadline = t0 + args.timeout
    while not stop.is_set() and time.monotonic() < deadline:
        outcomes[ch.send(bytes(args.bytes))] += 1
        k += 1
        stop.wait(max(t0 + k * period - time.monotonic(), 0))
    settle = threading.Event()
    settle.wait(0.1)  # the last datagrams arrive (the link's delay)
    before = ch.stats.received
    for _ in range(int(10 / args.keepalive_s)):  # a keep-alive after them
        if ch.stats.received != before or ch.stats.received + ch.stats.lost >= ch.stats.sent:
            break
        settle.wait(args.keepalive_s / 4)
    settle.wait(args.keepalive_s * 1.5)
    out = {"outcomes": outcomes, "stats": dataclasses.asdict(ch.stats)}
    print("RESULT " + json.dumps(out), flush=True)
    team.close()


def impair(args: argparse.Namespace) -> None:
    """Forward ``--listen`` to ``--to`` with loss and delay jitter on UDP (TCP as is)
    until a line on stdin or ``--timeout``; its counters."""
    sys.path.insert(0, str(__import__("pathlib").Path(__file__).parent))
    from rt_impair import ImpairedLink

    lh, lp = args.listen.rsplit(":", 1)
    th, tp = args.to.rsplit(":", 1)
    link = ImpairedLink(
        (th, int(tp)), listen=(lh, int(lp)), loss=args.loss, delay_ms=args.delay_ms,
        jitter_ms=args.jitter_ms, seed=args.seed,
    )  # fmt: skip
    print("READY", flush=True)
    _stdin_line().wait(args.timeout)
    print("RESULT " + json.dumps(link.counters()), flush=True)
    link.close()


def main() -> None:
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="role", required=True)
    s = sub.add_parser("sink")
    s.add_argument("--listen", required=True)
    s.add_argument("--expect-bulk", type=int, required=True)
    s.add_argument("--expect-drops", type=int, default=0)
    s.add_argument("--robot", default="ld")
    s.add_argument("--stall-ticker", action="store_true")
    s.add_argument("--scheduling", help="this process's CPU share (agent.scheduling's forms)")
    s.add_argument("--until-stdin", action="store_true", help="run until a line on stdin")
    ls_ = sub.add_parser("leaseserver")
    ls_.add_argument("--listen", required=True)
    ls_.add_argument("--download", type=int, default=200_000)
    lp = sub.add_parser("leaseprobe")
    lp.add_argument("--dest", required=True)
    lp.add_argument("--download", type=int, default=200_000)
    wa = sub.add_parser("watch")
    wa.add_argument("--ifname", required=True)
    wa.add_argument("--port", type=int, required=True)
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
    w.add_argument("--fleet", help="a team file with [fleet]: follow the robot's cell")
    w.add_argument("--scheduling", help="CPU share (default: with --fleet, agent.scheduling)")
    w.add_argument("--no-local", action="store_true")
    w.add_argument("--ls-period-ms", type=float, default=33.3)
    w.add_argument("--no-ls", action="store_true", help="no LS channel: a bulk-only robot")
    w.add_argument("--ls-bytes", type=int, default=4000)
    w.add_argument("--bh-bytes", type=int, required=True)
    w.add_argument("--seed", type=int, default=1)
    w.add_argument("--grid-ns", type=int, required=True)
    w.add_argument("--warmup", type=int, default=8)
    w.add_argument("--start-msg", action="store_true")
    w.add_argument("--go-stdin", action="store_true", help="send the bulk on a stdin line")
    w.add_argument("--announce-bulk", action="store_true")
    w.add_argument(
        "--announce-writing", action="store_true", help="print WRITING once bulk is on the air"
    )
    w.add_argument("--trace-outq", action="store_true")
    w.add_argument("--kernel-lease-mark", type=int, help="TeamSettings.kernel_lease_mark")
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
    st.add_argument("--each-line", action="store_true", help="a query per stdin line")
    f = sub.add_parser("forge")
    f.add_argument("--leader", required=True)
    mb = sub.add_parser("member")
    mb.add_argument("--leader", required=True)
    mb.add_argument("--robot", required=True)
    df = sub.add_parser("dflood")
    df.add_argument("--to", required=True)
    df.add_argument("--sources", required=True, help="PREFIX.LO-HI, e.g. 10.231.0.100-249")
    df.add_argument("--count", type=int, default=2000)
    ev = sub.add_parser("evict")
    ev.add_argument("--dest", required=True)
    ev.add_argument("--robot", required=True)
    ev.add_argument("--count", type=int, default=4200)
    ev.add_argument("--concurrency", type=int, default=16)
    rf = sub.add_parser("reqflood")
    rf.add_argument("--leader", required=True)
    rf.add_argument("--robot", required=True)
    rf.add_argument("--observers", type=int, default=1030)
    lf = sub.add_parser("lsflow")
    lf.add_argument("--dest", required=True)
    lf.add_argument("--robot", required=True)
    lf.add_argument("--hz", type=float, default=100)
    lf.add_argument("--bytes", type=int, default=200)
    lf.add_argument("--keepalive-s", type=float, default=0.5)
    im = sub.add_parser("impair")
    im.add_argument("--listen", required=True)
    im.add_argument("--to", required=True)
    im.add_argument("--loss", type=float, default=0.1)
    im.add_argument("--delay-ms", type=float, default=20)
    im.add_argument("--jitter-ms", type=float, default=10)
    im.add_argument("--seed", type=int, default=1)
    for q in (mb, ev, rf, lf):
        q.add_argument("--peers", default="ld,a1,a2,a3", help="the robot key's peers")
    for q in (s, w, st, f, fl, jp, sn, rp, mb, df, ev, rf, lf, im, wa, ls_, lp):
        q.add_argument("--key-hex", default="")
        q.add_argument("--timeout", type=float, default=60)
    args = p.parse_args()
    roles = {"sink": sink, "worker": worker, "stats": stats, "forge": forge}
    roles |= {"flood": flood, "joinprobe": joinprobe, "sniff": sniff, "replay": replay}
    roles |= {"watch": watch, "leaseserver": lease_server, "leaseprobe": lease_probe}
    roles |= {"member": member, "dflood": dflood, "evict": evict, "reqflood": reqflood}
    roles |= {"lsflow": lsflow, "impair": impair}
    roles[args.role](args)


if __name__ == "__main__":
    sys.exit(main())
