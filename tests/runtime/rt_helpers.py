"""Loopback helpers for runtime tests: a leader on its own loop thread, a throttling
TCP proxy (to keep a transfer in flight long enough to disturb it), a raw protocol
client (to send exactly the frames a test wants)."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time
from collections.abc import Coroutine
from typing import Any

from coorp.runtime import LeaderSettings, PermitService, TeamKey
from coorp.runtime.robot._threaded import _LoopThread
from coorp.runtime.wire._auth import (
    CLIENT_TO_SERVER,
    LEADER,
    SERVER_TO_CLIENT,
    FrameOpener,
    FrameSealer,
    new_nonce,
    open_hello,
)
from coorp.runtime.wire._format import Join, Message

KEY = TeamKey(b"test-team-key-0123456789abcdef!!")


class LeaderHandle:
    """A :class:`PermitService` on a private loop thread; stop/restart on one port."""

    def __init__(self, robots: list[str], settings: LeaderSettings) -> None:
        self.robots = robots
        self.settings = settings
        self.runner = _LoopThread("test-leader")
        self.port = 0
        self.service: PermitService | None = None
        self.start()

    def run(self, coro: Coroutine[Any, Any, Any], timeout: float = 10.0) -> Any:
        return self.runner.run(coro, timeout)

    def start(self) -> None:
        async def go() -> int:
            self.service = PermitService(self.robots, KEY, self.settings)
            _, port = await self.service.start(("127.0.0.1", self.port))
            return port

        self.port = self.run(go())

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def stop(self) -> None:
        if self.service is not None:
            self.run(self.service.close())
            self.service = None

    def stats(self) -> dict[str, int]:
        async def get() -> dict[str, int]:
            assert self.service is not None
            return self.service.stats()

        result: dict[str, int] = self.run(get())
        return result

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.stop()
        self.runner.stop()


class ThrottledProxy:
    """Forwards TCP connections to ``target`` at about ``rate`` bytes/s (both ways
    unthrottled for the small reverse direction). ``reached(n)`` is an event set once
    ``n`` bytes went through; ``cut()`` breaks every open connection."""

    def __init__(self, target: tuple[str, int], rate: float) -> None:
        self.target = target
        self.rate = rate
        self.runner = _LoopThread("test-proxy")
        self.forwarded = 0
        self.connections = 0
        self._socks: list[socket.socket] = []
        self._waiters: list[tuple[int, asyncio.Event]] = []
        self.port = self.runner.run(self._start(), 5)

    async def _start(self) -> int:
        server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self._server = server
        return int(server.sockets[0].getsockname()[1])

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            up_r, up_w = await asyncio.open_connection(*self.target)
        except OSError:
            writer.close()
            return
        for w in (writer, up_w):
            s = w.get_extra_info("socket")
            if s is not None:
                self._socks.append(s)

        async def pump(
            src: asyncio.StreamReader, dst: asyncio.StreamWriter, throttle: bool
        ) -> None:
            with contextlib.suppress(OSError, asyncio.IncompleteReadError):
                while True:
                    data = await src.read(16384)
                    if not data:
                        break
                    if throttle:
                        self.forwarded += len(data)
                        for n, ev in self._waiters:
                            if self.forwarded >= n:
                                ev.set()
                        await asyncio.sleep(len(data) / self.rate)  # shaping, not syncing
                    dst.write(data)
                    await dst.drain()
            with contextlib.suppress(OSError):
                dst.close()

        await asyncio.gather(pump(reader, up_w, True), pump(up_r, writer, False))

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def reached(self, nbytes: int) -> asyncio.Event:
        async def make() -> asyncio.Event:
            ev = asyncio.Event()
            if self.forwarded >= nbytes:
                ev.set()
            self._waiters.append((nbytes, ev))
            return ev

        ev: asyncio.Event = self.runner.run(make(), 5)
        return ev

    def wait(self, ev: asyncio.Event, timeout: float) -> bool:
        async def w() -> bool:
            try:
                async with asyncio.timeout(timeout):
                    await ev.wait()
                return True
            except TimeoutError:
                return False

        ok: bool = self.runner.run(w(), timeout + 5)
        return ok

    def cut(self) -> None:
        async def do() -> None:
            for s in self._socks:
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)
            self._socks.clear()

        self.runner.run(do(), 5)

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.cut()
            self._server.close()
        self.runner.stop()


class RawClient:
    """Speaks the framed protocol by hand (blocking socket, timeouts everywhere)."""

    def __init__(self, address: str, timeout: float = 2.0) -> None:
        host, port = address.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=timeout)
        self.sock.settimeout(timeout)
        self.sealer: FrameSealer | None = None
        self.opener: FrameOpener | None = None
        self.sent: list[bytes] = []

    def read_frame(self) -> bytes:
        prefix = self._exactly(4)
        n = int.from_bytes(prefix, "big")
        assert n <= 1 << 20
        return self._exactly(n)

    def _exactly(self, n: int) -> bytes:
        buf = b""
        deadline = time.monotonic() + 5
        while len(buf) < n and time.monotonic() < deadline:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                raise EOFError("closed")
            buf += chunk
        return buf

    def handshake(self, robot: str, key: TeamKey = KEY, role: str = "agent") -> None:
        """Greeting and Join, with the key of ``robot`` and the server (the leader, or
        the robot whose inbox this is)."""
        from coorp.runtime.wire._format import decode_envelope

        hello = open_hello(decode_envelope(self.read_frame()))
        nonce = new_nonce()
        mac = key.mac(robot, LEADER if hello.service == "leader" else hello.robot)
        self.sealer = FrameSealer(mac, CLIENT_TO_SERVER, hello.nonce)
        self.opener = FrameOpener(mac, SERVER_TO_CLIENT, nonce)
        self.send(Join(robot, nonce, role))  # type: ignore[arg-type]

    def send(self, msg: Message) -> bytes:
        assert self.sealer is not None
        frame = self.sealer.seal(msg)
        self.sock.sendall(frame)
        self.sent.append(frame)
        return frame

    def recv(self) -> Message:
        from coorp.runtime.wire._format import decode_envelope

        assert self.opener is not None
        return self.opener.open(decode_envelope(self.read_frame()))

    def closed_by_peer(self) -> bool:
        """True once the peer has closed (EOF or reset), within the socket timeout."""
        try:
            for _ in range(1000):
                if not self.sock.recv(65536):
                    return True
        except (ConnectionResetError, BrokenPipeError):
            return True
        except TimeoutError:
            return False
        return False

    def close(self) -> None:
        self.sock.close()
