"""End-to-end behaviour of the runtime on loopback (one process, real sockets)."""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import socket
import threading
import time
from collections.abc import Iterator

import pytest
from rt_capture import tcp_segment
from rt_helpers import KEY, LeaderHandle, RawClient, ThrottledProxy

from coorp.runtime import (
    BulkReceipt,
    BulkSettings,
    LeaderSettings,
    ReceiverLimits,
    RefusedError,
    Team,
    TeamKey,
    TeamSettings,
    join,
)
from coorp.runtime.wire._format import (
    Granted,
    Ping,
    Pong,
    Queued,
    Release,
    Request,
    Revoked,
    Welcome,
)

ROBOTS = ["sink", "r1", "r2", "r3"]


@pytest.fixture
def leader() -> Iterator[LeaderHandle]:
    handle = LeaderHandle(
        ROBOTS, LeaderSettings(limit=1, timeslice_ns=2_000_000_000, heartbeat_ns=100_000_000)
    )
    try:
        yield handle
    finally:
        handle.close()


@pytest.fixture
def teams() -> Iterator[list[Team]]:
    made: list[Team] = []
    try:
        yield made
    finally:
        for t in made:
            t.close()


def digest(data: bytes | bytearray) -> str:
    return hashlib.sha256(data).hexdigest()


def test_bulk_from_three_robots_arrives_intact_one_permit_at_a_time(
    leader: LeaderHandle, teams: list[Team]
) -> None:
    sink = join(leader.address, "sink", KEY)
    teams.append(sink)
    inbox = sink.listen("127.0.0.1:0")
    dest = f"127.0.0.1:{inbox.address[1]}"
    payloads = {r: os.urandom(3_000_000 + i) for i, r in enumerate(["r1", "r2", "r3"])}
    receipts: dict[str, BulkReceipt] = {}
    threads = []
    for robot, data in payloads.items():
        team = join(leader.address, robot, KEY)
        teams.append(team)
        assert team.mode == "coordinated"
        stream = team.bulk("params", dest)

        def go(r: str = robot, s=stream, d: bytes = data) -> None:  # type: ignore[no-untyped-def]
            receipts[r] = s.send(d, timeout_s=30)

        threads.append(threading.Thread(target=go))
    for t in threads:
        t.start()
    got = {}
    for _ in range(3):
        msg = inbox.recv(timeout=30)
        assert msg.kind == "bulk" and msg.channel == "params"
        got[msg.robot] = digest(msg.payload)
    for t in threads:
        t.join(timeout=30)
    assert got == {r: digest(d) for r, d in payloads.items()}
    # A stream's release goes out after its receipt: wait until the leader handled it.
    assert all(team.sync_leader() for team in teams[1:])
    stats = leader.stats()
    assert stats["max_holders"] == 1
    assert stats["grants"] == 3 and stats["releases"] == 3
    assert all(r.nbytes == len(payloads[k]) for k, r in receipts.items())


def test_raw_protocol_grant_release_and_disconnected_holder_is_revoked(
    leader: LeaderHandle,
) -> None:
    a, b = RawClient(leader.address), RawClient(leader.address)
    try:
        a.handshake("r1")
        assert isinstance(a.recv(), Welcome)
        b.handshake("r2")
        assert isinstance(b.recv(), Welcome)
        a.send(Request())
        grant_a = a.recv()
        assert isinstance(grant_a, Granted)
        b.send(Request())
        assert leader.stats()["waiting"] == 1 or True  # b may still be in flight
        a.close()  # the holder vanishes (its process died: the kernel closes the socket)
        grant_b = b.recv()  # granted long before the 2 s timeslice
        assert isinstance(grant_b, Granted)
        assert grant_b.grant_id > grant_a.grant_id
        assert leader.stats()["disconnect_revocations"] == 1
        b.send(Release(grant_b.grant_id))
        b.send(Ping(1))
        assert isinstance(b.recv(), Pong)
        assert leader.stats()["releases"] == 1
    finally:
        a.close()
        b.close()


