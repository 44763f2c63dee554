"""In-memory tests of runtime pieces with injected time and fake sockets."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path

import pytest

from coorp import ScenarioError, UsageError
from coorp.control import CompletionTimeTable, Gate, Interval
from coorp.runtime import (
    TeamKey,
    ajoin,
    join,
    load_team_config,
    mark_socket,
    resolve_team_key,
    team_settings,
)
from coorp.runtime.inbox._receiver import LsDecoder
from coorp.runtime.robot._latency import LatencySensitiveChannel
from coorp.runtime.robot._preempt import DrainTracker, queueing_ns, within_budget
from coorp.runtime.wire._marking import Marking

KEY = TeamKey(b"u" * 32)


class Clock:
    def __init__(self) -> None:
        self.t = 1_000_000_000

    def __call__(self) -> int:
        return self.t


class FakeSocket:
    """Accepts datagrams until ``full``; then raises EAGAIN like a full socket buffer."""

    def __init__(self) -> None:
        self.full = False
        self.sent: list[bytes] = []

    def sendmsg(self, bufs: list[bytes]) -> int:
        if self.full:
            raise BlockingIOError
        data = b"".join(bufs)
        self.sent.append(data)
        return len(data)

    def fileno(self) -> int:
        return -1

    def close(self) -> None:
        pass


SESSION = 77


def channel(clock: Clock, sock: FakeSocket, armed: list[int]) -> LatencySensitiveChannel:
    ch = LatencySensitiveChannel(
        name="perception",
        robot="r1",
        dest=("127.0.0.1", 1),
        sock=sock,  # type: ignore[arg-type]
        marking=Marking("ls", 48, 262, 6),
        period_ns=33_300_000,
        deadline_ns=33_000_000,
        observe=lambda f: 0,
        clock=clock,
        arm_writer=lambda ch, deadline: armed.append(deadline),
    )
    ch.set_session(SESSION, "sink", KEY.mac("r1", "sink"))
    armed.clear()
    return ch


def payloads(sock: FakeSocket) -> list[bytes]:
    dec = LsDecoder(KEY, "sink", clock=lambda: 0, max_age_ns=1 << 62)
    dec._install_session("r1", "perception", SESSION, 0)
    return [bytes(dec.decode(d, "x").payload) for d in sock.sent]


def test_ls_sends_at_once_when_the_socket_takes_it() -> None:
    clock, sock, armed = Clock(), FakeSocket(), []
    ch = channel(clock, sock, armed)
    assert ch.send(b"a") == "sent"
    assert payloads(sock) == [b"a"] and armed == []


def test_ls_keep_last_newer_message_supersedes_parked_one() -> None:
    clock, sock, armed = Clock(), FakeSocket(), []
    ch = channel(clock, sock, armed)
    sock.full = True
    assert ch.send(b"old") == "parked"
    clock.t += 1_000_000
    assert ch.send(b"new") == "parked"
    sock.full = False
    assert ch.flush()
    assert payloads(sock) == [b"new"]
    s = ch.stats
    assert (s.sent, s.superseded, s.expired) == (1, 1, 0)
    assert len(armed) == 2  # the event loop was asked to watch the socket


def test_ls_message_past_deadline_is_dropped_never_sent_late() -> None:
    clock, sock, armed = Clock(), FakeSocket(), []
    ch = channel(clock, sock, armed)
    sock.full = True
    ch.send(b"late")
    assert armed == [clock.t + 33_000_000]
    clock.t += 33_000_001
    sock.full = False
    assert ch.flush()
    assert sock.sent == []
    assert ch.stats.expired == 1


def test_ls_oversized_payload_is_a_usage_error() -> None:
    ch = channel(Clock(), FakeSocket(), [])
    with pytest.raises(UsageError):
        ch.send(bytes(70_000))


class Window:
    def __init__(self) -> None:
        self.window: Interval | None = None

    def next_window(self, now_ns: int) -> Interval | None:
        return self.window


def test_drain_tracker_turns_outstanding_bytes_into_ctt_samples() -> None:
    outq = [0]
    gate = Gate(Window(), CompletionTimeTable(default_ns=1_000_000))
    tr = DrainTracker(gate, lambda: outq[0], bucket_bytes=1000)
    assert tr.depth() == 0
    tr.on_write(1000, 0, tr.depth())
    outq[0] = 1000
    assert tr.depth() == 1
    tr.on_write(1000, 10, tr.depth())
    outq[0] = 2000
    tr.poll(50)  # nothing acknowledged yet
    assert gate.ctt.samples(0) == ()
    outq[0] = 1000  # first chunk acknowledged
    tr.poll(400)
    assert gate.ctt.samples(0) == (400,)
    outq[0] = 0
    tr.poll(900)
    assert gate.ctt.samples(1) == (890,)
    assert tr.tracking == 0


def test_drain_tracker_untracked_writes_still_count_for_acknowledgement() -> None:
    outq = [0]
    gate = Gate(Window(), CompletionTimeTable())
    tr = DrainTracker(gate, lambda: outq[0], bucket_bytes=1000)
    tr.on_write(5000, 0, None)  # unpaced bytes: no sample, but they are ahead
    tr.on_write(1000, 1, 5)
    outq[0] = 1000
    tr.poll(100)
    assert gate.ctt.samples(5) == ()
    outq[0] = 0
    tr.poll(200)
    assert gate.ctt.samples(5) == (199,)
    tr.on_write(1000, 300, 0)
    tr.reset()
    assert tr.tracking == 0 and gate.pending == 0


def test_a_confirmed_message_leaves_no_chunk_to_complete_with_the_next_one() -> None:
    # The receiver confirmed the message while SIOCOUTQ still showed the last chunk in
    # flight. Without settle() it completed when the next message's bytes were acked,
    # seconds later, and that idle time became a CTT sample that held the stream.
    outq = [0]
    gate = Gate(Window(), CompletionTimeTable(percentile=100.0))
    tr = DrainTracker(gate, lambda: outq[0], bucket_bytes=1000)
    tr.on_write(1000, 0, 0)
    tr.on_write(1000, 5, 1)
    outq[0] = 1000  # the first chunk is acknowledged, the second not yet
    tr.settle(100)
    assert gate.ctt.samples(0) == (100,)
    assert tr.tracking == 0 and gate.pending == 0
    outq[0] = 0
    tr.on_write(1000, 3_000_000_000, 0)  # the next message, 3 s later
    tr.poll(3_000_000_050)
    assert gate.ctt.samples(1) == ()  # no 3 s sample for the settled chunk
    assert gate.ctt.samples(0) == (100, 50)


def _table(latency_ns: int, chunk_ns: int, depths: int = 40) -> CompletionTimeTable:
    """Completion times of a path with a fixed latency (its own transmission included)
    and one chunk's time more per chunk ahead."""
    ctt = CompletionTimeTable(default_ns=1_000_000)
    for d in range(depths):
        for _ in range(20):
            ctt.record(d, latency_ns + d * chunk_ns)
    return ctt


