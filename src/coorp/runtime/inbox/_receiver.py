"""Receiving: LS datagrams and bulk messages, each delivered whole, exactly once.

* :class:`~._lsdecoder.LsDecoder` (its own module) checks one datagram and turns it
  into a :class:`Message`;
* :class:`BulkReceiver` serves bulk senders over TCP. Partial messages are kept per
  (robot, stream, session, message id) with the number of bytes received, so a
  sender that reconnects is told where to resume and no byte is lost or duplicated;
  recently completed ids are remembered, so a sender that missed the final
  acknowledgement is told "done" instead of delivering the message twice. Memory is
  bounded: per message, per sending member and in total for partial messages, and by
  age. A member's partial messages may hold at most ``max_partial_bytes_per_member``
  (a member over it gets its own message refused); when the total is full, another
  member's new message makes room by dropping partial messages of members above their
  fair share that have not advanced for ``partial_stall_s`` (their senders resume from
  the start). So a member that opens large messages and sends nothing cannot make the
  other members' bulk to this inbox fail (issue 33).
"""

from __future__ import annotations

import asyncio
import logging
import mmap
import os
import socket
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from coorp._errors import PeerError

from .._counters import DropLog
from .._errors import (
    FrameTooLargeError,
    LimitedError,
    MalformedFrameError,
    MarkingError,
    RefusedError,
)
from ..wire import (
    AcceptLoop,
    BulkAccept,
    BulkData,
    BulkDone,
    BulkOpen,
    BulkReject,
    FramedConnection,
    Keyring,
    LsAccept,
    LsKeepAlive,
    LsOpen,
    LsStatus,
    PeerClosed,
    Ping,
    Pong,
    QuotaSettings,
    Refused,
    format_address,
    greeting,
    mark_socket,
    server_handshake,
    tune_tcp,
)
from ._lsdecoder import LsDecoder, Message

__all__ = ["BulkReceiver", "LsDecoder", "Message", "ReceiverLimits"]

log = logging.getLogger("coorp.runtime.receiver")


@dataclass(frozen=True, slots=True)
class ReceiverLimits:
    max_message_bytes: int = 1 << 30
    max_partial_bytes: int = 2 << 30
    """Buffer space of all partial bulk messages together."""
    max_partial_bytes_per_member: int = 1 << 30
    """Buffer space of one sending member's partial messages (at least its largest
    message: ``max_message_bytes``)."""
    partial_stall_s: float = 10.0
    """A partial message that has not advanced this long may be dropped to make room
    for another member's, if its member holds more than its fair share."""
    idle_timeout_s: float = 30.0
    handshake_timeout_s: float = 5.0
    """Deadline for a sender's whole greeting (not per read)."""
    max_connections: int = 256
    """Open connections at most (bounded further by the fd limit)."""
    max_preauth_per_source: int = 8
    """Connections from one host still in their handshake at once; more are closed."""
    preauth_budget: int = 64
    """Connections in their handshake from hosts no member authenticated from, across
    all of them; above half of it the oldest are dropped early (see :mod:`._accept`)."""
    member_reserve: int = 32
    """Connections kept out of that budget for known members' hosts."""
    connections_per_member: int = 64
    """Authenticated connections one robot may hold here (LS sessions + bulk streams)."""
    frames_per_s_per_member: float = 200.0
    """Handshakes, session and control frames one robot may have handled per second
    (bulk payload frames not counted); beyond, its frames are read later."""
    frame_burst_per_member: int = 400
    ls_sessions_per_member: int = 64
    """LS sessions one robot may hold here; beyond, its own detached sessions go first,
    then new ones are refused. Other robots' sessions are never evicted."""
    max_ls_sessions: int = 4096
    ls_replay_window: int = 1024
    """Sequence numbers an LS session's anti-replay window spans: a datagram that
    arrives after a newer one, within this many, is accepted (counted ``reordered``)."""
    partial_ttl_s: float = 600.0
    remember_completed: int = 4096
    ls_max_age_s: float = 2.0
    """LS freshness window: a datagram sent longer ago than this is rejected."""
    acks_in_video: bool = True
    """The inbox's listening socket is marked AC_VI (DSCP CS4, ``SO_PRIORITY`` 260) and
    every connection accepted on it inherits the marking from its SYN-ACK on: what the
    inbox sends there are the TCP acks of the bulk data (and a few bytes of handshake
    and replies), which then leave at the receiver's next AC_VI access instead of
    queueing for an AC_BE one against the permit holder, as the simulator's ``coorp``
    sends them (docs/control.md, "The acks' access category"). False: AC_BE."""
    ls_socket_buffer_bytes: int = 4 << 20
    """Receive buffer asked for the inbox's UDP socket (``SO_RCVBUFFORCE`` where the
    process may, else ``SO_RCVBUF``, which the kernel caps at ``net.core.rmem_max``).
    Datagrams that arrive while the receiving thread is stalled wait here instead of
    being dropped by the kernel (a default buffer of 212,992 bytes holds about 90
    datagrams of 1 KB); the freshness window still rejects the stale ones."""


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
    dropped: bool = False
    """Dropped to make room for another member's message (its sender starts over)."""