def test_silent_holder_loses_permit_and_next_requester_gets_it() -> None:
    # The holder neither closes nor heartbeats (a frozen or partitioned robot).
    handle = LeaderHandle(
        ROBOTS, LeaderSettings(timeslice_ns=500_000_000, heartbeat_ns=2_000_000_000)
    )
    a, b = RawClient(handle.address), RawClient(handle.address, timeout=3.0)
    try:
        a.handshake("r1")
        a.recv()
        b.handshake("r2")
        b.recv()
        a.send(Request())
        assert isinstance(a.recv(), Granted)
        b.send(Request())
        b.send(Ping(1))  # b stays alive; a says nothing more
        assert isinstance(b.recv(), Pong)
        msg = b.recv()  # within the 0.5 s timeslice (plus scheduling)
        assert isinstance(msg, Granted)
        told = a.recv()  # the holder was told that r2 waits
        assert isinstance(told, Queued) and told.waiting == 1
        revoked = a.recv()
        assert isinstance(revoked, Revoked)
        assert handle.stats()["revocations"] == 1
    finally:
        a.close()
        b.close()
        handle.close()


def test_forged_malformed_oversized_and_replayed_frames_are_dropped(
    leader: LeaderHandle, teams: list[Team]
) -> None:
    # Garbage and an oversized length prefix.
    for junk in [b"\x00\x00\x00\x05hello", b"\xff\xff\xff\xff" + b"x" * 100]:
        c = RawClient(leader.address)
        c.read_frame()  # the greeting
        c.sock.sendall(junk)
        assert c.closed_by_peer()
        c.close()
    # A Join MACed with the wrong key.
    c = RawClient(leader.address)
    c.handshake("r1", key=TeamKey(b"W" * 32))
    assert c.closed_by_peer()
    c.close()
    # A replayed frame within an authenticated connection.
    c = RawClient(leader.address)
    c.handshake("r3")
    c.recv()
    frame = c.send(Ping(7))
    assert isinstance(c.recv(), Pong)
    c.sock.sendall(frame)
    assert c.closed_by_peer()
    c.close()
    stats = leader.stats()
    assert stats["dropped_malformed"] >= 1
    assert stats["dropped_oversized"] == 1
    assert stats["dropped_unauthenticated"] == 1
    assert stats["dropped_replayed"] == 1
    # ...and the leader keeps serving.
    team = join(leader.address, "r2", KEY)
    teams.append(team)
    assert team.mode == "coordinated"


def test_wrong_key_or_unknown_robot_is_refused_at_join(leader: LeaderHandle) -> None:
    with pytest.raises(RefusedError, match="authentication failed"):
        join(leader.address, "r1", TeamKey(b"W" * 32))
    with pytest.raises(RefusedError, match="not in the team"):
        join(leader.address, "stranger", KEY)


def test_forged_ls_datagrams_are_counted_and_valid_ones_delivered(teams: list[Team]) -> None:
    rx = join(None, "sink", KEY)
    teams.append(rx)
    inbox = rx.listen("127.0.0.1:0")
    dest = f"127.0.0.1:{inbox.address[1]}"
    forger = join(None, "r1", TeamKey(b"F" * 32))
    teams.append(forger)
    forger.latency_sensitive("perception", dest, deadline_ms=33).send(b"forged")
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.sendto(b"\x00\x05garbage", ("127.0.0.1", inbox.address[1]))  # shorter than a MAC
    good = join(None, "r2", KEY)
    teams.append(good)
    good.latency_sensitive("perception", dest, deadline_ms=33).send(b"genuine")
    msg = inbox.recv(timeout=5)
    assert (msg.robot, msg.payload) == ("r2", b"genuine")
    assert msg.latency_ns >= 0
    stats = inbox.stats()
    assert stats["dropped_unauthenticated"] == 1
    assert stats["dropped_malformed"] == 1


