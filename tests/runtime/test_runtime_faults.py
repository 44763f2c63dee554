"""Fault handling on loopback: accept loops that cannot die, aggregated drop logs."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from rt_helpers import KEY, LeaderHandle, RawClient

from coorp import ScenarioError
from coorp.runtime import (
    AuthenticationError,
    LeaderSettings,
    PermitService,
    RuntimeUsageError,
    StaleError,
    Team,
    TeamKey,
    join,
    query_leader_stats,
)
from coorp.runtime._counters import DropLog, host_of
from coorp.runtime._errors import MalformedFrameError
from coorp.runtime.wire._accept import AcceptLoop

ROBOTS = ["sink", "r1", "r2"]


@pytest.fixture
def small_leader() -> Iterator[LeaderHandle]:
    handle = LeaderHandle(
        ROBOTS,
        LeaderSettings(
            heartbeat_ns=100_000_000,
            max_connections=6,
            max_preauth_per_source=3,
            handshake_timeout_s=0.3,
        ),
    )
    try:
        yield handle
    finally:
        handle.close()


def test_idle_connections_are_bounded_and_timed_out_then_a_robot_joins(
    small_leader: LeaderHandle,
) -> None:
    host, port = small_leader.address.rsplit(":", 1)
    idle = [socket.create_connection((host, int(port)), timeout=2) for _ in range(20)]
    try:
        # The handshake deadline closes every idle connection (each read is cheap to
        # trickle, the whole greeting is bounded): every one sees EOF or a reset.
        for s in idle:
            s.settimeout(5)
            with pytest.raises((ConnectionResetError, TimeoutError, OSError)):
                for _ in range(100):
                    if not s.recv(4096):
                        raise ConnectionResetError("closed by the leader")
        team = join(small_leader.address, "r1", KEY)
        try:
            assert team.mode == "coordinated"
        finally:
            team.close()
        st = small_leader.stats()
        assert st["limited_connections"] >= 1  # over 3 per source in handshake
        assert st["handshake_timeouts"] >= 1
        assert st["accept_healthy"] == 1
        assert st["max_connections"] == 6
    finally:
        for s in idle:
            s.close()


def test_accept_loop_survives_fd_exhaustion_logs_once_and_resumes(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def scenario() -> dict[str, Any]:
        listener = socket.socket()
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        listener.setblocking(False)
        failures = 5
        served = asyncio.Event()

        async def accept(lst: socket.socket) -> tuple[socket.socket, Any]:
            nonlocal failures
            if failures:
                failures -= 1
                raise OSError(errno.EMFILE, "Too many open files")
            return await asyncio.get_running_loop().sock_accept(lst)

        async def handler(sock: socket.socket, peer: str, slot: AcceptLoop) -> None:
            async with slot.handshake_deadline(peer):
                pass
            served.set()

        loop = AcceptLoop(
            listener,
            handler,
            name="test",
            logger=logging.getLogger("coorp.runtime.test"),
            max_connections=4,
            max_preauth_per_source=2,
            handshake_timeout_s=1.0,
            accept=accept,
        )
        loop.start()
        client = socket.socket()
        client.setblocking(False)
        with pytest.raises(BlockingIOError):
            client.connect(listener.getsockname())
        async with asyncio.timeout(10):
            await served.wait()
        stats = loop.stats()
        await loop.close()
        client.close()
        listener.close()
        return stats

    with caplog.at_level(logging.INFO, logger="coorp.runtime"):
        stats = asyncio.run(scenario())
    assert stats["fd_exhaustions"] == 1  # one episode...
    assert stats["accepted"] == 1  # ...then it resumed and served the connection
    assert stats["accept_healthy"] == 1
    lines = [r.getMessage() for r in caplog.records]
    assert sum("cannot accept" in m for m in lines) == 1  # logged once
    assert sum("accepting connections again" in m for m in lines) == 1


def test_drop_log_aggregates_per_source_address(caplog: pytest.LogCaptureFixture) -> None:
    now = [0]
    drops = DropLog(logging.getLogger("coorp.runtime.test"), lambda: now[0])
    with caplog.at_level(logging.WARNING, logger="coorp.runtime.test"):
        for i in range(10_000):  # one attacker, a new source port every time
            now[0] = i * 1_000_000  # 10 s in all
            drops.drop(f"10.0.0.3:{1024 + i}", MalformedFrameError("junk"))
        now[0] += 2_000_000_000
        drops.drop("10.0.0.3:9", MalformedFrameError("junk"))
    assert drops.counts["malformed"] == 10_001  # counters stay exact
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) <= 12  # about one per second, not one per packet
    assert "more from 10.0.0.3" in lines[-1]
    assert host_of("[::1]:80") == "::1" and host_of("10.0.0.3:5512") == "10.0.0.3"


def test_drop_log_caps_lines_across_many_addresses(caplog: pytest.LogCaptureFixture) -> None:
    now = [0]
    drops = DropLog(logging.getLogger("coorp.runtime.test"), lambda: now[0])
    with caplog.at_level(logging.WARNING, logger="coorp.runtime.test"):
        for i in range(1000):  # a scan from 1000 addresses within one interval
            drops.drop(f"10.0.{i // 250}.{i % 250}:1", MalformedFrameError("junk"))
        now[0] = 1_500_000_000
        drops.drop("10.9.9.9:1", MalformedFrameError("junk"))
    lines = [r.getMessage() for r in caplog.records]
    # 3 lines in the first second (a fourth slot stays free for the summary), then the
    # summary of the 997 held back and the new line.
    assert len(lines) == 5
    assert "held back 997 more drop:malformed line(s)" in lines[3]
    assert all(m.endswith("[drop:malformed]") for m in lines)
    assert drops.counts["malformed"] == 1001 and drops.limiter.held_back["drop:malformed"] == 997


def test_status_asks_the_configured_address() -> None:
    from coorp.cli._runtime._daemons import _status_target, health_line

    assert _status_target(None, "0.0.0.0:7400", "10.0.0.1:7400") == "10.0.0.1:7400"
    assert _status_target(None, "0.0.0.0:7400", None) == "127.0.0.1:7400"
    assert _status_target(None, "10.0.0.2:7400", "10.0.0.1:7400") == "10.0.0.2:7400"
    assert _status_target("0.0.0.0:7500", "10.0.0.2:7400", None) == "127.0.0.1:7500"
    assert health_line({"accept_healthy": 0}).startswith("NOT accepting")


def test_status_line_from_a_running_leader(small_leader: LeaderHandle) -> None:
    st = query_leader_stats(small_leader.address, KEY)
    assert st.counters["accept_healthy"] == 1
    assert st.counters["open_connections"] >= 1  # this query itself


class Recorder:
    """Wraps an LS channel's socket: records every datagram it hands to the kernel."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self.sent: list[bytes] = []

    def sendmsg(self, bufs: Any) -> int:
        data = b"".join(bufs)
        self.sent.append(data)
        return self._sock.send(data)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sock, name)


