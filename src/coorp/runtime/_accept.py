"""Accept loops that cannot die: bounded connections, per-source limits, fd exhaustion.

Every TCP service of the runtime (the leader's permit service, an inbox's bulk and LS
session port) accepts through one :class:`AcceptLoop`:

* **bounded before accepting** — at ``max_connections`` open connections the loop
  stops calling ``accept`` (the kernel's listen queue holds or refuses newcomers) and
  resumes when one closes; the bound defaults to what the process's file-descriptor
  limit leaves room for;
* **pre-authentication limit per source address** — at most ``max_preauth_per_source``
  connections from one host may be in their handshake at once; more are closed at
  once (counted as ``limited``), so one flooding host cannot occupy the slots an
  honest robot needs;
* **a deadline for the whole greeting** — the handler runs its handshake inside
  :meth:`AcceptLoop.handshake_deadline`, which bounds the handshake as a whole (not
  each read: a peer trickling one byte per read interval cannot hold a slot);
* **file-descriptor exhaustion** (``EMFILE``/``ENFILE``/``ENOBUFS``/``ENOMEM``) is
  logged once per episode, the loop backs off (10 ms doubling to 1 s) and resumes;
  any other unexpected error is logged and the loop goes on.

:meth:`AcceptLoop.health` is the one-line state shown by ``coorp leader --status``.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import resource
import socket
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from typing import Any

from ._counters import host_of
from ._errors import PeerTimeoutError
from ._sockets import format_address

__all__ = ["AcceptLoop", "default_max_connections"]

_FD_ERRORS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})
#: File descriptors kept free for everything else (logs, outgoing connections, files).
_FD_RESERVE = 64
_MIN_BACKOFF_S = 0.01
_MAX_BACKOFF_S = 1.0


def default_max_connections(configured: int) -> int:
    """``configured``, but never more than the fd limit leaves room for."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return configured
    return min(configured, max(8, int(soft) - _FD_RESERVE))