def _deepest(ctt: CompletionTimeTable, chunk_ns: int, budget_ns: int = 6_000_000) -> int:
    """The deepest depth at which a chunk may still be written."""
    return max(d for d in range(40) if within_budget(ctt, d, 0, budget_ns, 1_000_000, chunk_ns))


def test_the_in_flight_budget_bounds_queueing_not_the_paths_latency() -> None:
    # A wire (50 Mbit/s, 16 KB chunks: 2.6 ms each, no latency of its own): a packet
    # arriving behind the holder's bytes waits (depth + 1) chunks; with 6 ms at most 2.
    wire = _table(2_600_000, 2_600_000)
    assert _deepest(wire, chunk_ns=2_600_000) == 1
    # WiFi: 0.3 ms of airtime per chunk, but 5.5 ms before any acknowledgement is back
    # (channel access, the ack's way through the access point). What queues behind the
    # holder's bytes waits only for their airtime: 19 chunks ahead keep that under 6 ms,
    # whatever the path's own latency (chunk_ns only prices unmeasured depths).
    air = _table(5_500_000, 300_000)
    assert _deepest(air, chunk_ns=300_000) == _deepest(air, chunk_ns=5_500_000) == 19
    assert within_budget(air, 35, 0, None, 5_500_000)  # no budget: anything goes