def wait_stat(inbox: Any, key: str, at_least: int, timeout: float = 5.0) -> dict[str, int]:
    """Read an inbox's counters until ``key`` reaches ``at_least`` (bounded)."""
    import time

    deadline = time.monotonic() + timeout
    stats: dict[str, int] = inbox.stats()
    while stats.get(key, 0) < at_least and time.monotonic() < deadline:
        with contextlib.suppress(TimeoutError):
            inbox.recv(timeout=0.05)
        stats = inbox.stats()
    return stats


def test_replayed_cross_robot_and_old_session_ls_datagrams_are_rejected() -> None:
    teams: list[Team] = []
    try:
        leader = join(None, "sink", KEY)
        r1, r2 = join(None, "r1", KEY), join(None, "r2", KEY)
        teams += [leader, r1, r2]
        inbox1, inbox2 = r1.listen("127.0.0.1:0"), r2.listen("127.0.0.1:0")
        port1 = inbox1.address[1]
        ch = leader.latency_sensitive("control-r1", f"127.0.0.1:{port1}", deadline_ms=33)
        rec = Recorder(ch._sock)
        ch._sock = rec  # type: ignore[assignment]
        for k in range(10):
            assert ch.send(b"cmd%d" % k) == "sent"
        got = [inbox1.recv(timeout=5).payload for _ in range(10)]
        assert got == [b"cmd%d" % k for k in range(10)]
        captured = list(rec.sent)
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as attacker:
            for d in captured:  # replayed to r1: same session, old sequence numbers
                attacker.sendto(d, ("127.0.0.1", port1))
            for d in captured:  # and to r2: not addressed to it
                attacker.sendto(d, ("127.0.0.1", inbox2.address[1]))
            s1 = wait_stat(inbox1, "dropped_replayed", 10)
            s2 = wait_stat(inbox2, "dropped_unauthenticated", 10)
            assert s1["dropped_replayed"] == 10 and s1["ls_received"] == 10
            assert s2["dropped_unauthenticated"] == 10 and s2["ls_received"] == 0
            # r1's inbox restarts on the same port: the old session is unknown there.
            inbox1.close()
            fresh = r1.listen(f"127.0.0.1:{port1}")
            for d in captured:
                attacker.sendto(d, ("127.0.0.1", port1))
            s3 = wait_stat(fresh, "dropped_stale", 10)
            assert s3["dropped_stale"] == 10 and s3["ls_received"] == 0
        # The sender notices the restart (its session connection broke), opens a new
        # session and its messages get through again.
        deadline_ok = False
        for _ in range(100):
            ch.send(b"after restart")
            with contextlib.suppress(TimeoutError):
                msg = fresh.recv(timeout=0.1)
                deadline_ok = msg.payload == b"after restart"
                break
        assert deadline_ok
        assert ch.stats.sessions == 2
    finally:
        for t in teams:
            t.close()


