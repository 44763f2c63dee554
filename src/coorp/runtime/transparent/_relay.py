"""Transparent mode's bulk interception: a local TCP relay under the robot's permit.

The kernel holds the SYN of every bulk connection until the gatekeeper
(:mod:`._admission`) has connected to the destination as the program
(:mod:`._identity`); then it redirects the connection (:mod:`._nft`) to
``127.0.0.1:relay_port``. :class:`Relay` accepts it, takes the gatekeeper's
:class:`~._admission.Ticket` for it (a connection without one — made to the relay port
directly, or never approved — is reset, and nothing is connected for it) and copies the
bytes:

* **application → destination** through a :class:`~._pacing.Pacer`, the same engine
  as Coorp's bulk streams: only while the robot holds the permit, within the
  in-flight budget, paused by the gate ahead of this robot's LS sends. A connection
  with bytes to send counts as an active bulk stream of the robot (all of them share
  one permit); one idle for ``idle_release_ns`` stops counting (what it has in flight
  drains while the next holder starts, as a bulk stream hands over at its last byte),
  and the last one to stop releases the permit.
* **destination → application** as it comes (that direction is the peer's traffic).

Bytes are copied in order and exactly once, through a buffer of the relay's
:class:`~._budget.BufferPool` held only across non-blocking system calls: the bytes are
peeked, written as far as the receiving socket takes them, and only those are taken
from the sending socket. A slow or stalled receiver (a program that does not read its
download, a destination that does not read an upload) keeps the bytes in the sender's
socket, never a buffer of the relay, so it cannot starve the other connections' copies;
a waiting connection holds nothing (its pacer is made at its first byte). The relay
reads from the application only what it may send next, so the application feels
backpressure from its own socket buffers, never an unbounded queue. A half-close
(``shutdown(SHUT_WR)``) is passed on once every byte before it is out; anything else —
a reset on either side, an error, the relay closing, the agent dying — ends both sides
with a reset (:mod:`._endings`).

**Inbound** (``inbound=True``, server-side selectors): the kernel redirects connections
*other* hosts open to a selected listening port here (``bh_inbound``, prerouting). The
admission is :class:`~._admission.LocalServer`: it checks the original destination is
a server of this host (never the relay's own port, never another host: a forwarded
connection is reset), within the same flow cap, and the relay then connects to that
server itself. The roles swap: what the local server sends back goes to the remote
peer through the :class:`~._pacing.Pacer`, under this robot's permit; what the peer
sends goes to the server as it comes. Either way the paced ("up") direction is the
bytes this host puts on the air; buffers, endings and half-closes are the outbound
relay's.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import fcntl
import functools
import logging
import select
import socket
import struct
import termios
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from .._counters import LogLimiter
from .._errors import PeerTimeoutError
from ..robot import (
    BulkSettings,
    Coordinator,
    Pacer,
    Progress,
    SharedPlanner,
    new_counters,
)
from ..wire import PeerClosed, bytes_outstanding, format_address, mark_socket, tune_tcp
from ._admission import Ticket
from ._budget import BufferPool
from ._endings import hold_reset, release_clean, reset

__all__ = ["Admission", "Relay", "RelayFlow", "original_destination"]

log = logging.getLogger("coorp.runtime.transparent")

_SO_ORIGINAL_DST = 80
#: Receive buffer of the application side: what the relay may hold before the
#: application's own writes block.
_APP_RCVBUF = 256 * 1024
_FD_ERRORS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})


def original_destination(sock: socket.socket) -> tuple[str, int] | None:
    """Where a redirected connection was going (None: it was not redirected)."""
    try:
        raw = sock.getsockopt(socket.SOL_IP, _SO_ORIGINAL_DST, 16)
    except OSError:
        return None
    port, addr = struct.unpack("!2xH4s8x", raw)
    dest = (socket.inet_ntoa(addr), port)
    with contextlib.suppress(OSError):
        if dest == sock.getsockname()[:2]:
            return None  # the kernel's record says it was addressed to us, not redirected
    return dest


def _inq(sock: socket.socket) -> int:
    """Bytes waiting to be read on ``sock``."""
    buf = fcntl.ioctl(sock.fileno(), termios.FIONREAD, b"\0\0\0\0")
    return int(struct.unpack("i", buf)[0])


class Admission(Protocol):
    """Who decides which accepted connections are relayed (:class:`~._admission.Gatekeeper`)."""

    def claim(self, peer: tuple[str, int], dest: tuple[str, int] | None) -> Ticket | None: ...

    def release(self, ticket: Ticket) -> None: ...


@dataclass(slots=True)
class RelayFlow:
    """One intercepted connection."""

    fid: int
    app: str
    dest: str
    started_ns: int
    identity: str = ""
    bytes_up: int = 0
    bytes_down: int = 0
    active: bool = False
    """Has bytes to send (counts towards the robot's permit)."""
    ended: str | None = None
    counters: dict[str, int] = field(default_factory=new_counters)

    def summary(self) -> dict[str, Any]:
        return {
            "id": self.fid,
            "app": self.app,
            "dest": self.dest,
            "identity": self.identity,
            "bytes_up": self.bytes_up,
            "bytes_down": self.bytes_down,
            "active": self.active,
            "ended": self.ended,
        }


class Relay:
    """Accepts redirected connections and relays them (see the module docstring)."""

    def __init__(
        self,
        *,
        port: int,
        coordinator: Coordinator,
        planner: SharedPlanner | None,
        settings: BulkSettings,
        idle_release_ns: int,
        admission: Admission,
        pool: BufferPool,
        limiter: LogLimiter | None = None,
        clock: Callable[[], int] = time.monotonic_ns,
        host: str = "127.0.0.1",
        destination: Callable[[socket.socket], tuple[str, int] | None] = original_destination,
        inbound: bool = False,
    ) -> None:
        self.host = host
        self.port = port
        #: Connections other hosts opened to this one (see the module docstring).
        self.inbound = inbound
        self._coord = coordinator
        self._planner = planner
        self.settings = settings
        self.idle_release_ns = idle_release_ns
        self.admission = admission
        self.pool = pool
        self._clock = clock
        self.limiter = limiter if limiter is not None else LogLimiter(log, clock)
        #: Where an accepted connection was going (the kernel's NAT record; tests on
        #: loopback inject their own).
        self._destination = destination
        self._listener: socket.socket | None = None
        self._accept_task: asyncio.Task[None] | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self.flows: dict[int, RelayFlow] = {}
        self._next_id = 1
        self.recent: list[RelayFlow] = []
        """The latest ended flows (at most 64), newest last."""
        self.counters = {
            "accepted": 0,
            "not_redirected": 0,
            "resets": 0,
            "completed": 0,
            "refused": 0,
            "accept_fd_errors": 0,
            "bytes_up": 0,
            "bytes_down": 0,
        }
        #: Summed pacer counters of every flow (where the time went).
        self.pacing = new_counters()

    async def start(self) -> None:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, _APP_RCVBUF)
            sock.bind((self.host, self.port))
            sock.listen(1024)
            sock.setblocking(False)
        except OSError as exc:
            sock.close()
            raise OSError(
                exc.errno, f"relay cannot listen on {self.host}:{self.port}: {exc.strerror}"
            ) from None
        self._listener = sock
        self.port = sock.getsockname()[1]
        self._accept_task = asyncio.get_running_loop().create_task(
            self._accept_loop(), name="coorp-relay-accept"
        )

    async def close(self) -> None:
        if self._accept_task is not None:
            self._accept_task.cancel()
            with contextlib.suppress(BaseException):
                await self._accept_task
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._listener is not None:
            self._listener.close()
            self._listener = None

    def stats(self) -> dict[str, Any]:
        return {
            **self.counters,
            "open": len(self.flows),
            "active": sum(1 for f in self.flows.values() if f.active),
            "buffers_in_use": self.pool.in_use,
            "buffer_bytes_allocated": self.pool.allocated_bytes,
            "buffer_waits": self.pool.counters["waits"],
            "flows": [f.summary() for f in self.flows.values()],
            "pacing": dict(self.pacing),
        }

    # -- accepting ------------------------------------------------------------------------------
    async def _accept_loop(self) -> None:
        loop = asyncio.get_running_loop()
        assert self._listener is not None
        backoff = 0.01
        while True:
            try:
                app, peer = await loop.sock_accept(self._listener)
            except OSError as exc:
                if exc.errno not in _FD_ERRORS:
                    raise
                self.counters["accept_fd_errors"] += 1
                self.limiter.log(
                    "relay-accept-fd",
                    logging.ERROR,
                    "relay: cannot accept (%s); retrying in %.2f s",
                    exc.strerror,
                    backoff,
                )
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 1.0)
                continue
            backoff = 0.01
            hold_reset(app)
            dest = self._destination(app)
            if self.inbound and dest is not None and dest[1] == self.port:
                dest = None  # made to this listener directly: its own "original" address
            ticket = self.admission.claim(peer, dest)
            if ticket is None:
                # Addressed to the relay port itself, or never approved: nothing is
                # connected for it.
                self.counters["not_redirected"] += 1
                reset(app)
                continue
            self.counters["accepted"] += 1
            flow = RelayFlow(
                self._next_id,
                format_address(peer),
                format_address(ticket.dest),
                self._clock(),
                identity=ticket.identity.describe(),
            )
            self._next_id += 1
            self.flows[flow.fid] = flow
            task = loop.create_task(self._serve(flow, app, ticket), name=f"coorp-relay-{flow.fid}")
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    # -- one connection -------------------------------------------------------------------------
    async def _serve(self, flow: RelayFlow, app: socket.socket, ticket: Ticket) -> None:
        app.setblocking(False)
        up = ticket.up
        if not ticket.connected:
            # Inbound: the local server is connected to now (the peer's handshake with
            # the kernel is already complete; a server that refuses resets the peer).
            try:
                async with asyncio.timeout(self.settings.connect_timeout_s):
                    await asyncio.get_running_loop().sock_connect(up, ticket.dest)
            except (OSError, TimeoutError) as exc:
                self.counters["refused"] += 1
                flow.ended = f"destination: {getattr(exc, 'strerror', None) or exc or 'timeout'}"
                log.info("relay: %s -> %s: %s", flow.app, flow.dest, flow.ended)
                reset(app)
                reset(up)
                self.admission.release(ticket)
                self.flows.pop(flow.fid, None)
                self.recent.append(flow)
                del self.recent[:-64]
                return
            ticket.connected = True
        # The paced side is the one towards the remote peer: the destination for a
        # connection a program here opened, the peer for one this host accepted.
        local, remote = (up, app) if self.inbound else (app, up)
        if self.inbound:
            mark_socket(remote, "bh")
            tune_tcp(remote)
        pacer: list[Pacer] = []  # made at the first byte to send
        upward = asyncio.create_task(self._upward(flow, local, remote, pacer))
        downward = asyncio.create_task(self._downward(flow, remote, local))
        clean = False
        try:
            done, _ = await asyncio.wait({upward, downward}, return_when=asyncio.FIRST_EXCEPTION)
            for t in done:
                t.result()  # a reset on either side ends both
            if upward.done() and downward.done():
                clean = True
                flow.ended = "closed"
                self.counters["completed"] += 1
        except (ConnectionError, PeerTimeoutError, PeerClosed, OSError) as exc:
            flow.ended = f"reset: {exc}"
        except asyncio.CancelledError:
            # The relay is closing with the connection still open: a reset, so that
            # neither end takes a cut-off transfer for a finished one.
            flow.ended = "reset: relay closed"
            raise
        finally:
            for t in (upward, downward):
                t.cancel()
            await asyncio.gather(upward, downward, return_exceptions=True)
            if pacer:
                pacer[0].detach()
            self._deactivate(flow)
            if clean:
                app.close()
                up.close()
            else:
                self.counters["resets"] += 1
                reset(app)
                reset(up)
            self.admission.release(ticket)
            for k, v in flow.counters.items():
                if k == "inflight_max_bytes":
                    self.pacing[k] = max(self.pacing[k], v)
                else:
                    self.pacing[k] += v
            self.flows.pop(flow.fid, None)
            self.recent.append(flow)
            del self.recent[:-64]

    def _activate(self, flow: RelayFlow) -> None:
        if not flow.active:
            flow.active = True
            self._coord.begin()

    def _deactivate(self, flow: RelayFlow) -> None:
        if flow.active:
            flow.active = False
            self._coord.end()

    def _pacer(self, flow: RelayFlow, up: socket.socket) -> Pacer:
        pacer = Pacer(
            name=f"relay {flow.dest}",
            coordinator=self._coord,
            planner=self._planner,
            settings=self.settings,
            clock=self._clock,
            counters=flow.counters,
        )
        pacer.attach(up)
        return pacer

    async def _upward(
        self, flow: RelayFlow, app: socket.socket, up: socket.socket, made: list[Pacer]
    ) -> None:
        """Application → destination, paced; ends with a half-close on EOF."""
        prog = Progress(last_progress_ns=self._clock())
        idle_s = self.idle_release_ns / 1e9
        while True:
            # Bytes already waiting: no trip through the event loop (two epoll_ctl
            # calls and a wake-up per chunk otherwise).
            pending = _inq(app) if flow.active else 0
            if pending == 0:
                timeout = idle_s if flow.active else None
                t0 = self._clock()
                readable = await _wait_readable(app, timeout)
                if flow.active:
                    flow.counters["source_wait_ns"] += self._clock() - t0
                pending = _inq(app) if readable else 0
            else:
                readable = True
                await asyncio.sleep(0)  # the other flows and the coordinator run too
            if not readable:
                # Nothing more to send for a while: stop counting towards the permit.
                # What is in flight (within the in-flight budget) drains while the next
                # holder starts, as a bulk stream hands over at its last byte.
                if made:
                    made[0].poll()
                if not await _wait_readable(app, 0):
                    if made:
                        made[0].settle()
                    self._deactivate(flow)
                continue
            if pending == 0:
                # Readable with nothing to read: end of stream (or an error, which
                # recv raises), or a wake-up with nothing behind it.
                try:
                    peek = app.recv(1, socket.MSG_PEEK)
                except BlockingIOError:
                    continue
                if peek == b"":
                    if made:
                        await self._drain(up, made[0])
                        made[0].settle()
                    # Every byte of the program is out: from now on a close of this
                    # side ends it cleanly, even if the agent dies.
                    release_clean(up)
                    up.shutdown(socket.SHUT_WR)
                    self._deactivate(flow)
                    return
                continue
            self._activate(flow)
            if not made:
                made.append(self._pacer(flow, up))
            pacer = made[0]
            n, depth = await pacer.next_chunk(pending, prog)
            try:
                sent = await self._copy(app, functools.partial(pacer.write_some, depth=depth), n)
            except EOFError:
                continue  # EOF is handled at the top
            flow.bytes_up += sent
            self.counters["bytes_up"] += sent

    async def _drain(self, up: socket.socket, pacer: Pacer) -> None:
        """Wait (bounded by the I/O timeout) until every byte sent upward is
        acknowledged, sampling completions."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.settings.io_timeout_s
        while bytes_outstanding(up) > 0:
            if loop.time() > deadline:
                raise PeerTimeoutError(f"{format_address(up.getpeername())}: nothing acknowledged")
            pacer.poll()
            await asyncio.sleep(self.settings.poll_s)
        pacer.poll()

    async def _downward(self, flow: RelayFlow, up: socket.socket, app: socket.socket) -> None:
        """Destination → application, as it comes; ends with a half-close on EOF."""

        def send(view: memoryview) -> int:
            try:
                return app.send(view)
            except BlockingIOError:
                return 0

        while True:
            await _wait_readable(up, None)
            await _wait_writable(app)
            try:
                sent = await self._copy(up, send, 1 << 30)
            except EOFError:
                # The destination's whole stream is in the program's socket: a close of
                # this side now ends it cleanly.
                release_clean(app)
                app.shutdown(socket.SHUT_WR)
                return
            flow.bytes_down += sent
            self.counters["bytes_down"] += sent

    async def _copy(
        self, src: socket.socket, write: Callable[[memoryview], int], limit: int
    ) -> int:
        """Copy what ``src`` holds (up to ``limit``) and ``write`` takes now, without
        waiting while a buffer is held: the bytes are peeked, written, and only what was
        written is taken from ``src`` (a slow receiver keeps them in ``src``, not in a
        buffer of the pool). EOFError at the end of ``src``'s stream."""
        buf = await self.pool.get()
        try:
            view = memoryview(buf)[: min(limit, len(buf))]
            try:
                got = src.recv_into(view, len(view), socket.MSG_PEEK)
            except BlockingIOError:
                return 0
            if got == 0:
                raise EOFError
            sent = write(view[:got])
            if sent:
                src.recv_into(view, sent)  # exactly the bytes that went
            return sent
        finally:
            self.pool.put(buf)


