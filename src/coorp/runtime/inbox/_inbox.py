"""Inboxes: where an application receives whole LS and bulk messages.

An inbox listens on one address: UDP for LS datagrams and TCP (same port) for bulk
senders. Two flavours with the same behaviour:

* :class:`AsyncInbox` for asyncio code: ``await inbox.recv()`` or ``async for``.
* :class:`Inbox` for threads: ``inbox.recv(timeout=...)``. LS datagrams are read and
  checked on the calling thread itself (no hop through the event loop, which is
  what keeps LS overhead low); bulk messages arrive from the team's event-loop thread.

Invalid datagrams are dropped, counted and logged with the sender's address. If the
application falls behind on LS, the oldest LS message waiting in the inbox is
dropped first (keep-last); bulk messages are never dropped: the sender waits.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import queue
import socket
import threading
import time
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

from coorp._errors import PeerError

from .._counters import DropLog
from .._errors import RuntimeUsageError
from ..wire import (
    MAX_DATAGRAM_BYTES,
    Address,
    Keyring,
    format_address,
    open_tcp_listener,
    resolve,
)
from ._latency_book import LatencyBook
from ._receiver import (
    BulkReceiver,
    LsDecoder,
    Message,
    ReceiverLimits,
)

__all__ = ["AsyncInbox", "Inbox", "bind_endpoints"]

log = logging.getLogger("coorp.runtime.receiver")
_MAX_DATAGRAMS_PER_WAKEUP = 64
#: A blocked ``Inbox.recv`` re-checks for close/deadline at least this often.
_WAIT_ROUND_S = 1.0
#: Bound on receive rounds per call (each ends in a message, a drop or a wait).
_MAX_ROUNDS = 1 << 30
_MAX_PEER_NAMES = 1024


def bind_endpoints(addr: Address) -> tuple[socket.socket, socket.socket, Address]:
    """A TCP listener and a UDP socket on the same port (port 0: pick a free one)."""
    family, sockaddr = resolve(addr, socket.SOCK_DGRAM)
    for _ in range(16):  # an ephemeral TCP port may be taken for UDP: try another
        listener = open_tcp_listener(addr)
        port = listener.getsockname()[1]
        udp = socket.socket(family, socket.SOCK_DGRAM)
        try:
            udp.bind((sockaddr[0], port, *sockaddr[2:]))
        except OSError:
            udp.close()
            listener.close()
            if addr[1] != 0:
                raise
            continue
        udp.setblocking(False)
        return listener, udp, (str(listener.getsockname()[0]), port)
    raise OSError(f"no port free for both TCP and UDP on {format_address(addr)}")


def _grow_receive_buffer(sock: socket.socket, nbytes: int) -> None:
    """Ask for an ``nbytes`` receive buffer: past ``net.core.rmem_max`` if the process
    has CAP_NET_ADMIN (``SO_RCVBUFFORCE``), up to it otherwise."""
    force = getattr(socket, "SO_RCVBUFFORCE", None)
    if force is not None:
        try:
            sock.setsockopt(socket.SOL_SOCKET, force, nbytes)
            return
        except OSError:
            pass  # not permitted: the capped request below
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, nbytes)


class _InboxCore:
    """What both flavours share: decoding, counters."""

    def __init__(
        self,
        udp: socket.socket,
        key: Keyring,
        robot: str,
        clock: Callable[[], int],
        drops: DropLog,
        limits: ReceiverLimits,
    ) -> None:
        self.udp = udp
        _grow_receive_buffer(udp, limits.ls_socket_buffer_bytes)
        self.decoder = LsDecoder(
            key,
            robot,
            clock,
            max_age_ns=round(limits.ls_max_age_s * 1e9),
            max_sessions=limits.max_ls_sessions,
            sessions_per_member=limits.ls_sessions_per_member,
            replay_window=limits.ls_replay_window,
        )
        self.drops = drops
        self.ls_received = 0
        self.latency = LatencyBook()
        self._peers: dict[tuple[Any, ...], str] = {}

    def stats(self) -> dict[str, int]:
        """The LS counters shared by both flavours (flows summed)."""
        flows = self.decoder.flows().values()
        out = {
            "ls_received": self.ls_received,
            "ls_sessions": self.decoder.sessions,
            "ls_lost": sum(f["lost"] for f in flows),
            "ls_reordered": sum(f["reordered"] for f in flows),
            "dropped": self.drops.total(),
        }
        out.update({f"dropped_{k}": v for k, v in self.drops.counts.items()})
        out["log_lines_held_back"] = sum(self.drops.limiter.held_back.values())
        return out

    def read_datagram(self) -> Message | None:
        """One valid LS message from the socket, None if none is waiting.

        Invalid datagrams are counted and skipped (bounded per call)."""
        for _ in range(_MAX_DATAGRAMS_PER_WAKEUP):
            try:
                data, addr = self.udp.recvfrom(MAX_DATAGRAM_BYTES + 1)
            except (BlockingIOError, InterruptedError):
                return None
            except OSError as exc:  # e.g. ICMP errors reported on the socket
                log.debug("LS socket error: %s", exc)
                continue
            msg = self.accept(data, addr)
            if msg is not None:
                return msg
        return None

    def accept(self, data: bytes, addr: tuple[Any, ...]) -> Message | None:
        """The LS message in one datagram, or None (counted and logged) if invalid."""
        peer = self._peers.get(addr)
        if peer is None:  # formatted once per sender address (a bounded cache)
            if len(self._peers) >= _MAX_PEER_NAMES:
                self._peers.clear()
            peer = self._peers[addr] = format_address(addr)
        try:
            msg = self.decoder.decode(data, peer)
        except PeerError as exc:
            self.drops.drop(peer, exc, "datagram")
            return None
        self.ls_received += 1
        offset = self.decoder.offset_ns(msg.robot, msg.channel)
        if offset is not None:
            arrived = msg.received_ns - offset  # on the sender's clock
            late = msg.deadline_ns is not None and arrived > msg.deadline_ns
            self.latency.record(msg.robot, arrived - msg.sent_ns, late)
        return msg


class _Mailbox:
    """Messages in arrival order; LS bounded keep-last, bulk bounded with back-pressure."""

    def __init__(self, maxsize: int) -> None:
        self._items: deque[Message] = deque()
        self._max = maxsize
        self._ls = 0
        self._bulk = 0
        self._arrived = asyncio.Event()
        self._room = asyncio.Event()
        self.ls_overflow = 0

    def put_ls(self, msg: Message) -> None:
        if self._ls >= self._max:
            # Keep-last: drop the oldest waiting LS message, never a bulk one.
            for i, old in enumerate(self._items):
                if old.kind == "ls":
                    del self._items[i]
                    self._ls -= 1
                    self.ls_overflow += 1
                    break
        self._items.append(msg)
        self._ls += 1
        self._arrived.set()

    async def put_bulk(self, msg: Message) -> None:
        while self._bulk >= self._max:
            self._room.clear()
            await self._room.wait()
        self._items.append(msg)
        self._bulk += 1
        self._arrived.set()

    def take_all(self) -> list[Message]:
        """Everything waiting, in arrival order; the mailbox is empty afterwards."""
        items = list(self._items)
        self._items.clear()
        self._ls = self._bulk = 0
        self._room.set()
        return items

    async def get(self) -> Message:
        while not self._items:
            self._arrived.clear()
            await self._arrived.wait()
        msg = self._items.popleft()
        if msg.kind == "ls":
            self._ls -= 1
        else:
            self._bulk -= 1
            self._room.set()
        return msg


class AsyncInbox:
    """Receive LS and bulk messages in asyncio code."""

    def __init__(
        self,
        listener: socket.socket,
        udp: socket.socket,
        address: Address,
        key: Keyring,
        *,
        robot: str,
        clock: Callable[[], int] = time.monotonic_ns,
        maxsize: int = 1024,
        limits: ReceiverLimits = ReceiverLimits(),
    ) -> None:
        self.address = address
        self.robot = robot
        self._loop = asyncio.get_running_loop()
        self._box = _Mailbox(maxsize)
        drops = DropLog(log, clock)
        self._core = _InboxCore(udp, key, robot, clock, drops, limits)
        self.bulk = BulkReceiver(
            key,
            self._box.put_bulk,
            limits=limits,
            clock=clock,
            drops=drops,
            robot=robot,
            ls=self._core.decoder,
        )
        self.bulk.start(listener)
        self._listener = listener
        self._closed = False
        self._loop.add_reader(udp.fileno(), self._on_readable)

    @classmethod
    async def open(cls, address: Address, key: Keyring, **kwargs: object) -> AsyncInbox:
        listener, udp, bound = bind_endpoints(address)
        return cls(listener, udp, bound, key, **kwargs)  # type: ignore[arg-type]

    @property
    def drops(self) -> DropLog:
        return self._core.drops

    def _on_readable(self) -> None:
        for _ in range(_MAX_DATAGRAMS_PER_WAKEUP):
            msg = self._core.read_datagram()
            if msg is None:
                return
            self._box.put_ls(msg)

    async def recv(self, timeout_s: float | None = None) -> Message:
        """The next message; :class:`TimeoutError` after ``timeout_s``."""
        async with asyncio.timeout(timeout_s):
            return await self._box.get()

    def __aiter__(self) -> AsyncIterator[Message]:
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[Message]:
        while True:
            yield await self._box.get()

    @property
    def latency(self) -> LatencyBook:
        """What this inbox measured of each sender's LS latency."""
        return self._core.latency

    def stats(self) -> dict[str, int]:
        out = self._core.stats()
        out["ls_overflow"] = self._box.ls_overflow
        out.update({f"bulk_{k}": v for k, v in self.bulk.stats().items()})
        return out

    def flows(self) -> dict[str, dict[str, int]]:
        """LS counts per flow ``"robot/channel"``: received, lost (the sender's count
        minus what arrived, updated at every keep-alive), reordered (accepted after a
        newer datagram: not a replay), replayed, sessions."""
        return self._core.decoder.flows()

    async def close(self) -> None:
        """Stop receiving (idempotent). Messages already received stay available to
        :meth:`drain`."""
        if self._closed:
            return
        self._closed = True
        with contextlib.suppress(ValueError, OSError):
            self._loop.remove_reader(self._core.udp.fileno())
        await self.bulk.close()
        self._listener.close()
        self._core.udp.close()

    def drain(self) -> list[Message]:
        """The messages received but not yet returned by :meth:`recv`, in arrival order.

        A bulk message is confirmed to its sender as soon as it is here, so a program
        that stops must take these after :meth:`close` or lose them.
        """
        return self._box.take_all()


