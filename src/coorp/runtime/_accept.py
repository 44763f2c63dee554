"""Accept loops that cannot die: floods from many sources, greedy members, fd exhaustion.

Every TCP service of the runtime (the leader's permit service, an inbox's bulk and LS
session port) accepts through one :class:`AcceptLoop`. It never stops accepting: the
kernel's listen queue is first come, first served, so a loop that paused while a flood
held its slots left a robot's connection waiting behind hundreds of the flood's.
Instead every connection is taken at once and triaged:

* **pre-authentication limit per source address** — at most
  ``max_preauth_per_source`` connections from one host may be in their handshake at
  once; more are closed at once (counted as ``limited``);
* **pre-authentication budget across all sources** — connections from hosts that
  never authenticated here share ``preauth_budget`` slots. Above half of it, each new
  one closes the *oldest* such connection with a probability rising linearly to 1 at
  the full budget (random early drop, at the head: the newcomer gets its chance, the
  one that has waited longest without authenticating goes; ``preauth_evicted``). An
  honest client answers the greeting within a round trip, so it completes unless the
  budget turns over within that time;
* **a reserve for known members** — hosts from which a member authenticated before
  (``known_hosts``) do not count against that budget and are never early-dropped;
  the budget is at most ``max_connections - member_reserve``, and at the bound a
  known host's connection closes an unknown one's pre-auth connection to get in;
* **bounded** — at ``max_connections`` (never more than the fd limit minus 64) a new
  connection closes the oldest unknown pre-auth connection, or is closed itself if
  there is none (``dropped_full``);
* **a deadline for the whole greeting** — the handler runs its handshake inside
  :meth:`AcceptLoop.handshake_deadline` (not per read: a peer trickling one byte per
  read interval cannot hold a slot);
* **per-member quotas** after authentication (:meth:`AcceptLoop.authenticated`,
  :class:`~._quota.MemberQuotas`): connections per member and frames per second;
* **file-descriptor exhaustion** (``EMFILE``/``ENFILE``/``ENOBUFS``/``ENOMEM``): the
  loop backs off (10 ms doubling to 1 s) and resumes; any other unexpected error is
  logged and the loop goes on.

Warnings go through the service's :class:`~._counters.LogLimiter` (per kind, at most
5 lines per second). :meth:`AcceptLoop.health` is the one-line state shown by
``coorp leader --status``.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import os
import random
import resource
import socket
import time
from collections import Counter, OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from ._counters import LogLimiter, host_of
from ._errors import PeerTimeoutError
from ._quota import MemberQuotas, QuotaSettings
from ._sockets import format_address

__all__ = ["AcceptLoop", "default_max_connections"]

_FD_ERRORS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})
#: File descriptors kept free for everything else (logs, outgoing connections, files).
_FD_RESERVE = 64
_MIN_BACKOFF_S = 0.01
_MAX_BACKOFF_S = 1.0
#: Accepts in a row before the loop lets the handlers run (accept returns without
#: suspending while connections are queued).
_YIELD_EVERY = 16
_MAX_KNOWN_HOSTS = 4096


def default_max_connections(configured: int) -> int:
    """``configured``, but never more than the fd limit leaves room for."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return configured
    return min(configured, max(8, int(soft) - _FD_RESERVE))