def _jittery(chunk_ns: int, depths: int) -> CompletionTimeTable:
    """Completion times whose access time varies 1-6 ms alike at every depth (a WiFi
    channel), plus ``chunk_ns`` per chunk ahead."""
    ctt = CompletionTimeTable(default_ns=1_000_000)
    for d in range(depths):
        for i in range(40):
            ctt.record(d, 1_000_000 + (i * 5_000_000) // 39 + d * chunk_ns)
    return ctt


def test_access_jitter_alike_at_every_depth_is_not_queueing() -> None:
    air = _jittery(300_000, 40)
    # The same percentile on both sides: the 5 ms spread cancels, n chunks cost n x 0.3 ms.
    assert queueing_ns(air, 10, 0, 1_000_000, 300_000) == 3_000_000
    assert _deepest(air, chunk_ns=300_000) == 19
    # The 95th percentile less the *shortest* depth-0 completion (the rule before) counts
    # the spread as queueing: 4.75 ms with nothing queued at all, room for 4 chunks.
    old = [d for d in range(40) if air.query(d + 1) - 1_000_000 <= 6_000_000]
    assert max(old) == 3


def test_unmeasured_depths_cost_a_full_chunk_each_beyond_the_deepest_measured() -> None:
    air = _jittery(300_000, 3)  # depths 0, 1 and 2 measured
    assert queueing_ns(air, 2, 0, 1_000_000, 2_500_000) == 600_000
    # Depth 5 is 3 chunks beyond the deepest measured one: each priced at the measured
    # drain time of a chunk, so the stream explores a chunk or two deeper at a time.
    assert queueing_ns(air, 5, 0, 1_000_000, 2_500_000) == 600_000 + 3 * 2_500_000
    assert _deepest(air, chunk_ns=2_500_000) == 3  # 0.6 ms + 2 x 2.5 ms at depth 4
    only_zero = _jittery(300_000, 1)
    assert queueing_ns(only_zero, 2, 0, 1_000_000, 2_500_000) == 5_000_000
    assert within_budget(only_zero, 1, 0, 6_000_000, 1_000_000, 2_500_000)
    assert not within_budget(only_zero, 2, 0, 6_000_000, 1_000_000, 2_500_000)
    # No drain time measured yet: the rule before (the table's answer less base_ns),
    # never base_ns per chunk (a token bucket's burst acknowledges a lone chunk at once).
    assert queueing_ns(only_zero, 2, 0, 100_000, 0) == only_zero.query(2) - 100_000
    assert not within_budget(only_zero, 1, 0, 6_000_000, 100_000, 0)
    # A depth with a few samples is not measured yet: one chunk that met a stall (19 ms,
    # a descheduled receiver) would otherwise be its 95th percentile and hold the stream
    # at one chunk in flight until it aged out (2 s).
    stalled = _jittery(300_000, 1)
    for d in (1, 2, 3):
        for _ in range(3):
            stalled.record(d, 19_000_000)
    assert queueing_ns(stalled, 3, 0, 1_000_000, 1_000_000) == 3_000_000
    assert _deepest(stalled, chunk_ns=1_000_000) == 5
    for _ in range(17):  # measured: 20 samples, and they say 19 ms at depth 2
        stalled.record(2, 19_000_000)
    expected = 19_000_000 - stalled.query(0) + 1_000_000
    assert queueing_ns(stalled, 3, 0, 1_000_000, 1_000_000) == expected
    assert _deepest(stalled, chunk_ns=1_000_000) == 0
    # Nothing measured at depth 0 (aged out): the table's own answer less base_ns.
    empty = CompletionTimeTable(default_ns=1_000_000)
    empty.record(3, 9_000_000)
    assert queueing_ns(empty, 3, 0, 2_000_000, 300_000) == 7_000_000


def test_the_paths_latency_is_the_fastest_chunk_with_nothing_ahead() -> None:
    outq = [0]
    gate = Gate(Window(), CompletionTimeTable(default_ns=1_000_000))
    tr = DrainTracker(gate, lambda: outq[0], bucket_bytes=1000)
    assert tr.base_ns == 0  # nothing measured yet
    tr.on_write(1000, 0, 0)
    tr.on_write(1000, 10, 1)  # behind the first: its time is not the path's latency
    outq[0] = 0  # both acknowledged
    tr.poll(5000)
    assert tr.base_ns == 5000 and gate.ctt.samples(1) == (4990,)
    for start, done in ((6000, 9000), (10_000, 18_000)):
        tr.on_write(1000, start, 0)
        tr.poll(done)
    assert tr.base_ns == 3000  # the shortest of the recent ones


def test_the_drain_rate_prices_a_chunk_at_its_share_of_the_bottleneck() -> None:
    outq = [0]
    gate = Gate(Window(), CompletionTimeTable(default_ns=1_000_000))
    tr = DrainTracker(gate, lambda: outq[0], bucket_bytes=1000)
    assert tr.chunk_ns == 0
    tr.on_write(1000, 0, 0)  # a chunk alone: 3 ms before its acknowledgement
    outq[0] = 1000
    tr.poll(0)
    outq[0] = 0
    tr.poll(3_000_000)
    assert tr.base_ns == 3_000_000 and tr.chunk_ns == 0  # a window is 16 chunks
    # 40 chunks in flight, acknowledged 4 at a time every 1 ms: 0.25 ms a chunk, though
    # each took milliseconds from write to acknowledgement.
    for i in range(40):
        tr.on_write(1000, 10_000_000, i)
    outq[0] = 40_000
    tr.poll(10_000_000)
    for k in range(1, 11):
        outq[0] = 40_000 - 4000 * k
        tr.poll(10_000_000 + k * 1_000_000)
    assert tr.chunk_ns == 250_000
    # Nothing in flight is no drain: an idle second does not slow the estimate.
    tr.poll(1_000_000_000)
    tr.on_write(16_000, 1_000_000_000, 0)
    outq[0] = 16_000
    tr.poll(1_000_000_000)
    outq[0] = 0
    tr.poll(1_008_000_000)
    assert tr.chunk_ns == 250_000


def test_marking_in_effect_is_read_back() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        m = mark_socket(s, "ls")
        assert m.dscp == 48 and m.user_priority == 6 and m.access_category == "AC_VO"
        assert s.getsockopt(socket.IPPROTO_IP, socket.IP_TOS) == 0xC0
        if m.priority is not None:  # root / CAP_NET_ADMIN
            assert s.getsockopt(socket.SOL_SOCKET, socket.SO_PRIORITY) == 262
            assert "SO_PRIORITY 262" in m.describe()
        else:
            assert "DSCP CS6 only" in m.describe()
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        m = mark_socket(s, "bh")
        assert m.dscp == 0 and m.user_priority == 0 and m.access_category == "AC_BE"


def write_team(tmp_path: Path, body: str) -> Path:
    p = tmp_path / "team.toml"
    p.write_text(body)
    return p


def test_team_file_loads_and_key_resolves(tmp_path: Path) -> None:
    (tmp_path / "k.hex").write_text("ab" * 32)
    (tmp_path / "k.hex").chmod(0o600)
    p = write_team(
        tmp_path,
        '[team]\nrobots = ["a", "b"]\nkey_file = "k.hex"\n'
        '[leader]\ntimeslice_ms = 2500\n[agent]\nleader = "10.0.0.1:7400"\n',
    )
    cfg = load_team_config(p)
    assert cfg.leader.timeslice_ns == 2_500_000_000
    assert cfg.agent.leader == "10.0.0.1:7400"
    assert isinstance(resolve_team_key(cfg, p), TeamKey)


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ('[team]\nrobots = ["a", "a"]\n', "team.robots"),
        ('[team]\nrobots = ["a"]\n[leader]\nlimit = 0\n', "leader.limit"),
        ('[team]\nrobots = ["a"]\n[leader]\nlisten = "nohost"\n', "leader.listen"),
        ('[team]\nrobots = ["a"]\n[leader]\ntimeslice = 5\n', "leader"),
        ('[team]\nrobots = ["a"]\n[agent]\nfallback_ms = 5\n', "agent.fallback_ms"),
        ('[team]\nrobots = ["a"]\n[agent]\ninflight_budget_ms = -1\n', "agent.inflight_budget_ms"),
        ('[team]\nrobots = ["a"]\n[leader]\ndownlink = ["b"]\n', "leader.downlink"),
        ('[team]\nrobots = ["a"]\n[agent]\ngate_completion = "air"\n', "agent.gate_completion"),
        (
            '[team]\nrobots = ["a"]\n[agent]\ninbox_ack_category = "VI"\n',
            "agent.inbox_ack_category",
        ),
    ],
)
def test_bad_team_files_name_the_field(tmp_path: Path, body: str, field: str) -> None:
    with pytest.raises(ScenarioError) as err:
        load_team_config(write_team(tmp_path, body))
    assert field in str(err.value)


