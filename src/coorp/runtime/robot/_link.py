"""An agent's link to the leader: join, heartbeat, reconnect, and fall back.

States (:class:`LinkState`):

* ``JOINED`` — authenticated connection up; BH needs a permit.
* ``PENDING`` — not (yet) joined, but the leader was heard from recently: BH waits,
  the link is reconnecting.
* ``UNCOORDINATED`` — the leader has not been heard from for ``fallback_ns``
  (default 0.9 s) **and** at least ``min_failed_attempts`` (2) reconnection attempts
  since then failed: BH sends without permits. Logged once per outage; when the
  leader answers again the link rejoins (logged once) and permits apply again.

Reconnect first: losing the connection starts reconnecting at once (back-off 50 ms
doubling to 0.5 s); only a leader that stays unreachable through those attempts is
"gone". A leader that vanishes silently is noticed after three heartbeats without a
frame — counted in time this process actually ran: a **stall** (the process was
stopped, e.g. SIGSTOP, or starved of CPU for more than a heartbeat) is detected by a
watchdog that ticks every quarter heartbeat, and gives the connection two more
heartbeats to deliver what the leader sent meanwhile instead of declaring it gone.
Stalls are reported (``on_stall``) so that a permit held before one is confirmed
with the leader before more BH is sent (see :mod:`._coordination`).

**The lease.** The leader drops a robot it has not heard from for three heartbeats
(its read timeout on the connection, restarted by every frame). So once the leader
answered a Ping this link sent at local time ``t``, it cannot have dropped the robot
(nor passed its permit on for silence) before ``t`` + three heartbeats, on any clock
that runs at the rate of real time: the leader read the Ping after ``t``.
:meth:`ControlLink.lease_ends_ns` is that instant minus half a heartbeat of margin, on
this robot's own monotonic clock, renewed by every answered heartbeat (every 200 ms by
default). A holder that was frozen, starved or suspended for longer than the lease
finds it over before its next byte, whatever woke it first, with no need to notice
the stall (:mod:`._coordination` checks it before every write).
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
import socket
import time
from collections.abc import Callable, Coroutine
from typing import Any

from coorp._errors import PeerError

from .._errors import MalformedFrameError, PeerTimeoutError, RefusedError
from ..wire import (
    Address,
    FramedConnection,
    Keyring,
    Message,
    PeerClosed,
    Ping,
    Pong,
    Welcome,
    client_handshake,
    format_address,
    recv_first_reply,
    resolve,
    tune_tcp,
)

__all__ = ["ControlLink", "LinkState"]

log = logging.getLogger("coorp.runtime.agent")


class LinkState(enum.Enum):
    JOINED = "coordinated"
    PENDING = "reconnecting"
    UNCOORDINATED = "uncoordinated"


class ControlLink:
    """Keeps one robot joined to its leader for as long as it runs."""

    def __init__(
        self,
        leader: Address,
        robot: str,
        key: Keyring,
        *,
        on_message: Callable[[Message], None],
        on_state: Callable[[LinkState, Welcome | None], None],
        clock: Callable[[], int] = time.monotonic_ns,
        fallback_ns: int = 900_000_000,
        connect_timeout_s: float = 0.5,
        max_backoff_s: float = 0.5,
        min_failed_attempts: int = 2,
        on_stall: Callable[[int], None] | None = None,
    ) -> None:
        self.leader = leader
        self.robot = robot
        self._key = key
        self._on_message = on_message
        self._on_state = on_state
        self._clock = clock
        self.fallback_ns = fallback_ns
        self._connect_timeout_s = connect_timeout_s
        self._max_backoff_s = max_backoff_s
        self.min_failed_attempts = min_failed_attempts
        self._on_stall = on_stall
        self._failed_attempts = 0
        self._fallback_due = False
        self.state = LinkState.PENDING
        self.welcome: Welcome | None = None
        self.refused: str | None = None
        #: Time from the last frame heard to the last switch to uncoordinated mode.
        self.fell_back_after_ns: int | None = None
        self._conn: FramedConnection | None = None
        self._last_heard_ns = clock()
        self._connecting_ns = clock()
        self._fallback_timer: asyncio.TimerHandle | None = None
        self._settled = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._fallback_logged = False
        self._closing = False
        # Round trips in flight: Ping token -> future set by the matching Pong.
        self._round_trips: dict[int, asyncio.Future[None]] = {}
        self._next_token = 1 << 40  # apart from the heartbeat tokens (1, 2, ...)
        # Pings in flight: token -> local send time (the lease starts at the send).
        self._pings_out: dict[int, int] = {}
        self._renewed_ns: int | None = None
        self._lease_ns = 0
        #: Called when an answered Ping renewed the lease.
        self.on_renew: Callable[[], None] | None = None
        self.counters = {
            "joins": 0,
            "disconnects": 0,
            "fallbacks": 0,
            "refusals": 0,
            "failed_attempts": 0,
            "stalls": 0,
            "moves": 0,
        }
        self._moved = False
        self._move = asyncio.Event()

    # -- public ----------------------------------------------------------------------------
    def start(self) -> None:
        self._arm_fallback()
        self._task = asyncio.create_task(self._run(), name=f"coorp-link-{self.robot}")

    async def wait_settled(self, timeout_s: float) -> LinkState:
        """Wait until joined, refused, or fallen back (at most ``timeout_s``)."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout_s):
                await self._settled.wait()
        return self.state

    async def send(self, msg: Message) -> bool:
        """Send if joined; False (nothing sent) otherwise."""
        conn = self._conn
        if conn is None or self.state is not LinkState.JOINED:
            return False
        try:
            await conn.send(msg)
        except (PeerError, OSError):
            conn.close()
            return False
        return True

    async def round_trip(self, timeout_s: float) -> bool:
        """Ping the leader and wait for its Pong: True once the leader has handled
        every frame sent on this connection before (frames are handled in order).
        False if not joined, or no answer within ``timeout_s``."""
        conn = self._conn
        if conn is None or self.state is not LinkState.JOINED:
            return False
        self._next_token += 1
        token = self._next_token
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._round_trips[token] = fut
        try:
            async with asyncio.timeout(timeout_s):
                await conn.send(self._ping(token))
                await fut
            return True
        except (TimeoutError, PeerError, OSError):
            return False
        finally:
            self._round_trips.pop(token, None)

    def move_to(self, leader: Address) -> None:
        """The robot is in another cell now (:mod:`._roam`): leave this leader (closing
        the connection tells it: the robot's request and permit are gone there) and join
        ``leader`` at once. Bulk waits meanwhile, as on any reconnection; LS, marking
        and local preemption do not depend on the leader and carry on."""
        if leader == self.leader:
            return
        log.info("%s: moving from leader %s to %s", self.robot, format_address(self.leader),
                 format_address(leader))  # fmt: skip
        self.leader = leader
        self.counters["moves"] += 1
        self._moved = True
        # Stop sending bulk before the old leader can hand the permit on (it does as
        # soon as it sees the connection close), then end the connection.
        self._lost()
        self._move.set()  # the connection loop connects to ``leader`` at once

    def lease_ends_ns(self) -> int | None:
        """Until when (this robot's monotonic clock) the leader cannot have dropped
        this robot for silence: see the module docstring. None while not joined."""
        if self.state is not LinkState.JOINED or self._renewed_ns is None:
            return None
        return self._renewed_ns + self._lease_ns

    def _ping(self, token: int) -> Ping:
        """A Ping whose answer renews the lease from now."""
        out = self._pings_out
        if len(out) >= 64:  # unanswered for long: the watchdog will end the link
            del out[next(iter(out))]
        out[token] = self._clock()
        return Ping(token)

    def _answered(self, token: int) -> None:
        sent = self._pings_out.pop(token, None)
        if sent is None:
            return
        # Frames are answered in order: older pings still listed were lost with an
        # earlier connection, never answered on this one.
        for t in [t for t, ns in self._pings_out.items() if ns <= sent]:
            del self._pings_out[t]
        if self._renewed_ns is None or sent > self._renewed_ns:
            self._renewed_ns = sent
            if self.on_renew is not None:
                self.on_renew()

    async def close(self) -> None:
        self._closing = True
        if self._fallback_timer is not None:
            self._fallback_timer.cancel()
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        if self._conn is not None:
            self._conn.close()

    # -- the connection loop ---------------------------------------------------------------
    async def _run(self) -> None:
        backoff = 0.05
        while True:
            joined = False
            target = self.leader
            peer = format_address(target)
            self._moved = False
            self._move.clear()
            try:
                conn, welcome = await self._unless_moved(self._connect())
                if self.leader != target:  # moved while connecting: not this one
                    raise PeerClosed(f"moved away from {peer}")
                backoff = 0.05
                joined = True
                await self._serve(conn, welcome)
            except RefusedError as exc:
                self.counters["refusals"] += 1
                if self.refused is None:
                    log.error("leader %s refused %s: %s", peer, self.robot, exc)
                self.refused = str(exc)
                self._settled.set()
            except (PeerError, PeerClosed, OSError, TimeoutError) as exc:
                log.debug("link to %s: %s", peer, exc)
            finally:
                self._lost()
            if self._moved:
                continue  # the robot changed cells: join the new leader now
            if not joined:
                self._failed_attempts += 1
                self.counters["failed_attempts"] += 1
                if self._fallback_due and self._failed_attempts >= self.min_failed_attempts:
                    self._fall_back()
            with contextlib.suppress(TimeoutError):  # a move ends the back-off
                await asyncio.wait_for(self._move.wait(), backoff)
            backoff = min(backoff * 2, self._max_backoff_s)

    async def _unless_moved(
        self, coro: Coroutine[Any, Any, tuple[FramedConnection, Welcome]]
    ) -> tuple[FramedConnection, Welcome]:
        """``coro``'s result, or :class:`PeerClosed` as soon as the robot changed cells."""
        task = asyncio.ensure_future(coro)
        moved = asyncio.ensure_future(self._move.wait())
        try:
            await asyncio.wait({task, moved}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            moved.cancel()
            if not task.done():
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
        if task.cancelled():
            raise PeerClosed(f"moved away from {format_address(self.leader)}")
        return task.result()

    async def _connect(self) -> tuple[FramedConnection, Welcome]:
        loop = asyncio.get_running_loop()
        # The leader's silence timer starts after our Join, which goes out after this.
        self._connecting_ns = self._clock()
        family, sockaddr = resolve(self.leader, socket.SOCK_STREAM)
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setblocking(False)
        try:
            async with asyncio.timeout(self._connect_timeout_s):
                await loop.sock_connect(sock, sockaddr)
        except BaseException:
            sock.close()
            raise
        tune_tcp(sock)
        conn = FramedConnection(
            sock,
            peer=format_address(self.leader),
            read_timeout_s=self._connect_timeout_s * 4,
            write_timeout_s=self._connect_timeout_s * 4,
        )
        self._conn = conn
        await client_handshake(conn, self._key, robot=self.robot, role="agent", service="leader")
        msg = await recv_first_reply(conn)
        if not isinstance(msg, Welcome):
            raise MalformedFrameError(f"expected Welcome, got {type(msg).__name__}")
        return conn, msg

    async def _serve(self, conn: FramedConnection, welcome: Welcome) -> None:
        self._joined(welcome)
        # Silence is judged by the watchdog (stall-aware), not by a read timeout.
        conn.read_timeout_s = 3600.0
        period_s = welcome.heartbeat_ns / 1e9
        tasks = [
            asyncio.create_task(self._read_loop(conn)),
            asyncio.create_task(self._heartbeat(conn, period_s)),
            asyncio.create_task(self._watchdog(welcome.heartbeat_ns)),
            asyncio.create_task(self._move.wait()),  # the robot changed cells: end
        ]
        try:
            done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
            for t in done:
                t.result()  # the reader's or the watchdog's error ends the connection
        finally:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    async def _read_loop(self, conn: FramedConnection) -> None:
        while True:
            msg = await conn.recv()
            self._last_heard_ns = self._clock()
            if isinstance(msg, Pong):
                self._answered(msg.token)
                fut = self._round_trips.get(msg.token)
                if fut is not None and not fut.done():
                    fut.set_result(None)
            else:
                self._on_message(msg)

    async def _watchdog(self, heartbeat_ns: int) -> None:
        """Raise :class:`PeerTimeoutError` after three heartbeats of silence, counted
        in time this process ran (a stall gives the leader two more heartbeats)."""
        tick_ns = max(heartbeat_ns // 4, 1_000_000)
        silence_ns = 3 * heartbeat_ns
        last = self._clock()
        while True:
            await asyncio.sleep(tick_ns / 1e9)
            now = self._clock()
            if now - last > heartbeat_ns:
                self.counters["stalls"] += 1
                log.info(
                    "%s: this process did not run for %.0f ms (stopped or starved); "
                    "waiting for the leader before judging it",
                    self.robot,
                    (now - last) / 1e6,
                )
                self._last_heard_ns = max(self._last_heard_ns, now - heartbeat_ns)
                if self._on_stall is not None:
                    self._on_stall(now - last)
            last = now
            if now - self._last_heard_ns > silence_ns:
                raise PeerTimeoutError(
                    f"leader {format_address(self.leader)} silent for "
                    f"{(now - self._last_heard_ns) / 1e6:.0f} ms"
                )

    async def _heartbeat(self, conn: FramedConnection, period_s: float) -> None:
        token = 0
        while True:
            await asyncio.sleep(period_s)
            token += 1
            try:
                await conn.send(self._ping(token))
            except (PeerError, OSError):
                conn.close()
                return

    # -- state changes ---------------------------------------------------------------------
    def _joined(self, welcome: Welcome) -> None:
        self._last_heard_ns = self._clock()
        # Three heartbeats of silence drop a robot at the leader; half a heartbeat of
        # margin (clock rates, the time between our check and the kernel's send).
        self._lease_ns = 3 * welcome.heartbeat_ns - welcome.heartbeat_ns // 2
        self._renewed_ns = self._connecting_ns
        self._pings_out.clear()
        self._failed_attempts = 0
        self._fallback_due = False
        if self._fallback_timer is not None:
            self._fallback_timer.cancel()
            self._fallback_timer = None
        was = self.state
        self.state = LinkState.JOINED
        self.welcome = welcome
        self.refused = None
        self.counters["joins"] += 1
        if was is LinkState.UNCOORDINATED:
            log.warning(
                "leader %s is back: %s rejoined, BH coordinated again",
                format_address(self.leader),
                self.robot,
            )
        else:
            log.info(
                "%s joined leader %s (limit %d, timeslice %.0f ms)",
                self.robot,
                format_address(self.leader),
                welcome.limit,
                welcome.timeslice_ns / 1e6,
            )
        self._fallback_logged = False
        self._on_state(LinkState.JOINED, welcome)
        self._settled.set()

    def _lost(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()
        if self.state is LinkState.JOINED and not self._closing:
            self.counters["disconnects"] += 1
            self.state = LinkState.PENDING
            log.info("lost leader %s; reconnecting", format_address(self.leader))
            self._on_state(LinkState.PENDING, None)
            self._arm_fallback()

    def _arm_fallback(self) -> None:
        if self._fallback_timer is not None:
            return
        delay_ns = max(self._last_heard_ns + self.fallback_ns - self._clock(), 0)
        self._fallback_timer = asyncio.get_running_loop().call_later(
            delay_ns / 1e9, self._fall_back
        )

    def _fall_back(self) -> None:
        self._fallback_timer = None
        if self.state is not LinkState.PENDING:
            return
        if self._failed_attempts < self.min_failed_attempts:
            # Reconnect first: the leader is gone only once attempts have failed.
            self._fallback_due = True
            return
        self._fallback_due = False
        self.state = LinkState.UNCOORDINATED
        self.counters["fallbacks"] += 1
        self.fell_back_after_ns = self._clock() - self._last_heard_ns
        if not self._fallback_logged:
            self._fallback_logged = True
            log.warning(
                "leader %s unreachable: %s sends BH uncoordinated until it is back",
                format_address(self.leader),
                self.robot,
            )
        self._on_state(LinkState.UNCOORDINATED, None)
        self._settled.set()
