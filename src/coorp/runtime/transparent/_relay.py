"""Transparent mode's bulk interception: a local TCP relay under the robot's permit.

The kernel redirects the first packet of every bulk connection (:mod:`._nft`) to
``127.0.0.1:relay_port``. For each connection :class:`Relay` accepts, it reads the
original destination (``SO_ORIGINAL_DST``), opens its own connection there (with
``SO_MARK`` = ``relay_mark``, so the kernel lets it through, and marked AC_BE), and
copies the bytes:

* **application → destination** through a :class:`~._pacing.Pacer`, the same engine
  as Coorp's bulk streams: only while the robot holds the permit, within the
  in-flight budget, paused by the gate ahead of this robot's LS sends. A connection
  with bytes to send counts as an active bulk stream of the robot (all of them share
  one permit); one idle for ``idle_release_ns`` stops counting (what it has in flight
  drains while the next holder starts), and the last one to stop releases the permit.
* **destination → application** as it comes (that direction is the peer's traffic).

Bytes are copied in order and exactly once. The relay reads from the application only
what it may send next, so the application feels backpressure from its own socket
buffers, never an unbounded queue. A half-close (``shutdown(SHUT_WR)``) is passed on
once every byte before it is out; a reset on either side resets the other; a
destination that refuses the connection resets the application's.

Only connections the kernel redirected are relayed: one made to the relay port
directly has no original destination and is closed.

**Inbound** (``inbound=True``, server-side selectors): the kernel redirects connections
*other* hosts open to a selected listening port here (``bh_inbound``, prerouting). The
relay connects to the local server itself (the original destination, an address of
this host) and the roles swap: what the local server sends back goes to the remote
peer through the :class:`~._pacing.Pacer`, under this robot's permit; what the peer
sends goes to the server as it comes. Either way the paced direction is the bytes
this host puts on the air.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import fcntl
import logging
import select
import socket
import struct
import termios
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

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

__all__ = ["Relay", "RelayFlow", "original_destination"]

log = logging.getLogger("coorp.runtime.transparent")

_SO_ORIGINAL_DST = 80
_COPY_BYTES = 256 * 1024
#: Receive buffer of the application side: what the relay may hold before the
#: application's own writes block.
_APP_RCVBUF = 256 * 1024


def original_destination(sock: socket.socket) -> tuple[str, int] | None:
    """Where a redirected connection was going (None: it was not redirected)."""
    try:
        raw = sock.getsockopt(socket.SOL_IP, _SO_ORIGINAL_DST, 16)
    except OSError:
        return None
    port, addr = struct.unpack("!2xH4s8x", raw)
    return socket.inet_ntoa(addr), port


def _inq(sock: socket.socket) -> int:
    """Bytes waiting to be read on ``sock``."""
    buf = fcntl.ioctl(sock.fileno(), termios.FIONREAD, b"\0\0\0\0")
    return int(struct.unpack("i", buf)[0])


def _reset(sock: socket.socket) -> None:
    """Close with a RST (SO_LINGER 0): the peer sees the connection reset."""
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


@dataclass(slots=True)
class RelayFlow:
    """One intercepted connection."""

    fid: int
    app: str
    dest: str
    started_ns: int
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
        mark: int,
        coordinator: Coordinator,
        planner: SharedPlanner | None,
        settings: BulkSettings,
        idle_release_ns: int,
        clock: Callable[[], int] = time.monotonic_ns,
        host: str = "127.0.0.1",
        max_flows: int = 1024,
        destination: Callable[[socket.socket], tuple[str, int] | None] = original_destination,
        inbound: bool = False,
    ) -> None:
        self.host = host
        self.port = port
        #: Connections other hosts opened to this one (see the module docstring).
        self.inbound = inbound
        self.mark = mark
        self._coord = coordinator
        self._planner = planner
        self.settings = settings
        self.idle_release_ns = idle_release_ns
        self._clock = clock
        self.max_flows = max_flows
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
            "refused": 0,
            "resets": 0,
            "completed": 0,
            "over_limit": 0,
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
            sock.listen(128)
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
            "flows": [f.summary() for f in self.flows.values()],
            "pacing": dict(self.pacing),
        }

    # -- accepting ------------------------------------------------------------------------------
    async def _accept_loop(self) -> None:
        loop = asyncio.get_running_loop()
        assert self._listener is not None
        while True:
            try:
                app, peer = await loop.sock_accept(self._listener)
            except OSError as exc:
                if exc.errno in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
                    log.warning("relay: cannot accept (%s); retrying in 0.1 s", exc.strerror)
                    await asyncio.sleep(0.1)
                    continue
                raise
            dest = self._destination(app)
            if dest is None or (self.inbound and dest[1] == self.port):
                # Not redirected (made to our port directly: its "original" destination
                # is this listener).
                self.counters["not_redirected"] += 1
                app.close()
                continue
            if len(self.flows) >= self.max_flows:
                self.counters["over_limit"] += 1
                _reset(app)
                continue
            self.counters["accepted"] += 1
            flow = RelayFlow(
                self._next_id, format_address(peer), format_address(dest), self._clock()
            )
            self._next_id += 1
            self.flows[flow.fid] = flow
            task = loop.create_task(self._serve(flow, app, dest), name=f"coorp-relay-{flow.fid}")
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    # -- one connection -------------------------------------------------------------------------
    async def _serve(self, flow: RelayFlow, app: socket.socket, dest: tuple[str, int]) -> None:
        app.setblocking(False)
        up: socket.socket | None = None
        try:
            try:
                up = await self._connect(dest)
            except OSError as exc:
                self.counters["refused"] += 1
                flow.ended = f"destination: {exc.strerror or exc}"
                log.info("relay: %s -> %s: %s", flow.app, flow.dest, flow.ended)
                _reset(app)
                return
            pacer = Pacer(
                name=f"relay {flow.dest}",
                coordinator=self._coord,
                planner=self._planner,
                settings=self.settings,
                clock=self._clock,
                counters=flow.counters,
            )
            # The paced side is the one towards the remote peer: the destination for a
            # connection a program here opened, the peer for one it accepted.
            local, remote = (up, app) if self.inbound else (app, up)
            if self.inbound:
                mark_socket(remote, "bh")
                tune_tcp(remote)
            pacer.attach(remote)
            upward = asyncio.create_task(self._upward(flow, local, remote, pacer))
            downward = asyncio.create_task(self._downward(flow, remote, local))
            reset = False
            try:
                done, _ = await asyncio.wait(
                    {upward, downward}, return_when=asyncio.FIRST_EXCEPTION
                )
                for t in done:
                    t.result()  # a reset on either side ends both
                flow.ended = "closed"
                self.counters["completed"] += 1
            except (ConnectionError, PeerTimeoutError, PeerClosed, OSError) as exc:
                flow.ended, reset = f"reset: {exc}", True
            except asyncio.CancelledError:
                # The relay is closing with the connection still open: a reset, so that
                # neither end takes a cut-off transfer for a finished one.
                flow.ended, reset = "reset: relay closed", True
                raise
            finally:
                for t in (upward, downward):
                    t.cancel()
                await asyncio.gather(upward, downward, return_exceptions=True)
                pacer.detach()
                if reset:
                    self.counters["resets"] += 1
                    _reset(app)
                    _reset(up)
        finally:
            self._deactivate(flow)
            app.close()
            if up is not None:
                up.close()
            for k, v in flow.counters.items():
                if k == "inflight_max_bytes":
                    self.pacing[k] = max(self.pacing[k], v)
                else:
                    self.pacing[k] += v
            self.flows.pop(flow.fid, None)
            self.recent.append(flow)
            del self.recent[:-64]

    async def _connect(self, dest: tuple[str, int]) -> socket.socket:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            # Our own connection must not be redirected to ourselves.
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_MARK, self.mark)
            if self.inbound:
                # To the local server: what the relay holds of its replies is bounded
                # like an application's socket buffer towards an outbound relay.
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, _APP_RCVBUF)
            else:
                mark_socket(sock, "bh")
                tune_tcp(sock)
            sock.setsockopt(
                socket.IPPROTO_TCP,
                socket.TCP_USER_TIMEOUT,
                int(self.settings.io_timeout_s * 1000),
            )
            sock.setblocking(False)
            async with asyncio.timeout(self.settings.connect_timeout_s):
                await asyncio.get_running_loop().sock_connect(sock, dest)
        except TimeoutError:
            sock.close()
            raise OSError(errno.ETIMEDOUT, "connect timed out") from None
        except BaseException:
            sock.close()
            raise
        return sock

    def _activate(self, flow: RelayFlow) -> None:
        if not flow.active:
            flow.active = True
            self._coord.begin()

    def _deactivate(self, flow: RelayFlow) -> None:
        if flow.active:
            flow.active = False
            self._coord.end()

    async def _upward(
        self, flow: RelayFlow, app: socket.socket, up: socket.socket, pacer: Pacer
    ) -> None:
        """Application → destination, paced; ends with a half-close on EOF."""
        buf = bytearray(max(self.settings.unpaced_chunk_bytes, self.settings.chunk_bytes))
        view = memoryview(buf)
        prog = Progress(last_progress_ns=self._clock())
        idle_s = self.idle_release_ns / 1e9
        while True:
            timeout = idle_s if flow.active else None
            if not await _wait_readable(app, timeout):
                # Nothing more to send for a while: stop counting towards the permit.
                # What is in flight (within the in-flight budget) drains while the next
                # holder starts, as a bulk stream hands over at its last byte.
                pacer.poll()
                if not await _wait_readable(app, 0):
                    pacer.settle()
                    self._deactivate(flow)
                continue
            pending = _inq(app)
            if pending == 0:
                # Readable with nothing to read: end of stream (or an error, which
                # recv raises), or a wake-up with nothing behind it.
                try:
                    peek = app.recv(1, socket.MSG_PEEK)
                except BlockingIOError:
                    continue
                if peek == b"":
                    await self._drain(up, pacer)
                    up.shutdown(socket.SHUT_WR)
                    pacer.settle()
                    self._deactivate(flow)
                    return
                continue
            self._activate(flow)
            n, depth = await pacer.next_chunk(pending, prog)
            got = app.recv_into(view[:n], n)
            if got == 0:
                continue  # EOF is handled at the top
            await pacer.write([view[:got]], depth)
            flow.bytes_up += got
            self.counters["bytes_up"] += got

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
        loop = asyncio.get_running_loop()
        buf = bytearray(_COPY_BYTES)
        view = memoryview(buf)
        while True:
            got = await loop.sock_recv_into(up, view)
            if got == 0:
                app.shutdown(socket.SHUT_WR)
                return
            await loop.sock_sendall(app, view[:got])
            flow.bytes_down += got
            self.counters["bytes_down"] += got


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
        return fut.done()
    finally:
        loop.remove_reader(fd)


def _poll_readable(sock: socket.socket) -> bool:
    p = select.poll()
    p.register(sock.fileno(), select.POLLIN | select.POLLRDHUP)
    return bool(p.poll(0))