async def _wait_readable(sock: socket.socket, timeout_s: float | None) -> bool:
    """True once ``sock`` is readable (data, EOF or an error); False after ``timeout_s``."""
    loop = asyncio.get_running_loop()
    fut: asyncio.Future[None] = loop.create_future()
    fd = sock.fileno()

    def ready() -> None:
        if not fut.done():
            fut.set_result(None)

    loop.add_reader(fd, ready)
    try:
        if timeout_s is None:
            await fut
            return True
        if timeout_s <= 0:
            await asyncio.sleep(0)
            return fut.done() or _poll_readable(sock)
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout_s):
                await fut
        # A timeout cancels the future it interrupted: cancelled is not readable (this
        # read as "readable" before, so an idle connection never stopped counting
        # towards the permit and woke every idle_release_ns, forever).
        return fut.done() and not fut.cancelled()
    finally:
        loop.remove_reader(fd)


async def _wait_writable(sock: socket.socket) -> None:
    """Until ``sock`` takes bytes (or has an error, which the write then raises)."""
    p = select.poll()
    p.register(sock.fileno(), select.POLLOUT)
    if p.poll(0):
        return
    loop = asyncio.get_running_loop()
    fut: asyncio.Future[None] = loop.create_future()

    def ready() -> None:
        if not fut.done():
            fut.set_result(None)

    loop.add_writer(sock.fileno(), ready)
    try:
        await fut
    finally:
        loop.remove_writer(sock.fileno())


def _poll_readable(sock: socket.socket) -> bool:
    p = select.poll()
    p.register(sock.fileno(), select.POLLIN | select.POLLRDHUP)
    return bool(p.poll(0))