@dataclass(slots=True)
class _Conn:
    sock: socket.socket
    peer: str
    host: str
    known: bool
    task: asyncio.Task[None] | None = None
    preauth: bool = True
    evicted: bool = False
    robot: str | None = None


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
        preauth_budget: int = 256,
        member_reserve: int = 64,
        quotas: QuotaSettings | None = None,
        limiter: LogLimiter | None = None,
        on_limited: Callable[[str], None] | None = None,
        accept: Callable[[socket.socket], Awaitable[tuple[socket.socket, Any]]] | None = None,
        clock: Callable[[], int] = time.monotonic_ns,
        rng: random.Random | None = None,
    ) -> None:
        self._listener = listener
        self._handler = handler
        self.name = name
        self._log = logger
        self.limiter = limiter if limiter is not None else LogLimiter(logger, clock)
        self.max_connections = default_max_connections(max_connections)
        self.max_preauth_per_source = max_preauth_per_source
        self.handshake_timeout_s = handshake_timeout_s
        self.member_reserve = min(member_reserve, self.max_connections // 2)
        self.preauth_budget = max(
            2, min(preauth_budget, self.max_connections - self.member_reserve)
        )
        self.quotas = MemberQuotas(quotas or QuotaSettings(), clock)
        self._on_limited = on_limited
        self._accept_fn = accept
        self._rng = rng if rng is not None else random.Random(os.urandom(16))
        # Every handler task, evicted ones included until they have ended.
        self._conns: dict[asyncio.Task[None], _Conn] = {}
        self._open = 0
        self._preauth: Counter[str] = Counter()
        # Pre-auth connections from unknown hosts, oldest first (the early-drop queue).
        self._unknown: OrderedDict[asyncio.Task[None], _Conn] = OrderedDict()
        self._known: OrderedDict[str, None] = OrderedDict()
        self._task: asyncio.Task[None] | None = None
        self.state = "accepting"
        self.counters = {
            "accepted": 0,
            "limited_connections": 0,
            "preauth_evicted": 0,
            "dropped_full": 0,
            "handshake_timeouts": 0,
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
        tasks = list(self._conns)
        if self._task is not None:
            tasks.append(self._task)
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    @property
    def open_connections(self) -> int:
        return self._open

    @property
    def in_handshake(self) -> int:
        return sum(self._preauth.values())

    def health(self) -> str:
        c = self.counters
        q = self.quotas.counters
        return (
            f"{self.state}: {self._open}/{self.max_connections} connections, "
            f"{self.in_handshake} in handshake ({len(self._unknown)}/{self.preauth_budget} "
            f"from unknown hosts), {c['preauth_evicted']} dropped early, "
            f"{c['limited_connections']} limited, {c['handshake_timeouts']} handshake "
            f"timeouts, {c['fd_exhaustions']} fd exhaustions, {q['quota_refused']} over quota"
        )

    def stats(self) -> dict[str, int]:
        out = dict(self.counters)
        out.update(self.quotas.counters)
        out["open_connections"] = self._open
        out["max_connections"] = self.max_connections
        out["preauth_budget"] = self.preauth_budget
        out["preauth_open"] = self.in_handshake
        out["known_hosts"] = len(self._known)
        out["accept_healthy"] = int(self.state == "accepting")
        return out

    # -- for handlers ----------------------------------------------------------------------
    def _current(self) -> _Conn | None:
        task = asyncio.current_task()
        conn = None if task is None else self._conns.get(task)
        return None if conn is None or conn.evicted else conn

    @contextlib.asynccontextmanager
    async def handshake_deadline(self, peer: str) -> AsyncIterator[None]:
        """The handshake of ``peer`` as a whole must finish within the deadline; the
        connection stops counting against the pre-auth limits afterwards."""
        conn = self._current()
        try:
            async with asyncio.timeout(self.handshake_timeout_s):
                yield
        except TimeoutError:
            self.counters["handshake_timeouts"] += 1
            raise PeerTimeoutError(
                f"{peer}: handshake not complete within {self.handshake_timeout_s:g} s"
            ) from None
        finally:
            if conn is not None:
                self._end_preauth(conn)

    async def authenticated(self, robot: str) -> None:
        """The current connection authenticated as ``robot``: its host is a known
        member's from now on; it counts against ``robot``'s connection quota
        (:class:`~._errors.LimitedError` when over it) and its handshake against the
        member's frame rate (this waits if the member is over it)."""
        conn = self._current()
        if conn is None:
            return
        self._end_preauth(conn)
        self._known[conn.host] = None
        self._known.move_to_end(conn.host)
        while len(self._known) > _MAX_KNOWN_HOSTS:
            self._known.popitem(last=False)
        self.quotas.open(robot)
        conn.robot = robot
        await self.quotas.pace(robot)

    async def pace(self, robot: str, frames: int = 1) -> None:
        """Charge ``frames`` handled for ``robot`` to its frame rate (waits when over)."""
        await self.quotas.pace(robot, frames)

    def _end_preauth(self, conn: _Conn) -> None:
        """Idempotent: the handshake ended (or the handler did without one)."""
        if not conn.preauth:
            return
        conn.preauth = False
        self._preauth[conn.host] -= 1
        if self._preauth[conn.host] <= 0:
            del self._preauth[conn.host]
        if conn.task is not None:
            self._unknown.pop(conn.task, None)

    # -- the loop ---------------------------------------------------------------------------
    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        backoff = _MIN_BACKOFF_S
        streak = 0
        for _ in iter(int, 1):  # until cancelled; every iteration accepts or waits
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
                        self.limiter.log(
                            "accept-fd",
                            logging.ERROR,
                            "%s: cannot accept: %s (%d connections open); backing off and retrying",
                            self.name,
                            exc.strerror,
                            self._open,
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
                self.limiter.log(
                    "accept-error", logging.ERROR, "%s: unexpected accept error: %r", self.name, exc
                )
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, _MAX_BACKOFF_S)
                continue
            backoff = _MIN_BACKOFF_S
            if self.state != "accepting":
                self.limiter.warning("accept-fd", "%s: accepting connections again", self.name)
                self.state = "accepting"
            self._triage(sock, format_address(addr))
            streak += 1
            if streak >= _YIELD_EVERY:
                streak = 0
                await asyncio.sleep(0)  # let the handlers (and evictions) run

    def _triage(self, sock: socket.socket, peer: str) -> None:
        """Admit the new connection (closing an older unknown one if need be), or close it."""
        host = host_of(peer)
        if self._preauth[host] >= self.max_preauth_per_source:
            self.counters["limited_connections"] += 1
            self._close(sock)
            if self._on_limited is not None:
                self._on_limited(peer)
            return
        known = host in self._known
        if not known and self._unknown:
            n, budget = len(self._unknown), self.preauth_budget
            low = budget // 2
            if n >= budget or (n >= low and self._rng.random() < (n - low) / (budget - low)):
                self._evict_oldest_unknown()
        if self._open >= self.max_connections:
            if not self._unknown:
                self.counters["dropped_full"] += 1
                self._close(sock)
                self.limiter.warning(
                    "accept-full",
                    "%s: %d connections open (the bound), none of them an unauthenticated "
                    "one to close: closing new connections",
                    self.name,
                    self._open,
                )
                return
            self._evict_oldest_unknown()
        self._preauth[host] += 1
        self.counters["accepted"] += 1
        conn = _Conn(sock, peer, host, known)
        task = asyncio.create_task(self._guard(sock, peer), name=f"coorp-{self.name}-{peer}")
        conn.task = task
        self._conns[task] = conn
        self._open += 1
        if not known:
            self._unknown[task] = conn
        task.add_done_callback(self._done)

    def _evict_oldest_unknown(self) -> None:
        task, conn = self._unknown.popitem(last=False)
        self.counters["preauth_evicted"] += 1
        self._end_preauth(conn)
        conn.evicted = True
        self._open -= 1
        task.cancel()  # its socket is closed when it ends (_done), started or not
        self.limiter.warning(
            "accept-flood",
            "%s: %d connections from hosts that never authenticated here are in their "
            "handshake (budget %d): closing the oldest ones early (preauth_evicted %d)",
            self.name,
            len(self._unknown) + 1,
            self.preauth_budget,
            self.counters["preauth_evicted"],
        )

    @staticmethod
    def _close(sock: socket.socket) -> None:
        with contextlib.suppress(OSError):
            sock.close()

    async def _guard(self, sock: socket.socket, peer: str) -> None:
        try:
            await self._handler(sock, peer, self)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a handler bug must not leak the slot or the fd
            self._log.exception("%s: handler for %s failed: %s", self.name, peer, exc)
        finally:
            self._close(sock)

    def _done(self, task: asyncio.Task[None]) -> None:
        conn = self._conns.pop(task, None)
        if conn is None:
            return
        # A task cancelled before it ever ran never reached _guard's finally.
        self._close(conn.sock)
        if conn.evicted:
            return  # already accounted for
        self._open -= 1
        self._end_preauth(conn)
        if conn.robot is not None:
            self.quotas.close(conn.robot)
            conn.robot = None
