"""What one member (or a flood) may cost the others, on loopback: per-member quotas at
the leader and at inboxes, LS session liveness, the anti-replay window and loss counts
through an impaired link, pre-authentication budgets, rate-limited logs, key rules."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from rt_helpers import KEY, LeaderHandle, RawClient
from rt_impair import ImpairedLink

from coorp import ScenarioError
from coorp.runtime import (
    LeaderSettings,
    ReceiverLimits,
    ReplayError,
    Team,
    TeamSettings,
    join,
    load_team_config,
    resolve_team_key,
    write_team_keys,
)
from coorp.runtime._counters import LogLimiter
from coorp.runtime.inbox._lssessions import ReplayWindow, SessionTable
from coorp.runtime.wire._accept import _PREAUTH_HOLD_S, AcceptLoop
from coorp.runtime.wire._format import (
    LsAccept,
    LsOpen,
    Ping,
    Pong,
    Refused,
    Request,
)
from coorp.runtime.wire._quota import MemberQuotas, QuotaSettings

ROBOTS = ["sink", "r1", "r2", "r3"]


def poll(pred: Any, what: str, rounds: int = 100, every_s: float = 0.05) -> None:
    """Wait (bounded) until ``pred()`` holds; the condition is the event waited for."""
    ev = threading.Event()
    for _ in range(rounds):
        if pred():
            return
        ev.wait(every_s)
    raise AssertionError(f"never happened: {what}")


@pytest.fixture
def teams() -> Iterator[list[Team]]:
    made: list[Team] = []
    try:
        yield made
    finally:
        for t in made:
            t.close()


# -- the anti-replay window -------------------------------------------------------------------
@given(st.data())
def test_replay_window_accepts_each_sequence_once_in_any_order(data: st.DataObject) -> None:
    size = data.draw(st.integers(1, 64))
    seqs = data.draw(st.lists(st.integers(1, 200), max_size=300))
    w = ReplayWindow(size)
    seen: set[int] = set()
    for seq in seqs:
        # The model: accepted iff never accepted and not older than the window allows.
        ok = seq not in seen and (not seen or seq > max(seen) - size)
        try:
            w.check(seq)
            w.commit(seq)
            accepted = True
        except ReplayError:
            accepted = False
        assert accepted == ok, (seq, sorted(seen), size)
        if ok:
            seen.add(seq)
            top = max(seen)
            assert w.accepted_above(seq) == sum(1 for s in seen if s > seq)
            assert w.top == top
    assert w.received == len(seen)
    assert w.replayed == len(seqs) - len(seen)


def test_the_session_table_counts_loss_from_the_senders_report() -> None:
    table = SessionTable(per_member=2, window=64)
    s, _ = table.open("r1", "ch", 7, 0, b"p")
    for seq in (1, 2, 4, 3, 7):  # 5 and 6 lost, 3 late
        s.window.check(seq)
        s.window.commit(seq)
    # The sender sent 8 (1..8); 8 is still in flight when its keep-alive comes.
    reported = table.report("r1", "ch", 7, 0, sent=8, last_seq=8)
    assert reported is not None and (reported.lost, reported.window.reordered) == (3, 1)
    s.window.check(8)
    s.window.commit(8)  # it arrives: no longer counted lost at the next keep-alive
    assert table.report("r1", "ch", 7, 0, sent=9, last_seq=9) is s and s.lost == 3  # 5, 6, 9
    # A report up to 4 counts only what was accepted up to 4.
    assert table.report("r1", "ch", 7, 0, sent=4, last_seq=4) is s and s.lost == 0
    assert table.report("r1", "ch", 8, 0, sent=4, last_seq=4) is None  # not this session
    assert table.flows()["r1/ch"]["received"] == 6


def test_a_member_over_its_session_quota_loses_only_its_own_sessions() -> None:
    table = SessionTable(per_member=3, max_sessions=100)
    gone: list[str] = []
    table.open("r3", "control", 1, 0, b"r3", on_gone=lambda: gone.append("r3"))
    for i in range(3):
        table.open("r1", f"c{i}", 10 + i, 0, b"%d" % i)
    with pytest.raises(Exception, match="ls_sessions_per_member = 3"):
        table.open("r1", "c3", 20, 0, b"x")  # all three in use: refused
    for i in range(3):
        table.detach("r1", f"c{i}", 10 + i)  # their connections ended
    for i in range(3, 4200):  # the eviction attack: thousands of new sessions
        table.open("r1", f"c{i}", 100 + i, 0, b"y")
        table.detach("r1", f"c{i}", 100 + i)
    assert table.get("r3", "control") is not None and gone == []
    assert len(table) == 4 and table.evicted == 4200 - 3


# -- rate-limited logs and member quotas ---------------------------------------------------------
def test_log_limiter_writes_at_most_four_lines_per_kind_in_any_second(
    caplog: pytest.LogCaptureFixture,
) -> None:
    now = [0]
    lim = LogLimiter(logging.getLogger("coorp.runtime.test"), lambda: now[0])
    times: dict[str, list[int]] = {"a": [], "b": []}
    with caplog.at_level(logging.INFO, logger="coorp.runtime.test"):
        for i in range(20_000):  # two kinds, one line every 0.5 ms, 10 s
            now[0] = i * 500_000
            for kind in times:
                before = lim.lines[kind]
                lim.warning(kind, "event %d", i)
                if lim.lines[kind] > before:
                    times[kind].append(now[0])
        now[0] += 2_000_000_000
        lim.flush()
    for kind, ts in times.items():
        assert max(sum(1 for u in ts if t - 1e9 < u <= t) for t in ts) <= 4
        summaries = [r.getMessage() for r in caplog.records if "held back" in r.getMessage()]
        assert sum(int(m.split()[2]) for m in summaries if f"[{kind}]" in m) == lim.held_back[kind]
    assert lim.lines["a"] >= 30  # not silenced: about 3 lines and a summary per second


def test_member_quotas_bound_connections_and_pace_frames() -> None:
    now = [0]
    q = MemberQuotas(QuotaSettings(2, frames_per_s=100.0, frame_burst=10), lambda: now[0])
    q.open("r1")
    q.open("r1")
    with pytest.raises(Exception, match="connections_per_member = 2"):
        q.open("r1")
    q.open("r2")  # another member is not affected
    assert [q.charge("r1") for _ in range(10)] == [0.0] * 10  # the burst
    assert q.charge("r1") == pytest.approx(0.01)  # then one frame per 10 ms
    assert q.charge("r1") == pytest.approx(0.02)
    assert q.charge("r2") == 0.0
    now[0] += 1_000_000_000  # a second later the bucket is full again
    assert q.charge("r1") == 0.0
    q.close("r1")
    q.open("r1")
    assert q.counters["quota_refused"] == 1 and q.counters["throttled_frames"] == 2


# -- the accept loop's triage --------------------------------------------------------------------
def test_unknown_sources_share_a_budget_and_known_members_always_get_in() -> None:
    async def scenario() -> dict[str, Any]:
        import random

        listener = socket.socket()
        waiting = asyncio.Event()
        now = [0]

        async def handler(sock: socket.socket, peer: str, slot: AcceptLoop) -> None:
            async with slot.handshake_deadline(peer):
                if not peer.startswith("10.0.0.1:"):
                    await waiting.wait()  # a flood connection never speaks
                await slot.authenticated("r1")
            await waiting.wait()  # the member stays

        loop = AcceptLoop(
            listener, handler, name="t", logger=logging.getLogger("coorp.runtime.test"),
            max_connections=24, max_preauth_per_source=4, handshake_timeout_s=60,
            preauth_budget=16, member_reserve=4, quotas=QuotaSettings(100),
            clock=lambda: now[0], rng=random.Random(3),
        )  # fmt: skip
        pairs: list[socket.socket] = []

        def batch(peers: list[str]) -> None:
            out = []
            for peer in peers:
                a, b = socket.socketpair()
                pairs.append(b)
                out.append((a, peer))
            loop._triage(out)

        batch(["10.0.0.1:1"])  # r1 authenticates from 10.0.0.1: a known member's host
        for _ in range(3):
            await asyncio.sleep(0)
        peak = 0
        for k in range(12):  # a flood from 150 addresses, 50 per batch, 0.1 s apart
            now[0] += 100_000_000
            batch([f"10.9.0.{i % 150}:{1000 + i}" for i in range(50 * k, 50 * k + 50)])
            peak = max(peak, len(loop._unknown))
            for _ in range(3):
                await asyncio.sleep(0)
        for i in range(12):  # the member's host opens more connections, at the bound
            batch([f"10.0.0.1:{2000 + i}"])
            for _ in range(3):
                await asyncio.sleep(0)
        stats = loop.stats()
        stats["peak_unknown"] = peak
        stats["unknown_now"] = len(loop._unknown)
        await loop.close()
        for s in pairs:
            s.close()
        listener.close()
        return stats

    st_ = asyncio.run(scenario())
    assert st_["peak_unknown"] <= 16  # the budget across all 150 sources
    # Admissions from unknown hosts: the budget at once, then the budget per hold time.
    admitted = st_["accepted"] - 13
    assert admitted <= 16 + 16 / _PREAUTH_HOLD_S * 1.2 + 1
    assert st_["dropped_early"] == 600 - admitted > 0
    assert st_["limited_connections"] == 0  # 4 per source at most: none over it
    assert st_["known_hosts"] == 1
    assert st_["dropped_full"] == 0  # every member connection got in...
    assert st_["open_connections"] == 24 and st_["unknown_now"] == 24 - 13  # ...at the bound
    assert st_["preauth_evicted"] >= admitted - 16


def test_a_distributed_flood_does_not_keep_a_robot_out(teams: list[Team]) -> None:
    """300 connections held open from 100 loopback addresses against a leader with
    room for 48: a robot whose host joined before still joins (coordinated), and the
    robot already joined never falls back."""
    handle = LeaderHandle(
        ROBOTS,
        LeaderSettings(max_connections=48, preauth_budget=16, member_reserve=8,
                       max_preauth_per_source=4, handshake_timeout_s=5.0),
    )  # fmt: skip
    flood: list[socket.socket] = []
    try:
        first = join(handle.address, "r1", KEY)
        teams.append(first)
        assert first.mode == "coordinated"
        port = handle.port
        for i in range(300):
            s = socket.socket()
            s.setblocking(False)
            s.bind((f"127.3.{i % 100 // 250}.{1 + i % 100}", 0))
            with contextlib.suppress(BlockingIOError):
                s.connect(("127.0.0.1", port))
            flood.append(s)
        poll(lambda: handle.stats()["dropped_early"] > 0, "the flood went over the budget")
        second = join(handle.address, "r2", KEY, settings=TeamSettings(join_timeout_s=5))
        teams.append(second)
        assert second.mode == "coordinated"
        st_ = handle.stats()
        assert st_["open_connections"] <= 48 and st_["accept_healthy"] == 1
        assert first.stats()["link"]["fallbacks"] == 0
    finally:
        for s in flood:
            s.close()
        handle.close()


# -- per-member quotas at the leader -----------------------------------------------------------
def test_a_member_over_its_connection_quota_is_refused_and_others_join(
    teams: list[Team],
) -> None:
    handle = LeaderHandle(ROBOTS, LeaderSettings(connections_per_member=3))
    clients: list[RawClient] = []
    try:
        for _ in range(3):
            c = RawClient(handle.address)
            c.handshake("r1", role="observer")
            c.send(Ping(1))
            assert isinstance(c.recv(), Pong)
            clients.append(c)
        extra = RawClient(handle.address)
        clients.append(extra)
        extra.handshake("r1", role="observer")
        reply = extra.recv()
        assert isinstance(reply, Refused) and "connections_per_member = 3" in reply.reason
        other = join(handle.address, "r2", KEY)
        teams.append(other)
        assert other.mode == "coordinated"
        assert handle.stats()["quota_refused"] == 1
    finally:
        for c in clients:
            c.close()
        handle.close()


def test_a_members_request_flood_is_paced_and_others_join(teams: list[Team]) -> None:
    handle = LeaderHandle(
        ROBOTS, LeaderSettings(frames_per_s_per_member=50.0, frame_burst_per_member=20)
    )
    flooder = RawClient(handle.address, timeout=5)
    stop = threading.Event()
    sent = [0]

    def blast() -> None:
        with contextlib.suppress(OSError):
            for _ in range(100_000):
                if stop.is_set():
                    return
                flooder.send(Request())
                sent[0] += 1

    try:
        flooder.handshake("r1")
        flooder.recv()  # Welcome
        t = threading.Thread(target=blast, daemon=True)
        t.start()
        poll(lambda: handle.stats()["throttled_frames"] > 100, "r1's frames are paced")
        other = join(handle.address, "r2", KEY)
        teams.append(other)
        assert other.mode == "coordinated"
        st_ = handle.stats()
        # The leader handled r1's frames at its rate, not at the rate it sent them.
        assert st_["frames"] < sent[0]
        assert st_["throttled_frames"] > 100
    finally:
        stop.set()
        flooder.close()
        handle.close()


# -- inboxes: sessions, liveness, loss --------------------------------------------------------
def open_raw_session(address: str, robot: str, channel: str) -> tuple[RawClient, Any]:
    c = RawClient(address)
    c.handshake(robot, role="ls")
    c.send(LsOpen(channel, 1))
    return c, c.recv()


def test_eviction_attack_on_an_inbox_costs_only_the_attacker(teams: list[Team]) -> None:
    limits = ReceiverLimits(ls_sessions_per_member=4, frames_per_s_per_member=1000.0)
    sink = join(None, "sink", KEY, settings=TeamSettings(receiver=limits))
    r3 = join(None, "r3", KEY)
    teams += [sink, r3]
    inbox = sink.listen("127.0.0.1:0")
    dest = f"127.0.0.1:{inbox.address[1]}"
    ch = r3.latency_sensitive("control", dest, deadline_ms=50)
    assert ch.send(b"before") == "sent" and inbox.recv(timeout=5).payload == b"before"
    held = []
    for i in range(4):  # r1 holds its quota of sessions open...
        c, reply = open_raw_session(dest, "r1", f"held{i}")
        assert isinstance(reply, LsAccept)
        held.append(c)
    c, reply = open_raw_session(dest, "r1", "one-more")  # ...one more is refused
    assert isinstance(reply, Refused) and "ls_sessions_per_member = 4" in reply.reason
    c.close()
    for c in held:
        c.close()
    table = inbox._core.decoder.table
    poll(
        lambda: not any(s.attached for s in table._by_robot.get("r1", {}).values()),
        "the inbox saw r1's connections end",
    )
    for i in range(200):  # then opens and drops sessions as fast as it can
        c, reply = open_raw_session(dest, "r1", f"churn{i}")
        assert isinstance(reply, LsAccept)
        c.close()
    for k in range(20):
        assert ch.send(b"after %d" % k) == "sent"
    got = [inbox.recv(timeout=5).payload for _ in range(20)]
    assert got == [b"after %d" % k for k in range(20)]  # none of r3's lost
    st_ = inbox.stats()
    assert st_["ls_sessions"] <= 4 + 1 and st_.get("dropped_stale", 0) == 0
    assert st_["bulk_ls_sessions_evicted"] >= 200 and ch.stats.sessions == 1


def test_a_sender_whose_session_is_gone_reopens_at_the_next_keepalive(
    teams: list[Team], caplog: pytest.LogCaptureFixture
) -> None:
    sink, r1 = join(None, "sink", KEY), join(None, "r1", KEY, settings=TeamSettings(
        ls_keepalive_s=0.1))  # fmt: skip
    teams += [sink, r1]
    inbox = sink.listen("127.0.0.1:0")
    ch = r1.latency_sensitive("control", f"127.0.0.1:{inbox.address[1]}", deadline_ms=50)
    assert ch.send(b"a") == "sent" and inbox.recv(timeout=5).payload == b"a"
    table = inbox._core.decoder.table
    with caplog.at_level(logging.INFO, logger="coorp.runtime.agent"):
        with table.lock:  # gone at the receiver while its connection stays up
            table._remove(table._sessions[("r1", "control")])
        poll(lambda: ch.stats.sessions == 2, "the sender opened a new session")
    assert any("no longer has the session" in r.getMessage() for r in caplog.records)
    poll(lambda: ch.send(b"b") == "sent" and _recv_payload(inbox) == b"b", "b arrives")


def _recv_payload(inbox: Any) -> bytes | None:
    with contextlib.suppress(TimeoutError):
        return bytes(inbox.recv(timeout=0.05).payload)
    return None


def test_reordering_is_not_replay_and_loss_is_counted_exactly(teams: list[Team]) -> None:
    """100 Hz LS through a link with 10 % loss and 20 ± 10 ms delay: every datagram
    that overtook another is accepted (counted reordered, none as a replay), and the
    receiver's loss count, reported back to the sender, is sent − received."""
    sink = join(None, "sink", KEY)
    r1 = join(None, "r1", KEY, settings=TeamSettings(ls_keepalive_s=0.1))
    teams += [sink, r1]
    inbox = sink.listen("127.0.0.1:0")
    link = ImpairedLink(("127.0.0.1", inbox.address[1]), loss=0.1, delay_ms=20, jitter_ms=10)
    try:
        ch = r1.latency_sensitive("control", f"127.0.0.1:{link.address[1]}", deadline_ms=50)
        assert ch.ready.is_set()
        n, pace, got = 150, threading.Event(), []
        for k in range(n):
            assert ch.send(b"%d" % k) == "sent"
            pace.wait(0.01)  # the workload: 100 Hz
        for _ in range(400):  # until the link has delivered everything it kept
            if len(got) + link.dropped >= n and link.forwarded == len(got):
                break
            with contextlib.suppress(TimeoutError):
                got.append(inbox.recv(timeout=0.1))
        assert len(got) == n - link.dropped
        poll(lambda: ch.stats.received == len(got), "a keep-alive reported everything")
        flow = inbox.flows()["r1/control"]
        assert link.overtaken > 0  # the link did reorder
        assert flow["reordered"] == link.overtaken and flow["replayed"] == 0
        assert inbox.stats().get("dropped_replayed", 0) == 0
        assert flow["lost"] == link.dropped == ch.stats.sent - len(got)
        s = ch.stats
        assert (s.lost, s.reordered, s.replayed) == (link.dropped, link.overtaken, 0)
        assert len({m.seq for m in got}) == len(got)
    finally:
        link.close()


