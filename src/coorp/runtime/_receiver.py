"""Receiving: LS datagrams and bulk messages, each delivered whole, exactly once.

* :class:`LsDecoder` checks one datagram (structure, MAC, freshness) and turns it into
  a :class:`Message`; it is pure, so the sync inbox can run it on the caller's thread
  (one thread hop less latency) and the async inbox on the event loop.
* :class:`BulkReceiver` serves bulk senders over TCP. Partial messages are kept per
  (robot, stream, session, message id) with the number of bytes received, so a
  sender that reconnects is told where to resume and no byte is lost or duplicated;
  recently completed ids are remembered, so a sender that missed the final
  acknowledgement is told "done" instead of delivering the message twice. Memory is
  bounded: per message, in total for partial messages, and by age.
"""

from __future__ import annotations

import logging
import mmap
import os
import socket
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Literal

import msgspec

from coorp._errors import PeerError

from ._accept import AcceptLoop
from ._auth import DatagramAuthenticator, TeamKey
from ._counters import DropLog
from ._errors import FrameTooLargeError, LimitedError, MalformedFrameError, RefusedError
from ._framing import FramedConnection, PeerClosed, server_handshake
from ._sockets import format_address, tune_tcp
from ._wire import (
    MAC_BYTES,
    BulkAccept,
    BulkData,
    BulkDone,
    BulkOpen,
    BulkReject,
    Ping,
    Pong,
    Refused,
    split_datagram,
)

__all__ = ["BulkReceiver", "LsDecoder", "Message", "ReceiverLimits"]

log = logging.getLogger("coorp.runtime.receiver")


class Message(msgspec.Struct, frozen=True):
    """One whole message as delivered to the application (read-only)."""

    kind: Literal["ls", "bulk"]
    robot: str
    """The sending robot (authenticated with the team key)."""
    channel: str
    """The LS channel or bulk stream name."""
    seq: int
    """Per-channel sequence number (LS) or message id (bulk), increasing."""
    payload: bytes | memoryview
    """``bytes`` for LS; for bulk, a writable ``memoryview`` over the message's own
    receive buffer (no copy was made; ``bytes(payload)`` makes one)."""
    sent_ns: int
    """Sender's ``CLOCK_MONOTONIC`` when the application called ``send``."""
    received_ns: int
    """Receiver's ``CLOCK_MONOTONIC`` when the message was complete."""
    first_byte_ns: int
    """Receiver's clock at the first byte (bulk) or at arrival (LS)."""
    deadline_ns: int | None
    """LS deadline on the sender's clock; None for bulk."""
    peer: str
    """Network address it came from."""

    @property
    def latency_ns(self) -> int:
        """``received_ns − sent_ns``: the one-way latency when sender and receiver share
        a clock (same host, or synchronized clocks); otherwise meaningless."""
        return self.received_ns - self.sent_ns


class LsDecoder:
    """Datagram -> :class:`Message`, or a :class:`~coorp.PeerError` saying why not."""

    def __init__(self, key: TeamKey, clock: Callable[[], int] = time.monotonic_ns) -> None:
        self._auth = DatagramAuthenticator(key)
        self._clock = clock

    def decode(self, data: bytes | bytearray | memoryview, peer: str) -> Message:
        now = self._clock()
        if len(data) <= MAC_BYTES:
            raise MalformedFrameError(f"datagram of {len(data)} bytes is too short")
        # The MAC first: nothing unauthenticated is parsed beyond its length.
        view = memoryview(data)
        self._auth.verify(view[:-MAC_BYTES], view[-MAC_BYTES:])
        header, payload, _, _ = split_datagram(view)
        self._auth.accept_sequence(header.robot, header.channel, header.session, header.seq)
        return Message(
            "ls",
            header.robot,
            header.channel,
            header.seq,
            bytes(payload),
            header.sent_ns,
            now,
            now,
            header.deadline_ns,
            peer,
        )


