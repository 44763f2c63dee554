"""Bandwidth-hungry (BH) streams: permit, chunks under local preemption, resume, release.

:meth:`AsyncBulkStream.send` delivers one message to a receiver, whole and once:

1. the robot's :class:`~._coordination.Coordinator` requests a permit (all streams of
   a robot share it) and the stream writes only while it is permitted;
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
import contextlib
import logging
import os
import select
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass

from coorp._errors import PeerError

from ._auth import Keyring
from ._coordination import Coordinator
from ._errors import (
    MalformedFrameError,
    PeerTimeoutError,
    RefusedError,
    RuntimeUsageError,
    TransferError,
)
from ._framing import FramedConnection, PeerClosed, client_handshake, recv_first_reply
from ._marking import Marking, mark_socket
from ._preempt import DrainTracker, SharedPlanner, new_gate, within_budget
from ._sockets import (
    Address,
    bytes_outstanding,
    format_address,
    resolve,
    set_notsent_lowat,
    tune_tcp,
)
from ._wire import (
    MAX_SEGMENT_BYTES,
    BulkAccept,
    BulkData,
    BulkDone,
    BulkOpen,
    BulkReject,
    Ping,
    Pong,
)

__all__ = ["AsyncBulkStream", "BulkReceipt", "BulkSettings"]

log = logging.getLogger("coorp.runtime.bulk")

_UNPACED_LOWAT = 1 << 30


@dataclass(frozen=True, slots=True)
class BulkSettings:
    chunk_bytes: int = 16 * 1024
    """Unit the gate admits while LS traffic is protected (one CTT "packet")."""
    unpaced_chunk_bytes: int = 1 << 20
    connect_timeout_s: float = 2.0
    io_timeout_s: float = 30.0
    """No progress at all for this long: the connection is dead, reconnect."""
    reconnect_window_s: float = 30.0
    """Give up (TransferError) after this long without any progress."""
    keepalive_s: float = 5.0
    poll_s: float = 0.001
    """How often outstanding bytes are sampled while waiting (CTT resolution)."""
    ctt_default_ns: int = 5_000_000
    """Drain time per chunk assumed before any was measured."""
    max_pause_ns: int = 100_000_000
    """Starvation guard: after this long paused by local preemption, one chunk goes
    out anyway. The gate itself explores completion times it cannot trust (one probe
    per gap between windows), but only where there is a gap: when LS jitter makes the
    protection windows tile time there is none, and without the guard BH would stop
    for as long as that lasts. A robot's LS send times come from a general-purpose OS
    (threads, GC, a loaded CPU), so that happens in practice."""

    inflight_budget_ns: int | None = 6_000_000
    """Bytes in flight, in time: while LS is protected, a chunk is written only if the
    completion-time table predicts it drains within this long (or nothing is in
    flight). What a holder has in flight waits in the one queue at the bottleneck (the
    access point), and another robot's LS datagram or the leader's command, whose
    instants this robot does not know, waits behind it; the budget bounds that wait
    for every flow, not only this robot's (cf. Linux's airtime queue limits). None:
    no bound (the congestion window decides)."""

    def __post_init__(self) -> None:
        if self.inflight_budget_ns is not None and self.inflight_budget_ns <= 0:
            raise RuntimeUsageError("inflight_budget_ns must be positive (or None)")
        if not 1024 <= self.chunk_bytes <= MAX_SEGMENT_BYTES:
            raise RuntimeUsageError(f"chunk_bytes={self.chunk_bytes}: must be in 1 KiB..16 MiB")
        if not self.chunk_bytes <= self.unpaced_chunk_bytes <= MAX_SEGMENT_BYTES:
            raise RuntimeUsageError("unpaced_chunk_bytes must be in chunk_bytes..16 MiB")


@dataclass(frozen=True, slots=True)
class BulkReceipt:
    """What happened while one message was sent."""

    stream: str
    msg_id: int
    nbytes: int
    started_ns: int
    finished_ns: int
    permit_wait_ns: int
    """Time spent without a permit (waiting for a grant, or for the leader)."""
    preempted_ns: int
    """Time spent paused by local preemption (protection windows, permit end)."""
    preemptions: int
    reconnects: int
    first_write_ns: int | None = None
    """When the first payload byte was written (after the permit); None if the
    receiver already had everything."""

    @property
    def duration_ns(self) -> int:
        return self.finished_ns - self.started_ns


@dataclass(slots=True)
class _Progress:
    permit_wait_ns: int = 0
    preempted_ns: int = 0
    preemptions: int = 0
    reconnects: int = 0
    last_progress_ns: int = 0
    first_write_ns: int | None = None


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
        self._planner = planner
        self.gate = (
            new_gate(planner, default_ns=settings.ctt_default_ns) if planner is not None else None
        )
        self._session = int.from_bytes(os.urandom(8), "big") >> 1
        self._msg_id = 0
        self._conn: FramedConnection | None = None
        self._tracker: DrainTracker | None = None
        self._poller: select.poll | None = None
        self._hangup: select.poll | None = None
        self._paced: bool | None = None
        self._regime = coordinator.regime
        self._first_reply = True
        self._lock = asyncio.Lock()
        self._closed = False
        self.marking: Marking | None = None
        self.counters = {
            "messages": 0,
            "bytes": 0,
            "reconnects": 0,
            "preemptions": 0,
            "revocation_pauses": 0,
            "probes": 0,
            "explorations": 0,
            "ctt_resets": 0,
            "inflight_waits": 0,
            "inflight_max_bytes": 0,
        }

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
        prog = _Progress(last_progress_ns=started)
        self._coord.begin()
        try:
            backoff = 0.05
            while True:
                try:
                    conn = await self._connection(prog)
                    offset = await self._open(conn, msg_id, len(view), started)
                    prog.last_progress_ns = self._clock()
                    await self._pump(conn, msg_id, view, offset, prog)
                    await self._await_done(conn, msg_id)
                    break
                except (RefusedError, TransferError):
                    self._drop_connection()
                    raise
                except (PeerError, PeerClosed, OSError) as exc:
                    self._drop_connection()
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
            self._coord.end()
        finished = self._clock()
        self.counters["messages"] += 1
        self.counters["bytes"] += len(view)
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
        )

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
        self, conn: FramedConnection, msg_id: int, view: memoryview, offset: int, prog: _Progress
    ) -> None:
        s = self.settings
        gate = self.gate
        tracker = self._tracker
        total = len(view)
        off = offset
        paused_since: int | None = None
        budget_since: int | None = None
        io_timeout_ns = round(s.io_timeout_s * 1e9)
        while off < total:
            if not self._coord.permitted(self._clock()):
                await self._wait_for_permit(conn, prog)
                continue
            await self._writable(conn)
            now = self._clock()
            if not self._coord.permitted(now):
                continue  # the wait may have outlasted the permit (or a stall)
            if self._coord.regime != self._regime:
                self._new_regime()
                gate = self.gate
            depth: int | None = None
            n = min(s.unpaced_chunk_bytes, total - off)
            if (
                gate is not None
                and tracker is not None
                and self._planner is not None
                and (self._planner.has_flows() or s.inflight_budget_ns is not None)
            ):
                # Chunks are measured (CTT samples) even before the time model predicts
                # windows, and gated once it does. A robot without LS channels of its
                # own is measured too: the in-flight budget protects the *other*
                # robots' LS datagrams, which wait behind its bytes at the bottleneck.
                self._pace(conn, True)
                tracker.poll(now)
                depth = tracker.depth()
                n = min(s.chunk_bytes, total - off)
                if not within_budget(gate.ctt, depth, now, s.inflight_budget_ns):
                    # Too much in flight: whatever is written now would make every
                    # flow through the bottleneck wait longer than the budget.
                    self.counters["inflight_waits"] += 1
                    if budget_since is None:
                        budget_since = now
                    elif now - budget_since > io_timeout_ns:
                        # Nothing drained for the I/O timeout: a dead peer (its
                        # bytes would stay outstanding forever); reconnect.
                        raise PeerTimeoutError(
                            f"{self.name}: nothing acknowledged for {s.io_timeout_s:.0f} s"
                        )
                    if self._hangup is not None and self._hangup.poll(0):
                        # The receiver closed (it never half-closes mid-message): its
                        # bytes will not drain, reconnect now rather than at the timeout.
                        raise PeerClosed(f"{self.name}: the receiver closed the connection")
                    await self._drain_for(s.poll_s)
                    continue
                budget_since = None
                if gate.window(now) is not None:
                    decision = gate.decide(now, depth)
                    if paused_since is None:
                        paused_since = now
                    if decision.explore:
                        self.counters["explorations"] += 1
                    if not decision.allow and now - paused_since < s.max_pause_ns:
                        prog.preemptions += 1
                        self.counters["preemptions"] += 1
                        until = min(decision.resume_ns or now, paused_since + s.max_pause_ns)
                        await self._hold_until(until, prog)
                        continue
                    if not decision.allow:
                        self.counters["probes"] += 1
                    paused_since = None
                    ends = self._coord.permit_ends_ns()
                    if ends is not None and now + gate.ctt.query(depth, now_ns=now) >= ends:
                        # Whatever we write now would still be in flight when the next
                        # holder starts: let it drain and wait for the permit to end.
                        self.counters["revocation_pauses"] += 1
                        await self._hold_until(ends, prog)
                        continue
            else:
                self._pace(conn, False)
            if prog.first_write_ns is None:
                prog.first_write_ns = self._clock()
            t_write = self._clock()
            await self._write_segment(conn, msg_id, off, view[off : off + n], depth)
            self._coord.note_write(t_write, self._clock())
            if depth is not None:
                inflight = bytes_outstanding(conn.sock)
                if inflight > self.counters["inflight_max_bytes"]:
                    self.counters["inflight_max_bytes"] = inflight
            off += n
            prog.last_progress_ns = self._clock()

    def _new_regime(self) -> None:
        """The robot went into or out of uncoordinated mode: completion times learned
        before describe another contention; start a fresh table."""
        self._regime = self._coord.regime
        if self.gate is not None and self._planner is not None:
            self.gate = new_gate(self._planner, default_ns=self.settings.ctt_default_ns)
            self.counters["ctt_resets"] += 1
            if self._tracker is not None:
                self._tracker.rebind(self.gate)

    async def _wait_for_permit(self, conn: FramedConnection, prog: _Progress) -> None:
        t0 = self._clock()
        while not await self._coord.wait_permitted(self.settings.keepalive_s):
            await conn.send(Ping(0))  # keep the receiver from timing us out
        prog.permit_wait_ns += self._clock() - t0
        prog.last_progress_ns = self._clock()

    async def _drain_for(self, seconds: float) -> None:
        """Let in-flight bytes drain for ``seconds``, sampling completions (not a
        preemption: the permit and the gate would allow a write)."""
        await asyncio.sleep(seconds)
        if self._tracker is not None:
            self._tracker.poll(self._clock())

    async def _hold_until(self, until_ns: int, prog: _Progress) -> None:
        """Write nothing until ``until_ns``, sampling what drains meanwhile."""
        t0 = self._clock()
        now = t0
        while now < until_ns:
            if self._tracker is not None:
                self._tracker.poll(now)
            await asyncio.sleep(min((until_ns - now) / 1e9, self.settings.poll_s))
            now = self._clock()
        prog.preempted_ns += now - t0
        prog.last_progress_ns = now

    async def _write_segment(
        self, conn: FramedConnection, msg_id: int, offset: int, chunk: memoryview, depth: int | None
    ) -> None:
        assert conn.sealer is not None
        async with conn._write_lock:
            header = conn.sealer.seal(BulkData(msg_id, offset, len(chunk)))
            enqueued = self._clock()
            bufs: list[bytes | memoryview] = [header, chunk]
            while bufs:
                try:
                    sent = conn.sock.sendmsg(bufs)
                except BlockingIOError:
                    await self._wait_fd(conn, writable=True)
                    continue
                while sent and bufs:
                    first = bufs[0]
                    if sent >= len(first):
                        sent -= len(first)
                        bufs.pop(0)
                    else:
                        bufs[0] = memoryview(first)[sent:]
                        sent = 0
        if self._tracker is not None:
            self._tracker.on_write(len(header) + len(chunk), enqueued, depth)

    async def _await_done(self, conn: FramedConnection, msg_id: int) -> None:
        """Wait for the receiver's confirmation while the last bytes drain."""
        timeout_ns = int(self.settings.io_timeout_s * 1e9)
        last_outq = -1
        last_change = self._clock()
        while True:
            if await self._wait_fd(conn, writable=False, timeout_s=0.05, must=False):
                msg = await conn.recv()
                if isinstance(msg, BulkDone) and msg.msg_id == msg_id:
                    if self._tracker is not None:
                        self._tracker.settle(self._clock())
                    return
                if isinstance(msg, BulkReject):
                    raise TransferError(f"{self.name}: receiver rejected message: {msg.reason}")
                if not isinstance(msg, Pong):
                    raise MalformedFrameError(f"expected BulkDone({msg_id}), got {msg!r}")
                continue
            now = self._clock()
            if self._tracker is not None:
                self._tracker.poll(now)
            outq = bytes_outstanding(conn.sock)
            if outq != last_outq:
                last_outq, last_change = outq, now
            elif now - last_change > timeout_ns:
                raise PeerTimeoutError(f"{self.name}: no confirmation from the receiver")

    # -- socket plumbing ----------------------------------------------------------------------
    async def _connection(self, prog: _Progress) -> FramedConnection:
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
        self._paced = None
        self._poller = select.poll()
        self._poller.register(sock.fileno(), select.POLLOUT)
        self._hangup = select.poll()
        self._hangup.register(sock.fileno(), select.POLLRDHUP | select.POLLERR | select.POLLHUP)
        if self.gate is not None:
            self._tracker = DrainTracker(
                self.gate, lambda: bytes_outstanding(sock), bucket_bytes=s.chunk_bytes
            )
        prog.last_progress_ns = self._clock()
        return conn

    def _drop_connection(self) -> None:
        if self._tracker is not None:
            self._tracker.reset()
            self._tracker = None
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def _pace(self, conn: FramedConnection, paced: bool) -> None:
        """Bound unsent bytes to one chunk while protecting LS; lift it otherwise."""
        if self._paced is paced:
            return
        self._paced = paced
        set_notsent_lowat(conn.sock, self.settings.chunk_bytes if paced else _UNPACED_LOWAT)

    async def _writable(self, conn: FramedConnection) -> None:
        assert self._poller is not None
        if self._poller.poll(0):
            return
        await self._wait_fd(conn, writable=True)

    async def _wait_fd(
        self,
        conn: FramedConnection,
        *,
        writable: bool,
        timeout_s: float | None = None,
        must: bool = True,
    ) -> bool:
        """Wait until the socket is writable/readable, sampling the outstanding bytes
        every ``poll_s``. Returns False on ``timeout_s`` (if not ``must``)."""
        loop = asyncio.get_running_loop()
        fd = conn.sock.fileno()
        limit = timeout_s if timeout_s is not None else self.settings.io_timeout_s
        deadline = loop.time() + limit
        fut: asyncio.Future[None] = loop.create_future()

        def ready() -> None:
            if not fut.done():
                fut.set_result(None)

        (loop.add_writer if writable else loop.add_reader)(fd, ready)
        try:
            while True:
                remaining = deadline - loop.time()
                if remaining <= 0:
                    if must:
                        raise PeerTimeoutError(f"{self.name}: socket stalled for {limit:.0f} s")
                    return False
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(min(remaining, self.settings.poll_s * 5)):
                        await asyncio.shield(fut)
                if fut.done():
                    return True
                if self._tracker is not None:
                    self._tracker.poll(self._clock())
        finally:
            (loop.remove_writer if writable else loop.remove_reader)(fd)