def test_a_burst_of_ls_datagrams_waits_in_the_inbox_socket_instead_of_being_dropped(
    teams: list[Team],
) -> None:
    # 400 datagrams of 1 KB take ~1 MB of kernel buffer on loopback (about 2.3 KB of
    # accounting each), several times a default UDP receive buffer (212,992 bytes: 92
    # of them survived there). The inbox asks for ReceiverLimits.ls_socket_buffer_bytes
    # (4 MiB), so a receiving thread that stalls through the burst loses none of it.
    rx = join(None, "sink", KEY)
    teams.append(rx)
    inbox = rx.listen("127.0.0.1:0")
    tx = join(None, "r1", KEY)
    teams.append(tx)
    ch = tx.latency_sensitive("perception", f"127.0.0.1:{inbox.address[1]}", deadline_ms=2000)
    n = 400
    for _ in range(n):
        assert ch.send(bytes(1000)) == "sent"
    got = []
    with contextlib.suppress(TimeoutError):
        for _ in range(n):
            got.append(inbox.recv(timeout=2).seq)
    assert got == list(range(1, n + 1))


def test_fallback_after_fallback_ns_logged_once_then_rejoin(
    leader: LeaderHandle, teams: list[Team], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="coorp")
    fallback_ns = 300_000_000
    team = join(leader.address, "r1", KEY, settings=TeamSettings(fallback_ns=fallback_ns))
    teams.append(team)
    assert team.mode == "coordinated"
    leader.stop()
    # The switch is timed by the link's own clock from the last frame it heard (no
    # wall-clock bound here: a loaded machine may run the timer late).
    assert team.wait_mode("uncoordinated", timeout_s=30.0)
    link = team.asyncio_team.link
    assert link is not None and link.counters["fallbacks"] == 1
    assert link.fell_back_after_ns is not None and link.fell_back_after_ns >= fallback_ns
    # Several reconnect attempts fail meanwhile; the outage is logged once.
    assert not team.wait_mode("coordinated", timeout_s=0.6)
    leader.start()
    assert team.wait_mode("coordinated", timeout_s=5.0)
    text = [r.getMessage() for r in caplog.records]
    assert sum("unreachable" in t for t in text) == 1
    assert sum("rejoined" in t for t in text) == 1


def test_leader_restart_and_data_reconnect_lose_no_byte(
    leader: LeaderHandle, teams: list[Team]
) -> None:
    sink = join(None, "sink", KEY)
    teams.append(sink)
    inbox = sink.listen("127.0.0.1:0")
    proxy = ThrottledProxy(("127.0.0.1", inbox.address[1]), rate=20e6)
    try:
        team = join(leader.address, "r1", KEY, settings=TeamSettings(fallback_ns=300_000_000))
        teams.append(team)
        data = os.urandom(12_000_000)
        result: list[BulkReceipt] = []
        sender = threading.Thread(
            target=lambda: result.append(
                team.bulk("params", proxy.address).send(data, timeout_s=60)
            )
        )
        sender.start()
        # Mid-transfer: the leader goes away and comes back...
        assert proxy.wait(proxy.reached(3_000_000), timeout=20)
        leader.stop()
        assert team.wait_mode("uncoordinated", timeout_s=2.0)
        leader.start()
        assert team.wait_mode("coordinated", timeout_s=5.0)
        # ...and the data connection breaks.
        assert proxy.wait(proxy.reached(7_000_000), timeout=20)
        proxy.cut()
        msg = inbox.recv(timeout=60)
        sender.join(timeout=60)
        assert digest(msg.payload) == digest(data)
        assert result and result[0].reconnects >= 1
        assert inbox.stats()["bulk_resumed"] >= 1
        assert inbox.stats()["bulk_messages"] == 1
        # The restarted leader granted the resumed transfer and got it back (the
        # release goes out after the receipt: wait until the leader handled it).
        assert team.sync_leader()
        stats = leader.stats()
        assert stats["grants"] >= 1 and stats["releases"] >= 1
    finally:
        proxy.close()