def test_the_in_flight_budget_comes_from_the_team_file(tmp_path: Path) -> None:
    base = '[team]\nrobots = ["a"]\n'
    default = team_settings(load_team_config(write_team(tmp_path, base)))
    assert default.bulk.inflight_budget_ns == 6_000_000
    off = team_settings(
        load_team_config(write_team(tmp_path, base + "[agent]\ninflight_budget_ms = 0\n"))
    )
    assert off.bulk.inflight_budget_ns is None
    two = team_settings(
        load_team_config(write_team(tmp_path, base + "[agent]\ninflight_budget_ms = 2.5\n"))
    )
    assert two.bulk.inflight_budget_ns == 2_500_000


def test_what_the_gate_measures_comes_from_the_team_file(tmp_path: Path) -> None:
    base = '[team]\nrobots = ["a"]\n'
    assert team_settings(load_team_config(write_team(tmp_path, base))).bulk.gate_departure
    ack = base + '[agent]\ngate_completion = "ack"\n'
    assert not team_settings(load_team_config(write_team(tmp_path, ack))).bulk.gate_departure


def test_the_inbox_acks_category_comes_from_the_team_file(tmp_path: Path) -> None:
    base = '[team]\nrobots = ["a"]\n'
    assert team_settings(load_team_config(write_team(tmp_path, base))).receiver.acks_in_video
    be = base + '[agent]\ninbox_ack_category = "AC_BE"\n'
    assert not team_settings(load_team_config(write_team(tmp_path, be))).receiver.acks_in_video


