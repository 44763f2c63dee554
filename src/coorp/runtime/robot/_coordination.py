"""The robot side of global preemption: may this robot send BH right now?

:class:`Coordinator` joins :class:`~coorp.control.BulkClient` (the pure
request/grant/release state machine) to the :class:`~._link.ControlLink`. All BH
streams of a robot share its one permit: the first stream that has data makes the
robot request, the last one to finish releases.

A fresh ``BulkClient`` is made on every (re)join: grant ids restart with a new leader
epoch, and a request sent on a dead connection must be asked again.

Modes: with no leader configured every send is permitted (marking and local
preemption only); while joined, only with a valid permit; while the link is
reconnecting, nothing (the grace period before fallback); after fallback, everything.

**After a stall** (this process did not run for more than a heartbeat: SIGSTOP, CPU
starvation) a permit held before it is *unconfirmed*: the leader may have revoked it
and granted the next robot meanwhile. No BH byte goes out until one round trip to
the leader has come back (frames are handled in order, so any revocation sent
before has arrived by then) or the link has rejoined with a fresh client. The stall
is noticed by whichever comes first: :meth:`Coordinator.permitted` itself (called
before every chunk) or a ticker every quarter heartbeat.

**The lease** does not depend on noticing anything: a permit is good only while the
link's lease runs (:meth:`~._link.ControlLink.lease_ends_ns`: the leader cannot have
dropped this robot for silence before it, and answered heartbeats renew it). A holder
frozen longer than that — long enough for the leader to pass its permit on — wakes
with its lease over, and :meth:`Coordinator.permitted`, which the pacer asks right
before every write to the socket, refuses until a heartbeat is answered again (the
link has rejoined by then if the leader had dropped it). :meth:`permit_ends_ns` is
the earlier of the permit's end and the lease's, so a stream also stops writing early
enough for its bytes to drain before the lease runs out.

**The kernel's half** (:class:`~coorp.runtime.wire.KernelLease`, optional:
``guard``): a check and the ``sendmsg`` after it are two steps, and a process frozen
between them writes when it runs again. With a guard, the kernel drops this robot's
bulk packets sent after the deadline it was last given: the permit's end or the
lease's, set at every grant and renewal; lifted once the robot stops holding a permit
while its lease still runs (released, revoked: the leader cannot have passed the permit
on for silence), kept when the lease ran out while it held (a freeze: what it wrote
after the deadline waits, queued by TCP, for its next grant, or a timeslice at most).
:meth:`permitted` also waits until the kernel has the deadline.

For tests and chaos runs, :attr:`Coordinator.intervals` records when this robot
wrote BH data: ``[first_ns, last_ns, grant_id]`` per stretch (grant -1: without a
permit, uncoordinated or no leader).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import Callable, Coroutine
from typing import Any

from coorp.control import BulkClient, ForeignGrantError, Grant

from ..wire import (
    Granted,
    KernelLease,
    Message,
    Queued,
    Release,
    Request,
    Revoked,
    Welcome,
    bytes_outstanding,
)
from ._link import ControlLink, LinkState

__all__ = ["Coordinator"]

log = logging.getLogger("coorp.runtime.agent")


class Coordinator:
    """Permit bookkeeping for one robot's BH streams (runs on the event loop)."""

    def __init__(self, robot: str, clock: Callable[[], int], *, release_linger_ns: int = 0) -> None:
        self.robot = robot
        self._clock = clock
        self.release_linger_ns = release_linger_ns
        self._linger: asyncio.TimerHandle | None = None
        self.link: ControlLink | None = None
        self.state: LinkState | None = None  # None: no leader, never coordinated
        self._client = BulkClient(robot)
        self._active = 0
        #: The leader said other robots wait for a permit (``Queued``): release as
        #: soon as no stream has data, without lingering for a next message.
        self.others_waiting = False
        #: The number of flows the leader was last told (``Request.flows``).
        self._told_flows = 0
        #: Held by the stream whose message goes out while the robot's streams send
        #: one message at a time (``BulkSettings.one_message_at_a_time``); an
        #: ``asyncio.Lock`` wakes its waiters in the order they came.
        self.turn = asyncio.Lock()
        self._changed = asyncio.Event()
        self._tasks: set[asyncio.Task[None]] = set()
        self.counters = {
            "grants": 0,
            "revocations": 0,
            "releases": 0,
            "requests": 0,
            "stalls": 0,
            "confirmations": 0,
            "kept": 0,
            "handed_on": 0,
        }
        self.stall_ns = 200_000_000
        self._awake_ns = clock()
        self._unconfirmed = False
        self._ticker: asyncio.TimerHandle | None = None
        #: Incremented on every switch into or out of uncoordinated mode: what a BH
        #: socket learned about the path before does not hold any more.
        self.regime = 0
        self.intervals: list[list[int]] = []
        #: The robot's paced BH sockets: their bytes in flight share one budget.
        self._bh_sockets: set[socket.socket] = set()
        #: The kernel's half of the lease (None: user space only).
        self.guard: KernelLease | None = None
        self._guard_held = False
        self._guard_keep_ns = 5_000_000_000
        self._guard_timer: asyncio.TimerHandle | None = None

    def attach_guard(self, guard: KernelLease) -> None:
        """Enforce permits in the kernel too: ``guard`` drops this robot's bulk packets
        (its sockets carry ``guard.mark``) sent after the deadline."""
        self.guard = guard
        guard.on_applied = self._changed.set
        self._sync_guard()

    def attach(self, link: ControlLink) -> None:
        self.link = link
        self.state = LinkState.PENDING
        link.on_renew = self._notify

    # -- link callbacks --------------------------------------------------------------------
    def on_state(self, state: LinkState, welcome: Welcome | None) -> None:
        if (state is LinkState.UNCOORDINATED) != (self.state is LinkState.UNCOORDINATED):
            self.regime += 1
        self.state = state
        if state is LinkState.JOINED:
            self._client = BulkClient(self.robot)
            self._unconfirmed = False
            if welcome is not None:
                self.stall_ns = welcome.heartbeat_ns
            self._start_ticker()
            if self._active:
                self._request()
        self._notify()

    def on_stall(self, stalled_ns: int) -> None:
        """The link's watchdog saw this process stall."""
        self._check_awake(self._clock())

    # -- stalls ----------------------------------------------------------------------------
    def _start_ticker(self) -> None:
        if self._ticker is None:
            self._awake_ns = self._clock()
            self._tick()

    def _tick(self) -> None:
        self._check_awake(self._clock())
        self._ticker = asyncio.get_running_loop().call_later(self.stall_ns / 4e9, self._tick)

    def _check_awake(self, now: int) -> None:
        gap = now - self._awake_ns
        self._awake_ns = max(self._awake_ns, now)
        if gap > self.stall_ns and self.state is LinkState.JOINED and not self._unconfirmed:
            self._unconfirmed = True
            self.counters["stalls"] += 1
            log.info(
                "%s: stalled %.0f ms; confirming the permit with the leader before sending",
                self.robot,
                gap / 1e6,
            )
            self._spawn(self._confirm())

    async def _confirm(self) -> None:
        link = self.link
        confirmed = link is not None and await link.round_trip(3 * self.stall_ns / 1e9)
        if confirmed and self._unconfirmed:
            self._unconfirmed = False
            self.counters["confirmations"] += 1
            self._notify()

    def close(self) -> None:
        if self._guard_timer is not None:
            self._guard_timer.cancel()
            self._guard_timer = None
        if self._linger is not None:
            self._linger.cancel()
            self._linger = None
        if self._ticker is not None:
            self._ticker.cancel()
            self._ticker = None

    # -- bytes in flight, robot-wide ------------------------------------------------------
    def track(self, sock: socket.socket) -> None:
        """``sock`` carries this robot's paced bulk from now on."""
        self._bh_sockets.add(sock)

    def untrack(self, sock: socket.socket) -> None:
        self._bh_sockets.discard(sock)

    def outstanding(self) -> int:
        """Bytes written and not yet acknowledged on all the robot's bulk sockets: what
        its streams and relayed connections (several at once, or one still draining
        while the next starts) have queued at the bottleneck together."""
        total = 0
        for sock in list(self._bh_sockets):
            try:
                total += bytes_outstanding(sock)
            except (OSError, ValueError):  # closed meanwhile
                self._bh_sockets.discard(sock)
        return total

    def note_write(self, start_ns: int, end_ns: int) -> None:
        """BH bytes were written between ``start_ns`` and ``end_ns``."""
        gid = -1
        grant = self._client.grant
        if self.state is LinkState.JOINED and grant is not None:
            gid = grant.grant_id
        last = self.intervals[-1] if self.intervals else None
        if last is not None and last[2] == gid and start_ns - last[1] < 50_000_000:
            last[1] = end_ns
        elif len(self.intervals) < 10_000:
            self.intervals.append([start_ns, end_ns, gid])

    def on_message(self, msg: Message) -> None:
        now = self._clock()
        if isinstance(msg, Granted):
            grant = Grant(self.robot, msg.grant_id, msg.granted_ns, msg.expires_ns)
            try:
                give_back = self._client.on_grant(grant, now)
            except ForeignGrantError:  # impossible by construction; never fatal
                return
            self.counters["grants"] += 1
            self.others_waiting = False
            if give_back is not None:
                self._send(Release(give_back))
        elif isinstance(msg, Revoked):
            self.counters["revocations"] += 1
            self._client.on_revoke(msg.grant_id, now)
        elif isinstance(msg, Queued):
            self.others_waiting = msg.waiting > 0
            if self.others_waiting and self._linger is not None:
                self.counters["handed_on"] += 1
                self.release_now()  # nothing to send: hand the permit on now
        else:
            log.debug("ignoring %s from the leader", type(msg).__name__)
            return
        self._notify()

    # -- stream side -----------------------------------------------------------------------
    @property
    def coordinated(self) -> bool:
        return self.state is LinkState.JOINED

    def permitted(self, now_ns: int) -> bool:
        if self.state is None or self.state is LinkState.UNCOORDINATED:
            return True
        if self.state is LinkState.PENDING:
            return False
        self._check_awake(now_ns)
        if self._unconfirmed:
            return False
        lease = self.link.lease_ends_ns() if self.link is not None else None
        if lease is not None and now_ns >= lease:
            return False
        if self.guard is not None and not self.guard.allows(now_ns):
            return False  # the kernel's deadline is not moved yet (a fresh grant)
        return self._client.may_send(now_ns)

    def permit_ends_ns(self) -> int | None:
        """Local end of the current permit while coordinated: the earlier of the
        timeslice's end and the lease's (None: no end known)."""
        if self.state is not LinkState.JOINED:
            return None
        ends = self._client.local_expires_ns
        lease = self.link.lease_ends_ns() if self.link is not None else None
        if ends is None or lease is None:
            return ends
        return min(ends, lease)

    def begin(self) -> None:
        """A stream has data to send."""
        self._active += 1
        if self._linger is not None:
            # The permit of the previous message is still held: keep it (no release,
            # no new request, no hand-over between back-to-back messages).
            self._linger.cancel()
            self._linger = None
            self.counters["kept"] += 1
        if self._active == 1 and self.state is LinkState.JOINED:
            self._request()
        elif (
            self._active > self._told_flows
            and self.state is LinkState.JOINED
            and (self._client.requested or self._client.grant is not None)
        ):
            # More flows want the permit than the leader was told: it weighs grants by
            # them (one timeslice per flow, up to its max_weight).
            self._told_flows = self._active
            self._send(Request(self._active))

    def end(self) -> None:
        """A stream finished its message. The last one to finish releases the permit,
        ``release_linger_ns`` later unless another message starts meanwhile."""
        self._active -= 1
        if self._active:
            return
        if self.others_waiting and self.state is LinkState.JOINED:
            self.counters["handed_on"] += 1
            self.release_now()
        elif self.release_linger_ns > 0 and self.state is LinkState.JOINED:
            if self._linger is None:
                self._linger = asyncio.get_running_loop().call_later(
                    self.release_linger_ns / 1e9, self.release_now
                )
        else:
            self.release_now()

    def release_now(self) -> None:
        """Release the permit at once if no stream has data (a lingering one too)."""
        if self._linger is not None:
            self._linger.cancel()
            self._linger = None
        if self._active:
            return
        gid = self._client.finished(self._clock())
        if gid is not None and self.state is LinkState.JOINED:
            self.counters["releases"] += 1
            self._send(Release(gid))
        self._sync_guard()

    async def wait_permitted(self, max_wait_s: float) -> bool:
        """Wait (at most ``max_wait_s``) until BH may be sent; re-requests as needed."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max_wait_s
        while True:
            now = self._clock()
            if self.permitted(now):
                return True
            if self.state is LinkState.JOINED:
                self._request()
            remaining = deadline - loop.time()
            if remaining <= 0:
                return False
            # Wake at the latest when the current permit expires locally, to re-request.
            ends = self._client.local_expires_ns
            if ends is not None and ends > now:
                remaining = min(remaining, (ends - now) / 1e9 + 1e-4)
            self._changed.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(remaining):
                    await self._changed.wait()

    async def wait_state(self, state: LinkState | None, timeout_s: float) -> bool:
        """Wait (at most ``timeout_s``) until the link is in ``state``."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while self.state is not state:
            remaining = deadline - loop.time()
            if remaining <= 0:
                return False
            await self.changed(remaining)
        return True

    async def changed(self, timeout_s: float) -> None:
        """Wait for any permit or link change (or the timeout)."""
        self._changed.clear()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout_s):
                await self._changed.wait()

    async def flush(self, timeout_s: float) -> None:
        """Wait (at most ``timeout_s``) until the permit messages already queued for
        the leader (requests, releases) have been written to the link; a lingering
        permit is released first."""
        self.release_now()
        if self._tasks:
            await asyncio.wait(list(self._tasks), timeout=timeout_s)

    async def sync(self, timeout_s: float) -> bool:
        """True once the leader has handled every permit message sent so far (see
        :meth:`ControlLink.round_trip`); False without a leader link or answer."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        await self.flush(timeout_s)
        if self.link is None:
            return False
        return await self.link.round_trip(max(deadline - loop.time(), 0.0))

    # -- internals -------------------------------------------------------------------------
    def _notify(self) -> None:
        self._sync_guard()
        self._changed.set()

    def _sync_guard(self) -> None:
        """Give the kernel the deadline that goes with the permit now (see the module
        docstring)."""
        guard = self.guard
        if guard is None:
            return
        now = self._clock()
        if self.state is None or self.state is LinkState.UNCOORDINATED:
            guard.request(None)
            return
        lease = self.link.lease_ends_ns() if self.link is not None else None
        holding = (
            self.state is LinkState.JOINED
            and self._client.grant is not None
            and (lease is None or now < lease)
        )
        if holding:
            self._guard_held = True
            grant = self._client.grant
            if grant is not None:
                self._guard_keep_ns = max(grant.expires_ns - grant.granted_ns, self.stall_ns)
            # The kernel's deadline: the permit's end, or half a heartbeat after the
            # lease's (three heartbeats after the last answered Ping: the earliest the
            # leader can drop this robot for silence). User space stops at the lease;
            # the margin lets its last bytes drain when a renewal is merely late
            # instead of dropping them into a retransmission timeout.
            ends = self._client.local_expires_ns
            if lease is not None:
                late = lease + self.stall_ns // 2
                ends = late if ends is None else min(ends, late)
            if ends is not None:
                guard.request(ends)
            return
        if not self._guard_held:
            return
        self._guard_held = False
        if lease is None or now < lease:
            # Stopped holding (released, revoked, the link lost) while the leader could
            # not yet have passed the permit on for silence: lift. What drains after
            # is the in-flight budget, as without the guard.
            guard.request(None)
            return
        # The lease ran out while holding (a freeze): what was written after the
        # deadline waits for the next grant, at most a timeslice (then it goes: a
        # connection must not hang on bytes no permit will ever let out).
        if self._guard_timer is not None:
            self._guard_timer.cancel()
        self._guard_timer = asyncio.get_running_loop().call_later(
            self._guard_keep_ns / 1e9, self._lift_guard
        )

    def _lift_guard(self) -> None:
        self._guard_timer = None
        if self.guard is not None and not self._guard_held:
            self.guard.request(None)

    def _request(self) -> None:
        if self._client.want(self._clock()):
            self.counters["requests"] += 1
            self._told_flows = max(self._active, 1)
            self._send(
                Request(self._told_flows),
                on_fail=lambda: self._client.on_request_lost(self._clock()),
            )

    def _send(self, msg: Message, on_fail: Callable[[], None] | None = None) -> None:
        link = self.link
        if link is None:
            return

        async def go() -> None:
            if not await link.send(msg) and on_fail is not None:
                on_fail()

        self._spawn(go())

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