def test_ls_freshness_window_rejects_old_datagrams() -> None:
    from coorp.runtime.inbox._receiver import LsDecoder
    from coorp.runtime.wire._format import WIRE_VERSION, LsHeader, pack_datagram

    now = [10_000_000_000]
    dec = LsDecoder(KEY, "sink", clock=lambda: now[0], max_age_ns=2_000_000_000)
    # The sender's clock reads 5 s when ours reads 10 s: offset 5 s.
    session = dec.open_session("r1", "ch", 5_000_000_000)

    def dgram(seq: int, sent_ns: int) -> bytes:
        h = LsHeader(WIRE_VERSION, "r1", "sink", "ch", session, seq, sent_ns, sent_ns, 1)
        d = pack_datagram(h, b"x")
        return bytes(d + KEY.mac("r1", "sink").datagram_mac(d))

    now[0] = 11_000_000_000
    assert dec.decode(dgram(1, 6_000_000_000), "p").seq == 1  # 0 s old
    now[0] = 20_000_000_000
    with pytest.raises(StaleError):  # sent at 7 s on its clock = 12 s ours: 8 s old
        dec.decode(dgram(2, 7_000_000_000), "p")
    assert dec.decode(dgram(3, 14_500_000_000), "p").seq == 3  # 0.5 s old


def test_each_robot_has_its_own_key_and_can_act_only_as_itself(tmp_path: Path) -> None:
    from coorp.runtime import RobotKey, load_team_config, resolve_team_key, write_team_keys
    from coorp.runtime.wire._auth import load_key_file

    cfg_path = tmp_path / "team.toml"
    cfg_path.write_text('[team]\nrobots = ["sink", "r1", "r2"]\nkey_file = "team.key"\n')
    cfg = load_team_config(cfg_path)
    team_path, paths = write_team_keys(cfg, cfg_path)
    for p in [team_path, *paths]:
        assert p.stat().st_mode & 0o777 == 0o600
    assert (tmp_path / "keys").stat().st_mode & 0o777 == 0o700
    k1 = resolve_team_key(cfg, cfg_path, robot="r1")
    assert isinstance(k1, RobotKey) and k1.robot == "r1" and k1.peers == ["r2", "sink"]
    team_key = resolve_team_key(cfg, cfg_path)
    assert isinstance(team_key, TeamKey)
    (tmp_path / "keys" / "r2.key").chmod(0o640)
    with pytest.raises(ScenarioError, match=r"(?s)invalid team file .*chmod 600"):
        resolve_team_key(cfg, cfg_path, robot="r2")
    (tmp_path / "keys" / "r2.key").chmod(0o600)
    k2 = load_key_file(tmp_path / "keys" / "r2.key")

    handle = LeaderHandleWithKey(["sink", "r1", "r2"], team_key)
    teams: list[Team] = []
    try:
        with pytest.raises(RuntimeUsageError, match="cannot act as 'r2'"):
            join(handle.address, "r2", k1)
        # Forging r2's join with r1's key material: the leader cannot verify it.
        raw = RawClient(handle.address)
        with pytest.raises(AuthenticationError):
            raw.handshake("r2", key=_Impersonator(k1))  # type: ignore[arg-type]
            raw.recv()
        raw.close()
        a, b = join(handle.address, "r1", k1), join(handle.address, "r2", k2)
        teams += [a, b]
        assert a.mode == b.mode == "coordinated"
        inbox = b.listen("127.0.0.1:0")
        a.bulk("data", f"127.0.0.1:{inbox.address[1]}").send(b"z" * 100_000, timeout_s=10)
        ls = a.latency_sensitive("ls", f"127.0.0.1:{inbox.address[1]}", deadline_ms=50)
        assert ls.send(b"hi") == "sent"
        kinds = {inbox.recv(timeout=5).kind for _ in range(2)}
        assert kinds == {"bulk", "ls"}
    finally:
        for t in teams:
            t.close()
        handle.close()


