"""Bandwidth-hungry (BH) streams: permit, chunks under local preemption, resume, release.

:meth:`AsyncBulkStream.send` delivers one message to a receiver, whole and once:

1. the robot's :class:`~._coordination.Coordinator` requests a permit (all streams of
   a robot share it) and the stream writes only while it is permitted; the robot's
   streams take turns, one message at a time in the order asked
   (``BulkSettings.one_message_at_a_time``), so one receiver at a time sends acks;
2. before each chunk the robot's :class:`~coorp.control.Gate` decides whether the
   chunk would still be outstanding when the next protection window opens (see
   :mod:`._preempt`); if so the stream pauses until the window has passed. Near the
   end of a permit it also stops early, so that what it wrote drains before the next
   holder starts. And it keeps its bytes in flight within a budget in time
   (``BulkSettings.inflight_budget_ns``): other robots' LS waits behind them at the
   bottleneck;
3. after a revocation the stream waits for a new permit and continues on the same
   connection; after a broken connection it reconnects and the receiver says how
   many bytes it already has (no byte lost, none sent twice);
4. when the receiver confirms the whole message, the permit is released.

With no LS flow to protect (no window predicted), chunks are large and the unsent
bound is lifted: that is the "not paced" fast path.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass

from coorp._errors import PeerError
from coorp.control import Gate

from .._errors import (
    MalformedFrameError,
    PeerTimeoutError,
    RefusedError,
    RuntimeUsageError,
    TransferError,
)
from ..wire import (
    Address,
    BulkAccept,
    BulkData,
    BulkDone,
    BulkOpen,
    BulkReject,
    FramedConnection,
    Keyring,
    Marking,
    PeerClosed,
    Ping,
    Pong,
    bytes_outstanding,
    client_handshake,
    format_address,
    mark_socket,
    recv_first_reply,
    resolve,
    tune_tcp,
)
from ._coordination import Coordinator
from ._pacing import (
    BulkSettings,
    Pacer,
    Progress,
    new_counters,
)
from ._preempt import SharedPlanner

__all__ = ["AsyncBulkStream", "BulkReceipt", "BulkSettings"]

log = logging.getLogger("coorp.runtime.bulk")


@dataclass(frozen=True, slots=True)
class BulkReceipt:
    """What happened while one message was sent."""

    stream: str
    msg_id: int
    nbytes: int
    started_ns: int
    finished_ns: int
    permit_wait_ns: int
    """Time spent without a permit (waiting for a grant, or for the leader), or
    waiting for the robot's earlier messages (``BulkSettings.one_message_at_a_time``)."""
    preempted_ns: int
    """Time spent paused by local preemption (protection windows, permit end)."""
    preemptions: int
    reconnects: int
    first_write_ns: int | None = None
    """When the first payload byte was written (after the permit); None if the
    receiver already had everything."""
    last_write_ns: int | None = None
    """When the last payload byte was written: the robot's next message and the next
    permit holder may start then, while these bytes drain."""

    @property
    def duration_ns(self) -> int:
        return self.finished_ns - self.started_ns