def test_missing_key_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("COORP_TEAM_KEY", raising=False)
    cfg = load_team_config(write_team(tmp_path, '[team]\nrobots = ["a"]\n'))
    with pytest.raises(ScenarioError, match="COORP_TEAM_KEY"):
        resolve_team_key(cfg, tmp_path / "team.toml")
    monkeypatch.setenv("COORP_TEAM_KEY", "cd" * 32)
    assert isinstance(resolve_team_key(cfg, tmp_path / "team.toml"), TeamKey)


def test_asyncio_api_end_to_end() -> None:
    async def main() -> None:
        rx = await ajoin(None, "rx", KEY)
        tx = await ajoin(None, "tx", KEY)
        try:
            inbox = await rx.listen("127.0.0.1:0")
            dest = f"127.0.0.1:{inbox.address[1]}"
            ch = tx.latency_sensitive("cmd", dest, deadline_ms=10)
            # A 10 ms deadline is shorter than opening the session may take on a loaded
            # machine (a message parked longer is dropped): wait for it first.
            assert await tx.ls_ready("cmd", 5)
            ch.send(b"go")
            msg = await inbox.recv(timeout_s=5)
            assert (msg.kind, msg.channel, msg.payload) == ("ls", "cmd", b"go")
            receipt = await tx.bulk("params", dest).send(b"z" * 3_000_000, timeout_s=10)
            assert receipt.nbytes == 3_000_000 and receipt.first_write_ns is not None
            async for m in inbox:
                assert (m.kind, m.seq, bytes(m.payload)) == ("bulk", 1, b"z" * 3_000_000)
                break
            assert tx.mode == "no leader"
        finally:
            await tx.close()
            await rx.close()

    asyncio.run(main())