@dataclass(frozen=True, slots=True)
class ReceiverLimits:
    max_message_bytes: int = 1 << 30
    max_partial_bytes: int = 2 << 30
    idle_timeout_s: float = 30.0
    handshake_timeout_s: float = 5.0
    """Deadline for a sender's whole greeting (not per read)."""
    max_connections: int = 256
    """Open connections at most (bounded further by the fd limit)."""
    max_preauth_per_source: int = 8
    """Connections from one host still in their handshake at once; more are closed."""
    partial_ttl_s: float = 600.0
    remember_completed: int = 4096


def _new_buffer(nbytes: int) -> bytearray | mmap.mmap:
    """A receive buffer. Large ones are anonymous mappings: the kernel hands out zeroed
    pages as data lands in them, instead of ``bytearray`` zero-filling the whole
    message up front (which, for a 40 MB update, costs as much as receiving it)."""
    if nbytes < 1 << 20:
        return bytearray(nbytes)
    return mmap.mmap(-1, nbytes)


@dataclass(slots=True)
class _Partial:
    buffer: bytearray | mmap.mmap
    sent_ns: int
    first_byte_ns: int
    touched_ns: int
    have: int = 0
    owner: object = field(default=None)


_Key = tuple[str, str, int, int]  # robot, stream, session, msg id


