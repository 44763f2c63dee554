"""Accept loops that cannot die: floods from many sources, greedy members, fd exhaustion.

Every TCP service of the runtime (the leader's permit service, an inbox's bulk and LS
session port) accepts through one :class:`AcceptLoop`. It never stops accepting: the
kernel's listen queue is first come, first served, so a loop that paused while a flood
held its slots left a robot's connection waiting behind hundreds of the flood's
(issue 23: joins over 1 s, fallbacks). Instead every queued connection is taken at once
and triaged, cheaply:

* **greeting without a task** — the service's greeting (a fresh nonce) is written by the
  accept loop itself and the connection waits, registered with the event loop but with
  no handler task and no buffer, until its peer speaks. Only then does the handler run
  (the rest of the handshake). A flood that connects and never speaks costs an accept,
  one small write and a close;
* **pre-authentication limit per source address** — at most
  ``max_preauth_per_source`` connections from one host may be in their handshake at
  once; more are closed at once (counted as ``limited``);
* **pre-authentication budget across all sources** — connections from hosts no member
  ever authenticated from share ``preauth_budget`` slots: when they are all taken, a
  newcomer closes the *oldest* of them (``preauth_evicted``: the newcomer gets its
  chance, the one that has waited longest without authenticating goes); and they are
  admitted at most ``preauth_budget`` per ``_PREAUTH_HOLD_S`` — arrivals beyond that
  rate are dropped early, at random (the kernel's queue order does not decide:
  ``dropped_early``), so an admitted connection keeps its slot long enough for an
  honest client to answer the greeting (one round trip); and at most
  ``_ADMIT_PER_BATCH`` per batch accepted together, so that under a loaded CPU, when the
  loop falls behind and its batches fill, greeting the flood does not take the time
  members' connections need. A connection dropped early is a bare descriptor, accepted
  and closed, never a socket object;
* **a reserve for known members** — hosts from which a member authenticated before
  (``known_hosts``, at most ``known_hosts_per_member`` of each member's addresses, for
  ``known_host_ttl_s``: :class:`~._quota.KnownHosts`) bypass that budget and its early
  drop; the budget is at most
  ``max_connections - member_reserve``, and at the bound a known host's connection
  closes an unknown one's pre-auth connection to get in;
* **bounded** — at ``max_connections`` (never more than the fd limit minus 64) a new
  connection closes the oldest unknown pre-auth connection, or is closed itself if
  there is none (``dropped_full``);
* **a deadline for the whole greeting** (``handshake_timeout_s``), counted from the
  accept: a peer that never speaks, or trickles a byte per read, cannot hold a slot;
* **per-member quotas** after authentication (:meth:`AcceptLoop.authenticated`,
  :class:`~._quota.MemberQuotas`): connections per member and frames per second;
* **file-descriptor exhaustion** (``EMFILE``/``ENFILE``/``ENOBUFS``/``ENOMEM``): the
  loop backs off (10 ms doubling to 1 s) and resumes; any other unexpected error is
  logged and the loop goes on.

Warnings go through the service's :class:`~._counters.LogLimiter` (per kind, at most
4 lines per second). :meth:`AcceptLoop.health` is the one-line state shown by
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

from .._counters import LogLimiter, host_of
from .._errors import PeerTimeoutError
from ._quota import KnownHosts, MemberQuotas, QuotaSettings
from ._sockets import format_address

__all__ = ["AcceptLoop", "default_max_connections"]

_FD_ERRORS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})
#: File descriptors kept free for everything else (logs, outgoing connections, files).
_FD_RESERVE = 64
_MIN_BACKOFF_S = 0.01
_MAX_BACKOFF_S = 1.0
#: Connections accepted and triaged together at most (what the listen queue holds).
_BATCH = 256
#: Unknown hosts' connections admitted per batch at most: when the loop falls behind
#: (a flood, a loaded CPU) its batches are full, and greeting flood connections would
#: take the time the members' connections need; the admissions then slow with the loop.
_ADMIT_PER_BATCH = 16
#: An unknown host's connection keeps its pre-auth slot about this long before the
#: budget may turn over (admissions from unknown hosts: the budget per this time).
_PREAUTH_HOLD_S = 0.1

#: (nonce, greeting frame): what the service says first on a new connection.
Greeting = Callable[[], tuple[bytes, bytes]]


def default_max_connections(configured: int) -> int:
    """``configured``, but never more than the fd limit leaves room for."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return configured
    return min(configured, max(8, int(soft) - _FD_RESERVE))