def test_async_inbox_overflow_drops_oldest_ls_never_bulk() -> None:
    from coorp.runtime.inbox._inbox import _Mailbox
    from coorp.runtime.inbox._receiver import Message

    def m(kind: str, seq: int) -> Message:
        return Message(kind, "r1", "c", seq, b"", 0, 0, 0, None, "p")  # type: ignore[arg-type]

    async def main() -> list[tuple[str, int]]:
        box = _Mailbox(2)
        await box.put_bulk(m("bulk", 1))
        for seq in (1, 2, 3):
            box.put_ls(m("ls", seq))  # the third pushes out LS 1, not bulk 1
        assert box.ls_overflow == 1
        await box.put_bulk(m("bulk", 2))
        blocked = asyncio.create_task(box.put_bulk(m("bulk", 3)))  # no room: waits
        await asyncio.sleep(0)
        assert not blocked.done()
        out = [await box.get()]  # frees room for bulk 3
        await asyncio.wait_for(blocked, 1)
        out += [await box.get() for _ in range(4)]
        return [(x.kind, x.seq) for x in out]

    assert asyncio.run(main()) == [("bulk", 1), ("ls", 2), ("ls", 3), ("bulk", 2), ("bulk", 3)]


def test_messages_confirmed_but_not_taken_are_drained_after_close() -> None:
    # A program that stops (the agent on SIGTERM) must not lose what the senders were
    # already told was delivered: close() stops receiving, drain() hands the rest over.
    async def main() -> list[tuple[str, int, int]]:
        rx = await ajoin(None, "rx", KEY)
        tx = await ajoin(None, "tx", KEY)
        try:
            inbox = await rx.listen("127.0.0.1:0")
            dest = f"127.0.0.1:{inbox.address[1]}"
            stream = tx.bulk("params", dest)
            for size in (1_000, 2_000):
                receipt = await stream.send(b"x" * size, timeout_s=10)
                assert receipt.nbytes == size  # confirmed by the receiver
            await inbox.close()
            await inbox.close()  # idempotent
            drained = [(m.kind, m.seq, len(m.payload)) for m in inbox.drain()]
            assert inbox.drain() == []
            return drained
        finally:
            await tx.close()
            await rx.close()

    assert asyncio.run(main()) == [("bulk", 1, 1_000), ("bulk", 2, 2_000)]


def test_threaded_inbox_drains_confirmed_bulk_messages_after_close() -> None:
    rx = join(None, "rx", KEY)
    tx = join(None, "tx", KEY)
    try:
        inbox = rx.listen("127.0.0.1:0")
        stream = tx.bulk("params", f"127.0.0.1:{inbox.address[1]}")
        for size in (1_000, 2_000):
            assert stream.send(b"y" * size, timeout_s=10).nbytes == size
        inbox.close()
        assert [(m.seq, len(m.payload)) for m in inbox.drain()] == [(1, 1_000), (2, 2_000)]
        assert inbox.drain() == []
    finally:
        tx.close()
        rx.close()


def _measure_return_path(tr: DrainTracker, outq: list[int], t: int, returns_ns: list[int]) -> int:
    """Chunks alone on the path, each acknowledged ``returns_ns[i]`` after it (1000
    bytes at 0.25 ms a chunk) left; then 48 chunks in flight, acknowledged 4 a
    millisecond, so the drain rate is measured. Returns the time reached."""
    for r in returns_ns:
        tr.on_write(1000, t, 0)
        outq[0] = 1000
        tr.poll(t)
        outq[0] = 0
        tr.poll(t + 250_000 + r)
        t += 20_000_000
    for i in range(48):
        tr.on_write(1000, t, i)
    outq[0] = 48_000
    tr.poll(t)
    for k in range(1, 13):
        outq[0] = 48_000 - 4000 * k
        tr.poll(t + k * 1_000_000)
    return t + 20_000_000