class AsyncBulkStream:
    """A named BH stream from this robot to one receiver; one message at a time."""

    def __init__(
        self,
        *,
        name: str,
        robot: str,
        dest: Address,
        key: Keyring,
        coordinator: Coordinator,
        planner: SharedPlanner | None,
        settings: BulkSettings = BulkSettings(),
        clock: Callable[[], int] = time.monotonic_ns,
    ) -> None:
        self.name = name
        self.robot = robot
        self.dest = dest
        self._key = key
        self._coord = coordinator
        self.settings = settings
        self._clock = clock
        self.counters = new_counters()
        self._pacer = Pacer(
            name=name,
            coordinator=coordinator,
            planner=planner,
            settings=settings,
            clock=clock,
            counters=self.counters,
        )
        self._session = int.from_bytes(os.urandom(8), "big") >> 1
        self._msg_id = 0
        self._conn: FramedConnection | None = None
        self._first_reply = True
        self._lock = asyncio.Lock()
        self._closed = False
        self.marking: Marking | None = None
        #: Payload bytes written of the message under way (``counters["bytes"]`` counts
        #: whole messages): a rate taken between two reports stays smooth.
        self.progress_bytes = 0

    @property
    def gate(self) -> Gate | None:
        """The gate of this stream's socket (None without local preemption)."""
        return self._pacer.gate

    # -- public -----------------------------------------------------------------------------
    async def send(
        self, data: bytes | bytearray | memoryview, *, timeout_s: float | None = None
    ) -> BulkReceipt:
        """Deliver ``data`` to the receiver (see the module docstring); returns a receipt.

        Raises :class:`TransferError` when the receiver refuses the message or cannot
        be reached for ``reconnect_window_s``; ``TimeoutError`` after ``timeout_s``.
        """
        try:
            view = memoryview(data).cast("B")
        except TypeError:
            raise RuntimeUsageError("bulk data must be a C-contiguous bytes-like object") from None
        async with self._lock:
            if self._closed:
                raise RuntimeUsageError(f"bulk stream {self.name!r} is closed")
            self._msg_id += 1
            async with asyncio.timeout(timeout_s):
                return await self._send(self._msg_id, view)

    async def close(self) -> None:
        self._closed = True
        self._drop_connection()

    # -- one message --------------------------------------------------------------------------
    async def _send(self, msg_id: int, view: memoryview) -> BulkReceipt:
        started = self._clock()
        prog = Progress(last_progress_ns=started)
        claim = _Claim(self._coord, self.settings.one_message_at_a_time)
        claim.begin()  # counted as wanting the permit while it waits its turn
        try:
            # Connect and open while the robot's earlier messages go out: the set-up
            # round trips overlap them instead of following them.
            prepared = await self._prepare(msg_id, view, started, prog)
            if await claim.take_turn():
                # Waiting for the robot's other messages is waiting for its permit;
                # the reconnect window starts once this one may go.
                prog.last_progress_ns = self._clock()
                turn_wait = prog.last_progress_ns - started
                prog.permit_wait_ns += turn_wait
                self.counters["permit_wait_ns"] += turn_wait
            backoff = 0.05
            while True:
                try:
                    if prepared is not None and self._conn is prepared[0]:
                        conn, offset = prepared
                    else:
                        conn = await self._connection(prog)
                        offset = await self._open(conn, msg_id, len(view), started)
                    prepared = None
                    prog.last_progress_ns = self._clock()
                    await claim.again()  # after a reconnect that followed a hand-over
                    await self._pump(conn, msg_id, view, offset, prog)
                    # Every byte is written; what is in flight drains within the
                    # in-flight budget. Hand the turn and (if no other message of this
                    # robot wants it) the permit on now, not after the receiver's
                    # confirmation: the next sender's first bytes reach the bottleneck
                    # about when these have drained.
                    claim.hand_over()
                    await self._await_done(conn, msg_id)
                    break
                except (RefusedError, TransferError):
                    self._drop_connection()
                    raise
                except (PeerError, PeerClosed, OSError) as exc:
                    self._drop_connection()
                    prepared = None
                    waited = (self._clock() - prog.last_progress_ns) / 1e9
                    if waited > self.settings.reconnect_window_s:
                        raise TransferError(
                            f"{self.name}: no progress to {format_address(self.dest)} for "
                            f"{waited:.1f} s ({exc})"
                        ) from None
                    log.info(
                        "%s: connection to %s lost (%s); resuming",
                        self.name,
                        format_address(self.dest),
                        exc,
                    )
                    prog.reconnects += 1
                    await asyncio.sleep(backoff)
                    backoff = min(2 * backoff, 1.0)
        except RefusedError as exc:
            raise TransferError(f"{self.name}: receiver refused: {exc}") from None
        except BaseException:
            # Timed out or cancelled, maybe mid-segment: the connection's framing can
            # no longer be trusted. The next message starts on a fresh one.
            self._drop_connection()
            raise
        finally:
            claim.hand_over()
        finished = self._clock()
        self.counters["messages"] += 1
        self.counters["bytes"] += len(view)
        self.progress_bytes = 0
        self.counters["reconnects"] += prog.reconnects
        return BulkReceipt(
            self.name,
            msg_id,
            len(view),
            started,
            finished,
            prog.permit_wait_ns,
            prog.preempted_ns,
            prog.preemptions,
            prog.reconnects,
            prog.first_write_ns,
            prog.last_write_ns,
        )

    async def _prepare(
        self, msg_id: int, view: memoryview, started: int, prog: Progress
    ) -> tuple[FramedConnection, int] | None:
        """Connect and open the message ahead of its turn; None if that failed (the
        send loop then tries again, with its reconnect window). A refusal is final."""
        try:
            conn = await self._connection(prog)
            return conn, await self._open(conn, msg_id, len(view), started)
        except (RefusedError, TransferError):
            self._drop_connection()
            raise
        except (PeerError, PeerClosed, OSError):
            self._drop_connection()
            return None

    async def _open(self, conn: FramedConnection, msg_id: int, total: int, sent_ns: int) -> int:
        await conn.send(BulkOpen(self.name, self._session, msg_id, total, sent_ns))
        reply = await recv_first_reply(conn) if self._first_reply else await conn.recv()
        self._first_reply = False
        if isinstance(reply, BulkReject):
            raise TransferError(f"{self.name}: receiver rejected message: {reply.reason}")
        if not isinstance(reply, BulkAccept) or reply.msg_id != msg_id:
            raise MalformedFrameError(f"expected BulkAccept({msg_id}), got {reply!r}")
        if reply.offset > total:
            raise MalformedFrameError(f"receiver claims {reply.offset} of {total} bytes")
        return reply.offset

    async def _pump(
        self, conn: FramedConnection, msg_id: int, view: memoryview, offset: int, prog: Progress
    ) -> None:
        total = len(view)
        off = offset

        async def keepalive() -> None:
            await conn.send(Ping(0))  # keep the receiver from timing us out

        while off < total:
            n, depth = await self._pacer.next_chunk(total - off, prog, keepalive=keepalive)
            if prog.first_write_ns is None:
                prog.first_write_ns = self._clock()
            await self._write_segment(conn, msg_id, off, view[off : off + n], depth)
            off += n
            self.progress_bytes = off
            prog.last_progress_ns = prog.last_write_ns = self._clock()

    async def _write_segment(
        self, conn: FramedConnection, msg_id: int, offset: int, chunk: memoryview, depth: int | None
    ) -> None:
        assert conn.sealer is not None
        async with conn._write_lock:
            header = conn.sealer.seal(BulkData(msg_id, offset, len(chunk)))
            await self._pacer.write([header, chunk], depth)

    async def _await_done(self, conn: FramedConnection, msg_id: int) -> None:
        """Wait for the receiver's confirmation while the last bytes drain."""
        timeout_ns = int(self.settings.io_timeout_s * 1e9)
        last_outq = -1
        last_change = self._clock()
        while True:
            if await self._pacer.wait_fd(writable=False, timeout_s=0.05, must=False):
                msg = await conn.recv()
                if isinstance(msg, BulkDone) and msg.msg_id == msg_id:
                    self._pacer.settle()
                    return
                if isinstance(msg, BulkReject):
                    raise TransferError(f"{self.name}: receiver rejected message: {msg.reason}")
                if not isinstance(msg, Pong):
                    raise MalformedFrameError(f"expected BulkDone({msg_id}), got {msg!r}")
                continue
            now = self._clock()
            self._pacer.poll()
            outq = bytes_outstanding(conn.sock)
            if outq != last_outq:
                last_outq, last_change = outq, now
            elif now - last_change > timeout_ns:
                raise PeerTimeoutError(f"{self.name}: no confirmation from the receiver")

    # -- socket plumbing ----------------------------------------------------------------------
    async def _connection(self, prog: Progress) -> FramedConnection:
        if self._conn is not None and not self._conn.closed:
            return self._conn
        s = self.settings
        family, sockaddr = resolve(self.dest, socket.SOCK_STREAM)
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            self.marking = mark_socket(sock, "bh")
            tune_tcp(sock)
            # A peer that stops acknowledging fails our writes within the io timeout
            # instead of TCP's default of many minutes.
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT, int(s.io_timeout_s * 1000))
            sock.setblocking(False)
            loop = asyncio.get_running_loop()
            async with asyncio.timeout(s.connect_timeout_s):
                await loop.sock_connect(sock, sockaddr)
        except TimeoutError:
            sock.close()
            raise PeerTimeoutError(f"connect to {format_address(self.dest)} timed out") from None
        except BaseException:
            sock.close()
            raise
        conn = FramedConnection(
            sock,
            peer=format_address(self.dest),
            read_timeout_s=s.io_timeout_s,
            write_timeout_s=s.io_timeout_s,
        )
        try:
            await client_handshake(
                conn, self._key, robot=self.robot, role="sender", service="receiver"
            )
        except BaseException:
            conn.close()
            raise
        self._conn = conn
        self._first_reply = True
        self._pacer.attach(sock)
        prog.last_progress_ns = self._clock()
        return conn

    def _drop_connection(self) -> None:
        self._pacer.detach()
        if self._conn is not None:
            self._conn.close()
            self._conn = None