class _Impersonator:
    """r1's key material used to claim another name (what a dishonest r1 could do)."""

    def __init__(self, keys: Any) -> None:
        self._keys = keys

    def mac(self, local: str, peer: str) -> Any:
        return self._keys.mac("r1", peer)


class LeaderHandleWithKey(LeaderHandle):
    def __init__(self, robots: list[str], key: Any) -> None:
        self._team_key = key
        super().__init__(robots, LeaderSettings())

    def start(self) -> None:
        async def go() -> int:
            self.service = PermitService(self.robots, self._team_key, self.settings)
            _, port = await self.service.start(("127.0.0.1", self.port))
            return port

        self.port = self.run(go())


def _gate_after_contention(max_age_ns: int | None) -> tuple[Any, Any, int]:
    """A robot's gate whose table learned 40 ms completions while four robots sent
    (an uncoordinated stretch); its LS flow runs every 33.3 ms."""
    from coorp.control import ProtectionPlanner
    from coorp.runtime.robot._preempt import SharedPlanner, new_gate

    now = [0]
    shared = SharedPlanner(ProtectionPlanner(margin_ns=2_000_000), lambda: now[0])
    gate = new_gate(shared, default_ns=2_000_000, max_age_ns=max_age_ns)
    period = 33_300_000
    for k in range(40):  # 1.3 s of LS sends, contention samples all along
        now[0] = k * period
        shared.observe_now("perception")
        for depth in range(4):
            gate.ctt.record(depth, 40_000_000, at_ns=now[0])
    return gate, shared, period


def _admits_just_after_a_send(gate: Any, shared: Any, period: int, t0: int) -> bool:
    """Feed sends from ``t0`` on for 0.2 s, then ask just after the last one (the next
    window opens ~30 ms later: a gap a 2 ms chunk fits and a 40 ms one does not)."""
    t = t0
    for _ in range(6):
        t += period
        shared._clock = lambda t=t: t
        shared.observe_now("perception")
    window = shared.next_window(t + 1_000_000)
    assert window is not None and window.start_ns - (t + 1_000_000) > 20_000_000
    ok: bool = gate.admits(t + 1_000_000, 0)
    return ok


def test_why_bulk_stayed_slow_after_an_uncoordinated_stretch() -> None:
    """The cause: the gate learns only at depths it admits, so completion times
    measured under contention keep it denying (the paper's table never forgets):
    bulk then moves only through the starvation guard. Ageing the samples (2 s in the
    runtime) — plus a fresh table on every switch into or out of uncoordinated mode —
    gives the gate back its uncontended estimate within one timeslice (5 s)."""
    end = 40 * 33_300_000
    paper, shared, period = _gate_after_contention(None)
    assert not _admits_just_after_a_send(paper, shared, period, end + 2_500_000_000)
    aged, shared, period = _gate_after_contention(2_000_000_000)
    assert not _admits_just_after_a_send(aged, shared, period, end)  # still fresh
    aged, shared, period = _gate_after_contention(2_000_000_000)
    assert _admits_just_after_a_send(aged, shared, period, end + 2_500_000_000)
