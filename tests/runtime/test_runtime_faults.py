"""Fault handling on loopback: accept loops that cannot die, aggregated drop logs."""

from __future__ import annotations

import asyncio
import errno
import logging
import socket
from collections.abc import Iterator
from typing import Any

import pytest
from rt_helpers import KEY, LeaderHandle

from coorp.runtime import LeaderSettings, join, query_leader_stats
from coorp.runtime._accept import AcceptLoop
from coorp.runtime._counters import DropLog, host_of
from coorp.runtime._errors import MalformedFrameError

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
    assert len(lines) <= 12
    assert any("held back" in m and "990" in m for m in lines)


def test_status_asks_the_configured_address() -> None:
    from coorp.cli._runtime import _status_target, health_line

    assert _status_target(None, "0.0.0.0:7400", "10.0.0.1:7400") == "10.0.0.1:7400"
    assert _status_target(None, "0.0.0.0:7400", None) == "127.0.0.1:7400"
    assert _status_target(None, "10.0.0.2:7400", "10.0.0.1:7400") == "10.0.0.2:7400"
    assert _status_target("0.0.0.0:7500", "10.0.0.2:7400", None) == "127.0.0.1:7500"
    assert health_line({"accept_healthy": 0}).startswith("NOT accepting")


def test_status_line_from_a_running_leader(small_leader: LeaderHandle) -> None:
    st = query_leader_stats(small_leader.address, KEY)
    assert st.counters["accept_healthy"] == 1
    assert st.counters["open_connections"] >= 1  # this query itself
