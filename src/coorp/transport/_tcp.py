"""A small TCP network transport: subscriptions, frames, ``TCP_NODELAY``, bounded queues.

Every connection is symmetric: after ``HELLO`` each side announces the topics it
subscribes to (``SUB`` with the topic's type id, so a type mismatch is refused with an
``ERR`` the subscriber raises), and sends ``FRAME`` messages for the topics the other side
subscribed to. Messages are ``[u32 length][u8 type][body]``.

Sending first tries a non-blocking ``sendmsg`` straight from the publishing thread -- the
small-message fast path: no thread hop, no copy, Nagle off. Whatever does not fit into the
socket buffer is copied to a bounded per-connection queue drained by a writer thread; when
that queue is full, ``KEEP_LAST`` drops the oldest whole frame and ``BLOCK`` waits up to
the publish timeout. The reader thread validates every length before allocating (frames
larger than the topic's ``max_payload`` are skipped) and never unpickles anything.
"""

from __future__ import annotations

import collections
import contextlib
import socket
import struct
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field

from coorp.transport._errors import (
    DeliveryTimeoutError,
    MalformedFrameError,
    TopicTypeMismatchError,
    TransportClosedError,
)
from coorp.transport._network import FrameSink, NetworkTransport
from coorp.transport._options import QueuePolicy
from coorp.transport._topic import Topic

__all__ = ["TcpTransport"]

_HEAD = struct.Struct("<IB")
_HELLO, _SUB, _UNSUB, _FRAME, _ERR = 1, 2, 3, 4, 5
_SUB_BODY = struct.Struct("<QH")
_NAME = struct.Struct("<H")
_CONTROL_LIMIT = 64 << 10
_QUEUE_FRAMES = 64


@dataclass(eq=False)
class _Conn:
    sock: socket.socket
    peer: str
    remote_topics: set[str] = field(default_factory=set)
    send_lock: threading.Lock = field(default_factory=threading.Lock)
    cond: threading.Condition = field(default_factory=threading.Condition)
    backlog: collections.deque[bytes] = field(default_factory=collections.deque)
    closed: bool = False
    dropped: int = 0
    threads: list[threading.Thread] = field(default_factory=list)


def _recv_exact(sock: socket.socket, buf: memoryview) -> bool:
    pos = 0
    while pos < len(buf):
        n = sock.recv_into(buf[pos:])
        if n == 0:
            return False
        pos += n
    return True


