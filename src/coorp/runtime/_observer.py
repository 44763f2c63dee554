"""Asking a leader for its counters (an authenticated "observer" connection).

Used by ``coorp leader --status``, tests and benchmarks. Observers need the team key
but no robot slot; they cannot request permits.
"""

from __future__ import annotations

import asyncio
import socket
from dataclasses import dataclass

from ._auth import Keyring, TeamKey
from ._errors import MalformedFrameError, PeerTimeoutError
from ._framing import FramedConnection, client_handshake, recv_first_reply
from ._sockets import format_address, parse_address, resolve, tune_tcp
from ._wire import StatsQuery, StatsReply

__all__ = ["LeaderStats", "aquery_leader_stats", "query_leader_stats"]


@dataclass(frozen=True, slots=True)
class LeaderStats:
    counters: dict[str, int]
    holders: tuple[str, ...]
    waiting: tuple[str, ...]


async def aquery_leader_stats(
    leader: str, key: Keyring | bytes | str, *, timeout_s: float = 2.0, name: str = "observer"
) -> LeaderStats:
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
        await conn.send(StatsQuery())
        reply = await recv_first_reply(conn)
        if not isinstance(reply, StatsReply):
            raise MalformedFrameError(f"expected stats, got {type(reply).__name__}")
        return LeaderStats(dict(reply.counters), tuple(reply.holders), tuple(reply.waiting))
    finally:
        conn.close()


def query_leader_stats(
    leader: str, key: Keyring | bytes | str, *, timeout_s: float = 2.0
) -> LeaderStats:
    """The leader's counters (grants, drops, ``max_holders``...), from any thread."""
    return asyncio.run(aquery_leader_stats(leader, key, timeout_s=timeout_s))