# -- keys --------------------------------------------------------------------------------------
def test_key_directory_must_be_owner_only_and_fallback_needs_the_setting(
    tmp_path: Path,
) -> None:
    cfg_path = tmp_path / "team.toml"
    cfg_path.write_text('[team]\nrobots = ["sink", "r1", "r2"]\nkey_file = "team.key"\n')
    cfg = load_team_config(cfg_path)
    write_team_keys(cfg, cfg_path)
    (tmp_path / "keys" / "r2.key").unlink()
    with pytest.raises(ScenarioError, match=r"(?s)keys/r2.key is missing.*team_key_fallback"):
        resolve_team_key(cfg, cfg_path, robot="r2")
    (tmp_path / "keys").chmod(0o755)
    with pytest.raises(ScenarioError, match=r"(?s)mode 0755.*chmod 700"):
        resolve_team_key(cfg, cfg_path, robot="r1")
    with pytest.raises(ScenarioError, match="chmod 700"):  # coorp keys refuses it too
        write_team_keys(cfg, cfg_path)
    (tmp_path / "keys").chmod(0o700)
    cfg_path.write_text(cfg_path.read_text() + "team_key_fallback = true\n")
    fallback = load_team_config(cfg_path)
    assert resolve_team_key(fallback, cfg_path, robot="r2").identity is None  # team key
    assert resolve_team_key(fallback, cfg_path, robot="r1").identity == "r1"