def test_the_gate_sees_when_a_chunk_left_not_when_the_receiver_acked_it() -> None:
    # The receiver's acks come 4 ms after the bytes left, in one case of five 9 ms (its
    # reads, a delayed ack, the air back); a chunk behind 4 others leaves after 5 x 0.25
    # ms. The gate's table gets that departure (the simulator's NIC completion): its
    # answer at a depth is the acks' 95th percentile there less theirs with nothing
    # ahead, plus one chunk's drain. The budget's table keeps the acknowledgements.
    outq = [0]
    gate = Gate(Window(), CompletionTimeTable(default_ns=1_000_000, max_age_ns=None))
    tr = DrainTracker(gate, lambda: outq[0], bucket_bytes=1000)
    assert tr.return_ns == 0
    t = _measure_return_path(tr, outq, 0, [4_000_000] * 20 + [9_000_000] * 5)
    assert tr.chunk_ns == 250_000
    for i in range(5):
        tr.on_write(1000, t, i)
    outq[0] = 5000
    tr.poll(t)
    outq[0] = 0
    tr.poll(t + 5 * 250_000 + 9_000_000)
    assert tr.return_ns == 9_000_000  # the 95th percentile alone, less a chunk's drain
    assert gate.ctt.samples(4)[-1] == 5 * 250_000
    assert tr.queueing.samples(4)[-1] == 5 * 250_000 + 9_000_000


def test_acknowledgement_times_reach_the_gate_when_asked_or_before_the_path_is_known() -> None:
    outq = [0]
    ack = Gate(Window(), CompletionTimeTable(default_ns=1_000_000, max_age_ns=None))
    tr = DrainTracker(ack, lambda: outq[0], bucket_bytes=1000, departure=False)
    t = _measure_return_path(tr, outq, 0, [6_000_000] * 25)
    assert tr.return_ns == 0 and ack.ctt.samples(0)[:25] == (6_250_000,) * 25
    # Departure estimates need MEASURED_SAMPLES chunks alone first: until then the
    # gate gets the acknowledgement (a cautious answer, never a guess).
    early = Gate(Window(), CompletionTimeTable(default_ns=1_000_000, max_age_ns=None))
    tr = DrainTracker(early, lambda: outq[0], bucket_bytes=1000)
    for i in range(16):
        tr.on_write(1000, 0, i)
    outq[0] = 16_000
    tr.poll(0)
    outq[0] = 0
    tr.poll(7_000_000)
    assert tr.return_ns == 0 and early.ctt.samples(15) == (7_000_000,)
    del t


def test_a_departure_is_never_before_the_write_nor_out_of_order() -> None:
    outq = [0]
    gate = Gate(Window(), CompletionTimeTable(default_ns=1_000_000, max_age_ns=None))
    tr = DrainTracker(gate, lambda: outq[0], bucket_bytes=1000)
    t = _measure_return_path(tr, outq, 0, [6_000_000] * 25)
    # Acknowledged 1 ms after the write: faster than the typical return path.
    tr.on_write(1000, t, 0)
    outq[0] = 1000
    tr.poll(t)
    outq[0] = 0
    tr.poll(t + 1_000_000)
    assert gate.ctt.samples(0)[-1] == 0  # left when written, not 5 ms before
    assert gate.pending == 0


def test_ls_in_video_is_marked_cs5_and_up_5(tmp_path: Path) -> None:
    """``[agent] ls_category = "AC_VI"``: the LS channels' sockets get DSCP CS5 and
    priority 261 (UP 5, AC_VI; the acks keep CS4), and a category that is neither is
    refused by name."""
    from coorp.runtime import MarkingError

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        m = mark_socket(s, "ls", ls_category="AC_VI")
        assert m.dscp == 40 and m.user_priority == 5 and m.access_category == "AC_VI"
        assert s.getsockopt(socket.IPPROTO_IP, socket.IP_TOS) == 0xA0
        if m.priority is not None:  # root / CAP_NET_ADMIN
            assert s.getsockopt(socket.SOL_SOCKET, socket.SO_PRIORITY) == 261
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        assert mark_socket(s, "bh", ls_category="AC_VI").access_category == "AC_BE"
    with (
        socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s,
        pytest.raises(MarkingError, match="one of AC_VO, AC_VI"),
    ):
        mark_socket(s, "ls", ls_category="AC_BE")  # type: ignore[arg-type]
    base = '[team]\nrobots = ["a"]\n'
    assert team_settings(load_team_config(write_team(tmp_path, base))).ls_category == "AC_VO"
    vi = base + '[agent]\nls_category = "AC_VI"\n'
    assert team_settings(load_team_config(write_team(tmp_path, vi))).ls_category == "AC_VI"
    with pytest.raises(ScenarioError, match="ls_category"):
        load_team_config(write_team(tmp_path, base + '[agent]\nls_category = "VO"\n'))