class AcceptLoop:
    """Accepts on ``listener`` and runs ``handler(sock, peer, slot)`` per connection."""

    def __init__(
        self,
        listener: socket.socket,
        handler: Callable[[socket.socket, str, AcceptLoop], Coroutine[Any, Any, None]],
        *,
        name: str,
        logger: logging.Logger,
        max_connections: int,
        max_preauth_per_source: int,
        handshake_timeout_s: float,
        on_limited: Callable[[str], None] | None = None,
        accept: Callable[[socket.socket], Awaitable[tuple[socket.socket, Any]]] | None = None,
    ) -> None:
        self._listener = listener
        self._handler = handler
        self.name = name
        self._log = logger
        self.max_connections = default_max_connections(max_connections)
        self.max_preauth_per_source = max_preauth_per_source
        self.handshake_timeout_s = handshake_timeout_s
        self._on_limited = on_limited
        self._accept_fn = accept
        self._tasks: set[asyncio.Task[None]] = set()
        self._preauth: Counter[str] = Counter()
        self._in_handshake: set[str] = set()
        self._slot_free = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.state = "accepting"
        self.counters = {
            "accepted": 0,
            "open_connections": 0,
            "limited_connections": 0,
            "handshake_timeouts": 0,
            "accept_paused": 0,
            "fd_exhaustions": 0,
            "accept_errors": 0,
        }

    # -- lifecycle -------------------------------------------------------------------------
    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name=f"coorp-accept-{self.name}")

    async def wait(self) -> None:
        if self._task is not None:
            await asyncio.gather(self._task, return_exceptions=True)

    async def close(self) -> None:
        tasks = list(self._tasks)
        if self._task is not None:
            tasks.append(self._task)
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    @property
    def open_connections(self) -> int:
        return len(self._tasks)

    def health(self) -> str:
        c = self.counters
        return (
            f"{self.state}: {len(self._tasks)}/{self.max_connections} connections, "
            f"{sum(self._preauth.values())} in handshake, {c['limited_connections']} limited, "
            f"{c['handshake_timeouts']} handshake timeouts, {c['fd_exhaustions']} fd exhaustions"
        )

    def stats(self) -> dict[str, int]:
        out = dict(self.counters)
        out["open_connections"] = len(self._tasks)
        out["max_connections"] = self.max_connections
        out["accept_healthy"] = int(self.state == "accepting")
        return out

    # -- for handlers ----------------------------------------------------------------------
    @contextlib.asynccontextmanager
    async def handshake_deadline(self, peer: str) -> AsyncIterator[None]:
        """The handshake of ``peer`` as a whole must finish within the deadline; the
        connection stops counting against its source's pre-auth limit afterwards."""
        try:
            async with asyncio.timeout(self.handshake_timeout_s):
                yield
        except TimeoutError:
            self.counters["handshake_timeouts"] += 1
            raise PeerTimeoutError(
                f"{peer}: handshake not complete within {self.handshake_timeout_s:g} s"
            ) from None
        finally:
            self._release_preauth(peer)

    def _release_preauth(self, peer: str) -> None:
        """Idempotent: the handshake ended (or the handler did without one)."""
        if peer not in self._in_handshake:
            return
        self._in_handshake.discard(peer)
        host = host_of(peer)
        self._preauth[host] -= 1
        if self._preauth[host] <= 0:
            del self._preauth[host]

    # -- the loop ---------------------------------------------------------------------------
    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        backoff = _MIN_BACKOFF_S
        for _ in iter(int, 1):  # until cancelled; every iteration accepts or waits
            if len(self._tasks) >= self.max_connections:
                if self.state != "paused":
                    self.state = "paused"
                    self.counters["accept_paused"] += 1
                    self._log.warning(
                        "%s: %d connections open (the limit): not accepting until one closes",
                        self.name,
                        len(self._tasks),
                    )
                self._slot_free.clear()
                await self._slot_free.wait()
                continue
            try:
                if self._accept_fn is not None:
                    sock, addr = await self._accept_fn(self._listener)
                else:
                    sock, addr = await loop.sock_accept(self._listener)
            except asyncio.CancelledError:
                raise
            except OSError as exc:
                if exc.errno in _FD_ERRORS:
                    if self.state != "backing off":
                        self.state = "backing off"
                        self.counters["fd_exhaustions"] += 1
                        self._log.error(
                            "%s: cannot accept: %s (%d connections open); backing off and retrying",
                            self.name,
                            exc.strerror,
                            len(self._tasks),
                        )
                    await asyncio.sleep(backoff)
                    backoff = min(backoff * 2, _MAX_BACKOFF_S)
                    continue
                # ECONNABORTED and friends: that one connection is gone, not the loop.
                self.counters["accept_errors"] += 1
                self._log.debug("%s: accept failed: %s", self.name, exc)
                continue
            except Exception as exc:  # never let the loop die
                self.counters["accept_errors"] += 1
                self._log.exception("%s: unexpected accept error: %s", self.name, exc)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, _MAX_BACKOFF_S)
                continue
            backoff = _MIN_BACKOFF_S
            if self.state != "accepting":
                self._log.warning("%s: accepting connections again", self.name)
                self.state = "accepting"
            peer = format_address(addr)
            host = host_of(peer)
            if self._preauth[host] >= self.max_preauth_per_source:
                self.counters["limited_connections"] += 1
                with contextlib.suppress(OSError):
                    sock.close()
                if self._on_limited is not None:
                    self._on_limited(peer)
                continue
            self._preauth[host] += 1
            self._in_handshake.add(peer)
            self.counters["accepted"] += 1
            task = asyncio.create_task(self._guard(sock, peer), name=f"coorp-{self.name}-{peer}")
            self._tasks.add(task)
            task.add_done_callback(self._done)

    async def _guard(self, sock: socket.socket, peer: str) -> None:
        try:
            await self._handler(sock, peer, self)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a handler bug must not leak the slot or the fd
            self._log.exception("%s: handler for %s failed: %s", self.name, peer, exc)
        finally:
            self._release_preauth(peer)
            with contextlib.suppress(OSError):
                sock.close()

    def _done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        self._slot_free.set()