_Key = tuple[str, str, int, int]  # robot, stream, session, msg id


class BulkReceiver:
    """Serves bulk senders on a TCP listener; ``deliver`` gets each whole message once."""

    def __init__(
        self,
        key: Keyring,
        deliver: Callable[[Message], Awaitable[None]],
        *,
        limits: ReceiverLimits = ReceiverLimits(),
        clock: Callable[[], int] = time.monotonic_ns,
        drops: DropLog | None = None,
        robot: str,
        ls: LsDecoder | None = None,
    ) -> None:
        self._key = key
        self.robot = robot
        self.ls = ls
        self._deliver = deliver
        self.limits = limits
        self._clock = clock
        self.drops = drops if drops is not None else DropLog(log, clock)
        self._epoch = int.from_bytes(os.urandom(8), "big") >> 1
        self._partials: dict[_Key, _Partial] = {}
        self._partial_bytes = 0
        self._member_bytes: dict[str, int] = {}
        self._completed: OrderedDict[_Key, int] = OrderedDict()
        self._accept: AcceptLoop | None = None
        self.counters = {
            "messages": 0,
            "bytes": 0,
            "resumed": 0,
            "duplicates_suppressed": 0,
            "expired_partials": 0,
            "partials_refused_member": 0,
            "partials_refused_full": 0,
            "partials_dropped_for_others": 0,
            "ls_sessions": 0,
        }

    def start(self, listener: socket.socket) -> None:
        lim = self.limits
        if lim.acks_in_video:
            try:
                log.debug("inbox: %s", mark_socket(listener, "ack").describe())
            except MarkingError as exc:
                # The data still arrives, its acks in AC_BE: said once, never fatal.
                log.warning("inbox: bulk acks left in AC_BE: %s", exc)
        self._accept = AcceptLoop(
            listener,
            self._handle,
            name=f"inbox {format_address(listener.getsockname())}",
            logger=log,
            max_connections=lim.max_connections,
            max_preauth_per_source=lim.max_preauth_per_source,
            handshake_timeout_s=lim.handshake_timeout_s,
            preauth_budget=lim.preauth_budget,
            member_reserve=lim.member_reserve,
            quotas=QuotaSettings(
                lim.connections_per_member, lim.frames_per_s_per_member, lim.frame_burst_per_member
            ),
            limiter=self.drops.limiter,
            greeting=lambda: greeting("receiver", self._epoch, self.robot),
            on_limited=lambda peer: self.drops.drop(
                peer, LimitedError("too many connections in handshake from this host")
            ),
            clock=self._clock,
        )
        self._accept.start()

    async def close(self) -> None:
        if self._accept is not None:
            await self._accept.close()

    def stats(self) -> dict[str, int]:
        out = dict(self.counters)
        if self._accept is not None:
            out.update(self._accept.stats())
        if self.ls is not None:
            out["ls_sessions_refused"] = self.ls.table.refused
            out["ls_sessions_evicted"] = self.ls.table.evicted
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
                    conn,
                    self._key,
                    service="receiver",
                    epoch=self._epoch,
                    local=self.robot,
                    greeted=slot.greeted_nonce(),
                )
            try:
                await slot.authenticated(join.robot)
            except LimitedError as exc:
                await conn.send(Refused(str(exc)))
                raise
            if join.role == "ls" and self.ls is not None:
                conn.read_timeout_s = lim.idle_timeout_s
                await self._serve_ls(conn, join.robot, self.ls, slot)
                return
            if join.role != "sender":
                await conn.send(Refused(f"role {join.role!r} is not served by a receiver"))
                raise RefusedError(f"role {join.role!r} is not served by a receiver")
            conn.read_timeout_s = lim.idle_timeout_s
            await self._serve(conn, join.robot, slot)
        except PeerClosed:
            pass
        except PeerError as exc:
            self.drops.drop(peer, exc)
        except OSError as exc:
            log.debug("bulk connection %s failed: %s", peer, exc)
        finally:
            conn.close()

    async def _serve_ls(
        self, conn: FramedConnection, robot: str, ls: LsDecoder, slot: AcceptLoop
    ) -> None:
        """An LS sender's session: open it, then answer keep-alives with the session's
        counts until the sender goes — or say it is gone (replaced, evicted), so the
        sender opens a new one at once."""
        first = await conn.recv()
        if not isinstance(first, LsOpen):
            raise MalformedFrameError(f"expected LsOpen, got {type(first).__name__}")
        await slot.pace(robot)
        task = asyncio.current_task()

        def gone() -> None:  # replaced or evicted: end this connection (the sender reopens)
            if task is not None:
                task.cancel()

        try:
            session = ls.open_session(robot, first.channel, first.sent_ns, on_gone=gone)
        except LimitedError as exc:
            await conn.send(Refused(str(exc)))
            raise
        self.counters["ls_sessions"] += 1
        try:
            await conn.send(LsAccept(session))
            while True:
                msg = await conn.recv()
                await slot.pace(robot)
                if not isinstance(msg, LsKeepAlive):
                    raise MalformedFrameError(f"unexpected {type(msg).__name__} on an LS session")
                s = ls.refresh(robot, first.channel, session, msg.sent_ns, msg.sent, msg.last_seq)
                if s is None:
                    await conn.send(LsStatus(session, False, 0, 0, 0, 0))
                    return
                w = s.window
                await conn.send(
                    LsStatus(session, True, w.received, s.lost, w.reordered, w.replayed)
                )
        finally:
            ls.detach(robot, first.channel, session)

    async def _serve(self, conn: FramedConnection, robot: str, slot: AcceptLoop) -> None:
        current: tuple[_Key, _Partial] | None = None
        while True:
            msg = await conn.recv()
            if not isinstance(msg, BulkData):  # payload frames run at the data rate
                await slot.pace(robot)
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
            mine = self._member_bytes.get(robot, 0)
            if mine + total > self.limits.max_partial_bytes_per_member:
                self.counters["partials_refused_member"] += 1
                await conn.send(
                    BulkReject(msg.msg_id, "sender's share of the receiver's buffer space is full")
                )
                raise RefusedError(
                    f"{robot} already holds {mine} bytes of partial messages here (at most "
                    f"{self.limits.max_partial_bytes_per_member})"
                )
            if not self._room_for(total, robot):
                self.counters["partials_refused_full"] += 1
                await conn.send(BulkReject(msg.msg_id, "receiver is out of buffer space"))
                raise RefusedError(f"no buffer space for {total} more bytes")
            now = self._clock()
            partial = _Partial(_new_buffer(total), msg.sent_ns, now, now)
            self._partials[key] = partial
            self._partial_bytes += total
            self._member_bytes[robot] = mine + total
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
        if partial.dropped:
            await conn.send(BulkReject(msg.msg_id, "dropped to make room for other senders"))
            raise RefusedError(f"message {msg.msg_id} was dropped to make room for others")
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
        self._forget_partial(key)
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

    def _forget_partial(self, key: _Key) -> _Partial:
        p = self._partials.pop(key)
        self._partial_bytes -= len(p.buffer)
        left = self._member_bytes.get(key[0], 0) - len(p.buffer)
        if left > 0:
            self._member_bytes[key[0]] = left
        else:
            self._member_bytes.pop(key[0], None)
        return p

    def _room_for(self, nbytes: int, robot: str) -> bool:
        """Whether ``nbytes`` more fit in the total, after dropping stalled partial
        messages of members above their fair share (the oldest first), if need be."""
        lim = self.limits
        if self._partial_bytes + nbytes <= lim.max_partial_bytes:
            return True
        members = {k[0] for k in self._partials} | {robot}
        fair = lim.max_partial_bytes // len(members)
        stalled = self._clock() - round(lim.partial_stall_s * 1e9)
        victims = sorted(
            (p.touched_ns, k)
            for k, p in self._partials.items()
            if k[0] != robot and p.touched_ns < stalled
        )
        for _, key in victims:
            if self._partial_bytes + nbytes <= lim.max_partial_bytes:
                break
            if self._member_bytes.get(key[0], 0) <= fair:
                continue
            self._forget_partial(key).dropped = True
            self.counters["partials_dropped_for_others"] += 1
        return self._partial_bytes + nbytes <= lim.max_partial_bytes

    def _expire_partials(self) -> None:
        cutoff = self._clock() - int(self.limits.partial_ttl_s * 1e9)
        for key in [k for k, p in self._partials.items() if p.touched_ns < cutoff]:
            self._forget_partial(key).dropped = True
            self.counters["expired_partials"] += 1