class _Claim:
    """One message's claim on the robot's permit and on its turn among the robot's
    streams (``BulkSettings.one_message_at_a_time``), handed on once its last byte is
    written (:meth:`hand_over`) and taken again if the message must be resumed after a
    reconnect (:meth:`again`). Its place in the line of turns is taken when the
    message is asked (:meth:`begin`), so turns keep the order of the ``send`` calls
    however long each message's connection takes to set up."""

    def __init__(self, coord: Coordinator, turns: bool) -> None:
        self._coord = coord
        self._turn = coord.turn if turns else None
        self._wants = False
        self._has_turn = False
        self._waiting: asyncio.Task[bool] | None = None

    def begin(self) -> None:
        if not self._wants:
            self._wants = True
            self._coord.begin()
        if self._turn is not None and not self._has_turn and self._waiting is None:
            self._waiting = asyncio.ensure_future(self._turn.acquire())

    async def take_turn(self) -> bool:
        """Wait for this robot's earlier messages; True if there was a turn to wait for."""
        if self._waiting is None:
            return False
        await self._waiting
        self._waiting = None
        self._has_turn = True
        return True

    async def again(self) -> None:
        if not self._wants:
            self.begin()
            await self.take_turn()

    def hand_over(self) -> None:
        waiting, self._waiting = self._waiting, None
        if waiting is not None:  # cancelled while in line: leave it (or pass the turn on)
            if waiting.done() and not waiting.cancelled():
                self._has_turn = True
            else:
                waiting.cancel()
        if self._has_turn:
            assert self._turn is not None
            self._has_turn = False
            self._turn.release()
        if self._wants:
            self._wants = False
            self._coord.end()
