"""Framed, authenticated, time-limited TCP connections on asyncio, and the handshake.

A :class:`FramedConnection` owns one non-blocking socket. Every read has a timeout
and a size limit checked on the length prefix before the body is read, so a peer can
neither stall a handler forever nor make it allocate more than the limit. Writes are
serialised by a lock so that frames from concurrent tasks never interleave and frame
counters go out in order.

The handshake is the same for every framed service (leader, bulk receiver): the
server greets with a fresh nonce (:class:`~._wire.Hello`), the client answers with an
authenticated :class:`~._wire.Join` carrying its own nonce, and from then on each
direction MACs its frames to the other side's nonce (see :mod:`._auth`).
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from typing import TypeVar

from .._errors import (
    AuthenticationError,
    MalformedFrameError,
    PeerTimeoutError,
    RefusedError,
)
from ._auth import (
    CLIENT_TO_SERVER,
    LEADER,
    SERVER_TO_CLIENT,
    FrameOpener,
    FrameSealer,
    Keyring,
    new_nonce,
    open_hello,
    seal_hello,
)
from ._format import (
    LENGTH_PREFIX,
    MAX_CONTROL_FRAME_BYTES,
    Envelope,
    Hello,
    Join,
    Message,
    Refused,
    decode_envelope,
    decode_message,
    encode_envelope,
    encode_message,
    parse_frame_length,
)

__all__ = [
    "FramedConnection",
    "PeerClosed",
    "client_handshake",
    "connect_framed",
    "greeting",
    "recv_first_reply",
    "server_handshake",
]

M = TypeVar("M")


class PeerClosed(EOFError):
    """The peer closed the connection (an orderly end, not a protocol violation)."""


class FramedConnection:
    """One TCP connection carrying length-prefixed frames."""

    def __init__(
        self,
        sock: socket.socket,
        *,
        peer: str,
        read_timeout_s: float,
        write_timeout_s: float,
        max_frame_bytes: int = MAX_CONTROL_FRAME_BYTES,
    ) -> None:
        sock.setblocking(False)
        self.sock = sock
        self.peer = peer
        self.read_timeout_s = read_timeout_s
        self.write_timeout_s = write_timeout_s
        self.max_frame_bytes = max_frame_bytes
        self.sealer: FrameSealer | None = None
        self.opener: FrameOpener | None = None
        self._loop = asyncio.get_running_loop()
        self._write_lock = asyncio.Lock()
        self.closed = False

    # -- reading -------------------------------------------------------------------------
    async def recv_exactly_into(self, view: memoryview, timeout_s: float | None = None) -> None:
        """Fill ``view`` completely; :class:`PeerTimeoutError` if the peer stalls."""
        got = 0
        n = len(view)
        try:
            async with asyncio.timeout(timeout_s if timeout_s is not None else self.read_timeout_s):
                while got < n:
                    k = await self._loop.sock_recv_into(self.sock, view[got:])
                    if k == 0:
                        raise PeerClosed(f"{self.peer} closed the connection")
                    got += k
        except TimeoutError:
            raise PeerTimeoutError(
                f"{self.peer}: no complete read within the timeout ({got}/{n} bytes)"
            ) from None

    async def recv_some_into(self, view: memoryview, timeout_s: float | None = None) -> int:
        """Read at least one byte into ``view`` (bulk payload); returns the count."""
        try:
            async with asyncio.timeout(timeout_s if timeout_s is not None else self.read_timeout_s):
                k = await self._loop.sock_recv_into(self.sock, view)
        except TimeoutError:
            raise PeerTimeoutError(f"{self.peer}: nothing received within the timeout") from None
        if k == 0:
            raise PeerClosed(f"{self.peer} closed the connection")
        return k

    async def read_envelope(self, timeout_s: float | None = None) -> Envelope:
        prefix = bytearray(LENGTH_PREFIX.size)
        await self.recv_exactly_into(memoryview(prefix), timeout_s)
        n = parse_frame_length(prefix, self.max_frame_bytes)
        body = bytearray(n)
        await self.recv_exactly_into(memoryview(body), timeout_s)
        return decode_envelope(body)

    async def recv(self, timeout_s: float | None = None) -> Message:
        """The next authenticated message."""
        if self.opener is None:
            raise MalformedFrameError("connection is not authenticated yet")
        return self.opener.open(await self.read_envelope(timeout_s))

    async def recv_expect(self, kind: type[M], timeout_s: float | None = None) -> M:
        msg = await self.recv(timeout_s)
        if not isinstance(msg, kind):
            raise MalformedFrameError(f"expected {kind.__name__}, got {type(msg).__name__}")
        return msg

    # -- writing -------------------------------------------------------------------------
    async def write_raw(self, data: bytes | memoryview) -> None:
        try:
            async with asyncio.timeout(self.write_timeout_s):
                await self._loop.sock_sendall(self.sock, data)
        except TimeoutError:
            raise PeerTimeoutError(f"{self.peer}: write did not complete in time") from None

    async def send(self, msg: Message) -> None:
        if self.sealer is None:
            raise MalformedFrameError("connection is not authenticated yet")
        async with self._write_lock:
            # Sealed under the lock: counters must reach the wire in order.
            await self.write_raw(self.sealer.seal(msg))

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            with contextlib.suppress(OSError):
                self.sock.close()


def greeting(service: str, epoch: int, local: str = LEADER) -> tuple[bytes, bytes]:
    """A fresh nonce and the greeting frame that carries it."""
    nonce = new_nonce()
    name = "" if local == LEADER else local
    return nonce, seal_hello(Hello(nonce, service, epoch, name))  # type: ignore[arg-type]


async def server_handshake(
    conn: FramedConnection,
    keys: Keyring,
    *,
    service: str,
    epoch: int,
    local: str = LEADER,
    greeted: bytes | None = None,
) -> Join:
    """Greet (unless the accept loop did already, with nonce ``greeted``), then verify
    the client's :class:`Join` with the key of the pair (``local``, the robot it
    names). Raises a PeerError on failure."""
    if greeted is None:
        nonce, frame = greeting(service, epoch, local)
        async with conn._write_lock:
            await conn.write_raw(frame)
    else:
        nonce = greeted
    try:
        env = await conn.read_envelope()
        # The Join names who the client claims to be; only then do we know which key
        # must have made its MAC. Parsing it first is safe: the decoder is bounded.
        claimed = decode_message(env.body)
        if not isinstance(claimed, Join):
            raise MalformedFrameError(f"expected Join, got {type(claimed).__name__}")
        key = keys.mac(local, claimed.robot)
        conn.opener = FrameOpener(key, CLIENT_TO_SERVER, nonce)
        join = conn.opener.open(env)
        assert isinstance(join, Join)
    except AuthenticationError:
        # Tell an honest client with the wrong key why, unauthenticated (we cannot MAC
        # for it). A forged notice can only make a client give up, which an attacker
        # able to reset its connection could do anyway.
        notice = encode_envelope(0, encode_message(Refused("authentication failed")), b"")
        with contextlib.suppress(OSError, PeerTimeoutError):
            await conn.write_raw(notice)
        raise
    conn.sealer = FrameSealer(key, SERVER_TO_CLIENT, join.nonce)
    return join


async def client_handshake(
    conn: FramedConnection, keys: Keyring, *, robot: str, role: str, service: str
) -> Hello:
    """Read the greeting, answer with an authenticated :class:`Join`."""
    keys.check_identity(robot)
    hello = open_hello(await conn.read_envelope())
    if hello.service != service:
        raise MalformedFrameError(f"{conn.peer} is a {hello.service}, expected a {service}")
    peer = LEADER if service == "leader" else hello.robot
    if not peer:
        raise MalformedFrameError(f"{conn.peer}: the receiver did not say whose inbox it is")
    try:
        key = keys.mac(robot, peer)
    except AuthenticationError as exc:
        raise RefusedError(f"{conn.peer} is robot {peer!r}: {exc}") from None
    nonce = new_nonce()
    conn.sealer = FrameSealer(key, CLIENT_TO_SERVER, hello.nonce)
    conn.opener = FrameOpener(key, SERVER_TO_CLIENT, nonce)
    await conn.send(Join(robot, nonce, role))  # type: ignore[arg-type]
    return hello


async def recv_first_reply(conn: FramedConnection, timeout_s: float | None = None) -> Message:
    """The server's first authenticated reply after our Join, or :class:`RefusedError`
    when it sent an (unauthenticated) refusal instead."""
    env = await conn.read_envelope(timeout_s)
    if env.counter == 0 and not env.mac:
        msg = decode_message(env.body)
        if isinstance(msg, Refused):
            raise RefusedError(msg.reason)
        raise MalformedFrameError(f"unexpected unauthenticated {type(msg).__name__}")
    assert conn.opener is not None
    try:
        msg = conn.opener.open(env)
    except AuthenticationError:
        raise AuthenticationError("server's reply does not verify: wrong key?") from None
    if isinstance(msg, Refused):
        raise RefusedError(msg.reason)
    return msg


async def connect_framed(addr: tuple[str, int], *, timeout_s: float) -> FramedConnection:
    """A TCP connection to ``addr`` (connect bounded by ``timeout_s``), framed."""
    from ._sockets import format_address, resolve, tune_tcp

    family, sockaddr = resolve(addr, socket.SOCK_STREAM)
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setblocking(False)
    try:
        async with asyncio.timeout(timeout_s):
            await asyncio.get_running_loop().sock_connect(sock, sockaddr)
        tune_tcp(sock)
    except BaseException:
        sock.close()
        raise
    return FramedConnection(
        sock, peer=format_address(addr), read_timeout_s=timeout_s, write_timeout_s=timeout_s
    )
