"""A user-space impaired link (the kernel here has no netem): a relay that forwards UDP
datagrams with random loss and delay jitter, and TCP connections unchanged.

An LS channel sent to the relay's address reaches the inbox behind it through a
lossy, reordering path (each datagram is delayed independently, uniform in
``delay ± jitter``, so datagrams sent closer together than the jitter overtake each
other), while its session connection (TCP, same port) goes through untouched.
Everything is driven by one seeded ``random.Random``: the same seed drops the same
datagrams. Runs an asyncio loop on its own thread; :meth:`close` stops it.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import socket
import threading
from typing import Any

__all__ = ["ImpairedLink"]


class _Udp(asyncio.DatagramProtocol):
    def __init__(self, link: ImpairedLink) -> None:
        self.link = link
        self.transport: asyncio.DatagramTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def datagram_received(self, data: bytes, addr: Any) -> None:
        self.link._on_datagram(data)


class ImpairedLink:
    """Forwards ``listen`` (host, port; port 0: any) to ``target`` (see module doc)."""

    def __init__(
        self,
        target: tuple[str, int],
        *,
        listen: tuple[str, int] = ("127.0.0.1", 0),
        loss: float = 0.0,
        delay_ms: float = 0.0,
        jitter_ms: float = 0.0,
        seed: int = 1,
    ) -> None:
        if not 0 <= loss < 1 or jitter_ms > delay_ms:
            raise ValueError("loss in [0, 1); jitter_ms <= delay_ms")
        self.target = target
        self.loss, self.delay_s, self.jitter_s = loss, delay_ms / 1e3, jitter_ms / 1e3
        self._rng = random.Random(seed)
        self.received = self.dropped = self.forwarded = self.overtaken = 0
        self._next_id = 0
        self._last_out = -1
        self._out: socket.socket | None = None
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()
        self.address = asyncio.run_coroutine_threadsafe(self._start(listen), self._loop).result(10)

    async def _start(self, listen: tuple[str, int]) -> tuple[str, int]:
        loop = asyncio.get_running_loop()
        self._server = await asyncio.start_server(self._pipe, listen[0], listen[1])
        port = self._server.sockets[0].getsockname()[1]
        self._udp, _ = await loop.create_datagram_endpoint(
            lambda: _Udp(self), local_addr=(listen[0], port)
        )
        out = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        out.setblocking(False)
        out.connect(self.target)
        self._out = out
        return listen[0], port

    def _on_datagram(self, data: bytes) -> None:
        self.received += 1
        ident = self._next_id
        self._next_id += 1
        if self._rng.random() < self.loss:
            self.dropped += 1
            return
        delay = self.delay_s + self._rng.uniform(-self.jitter_s, self.jitter_s)
        self._loop.call_later(max(delay, 0.0), self._forward, ident, data)

    def _forward(self, ident: int, data: bytes) -> None:
        if ident < self._last_out:
            self.overtaken += 1  # a later datagram went out first: this one is reordered
        self._last_out = max(self._last_out, ident)
        assert self._out is not None
        with contextlib.suppress(OSError):
            self._out.send(data)
            self.forwarded += 1

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_r, up_w = await asyncio.open_connection(*self.target)
        except OSError:
            writer.close()
            return

        async def copy(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            with contextlib.suppress(OSError, asyncio.IncompleteReadError):
                while data := await src.read(65536):
                    dst.write(data)
                    await dst.drain()
            with contextlib.suppress(OSError):
                dst.close()

        await asyncio.gather(copy(reader, up_w), copy(up_r, writer))

    def counters(self) -> dict[str, int]:
        return {
            "received": self.received,
            "dropped": self.dropped,
            "forwarded": self.forwarded,
            "overtaken": self.overtaken,
        }

    def close(self) -> None:
        async def stop() -> None:
            self._server.close()
            self._udp.close()
            if self._out is not None:
                self._out.close()
            others = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for t in others:
                t.cancel()
            await asyncio.gather(*others, return_exceptions=True)

        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(stop(), self._loop).result(5)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=5)