def test_local_preemption_pauses_bulk_around_ls_windows(teams: list[Team]) -> None:
    sink = join(None, "sink", KEY)
    teams.append(sink)
    inbox = sink.listen("127.0.0.1:0")
    proxy = ThrottledProxy(("127.0.0.1", inbox.address[1]), rate=8e6)
    try:
        team = join(None, "r1", KEY)
        teams.append(team)
        ls = team.latency_sensitive(
            "perception", f"127.0.0.1:{inbox.address[1]}", deadline_ms=10, period_ms=10
        )
        stop = threading.Event()
        learnt = threading.Event()

        def periodic() -> None:
            # The LS workload itself: a 10 ms loop (pacing the workload, not syncing).
            nxt = time.monotonic()
            for i in range(1000):
                if stop.is_set():
                    return
                ls.send(b"p" * 1000)
                if i == 10:  # enough sends for the time model to predict windows
                    learnt.set()
                nxt += 0.01
                stop.wait(max(0.0, nxt - time.monotonic()))

        lt = threading.Thread(target=periodic)
        lt.start()
        assert learnt.wait(timeout=10)
        data = os.urandom(1_000_000)
        try:
            receipt = team.bulk("params", proxy.address).send(data, timeout_s=60)
        finally:
            stop.set()
            lt.join(timeout=5)
        assert receipt.preemptions > 0 and receipt.preempted_ns > 0
        for _ in range(10_000):  # LS messages first, then the bulk one
            msg = inbox.recv(timeout=10)
            if msg.kind == "bulk":
                break
        assert msg.kind == "bulk" and digest(msg.payload) == digest(data)
    finally:
        proxy.close()


@pytest.mark.parametrize("one_at_a_time", [True, False])
def test_a_robots_bulk_streams_take_turns_under_one_permit(
    leader: LeaderHandle, teams: list[Team], one_at_a_time: bool
) -> None:
    # Two messages of one robot to two receivers, asked for together. Taking turns,
    # the second writes nothing until the first's last byte is written (its turn is
    # handed on then, while those bytes drain), and the robot holds one permit for
    # both; without turns both write at once (so this can tell them apart).
    sink = join(None, "sink", KEY)
    teams.append(sink)
    inbox = sink.listen("127.0.0.1:0")
    proxies = [ThrottledProxy(("127.0.0.1", inbox.address[1]), rate=8e6) for _ in range(2)]
    try:
        settings = TeamSettings(bulk=BulkSettings(one_message_at_a_time=one_at_a_time))
        team = join(leader.address, "r1", KEY, settings=settings)
        teams.append(team)
        assert team.mode == "coordinated"
        payloads = [os.urandom(4_000_000), os.urandom(4_000_001)]
        receipts: list[BulkReceipt] = []
        streams = [team.bulk(f"part{i}", p.address) for i, p in enumerate(proxies)]
        threads = [
            threading.Thread(
                target=lambda s=s, d=d: receipts.append(s.send(d, timeout_s=60))  # type: ignore[misc]
            )
            for s, d in zip(streams, payloads, strict=True)
        ]
        for t in threads:
            t.start()
        got = sorted(digest(inbox.recv(timeout=60).payload) for _ in payloads)
        for t in threads:
            t.join(timeout=60)
        assert got == sorted(digest(d) for d in payloads)
        assert len(receipts) == 2
        first, second = sorted(receipts, key=lambda r: r.finished_ns)
        assert first.first_write_ns is not None and second.first_write_ns is not None
        assert first.last_write_ns is not None
        if one_at_a_time:
            assert second.first_write_ns >= first.last_write_ns
            assert second.permit_wait_ns > 0
            assert team.sync_leader()
            stats = leader.stats()
            assert stats["grants"] == 1 and stats["releases"] == 1
        else:
            assert second.first_write_ns < first.finished_ns
    finally:
        for p in proxies:
            p.close()