class BulkReceiver:
    """Serves bulk senders on a TCP listener; ``deliver`` gets each whole message once."""

    def __init__(
        self,
        key: TeamKey,
        deliver: Callable[[Message], Awaitable[None]],
        *,
        limits: ReceiverLimits = ReceiverLimits(),
        clock: Callable[[], int] = time.monotonic_ns,
        drops: DropLog | None = None,
    ) -> None:
        self._key = key
        self._deliver = deliver
        self.limits = limits
        self._clock = clock
        self.drops = drops if drops is not None else DropLog(log, clock)
        self._epoch = int.from_bytes(os.urandom(8), "big") >> 1
        self._partials: dict[_Key, _Partial] = {}
        self._partial_bytes = 0
        self._completed: OrderedDict[_Key, int] = OrderedDict()
        self._accept: AcceptLoop | None = None
        self.counters = {
            "messages": 0,
            "bytes": 0,
            "resumed": 0,
            "duplicates_suppressed": 0,
            "expired_partials": 0,
        }

    def start(self, listener: socket.socket) -> None:
        lim = self.limits
        self._accept = AcceptLoop(
            listener,
            self._handle,
            name=f"inbox {format_address(listener.getsockname())}",
            logger=log,
            max_connections=lim.max_connections,
            max_preauth_per_source=lim.max_preauth_per_source,
            handshake_timeout_s=lim.handshake_timeout_s,
            on_limited=lambda peer: self.drops.drop(
                peer, LimitedError("too many connections in handshake from this host")
            ),
        )
        self._accept.start()

    async def close(self) -> None:
        if self._accept is not None:
            await self._accept.close()

    def stats(self) -> dict[str, int]:
        out = dict(self.counters)
        if self._accept is not None:
            out.update(self._accept.stats())
        return out

    def health(self) -> str:
        return self._accept.health() if self._accept is not None else "not started"

    async def _handle(self, sock: socket.socket, peer: str, slot: AcceptLoop) -> None:
        lim = self.limits
        tune_tcp(sock)
        conn = FramedConnection(
            sock,
            peer=peer,
            read_timeout_s=lim.handshake_timeout_s,
            write_timeout_s=lim.idle_timeout_s,
        )
        try:
            async with slot.handshake_deadline(peer):
                join = await server_handshake(
                    conn, self._key, service="receiver", epoch=self._epoch
                )
            if join.role != "sender":
                await conn.send(Refused(f"role {join.role!r} is not served by a receiver"))
                raise RefusedError(f"role {join.role!r} is not served by a receiver")
            conn.read_timeout_s = lim.idle_timeout_s
            await self._serve(conn, join.robot)
        except PeerClosed:
            pass
        except PeerError as exc:
            self.drops.drop(peer, exc)
        except OSError as exc:
            log.debug("bulk connection %s failed: %s", peer, exc)
        finally:
            conn.close()

    async def _serve(self, conn: FramedConnection, robot: str) -> None:
        current: tuple[_Key, _Partial] | None = None
        while True:
            msg = await conn.recv()
            if isinstance(msg, BulkOpen):
                current = await self._open(conn, robot, msg)
            elif isinstance(msg, BulkData):
                if current is None or current[0][3] != msg.msg_id:
                    raise MalformedFrameError(f"data for message {msg.msg_id}, which is not open")
                if await self._data(conn, current[0], current[1], msg):
                    current = None
            elif isinstance(msg, Ping):
                await conn.send(Pong(msg.token))
            else:
                raise MalformedFrameError(f"unexpected {type(msg).__name__} from a sender")

    async def _open(
        self, conn: FramedConnection, robot: str, msg: BulkOpen
    ) -> tuple[_Key, _Partial] | None:
        key: _Key = (robot, msg.stream, msg.session, msg.msg_id)
        self._expire_partials()
        if key in self._completed:
            # The sender missed our acknowledgement: confirm, do not deliver again.
            self.counters["duplicates_suppressed"] += 1
            await conn.send(BulkAccept(msg.msg_id, self._completed[key]))
            await conn.send(BulkDone(msg.msg_id))
            return None
        partial = self._partials.get(key)
        if partial is None:
            total = msg.total_bytes
            if total > self.limits.max_message_bytes:
                await conn.send(BulkReject(msg.msg_id, "message too large"))
                raise FrameTooLargeError(
                    f"bulk message of {total} bytes exceeds {self.limits.max_message_bytes}"
                )
            if self._partial_bytes + total > self.limits.max_partial_bytes:
                await conn.send(BulkReject(msg.msg_id, "receiver is out of buffer space"))
                raise RefusedError(f"no buffer space for {total} more bytes")
            now = self._clock()
            partial = _Partial(_new_buffer(total), msg.sent_ns, now, now)
            self._partials[key] = partial
            self._partial_bytes += total
        elif len(partial.buffer) != msg.total_bytes:
            raise MalformedFrameError(
                f"message {msg.msg_id} reopened with {msg.total_bytes} bytes, "
                f"was {len(partial.buffer)}"
            )
        else:
            self.counters["resumed"] += 1
        # A newer connection of the same sender takes the message over; the old one,
        # if still alive, may no longer advance it.
        partial.owner = conn
        await conn.send(BulkAccept(msg.msg_id, partial.have))
        if partial.have == len(partial.buffer):
            await self._complete(conn, key, partial)
            return None
        return key, partial

    async def _data(
        self, conn: FramedConnection, key: _Key, partial: _Partial, msg: BulkData
    ) -> bool:
        total = len(partial.buffer)
        if msg.offset != partial.have or msg.offset + msg.nbytes > total:
            raise MalformedFrameError(
                f"segment [{msg.offset}, +{msg.nbytes}) does not continue at {partial.have} "
                f"of {total}"
            )
        view = memoryview(partial.buffer)[msg.offset : msg.offset + msg.nbytes]
        await conn.recv_exactly_into(view)
        if partial.owner is not conn:
            raise PeerClosed("superseded by a newer connection of the same sender")
        partial.have += msg.nbytes
        partial.touched_ns = self._clock()
        self.counters["bytes"] += msg.nbytes
        if partial.have < total:
            return False
        await self._complete(conn, key, partial)
        return True

    async def _complete(self, conn: FramedConnection, key: _Key, partial: _Partial) -> None:
        robot, stream, _, msg_id = key
        del self._partials[key]
        self._partial_bytes -= len(partial.buffer)
        self._completed[key] = len(partial.buffer)
        while len(self._completed) > self.limits.remember_completed:
            self._completed.popitem(last=False)
        self.counters["messages"] += 1
        now = self._clock()
        await self._deliver(
            Message(
                "bulk",
                robot,
                stream,
                msg_id,
                memoryview(partial.buffer),
                partial.sent_ns,
                now,
                partial.first_byte_ns,
                None,
                conn.peer,
            )
        )
        await conn.send(BulkDone(msg_id))

    def _expire_partials(self) -> None:
        cutoff = self._clock() - int(self.limits.partial_ttl_s * 1e9)
        for key in [k for k, p in self._partials.items() if p.touched_ns < cutoff]:
            p = self._partials.pop(key)
            self._partial_bytes -= len(p.buffer)
            self.counters["expired_partials"] += 1