@dataclass(slots=True, eq=False)
class _Conn:
    sock: socket.socket
    peer: str
    host: str
    known: bool
    since_ns: int
    nonce: bytes | None = None
    """The greeting's nonce, when the accept loop greeted."""
    task: asyncio.Task[None] | None = None
    """None while waiting for the peer to speak."""
    preauth: bool = True
    closed: bool = False
    robot: str | None = None


class AcceptLoop:
    """Accepts on ``listener`` and runs ``handler(sock, peer, slot)`` per connection
    (after ``greeting``, if given, was written and the peer answered)."""

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
        greeting: Greeting | None = None,
        on_limited: Callable[[str], None] | None = None,
        accept: Callable[[socket.socket], Awaitable[tuple[socket.socket, Any]]] | None = None,
        clock: Callable[[], int] = time.monotonic_ns,
        rng: random.Random | None = None,
    ) -> None:
        self._listener = listener
        self._handler = handler
        self.name = name
        self._log = logger
        self._clock = clock
        self.limiter = limiter if limiter is not None else LogLimiter(logger, clock)
        self.max_connections = default_max_connections(max_connections)
        self.max_preauth_per_source = max_preauth_per_source
        self.handshake_timeout_s = handshake_timeout_s
        self.member_reserve = min(member_reserve, self.max_connections // 2)
        self.preauth_budget = max(
            2, min(preauth_budget, self.max_connections - self.member_reserve)
        )
        q = quotas or QuotaSettings()
        self.quotas = MemberQuotas(q, clock)
        self._greeting = greeting
        self._on_limited = on_limited
        self._accept_fn = accept
        self._rng = rng if rng is not None else random.Random(os.urandom(16))
        self._conns: dict[asyncio.Task[None], _Conn] = {}
        """Every handler task, closed (evicted) ones included until they have ended."""
        self._open = 0
        self._preauth: Counter[str] = Counter()
        # Pre-auth connections, oldest first: unknown hosts' (the drop-head queue) and
        # known hosts' (only for the greeting deadline).
        self._unknown: OrderedDict[_Conn, None] = OrderedDict()
        self._known_pre: OrderedDict[_Conn, None] = OrderedDict()
        self.known = KnownHosts(
            per_member=q.known_hosts_per_member, ttl_s=q.known_host_ttl_s, clock=clock
        )
        self._task: asyncio.Task[None] | None = None
        self._sweeper: asyncio.TimerHandle | None = None
        self._tokens = float(self.preauth_budget)
        self._tokens_ns = clock()
        self._early_logged = 0
        self.state = "accepting"
        self.counters = {
            "accepted": 0,
            "limited_connections": 0,
            "dropped_early": 0,
            "preauth_evicted": 0,
            "dropped_full": 0,
            "handshake_timeouts": 0,
            "fd_exhaustions": 0,
            "accept_errors": 0,
        }

    # -- lifecycle -------------------------------------------------------------------------
    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name=f"coorp-accept-{self.name}")
        self._sweep()

    async def wait(self) -> None:
        if self._task is not None:
            await asyncio.gather(self._task, return_exceptions=True)

    async def close(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
        for conn in [*self._unknown, *self._known_pre]:
            if conn.task is None:
                self._drop(conn)
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
            f"from unknown hosts), {c['dropped_early'] + c['preauth_evicted']} dropped early, "
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
        out["known_hosts"] = len(self.known)
        out.update(self.known.counters)
        out["accept_healthy"] = int(self.state == "accepting")
        return out

    # -- for handlers ----------------------------------------------------------------------
    def _current(self) -> _Conn | None:
        task = asyncio.current_task()
        conn = None if task is None else self._conns.get(task)
        return None if conn is None or conn.closed else conn

    def greeted_nonce(self) -> bytes | None:
        """The nonce of the greeting this loop already wrote on the current connection
        (the handler must not greet again); None if it wrote none."""
        conn = self._current()
        return None if conn is None else conn.nonce

    @contextlib.asynccontextmanager
    async def handshake_deadline(self, peer: str) -> AsyncIterator[None]:
        """The handshake of ``peer`` as a whole — from the accept on — must finish
        within the deadline; the connection stops counting against the pre-auth
        limits afterwards."""
        conn = self._current()
        left = self.handshake_timeout_s
        if conn is not None:
            left -= (self._clock() - conn.since_ns) / 1e9
        try:
            async with asyncio.timeout(max(left, 0.0)):
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
        self.known.add(conn.host, robot)
        self.quotas.open(robot)
        conn.robot = robot
        await self.quotas.pace(robot)

    async def pace(self, robot: str, frames: int = 1) -> None:
        """Charge ``frames`` handled for ``robot`` to its frame rate (waits when over)."""
        await self.quotas.pace(robot, frames)

    def _end_preauth(self, conn: _Conn) -> None:
        """Idempotent: the handshake ended (or the connection did)."""
        if not conn.preauth:
            return
        conn.preauth = False
        self._preauth[conn.host] -= 1
        if self._preauth[conn.host] <= 0:
            del self._preauth[conn.host]
        self._unknown.pop(conn, None)
        self._known_pre.pop(conn, None)

    # -- the loop ---------------------------------------------------------------------------
    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        backoff = _MIN_BACKOFF_S
        for _ in iter(int, 1):  # until cancelled; every iteration accepts or waits
            try:
                if self._accept_fn is not None:
                    first = await self._accept_fn(self._listener)
                else:
                    first = await loop.sock_accept(self._listener)
                batch: list[tuple[socket.socket | int, Any]] = [first]
                # Whatever else is queued, without waiting, within the fds left: most
                # of a flood is closed again at once (early drop), so fds stay free.
                # Taken as bare descriptors: a connection dropped early never becomes a
                # socket object (a flood's cost is an accept and a close).
                room = max(8, self.max_connections + _FD_RESERVE // 2 - self._open)
                raw = getattr(self._listener, "_accept", self._listener.accept)
                while len(batch) < min(_BATCH, room):
                    try:
                        batch.append(raw())
                    except OSError:  # nothing queued (EAGAIN), or no fd: the next await says
                        break
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
            self._triage([(sock, format_address(addr)) for sock, addr in batch])
            await asyncio.sleep(0)  # let the handlers (and evictions) run

    def _admission_tokens(self) -> float:
        """Admissions of unknown hosts' connections left now: ``preauth_budget`` per
        ``_PREAUTH_HOLD_S``, at most ``preauth_budget`` at once."""
        now = self._clock()
        rate = self.preauth_budget / _PREAUTH_HOLD_S
        self._tokens = min(
            float(self.preauth_budget), self._tokens + (now - self._tokens_ns) * rate / 1e9
        )
        self._tokens_ns = now
        return self._tokens

    def _triage(self, batch: list[tuple[socket.socket | int, str]]) -> None:
        """Admit or close each connection of ``batch`` (accepted together): known
        members' hosts first; unknown hosts' within their admission rate, a uniform
        random sample of them when more arrived (the rest closed at once, cheaply)."""
        known: list[tuple[socket.socket | int, str, str]] = []
        unknown: list[tuple[socket.socket | int, str, str]] = []
        for sock, peer in batch:
            host = host_of(peer)
            (known if host in self.known else unknown).append((sock, peer, host))
        for sock, peer, host in known:
            self._admit(sock, peer, host, known=True)
        if not unknown:
            return
        if len(unknown) > 1:
            self._rng.shuffle(unknown)  # the kernel's queue order must not decide
        tokens = self._admission_tokens()
        admitted = 0
        for sock, peer, host in unknown:
            if (tokens < 1 or admitted >= _ADMIT_PER_BATCH) and self._preauth[
                host
            ] < self.max_preauth_per_source:
                self.counters["dropped_early"] += 1
                self._close(sock)
                continue
            if self._admit(sock, peer, host, known=False):
                tokens -= 1
                admitted += 1
        self._tokens = tokens
        if self.counters["dropped_early"] > self._early_logged:
            self._early_logged = self.counters["dropped_early"]
            self.limiter.warning(
                "accept-flood",
                "%s: more connections from hosts that never authenticated here than the "
                "pre-auth budget admits (%d per %.2f s): dropping the excess at random "
                "(dropped_early %d, preauth_evicted %d)",
                self.name,
                self.preauth_budget,
                _PREAUTH_HOLD_S,
                self.counters["dropped_early"],
                self.counters["preauth_evicted"],
            )

    def _admit(self, sock: socket.socket | int, peer: str, host: str, *, known: bool) -> bool:
        """Greet one connection (closing the oldest unknown pre-auth connection if need
        be); False if it was closed instead."""
        if self._preauth[host] >= self.max_preauth_per_source:
            self.counters["limited_connections"] += 1
            self._close(sock)
            if self._on_limited is not None:
                self._on_limited(peer)
            return False
        if not known and len(self._unknown) >= self.preauth_budget:
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
                return False
            self._evict_oldest_unknown()
        if isinstance(sock, int):  # a bare descriptor from the batch: a socket from now on
            sock = socket.socket(self._listener.family, socket.SOCK_STREAM, fileno=sock)
        conn = _Conn(sock, peer, host, known, self._clock())
        if self._greeting is not None:
            nonce, frame = self._greeting()
            try:  # a few dozen bytes into a fresh socket's empty buffer
                sock.setblocking(False)
                if sock.send(frame) != len(frame):
                    raise OSError(errno.EAGAIN, "greeting not written whole")
            except OSError:
                self._close(sock)
                return False
            conn.nonce = nonce
        self._preauth[host] += 1
        self._open += 1
        self.counters["accepted"] += 1
        (self._unknown if not known else self._known_pre)[conn] = None
        if self._greeting is None:
            self._start_handler(conn)
        else:
            asyncio.get_running_loop().add_reader(sock.fileno(), self._spoke, conn)
        return True

    def _spoke(self, conn: _Conn) -> None:
        """The peer answered the greeting (or closed): the handler takes over."""
        with contextlib.suppress(ValueError, OSError):
            asyncio.get_running_loop().remove_reader(conn.sock.fileno())
        if not conn.closed:
            self._start_handler(conn)

    def _start_handler(self, conn: _Conn) -> None:
        task = asyncio.create_task(
            self._guard(conn.sock, conn.peer), name=f"coorp-{self.name}-{conn.peer}"
        )
        conn.task = task
        self._conns[task] = conn
        task.add_done_callback(self._done)

    def _evict_oldest_unknown(self) -> None:
        conn, _ = self._unknown.popitem(last=False)
        self.counters["preauth_evicted"] += 1
        self._drop(conn)

    def _drop(self, conn: _Conn) -> None:
        """Close a pre-auth connection (evicted, or its greeting deadline passed)."""
        self._end_preauth(conn)
        if conn.closed:
            return
        conn.closed = True
        self._open -= 1
        if conn.task is None:
            with contextlib.suppress(ValueError, OSError):
                asyncio.get_running_loop().remove_reader(conn.sock.fileno())
            self._close(conn.sock)
        else:
            conn.task.cancel()  # its socket is closed when it ends (_done), started or not

    def _sweep(self) -> None:
        """Close greeted connections whose peer never spoke within the deadline
        (oldest first; every quarter of the deadline, and at close)."""
        cutoff = self._clock() - round(self.handshake_timeout_s * 1e9)
        for pool in (self._unknown, self._known_pre):
            for conn in list(pool):
                if conn.since_ns > cutoff:
                    break
                if conn.task is None:
                    self.counters["handshake_timeouts"] += 1
                    self._drop(conn)
        self._sweeper = asyncio.get_running_loop().call_later(
            self.handshake_timeout_s / 4, self._sweep
        )

    @staticmethod
    def _close(sock: socket.socket | int) -> None:
        with contextlib.suppress(OSError):
            if isinstance(sock, int):
                os.close(sock)
            else:
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
        self._end_preauth(conn)
        if conn.closed:
            return  # evicted: already accounted for
        conn.closed = True
        self._open -= 1
        if conn.robot is not None:
            self.quotas.close(conn.robot)
            conn.robot = None