def test_a_closed_stream_frees_its_connection_at_the_receiver(teams: list[Team]) -> None:
    """A stream used for one message and closed gives its connection back: the
    receiver's inbox holds every open connection against its bound, so a sender that
    opened a fresh stream per message and never closed them (the learn roles did)
    filled it after a few hundred messages and the next one was refused."""
    rx = join(None, "sink", KEY)
    teams.append(rx)
    inbox = rx.listen("127.0.0.1:0")
    dest = f"127.0.0.1:{inbox.address[1]}"
    tx = join(None, "r1", KEY)
    teams.append(tx)
    kept = tx.bulk("kept-open", dest)
    kept.send(b"k" * 20_000, timeout_s=10)
    for i in range(3):
        stream = tx.bulk(f"one-message-{i}", dest)
        stream.send(bytes([i]) * 20_000, timeout_s=10)
        stream.close()
    for _ in range(4):
        inbox.recv(timeout=5)
    # The receiver sees each close as an EOF on its own loop: wait for that (bounded),
    # the condition being the event waited for.
    ev = threading.Event()
    for _ in range(200):
        if inbox.stats()["bulk_open_connections"] <= 1:
            break
        ev.wait(0.05)
    assert inbox.stats()["bulk_open_connections"] == 1  # the stream left open, only
    with pytest.raises(Exception, match="closed"):
        stream.send(b"again", timeout_s=1)


def _capture_lo() -> socket.socket | None:
    """A packet socket seeing every IPv4 packet on ``lo`` (None without CAP_NET_RAW)."""
    try:
        s = socket.socket(socket.AF_PACKET, socket.SOCK_DGRAM, socket.htons(0x0800))
    except (PermissionError, AttributeError):
        return None
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16 << 20)
    s.bind(("lo", 0x0800))
    s.setblocking(False)
    return s


def _tcp_tos(cap: socket.socket, port: int) -> tuple[set[int], set[int]]:
    """TOS bytes of the pure acks sent from ``port`` and of the data segments sent to
    it, among the packets ``cap`` holds (on ``lo`` a packet may show as it left and as
    it arrived: sets of values, not counts)."""
    acks: set[int] = set()
    data: set[int] = set()
    for _ in range(1_000_000):  # bounded: what the socket buffered
        try:
            pkt = cap.recv(70_000)
        except BlockingIOError:
            break
        seg = tcp_segment(pkt)
        if seg is None:
            continue
        sport, dport, payload, pure_ack = seg
        if sport == port and pure_ack:
            acks.add(pkt[1])
        elif dport == port and payload > 0:
            data.add(pkt[1])
    return acks, data


@pytest.mark.parametrize("in_video", [True, False])
def test_an_inbox_sends_its_bulk_acks_in_ac_vi(teams: list[Team], in_video: bool) -> None:
    """The simulator's coorp sends the team's acks in AC_VI (CoorpPolicy.ack_ac); so does
    the inbox: every pure ack it sends for a bulk message carries DSCP CS4 (TOS 0x80),
    while the data keeps DSCP CS0. ``acks_in_video=False``: the acks keep CS0 too."""
    cap = _capture_lo()
    if cap is None:
        pytest.skip("needs CAP_NET_RAW for a packet socket on lo")
    try:
        limits = ReceiverLimits(acks_in_video=in_video)
        sink = join(None, "sink", KEY, settings=TeamSettings(receiver=limits))
        teams.append(sink)
        inbox = sink.listen("127.0.0.1:0")
        port = inbox.address[1]
        sender = join(None, "r1", KEY)
        teams.append(sender)
        data = os.urandom(3_000_000)
        sender.bulk("params", f"127.0.0.1:{port}").send(data, timeout_s=30)
        assert digest(inbox.recv(timeout=30).payload) == digest(data)
        acks, sent = _tcp_tos(cap, port)
    finally:
        cap.close()
    assert sent == {0}  # the data: CS0, AC_BE
    assert acks == ({0x80} if in_video else {0}), acks  # CS4 << 2, AC_VI; or CS0