class TcpTransport(NetworkTransport):
    """Network transport over TCP; listens on ``listen`` (``None``: connect-only)."""

    def __init__(self, listen: tuple[str, int] | None = ("127.0.0.1", 0)) -> None:
        self._sink: FrameSink | None = None
        self._bus_id = 0
        self._conns: list[_Conn] = []
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._closed = False
        self._server: socket.socket | None = None
        self._accept_thread: threading.Thread | None = None
        self.rejected = 0
        if listen is not None:
            srv = socket.create_server(listen, reuse_port=False)
            self._server = srv
            self._accept_thread = threading.Thread(
                target=self._accept_loop, daemon=True, name="coorp-tcp-accept"
            )

    @property
    def address(self) -> tuple[str, int]:
        """Where this transport listens."""
        if self._server is None:
            raise TransportClosedError("this TcpTransport does not listen")
        host, port = self._server.getsockname()[:2]
        return host, port

    # -- NetworkTransport ---------------------------------------------------------------
    def bind(self, sink: FrameSink, bus_id: int) -> None:
        self._sink, self._bus_id = sink, bus_id
        if self._accept_thread is not None:
            self._accept_thread.start()

    def connect(self, address: tuple[str, int], timeout: float = 5.0) -> None:
        """Connect to a peer bus's transport (both sides then exchange subscriptions)."""
        sock = socket.create_connection(address, timeout=timeout)
        self._start(sock, f"{address[0]}:{address[1]}")

    def subscribe(self, topic: Topic) -> None:
        body = self._sub_body(topic)
        for conn in self._snapshot():
            self._control(conn, _SUB, body)

    def unsubscribe(self, topic: Topic) -> None:
        body = _NAME.pack(len(topic.name.encode())) + topic.name.encode()
        for conn in self._snapshot():
            self._control(conn, _UNSUB, body)

    def has_subscribers(self, topic: Topic) -> bool:
        return any(topic.name in c.remote_topics for c in self._conns)

    def wait_for_subscribers(self, topic: Topic, count: int = 1, timeout: float = 5.0) -> bool:
        """Wait until ``count`` peers subscribed to ``topic``; ``False`` on timeout."""
        with self._changed:
            return self._changed.wait_for(
                lambda: sum(topic.name in c.remote_topics for c in self._conns) >= count, timeout
            )

    @property
    def connections(self) -> int:
        """Open connections."""
        with self._lock:
            return len(self._conns)

    def send(
        self, topic: Topic, parts: Sequence[bytes | memoryview], *, timeout: float | None
    ) -> None:
        name = topic.name.encode()
        size = sum(memoryview(p).nbytes for p in parts)
        head = _HEAD.pack(1 + 2 + len(name) + size, _FRAME) + _NAME.pack(len(name)) + name
        for conn in self._snapshot():
            if topic.name in conn.remote_topics:
                self._send(conn, [head, *parts], topic.policy, timeout)

    # -- sending ------------------------------------------------------------------------
    def _snapshot(self) -> list[_Conn]:
        with self._lock:
            return [c for c in self._conns if not c.closed]

    def _sub_body(self, topic: Topic) -> bytes:
        name, tname = topic.name.encode(), topic.type_name.encode()[:1000]
        return (
            _SUB_BODY.pack(topic.type_id, len(name))
            + name
            + _NAME.pack(topic.max_payload >> 20)
            + tname
        )

    def _control(self, conn: _Conn, kind: int, body: bytes) -> None:
        self._send(conn, [_HEAD.pack(1 + len(body), kind), body], QueuePolicy.BLOCK, 5.0)

    def _send(
        self,
        conn: _Conn,
        parts: list[bytes | memoryview],
        policy: QueuePolicy,
        timeout: float | None,
    ) -> None:
        with conn.send_lock:
            if conn.closed:
                return
            with conn.cond:
                empty = not conn.backlog
            if empty:
                # Fast path: straight into the socket buffer from the caller's memory.
                try:
                    sent = conn.sock.sendmsg(parts, [], socket.MSG_DONTWAIT)
                except BlockingIOError:
                    sent = 0
                except OSError:
                    self._drop(conn)
                    return
                total = sum(memoryview(p).nbytes for p in parts)
                if sent == total:
                    return
                rest = b"".join(bytes(p) for p in parts)[sent:]
                with conn.cond:
                    # A partly written frame must go out first and whole.
                    conn.backlog.appendleft(rest)
                    conn.cond.notify_all()
                return
            frame = b"".join(bytes(p) for p in parts)
            with conn.cond:
                if len(conn.backlog) >= _QUEUE_FRAMES:
                    if policy is QueuePolicy.KEEP_LAST and len(conn.backlog) > 1:
                        del conn.backlog[1]  # [0] may be partly sent already
                        conn.dropped += 1
                    else:
                        ok = conn.cond.wait_for(
                            lambda: len(conn.backlog) < _QUEUE_FRAMES or conn.closed, timeout
                        )
                        if not ok:
                            raise DeliveryTimeoutError(
                                f"peer {conn.peer} did not read for {timeout} s"
                            )
                conn.backlog.append(frame)
                conn.cond.notify_all()

    def _writer(self, conn: _Conn) -> None:
        while True:
            with conn.cond:
                conn.cond.wait_for(lambda: bool(conn.backlog) or conn.closed)
                if conn.closed:
                    return
                data = conn.backlog[0]
            try:
                conn.sock.sendall(data)
            except OSError:
                self._drop(conn)
                return
            with conn.cond:
                conn.backlog.popleft()
                conn.cond.notify_all()

    # -- receiving ----------------------------------------------------------------------
    def _accept_loop(self) -> None:
        assert self._server is not None
        while not self._closed:
            try:
                sock, addr = self._server.accept()
            except OSError:
                return
            self._start(sock, f"{addr[0]}:{addr[1]}")

    def _start(self, sock: socket.socket, peer: str) -> None:
        sock.settimeout(None)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        conn = _Conn(sock, peer)
        with self._lock:
            if self._closed:
                sock.close()
                return
            self._conns.append(conn)
        for target in (self._reader, self._writer):
            t = threading.Thread(
                target=target, args=(conn,), daemon=True, name=f"coorp-tcp-{target.__name__}"
            )
            conn.threads.append(t)
            t.start()
        self._control(conn, _HELLO, self._bus_id.to_bytes(8, "little"))
        assert self._sink is not None
        for topic in self._sink.subscribed_topics():
            self._control(conn, _SUB, self._sub_body(topic))

    def _reader(self, conn: _Conn) -> None:
        head = bytearray(_HEAD.size)
        try:
            while not conn.closed:
                if not _recv_exact(conn.sock, memoryview(head)):
                    break
                length, kind = _HEAD.unpack(head)
                if kind == _FRAME:
                    self._read_frame(conn, length - 1)
                    continue
                if length - 1 > _CONTROL_LIMIT:
                    raise MalformedFrameError(f"control message of {length} bytes")
                body = bytearray(length - 1)
                if not _recv_exact(conn.sock, memoryview(body)):
                    break
                self._control_in(conn, kind, bytes(body))
        except (OSError, MalformedFrameError, struct.error, UnicodeDecodeError):
            self.rejected += 1
        finally:
            self._drop(conn)

    def _read_frame(self, conn: _Conn, length: int) -> None:
        assert self._sink is not None
        nlen = bytearray(2)
        if not _recv_exact(conn.sock, memoryview(nlen)):
            raise OSError("peer closed mid-frame")
        (n,) = _NAME.unpack(nlen)
        name_b = bytearray(n)
        if not _recv_exact(conn.sock, memoryview(name_b)):
            raise OSError("peer closed mid-frame")
        name = name_b.decode()
        size = length - 2 - n
        topic = next((t for t in self._sink.subscribed_topics() if t.name == name), None)
        if topic is None or size > topic.max_payload or size < 0:
            # Not ours, or too big: skip it without allocating it.
            self.rejected += 1
            scratch = memoryview(bytearray(min(max(size, 0), 1 << 20) or 1))
            left = size
            while left > 0:
                k = conn.sock.recv_into(scratch[: min(left, len(scratch))])
                if k == 0:
                    raise OSError("peer closed mid-frame")
                left -= k
            return
        # A fresh buffer per frame: decoded arrays are views of it and keep it alive.
        buf = bytearray(size)
        if not _recv_exact(conn.sock, memoryview(buf)):
            raise OSError("peer closed mid-frame")
        self._sink.deliver_frame(name, memoryview(buf).toreadonly(), buf)

    def _control_in(self, conn: _Conn, kind: int, body: bytes) -> None:
        assert self._sink is not None
        if kind == _HELLO:
            return
        if kind == _SUB:
            type_id, n = _SUB_BODY.unpack_from(body)
            name = body[_SUB_BODY.size : _SUB_BODY.size + n].decode()
            type_name = body[_SUB_BODY.size + n + 2 :].decode(errors="replace")
            mine = self._sink.published_topic(name)
            if mine is not None and mine.type_id != type_id:
                msg = f"{name}\0{mine.type_name}".encode()
                self._control(conn, _ERR, msg)
                return
            if mine is not None and mine.allow_pickle:
                return
            with self._changed:
                conn.remote_topics.add(name)
                self._changed.notify_all()
            del type_name
        elif kind == _UNSUB:
            (n,) = _NAME.unpack_from(body)
            conn.remote_topics.discard(body[2 : 2 + n].decode())
        elif kind == _ERR:
            name, _, theirs = body.decode(errors="replace").partition("\0")
            topic = next((t for t in self._sink.subscribed_topics() if t.name == name), None)
            if topic is not None:
                self._sink.remote_error(
                    name,
                    TopicTypeMismatchError(
                        name, topic.type_name, f"{theirs} (publisher at {conn.peer})"
                    ),
                )
        else:
            raise MalformedFrameError(f"unknown message type {kind}")

    # -- teardown -----------------------------------------------------------------------
    def _drop(self, conn: _Conn) -> None:
        with conn.cond:
            if conn.closed:
                return
            conn.closed = True
            conn.cond.notify_all()
        with contextlib.suppress(OSError):
            conn.sock.shutdown(socket.SHUT_RDWR)
        conn.sock.close()
        with self._lock:
            if conn in self._conns:
                self._conns.remove(conn)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            conns = list(self._conns)
        if self._server is not None:
            with contextlib.suppress(OSError):
                self._server.shutdown(socket.SHUT_RDWR)
            self._server.close()
        for conn in conns:
            self._drop(conn)
        me = threading.current_thread()
        for conn in conns:
            for t in conn.threads:
                if t is not me:
                    t.join(timeout=2.0)
        if self._accept_thread is not None and self._accept_thread.is_alive():
            self._accept_thread.join(timeout=2.0)