class Inbox:
    """Receive LS and bulk messages from a thread; made by :meth:`Team.listen`.

    One thread at a time may call :meth:`recv`. The calling thread blocks in the UDP
    socket's own ``recvfrom``, exactly like a raw socket would, so an LS message costs
    one wake-up and its check. When the event-loop thread has a bulk message for it,
    it wakes the caller with a one-byte datagram from a private local socket.
    """

    def __init__(
        self,
        listener: socket.socket,
        udp: socket.socket,
        address: Address,
        key: Keyring,
        loop: asyncio.AbstractEventLoop,
        *,
        robot: str,
        clock: Callable[[], int] = time.monotonic_ns,
        maxsize: int = 1024,
        limits: ReceiverLimits = ReceiverLimits(),
    ) -> None:
        self.address = address
        self.robot = robot
        self._loop = loop
        self._bulk_q: queue.Queue[Message] = queue.Queue(maxsize)
        self._core = _InboxCore(udp, key, robot, clock, DropLog(log, clock), limits)
        self._udp = udp
        udp.settimeout(_WAIT_ROUND_S)
        self._timeout = _WAIT_ROUND_S
        # The waker sends to our own port over loopback (or our bound address).
        host = udp.getsockname()[0]
        if host in ("0.0.0.0", "::"):
            host = "127.0.0.1" if udp.family == socket.AF_INET else "::1"
        self._waker = socket.socket(udp.family, socket.SOCK_DGRAM)
        self._waker.bind((host, 0))
        self._waker.connect((host, udp.getsockname()[1]))
        self._waker.setblocking(False)
        self._waker_addr = self._waker.getsockname()[:2]
        self._recv_lock = threading.Lock()
        self._listener = listener
        self._closed = False
        self.bulk: BulkReceiver | None = None

        async def start() -> BulkReceiver:
            receiver = BulkReceiver(
                key,
                self._deliver_bulk,
                limits=limits,
                clock=clock,
                drops=self._core.drops,
                robot=robot,
                ls=self._core.decoder,
            )
            receiver.start(listener)
            return receiver

        self.bulk = asyncio.run_coroutine_threadsafe(start(), loop).result(timeout=10)

    @property
    def drops(self) -> DropLog:
        return self._core.drops

    async def _deliver_bulk(self, msg: Message) -> None:
        # Runs on the loop thread. Waiting for room (in a worker thread) makes the
        # sender wait for its confirmation: back-pressure instead of dropping bulk data.
        try:
            self._bulk_q.put_nowait(msg)
        except queue.Full:
            await asyncio.get_running_loop().run_in_executor(None, self._put_waiting, msg)
        self._wake()

    def _wake(self) -> None:
        with contextlib.suppress(OSError):
            self._waker.send(b"w")

    def _put_waiting(self, msg: Message) -> None:
        # In a worker thread; gives up when the inbox is closed (never blocks forever).
        while not self._closed:
            with contextlib.suppress(queue.Full):
                self._bulk_q.put(msg, timeout=0.5)
                return

    def recv(self, timeout: float | None = None) -> Message:
        """The next message (LS or bulk); :class:`TimeoutError` after ``timeout`` s."""
        deadline = None if timeout is None else time.monotonic() + timeout
        core = self._core
        with self._recv_lock:
            for _ in range(_MAX_ROUNDS):
                if self._bulk_q.queue:  # a peek without the queue's lock
                    with contextlib.suppress(queue.Empty):
                        return self._bulk_q.get_nowait()
                if self._closed:
                    raise RuntimeUsageError("the inbox is closed")
                wait = _WAIT_ROUND_S
                if deadline is not None:
                    wait = min(wait, deadline - time.monotonic())
                    if wait <= 0:
                        raise TimeoutError("no message within the timeout")
                if wait != self._timeout:
                    self._udp.settimeout(wait)
                    self._timeout = wait
                try:
                    data, addr = self._udp.recvfrom(MAX_DATAGRAM_BYTES + 1)
                except TimeoutError:
                    continue
                except OSError as exc:  # ICMP errors reported on the socket; closed
                    if self._closed:
                        raise RuntimeUsageError("the inbox is closed") from None
                    log.debug("LS socket error: %s", exc)
                    continue
                if addr[:2] == self._waker_addr:
                    continue  # a bulk message (or close) is waiting: check the queue
                msg = core.accept(data, addr)
                if msg is not None:
                    return msg
        raise TimeoutError("no message within the timeout")

    def __iter__(self) -> Iterator[Message]:
        while not self._closed:
            yield self.recv()

    @property
    def latency(self) -> LatencyBook:
        """What this inbox measured of each sender's LS latency."""
        return self._core.latency

    def stats(self) -> dict[str, int]:
        out = self._core.stats()
        if self.bulk is not None:
            out.update({f"bulk_{k}": v for k, v in self.bulk.stats().items()})
        return out

    def flows(self) -> dict[str, dict[str, int]]:
        """LS counts per flow (see :meth:`AsyncInbox.flows`)."""
        return self._core.decoder.flows()

    def drain(self) -> list[Message]:
        """The bulk messages received (and confirmed to their senders) but not yet
        returned by :meth:`recv`; call after :meth:`close` so a stopping program loses
        none. LS datagrams still in the socket are not confirmed and are not kept."""
        out: list[Message] = []
        while True:
            try:
                out.append(self._bulk_q.get_nowait())
            except queue.Empty:
                return out

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self.bulk is not None and not self._loop.is_closed():
            with contextlib.suppress(Exception):
                asyncio.run_coroutine_threadsafe(self.bulk.close(), self._loop).result(timeout=5)
        self._listener.close()
        self._wake()
        with self._recv_lock:  # a receiving thread leaves within one round
            self._udp.close()
        self._waker.close()
