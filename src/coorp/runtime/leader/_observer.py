"""Asking a leader for its counters or its team's status (an authenticated "observer"
connection).

Used by ``coorp leader --status``, ``coorp top``, tests and benchmarks. Observers need the team key
but no robot slot; they cannot request permits.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator
from dataclasses import dataclass

import msgspec

from .._errors import MalformedFrameError, PeerTimeoutError
from ..wire import (
    FramedConnection,
    Keyring,
    RobotRow,
    StatsQuery,
    StatsReply,
    TeamKey,
    TeamQuery,
    TeamReply,
    client_handshake,
    format_address,
    parse_address,
    recv_first_reply,
    resolve,
    tune_tcp,
)

__all__ = [
    "LeaderStats",
    "TeamStatus",
    "aquery_leader_stats",
    "aquery_team",
    "query_leader_stats",
]


@dataclass(frozen=True, slots=True)
class LeaderStats:
    counters: dict[str, int]
    holders: tuple[str, ...]
    waiting: tuple[str, ...]


@contextlib.asynccontextmanager
async def _observer(
    leader: str, key: Keyring | bytes | str, timeout_s: float, name: str = "observer"
) -> AsyncIterator[FramedConnection]:
    """An authenticated observer connection to the leader at ``leader``."""
    addr = parse_address(leader, what="leader")
    family, sockaddr = resolve(addr, socket.SOCK_STREAM)
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setblocking(False)
    loop = asyncio.get_running_loop()
    try:
        async with asyncio.timeout(timeout_s):
            await loop.sock_connect(sock, sockaddr)
    except TimeoutError:
        sock.close()
        raise PeerTimeoutError(f"cannot reach leader {format_address(addr)}") from None
    except BaseException:
        sock.close()
        raise
    tune_tcp(sock)
    conn = FramedConnection(
        sock, peer=format_address(addr), read_timeout_s=timeout_s, write_timeout_s=timeout_s
    )
    keys = TeamKey.coerce(key)
    try:
        await client_handshake(
            conn, keys, robot=keys.identity or name, role="observer", service="leader"
        )
        yield conn
    finally:
        conn.close()


async def aquery_leader_stats(
    leader: str, key: Keyring | bytes | str, *, timeout_s: float = 2.0, name: str = "observer"
) -> LeaderStats:
    async with _observer(leader, key, timeout_s, name) as conn:
        await conn.send(StatsQuery())
        reply = await recv_first_reply(conn)
        if not isinstance(reply, StatsReply):
            raise MalformedFrameError(f"expected stats, got {type(reply).__name__}")
        return LeaderStats(dict(reply.counters), tuple(reply.holders), tuple(reply.waiting))


def query_leader_stats(
    leader: str, key: Keyring | bytes | str, *, timeout_s: float = 2.0
) -> LeaderStats:
    """The leader's counters (grants, drops, ``max_holders``...), from any thread."""
    return asyncio.run(aquery_leader_stats(leader, key, timeout_s=timeout_s))


@dataclass(frozen=True, slots=True)
class TeamStatus:
    """What ``coorp top`` shows: the permit holders and queue, a row per robot."""

    holders: tuple[str, ...]
    waiting: tuple[str, ...]
    rows: tuple[RobotRow, ...]

    def to_json(self) -> dict[str, object]:
        return {
            "holders": list(self.holders),
            "waiting": list(self.waiting),
            "robots": [_as_dict(r) for r in self.rows],
        }


def _as_dict(value: object) -> object:
    """A wire struct (array-like on the wire) as a JSON-ready dict, nested ones too."""
    if isinstance(value, msgspec.Struct):
        return {f: _as_dict(getattr(value, f)) for f in value.__struct_fields__}
    if isinstance(value, list):
        return [_as_dict(v) for v in value]
    return value


async def aquery_team(
    leader: str, key: Keyring | bytes | str, *, timeout_s: float = 2.0
) -> TeamStatus:
    """Every robot's row from the leader (as many pages as the team needs)."""
    async with _observer(leader, key, timeout_s) as conn:
        rows: list[RobotRow] = []
        holders: list[str] = []
        waiting: list[str] = []
        for _ in range(64):  # 64 pages of 32 rows: more than a team may have
            await conn.send(TeamQuery(len(rows)))
            reply = await recv_first_reply(conn) if not rows else await conn.recv()
            if not isinstance(reply, TeamReply):
                raise MalformedFrameError(f"expected team status, got {type(reply).__name__}")
            holders, waiting = list(reply.holders), list(reply.waiting)
            rows += reply.rows
            if not reply.rows or len(rows) >= reply.total:
                break
        return TeamStatus(tuple(holders), tuple(waiting), tuple(rows))
