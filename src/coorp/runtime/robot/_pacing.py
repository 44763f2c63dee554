"""The bulk engine: when may the next chunk of BH bytes go onto a TCP socket?

One :class:`Pacer` per BH socket, shared by both ways of sending bulk data:
:class:`~._bulk.AsyncBulkStream` (Coorp's own API: framed messages, resume after a
reconnect) and :mod:`._relay` (transparent mode: the bytes of an intercepted
connection, as they are). Before each chunk, :meth:`Pacer.next_chunk` waits until

1. the robot holds the permit (:class:`~._coordination.Coordinator`; all BH sockets of
   a robot share it);
2. the socket can take bytes;
3. what is in flight drains within the in-flight budget
   (``BulkSettings.inflight_budget_ns``): other robots' LS waits behind these bytes at
   the bottleneck. In flight counts the robot's bytes on all its bulk sockets
   (:meth:`~._coordination.Coordinator.outstanding`): its streams and relayed
   connections share one budget;
4. the :class:`~coorp.control.Gate` allows it (the chunk would not still be in flight
   when this robot's next protection window opens), and
5. it would drain before the permit ends;

and says how many bytes to write (a chunk while LS is protected, much more when not).
:meth:`Pacer.write` writes them and feeds the completion-time table
(:class:`~._preempt.DrainTracker`).

Where the time went is counted (``counters``, nanoseconds): waiting for a permit, for
the budget, paused by the gate, paused for the permit's end, and writing.
"""

from __future__ import annotations

import asyncio
import contextlib
import select
import socket
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from coorp.control import Gate

from .._errors import PeerTimeoutError, RuntimeUsageError
from ..wire import MAX_SEGMENT_BYTES, PeerClosed, bytes_outstanding, set_notsent_lowat
from ._coordination import Coordinator
from ._preempt import (
    DrainTracker,
    SharedPlanner,
    new_gate,
    within_budget,
)

__all__ = ["BulkSettings", "Pacer", "Progress"]

_UNPACED_LOWAT = 1 << 30


@dataclass(frozen=True, slots=True)
class BulkSettings:
    chunk_bytes: int = 16 * 1024
    """Unit the gate admits while LS traffic is protected (one CTT "packet")."""
    unpaced_chunk_bytes: int = 1 << 20
    connect_timeout_s: float = 2.0
    io_timeout_s: float = 30.0
    """No progress at all for this long: the connection is dead, reconnect."""
    reconnect_window_s: float = 30.0
    """Give up (TransferError) after this long without any progress."""
    keepalive_s: float = 5.0
    poll_s: float = 0.001
    """How often outstanding bytes are sampled while waiting (CTT resolution)."""
    ctt_default_ns: int = 5_000_000
    """Drain time per chunk assumed before any was measured."""
    max_pause_ns: int = 100_000_000
    """Starvation guard: after this long paused by local preemption without a break,
    the gate is bypassed for as long again (bulk then bounded by the in-flight budget
    alone). The gate itself explores completion times it cannot trust (one probe per
    gap between windows), but only where there is a gap: when LS jitter makes the
    protection windows tile time there is none (a new flow whose model is still wide,
    a loaded CPU), and without the guard BH would stop for as long as that lasts. One
    chunk per pause (the previous guard) moved 1.3 Mb/s on a 50 Mbit/s link while a
    100 Hz flow was being learnt; the bypass keeps at least half the time for bulk,
    and the budget keeps every LS datagram's wait behind it bounded."""

    protection_tolerance_ns: int = 0
    """How long this robot's own LS datagram may wait behind its own bulk bytes: the
    gate admits a chunk that would still be in flight up to this long after a
    protection window opens (0: the paper's rule, the chunk must have drained).
    Every ms of tolerance is a ms less of pause ahead of each LS send."""

    inflight_budget_ns: int | None = 6_000_000
    """Bytes in flight, in time: while LS is protected, a chunk is written only if the
    completion-time table predicts it drains within this long (or nothing is in
    flight). What a holder has in flight waits in the one queue at the bottleneck (the
    access point), and another robot's LS datagram or the leader's command, whose
    instants this robot does not know, waits behind it; the budget bounds that wait
    for every flow, not only this robot's (cf. Linux's airtime queue limits). None:
    no bound (the congestion window decides)."""

    gate_departure: bool = True
    """The gate's completion times end when a chunk left this host, estimated as its
    TCP acknowledgement less the path's measured return latency
    (:class:`~._preempt.DrainTracker`): what this robot's LS datagram waits behind in
    its NIC. False: they end at the acknowledgement (receiver's ack delay included)."""

    one_message_at_a_time: bool = True
    """A robot's bulk streams send one message at a time, in the order they were
    asked (the rest wait, holding the robot's permit for it): each receiver sends TCP
    acks, so messages to four receivers at once put four ack senders on the air beside
    the data, and each extra contender adds collisions whose backoff an LS datagram
    then waits behind (the simulator's ``CoorpPolicy.serial_transfers``). False: every
    stream writes as soon as the permit allows."""

    def __post_init__(self) -> None:
        if self.protection_tolerance_ns < 0:
            raise RuntimeUsageError("protection_tolerance_ns must be >= 0")
        if self.inflight_budget_ns is not None and self.inflight_budget_ns <= 0:
            raise RuntimeUsageError("inflight_budget_ns must be positive (or None)")
        if not 1024 <= self.chunk_bytes <= MAX_SEGMENT_BYTES:
            raise RuntimeUsageError(f"chunk_bytes={self.chunk_bytes}: must be in 1 KiB..16 MiB")
        if not self.chunk_bytes <= self.unpaced_chunk_bytes <= MAX_SEGMENT_BYTES:
            raise RuntimeUsageError("unpaced_chunk_bytes must be in chunk_bytes..16 MiB")


@dataclass(slots=True)
class Progress:
    """What happened while one message (or one burst of a relayed connection) went out."""

    permit_wait_ns: int = 0
    preempted_ns: int = 0
    preemptions: int = 0
    reconnects: int = 0
    last_progress_ns: int = 0
    first_write_ns: int | None = None
    last_write_ns: int | None = None


def new_counters() -> dict[str, int]:
    return {
        "messages": 0,
        "bytes": 0,
        "reconnects": 0,
        "preemptions": 0,
        "revocation_pauses": 0,
        "gate_bypasses": 0,
        "explorations": 0,
        "early_resumes": 0,
        "ctt_resets": 0,
        "inflight_waits": 0,
        "inflight_max_bytes": 0,
        # Where the time went (ns): see the module docstring.
        "permit_wait_ns": 0,
        "budget_wait_ns": 0,
        "gate_pause_ns": 0,
        "end_pause_ns": 0,
        "write_ns": 0,
        # Transparent relay only: waiting for the application's next bytes while
        # counted as an active bulk stream (the program, not the pacing, was slow).
        "source_wait_ns": 0,
    }


class Pacer:
    """Pacing of one BH socket at a time (:meth:`attach` a new one after a reconnect)."""

    def __init__(
        self,
        *,
        name: str,
        coordinator: Coordinator,
        planner: SharedPlanner | None,
        settings: BulkSettings,
        clock: Callable[[], int] = time.monotonic_ns,
        counters: dict[str, int] | None = None,
    ) -> None:
        self.name = name
        self.settings = settings
        self._coord = coordinator
        self._planner = planner
        self._clock = clock
        self.counters = counters if counters is not None else new_counters()
        self.gate = self._new_gate()
        self._regime = coordinator.regime
        self._sock: socket.socket | None = None
        self._tracker: DrainTracker | None = None
        self._poller: Any = None
        self._hangup: Any = None
        self._paced: bool | None = None
        self._paused_since: int | None = None
        self._budget_since: int | None = None
        self._bypass_until: int | None = None

    # -- the socket ---------------------------------------------------------------------------
    def attach(self, sock: socket.socket) -> None:
        """Pace ``sock`` from now on (a fresh connection)."""
        self.detach()
        self._sock = sock
        guard = self._coord.guard
        if guard is not None:
            # The kernel drops this robot's bulk past its permit (KernelLease).
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_MARK, guard.mark)
        self._coord.track(sock)
        self._paced = None
        self._paused_since = self._budget_since = self._bypass_until = None
        self._poller = select.poll()
        self._poller.register(sock.fileno(), select.POLLOUT)
        self._hangup = select.poll()
        self._hangup.register(sock.fileno(), select.POLLRDHUP | select.POLLERR | select.POLLHUP)
        if self.gate is not None:
            self._tracker = DrainTracker(
                self.gate,
                lambda: bytes_outstanding(sock),
                bucket_bytes=self.settings.chunk_bytes,
                departure=self.settings.gate_departure,
            )

    def detach(self) -> None:
        """The connection is gone: nothing written on it will complete."""
        if self._tracker is not None:
            self._tracker.reset()
            self._tracker = None
        if self._sock is not None:
            self._coord.untrack(self._sock)
        self._sock = None
        self._poller = None
        self._hangup = None

    @property
    def sock(self) -> socket.socket:
        if self._sock is None:
            raise RuntimeError(f"{self.name}: no socket attached")
        return self._sock

    # -- the decision ---------------------------------------------------------------------------
    async def next_chunk(
        self,
        remaining: int,
        prog: Progress,
        *,
        keepalive: Callable[[], Awaitable[None]] | None = None,
    ) -> tuple[int, int | None]:
        """Wait until a chunk may be written; returns (bytes to write, depth) where the
        depth (bytes in flight in chunks) is None when the chunk is not paced.
        ``keepalive`` is awaited every ``keepalive_s`` while waiting for a permit."""
        s = self.settings
        io_timeout_ns = round(s.io_timeout_s * 1e9)
        while True:
            if not self._coord.permitted(self._clock()):
                await self._wait_for_permit(prog, keepalive)
                continue
            await self._writable()
            now = self._clock()
            if not self._coord.permitted(now):
                continue  # the wait may have outlasted the permit (or a stall)
            if self._coord.regime != self._regime:
                self._new_regime()
            gate, tracker = self.gate, self._tracker
            if (
                gate is None
                or tracker is None
                or self._planner is None
                or not (self._planner.has_flows() or s.inflight_budget_ns is not None)
            ):
                self._pace(False)
                return min(s.unpaced_chunk_bytes, remaining), None
            # Chunks are measured (CTT samples) even before the time model predicts
            # windows, and gated once it does. A robot without LS flows of its own is
            # measured too: the in-flight budget protects the *other* robots' LS
            # datagrams, which wait behind its bytes at the bottleneck.
            self._pace(True)
            tracker.poll(now)
            depth = self._depth()
            n = min(s.chunk_bytes, remaining)
            if not within_budget(
                tracker.queueing,
                depth,
                now,
                s.inflight_budget_ns,
                tracker.base_ns,
                tracker.chunk_ns,
            ):
                # Too much in flight: whatever is written now would make every flow
                # through the bottleneck wait longer than the budget.
                self.counters["inflight_waits"] += 1
                if self._budget_since is None:
                    self._budget_since = now
                elif now - self._budget_since > io_timeout_ns:
                    # Nothing drained for the I/O timeout: a dead peer (its bytes
                    # would stay outstanding forever); reconnect.
                    raise PeerTimeoutError(
                        f"{self.name}: nothing acknowledged for {s.io_timeout_s:.0f} s"
                    )
                if self._hangup is not None and self._hangup.poll(0):
                    # The receiver closed (it never half-closes mid-message): its
                    # bytes will not drain; reconnect now rather than at the timeout.
                    raise PeerClosed(f"{self.name}: the receiver closed the connection")
                t0 = now
                await asyncio.sleep(s.poll_s)
                tracker.poll(self._clock())
                self.counters["budget_wait_ns"] += self._clock() - t0
                continue
            self._budget_since = None
            if gate.window(now) is not None:
                decision = gate.decide(now, depth)
                if self._paused_since is None:
                    self._paused_since = now
                if decision.explore:
                    self.counters["explorations"] += 1
                bypassing = self._bypass_until is not None and now < self._bypass_until
                if (
                    not decision.allow
                    and not bypassing
                    and now - self._paused_since >= s.max_pause_ns
                ):
                    self._bypass_until = now + s.max_pause_ns
                    self.counters["gate_bypasses"] += 1
                    bypassing = True
                if not decision.allow and not bypassing:
                    prog.preemptions += 1
                    self.counters["preemptions"] += 1
                    until = min(decision.resume_ns or now, self._paused_since + s.max_pause_ns)
                    self.counters["gate_pause_ns"] += await self._hold_until(
                        until, prog, recheck=True
                    )
                    continue
                if decision.allow:
                    self._paused_since = None
                    self._bypass_until = None
                else:
                    self._paused_since = now  # the next pause is timed from here
                ends = self._coord.permit_ends_ns()
                if ends is not None and now + gate.ctt.query(depth, now_ns=now) >= ends:
                    # Whatever we write now would still be in flight when the next
                    # holder starts: let it drain and wait for the permit to end.
                    self.counters["revocation_pauses"] += 1
                    self.counters["end_pause_ns"] += await self._hold_until(
                        ends, prog, while_ends=ends
                    )
                    continue
            return n, depth

    async def write(self, bufs: list[bytes | memoryview], depth: int | None) -> int:
        """Write every byte of ``bufs`` (waiting for the socket as needed); the bytes
        count towards the completion-time table, as a chunk at ``depth`` unless None."""
        sock = self.sock
        nbytes = sum(len(b) for b in bufs)
        enqueued = self._clock()
        bufs = list(bufs)
        while bufs:
            # Asked right before every syscall, not only before the chunk: a wait for
            # the socket (or a freeze of this process) may have outlasted the permit
            # or its lease. The rest of the chunk then waits for the next permit.
            start = self._clock()
            if not self._coord.permitted(start):
                await self._wait_for_permit(Progress(), None)
                continue
            try:
                sent = sock.sendmsg(bufs)
            except BlockingIOError:
                await self.wait_fd(writable=True)
                continue
            self._coord.note_write(start, self._clock())
            while sent and bufs:
                first = bufs[0]
                if sent >= len(first):
                    sent -= len(first)
                    bufs.pop(0)
                else:
                    bufs[0] = memoryview(first)[sent:]
                    sent = 0
        done = self._clock()
        self.counters["write_ns"] += done - enqueued
        if self._tracker is not None:
            self._tracker.on_write(nbytes, enqueued, depth)
        if depth is not None:
            inflight = bytes_outstanding(sock)
            if inflight > self.counters["inflight_max_bytes"]:
                self.counters["inflight_max_bytes"] = inflight
        return nbytes

    def write_some(self, data: memoryview, depth: int | None) -> int:
        """Write what the socket takes now, without waiting (maybe nothing); counted as
        :meth:`write` counts it. For a caller that must not hold its buffer while the
        peer is slow (the relay: the bytes stay in the source socket until they went)."""
        sock = self.sock
        enqueued = self._clock()
        # Asked right before the syscall, as :meth:`write` does: the wait since
        # :meth:`next_chunk` (or a freeze of this process) may have outlasted the permit
        # or its lease. Nothing goes then; the caller's next chunk waits for a permit.
        if not self._coord.permitted(enqueued):
            return 0
        try:
            sent = sock.send(data)
        except BlockingIOError:
            return 0
        if sent:
            done = self._clock()
            self.counters["write_ns"] += done - enqueued
            if self._tracker is not None:
                self._tracker.on_write(sent, enqueued, depth)
            self._coord.note_write(enqueued, done)
            if depth is not None:
                inflight = bytes_outstanding(sock)
                if inflight > self.counters["inflight_max_bytes"]:
                    self.counters["inflight_max_bytes"] = inflight
        return sent

    def poll(self) -> None:
        """Sample what drained (completion-time samples) now."""
        if self._tracker is not None:
            self._tracker.poll(self._clock())

    def settle(self) -> None:
        """A message is confirmed: forget chunks not yet seen acknowledged."""
        if self._tracker is not None:
            self._tracker.settle(self._clock())

    # -- waits ----------------------------------------------------------------------------------
    def _new_gate(self) -> Gate | None:
        if self._planner is None:
            return None
        s = self.settings
        return new_gate(
            self._planner, default_ns=s.ctt_default_ns, tolerance_ns=s.protection_tolerance_ns
        )

    def _new_regime(self) -> None:
        """The robot went into or out of uncoordinated mode: completion times learned
        before describe another contention; start a fresh table."""
        self._regime = self._coord.regime
        if self.gate is not None and self._planner is not None:
            self.gate = self._new_gate()
            self.counters["ctt_resets"] += 1
            if self._tracker is not None and self.gate is not None:
                self._tracker.rebind(self.gate)

    async def _wait_for_permit(
        self, prog: Progress, keepalive: Callable[[], Awaitable[None]] | None
    ) -> None:
        t0 = self._clock()
        while not await self._coord.wait_permitted(self.settings.keepalive_s):
            if keepalive is not None:
                await keepalive()
        waited = self._clock() - t0
        prog.permit_wait_ns += waited
        self.counters["permit_wait_ns"] += waited
        prog.last_progress_ns = self._clock()

    async def _hold_until(
        self,
        until_ns: int,
        prog: Progress,
        *,
        recheck: bool = False,
        while_ends: int | None = None,
    ) -> int:
        """Write nothing until ``until_ns``, sampling what drains meanwhile; returns
        how long that was. With ``recheck``, stop early once the gate would admit a
        chunk: the bytes in flight drained enough to fit the gap, or this robot's LS
        send came and consumed the window (the simulator's ``drain_recheck``). With
        ``while_ends``, stop early once the permit's end moved (a lease renewed)."""
        t0 = self._clock()
        now = t0
        while now < until_ns:
            if while_ends is not None and self._coord.permit_ends_ns() != while_ends:
                break
            tracker = self._tracker
            if tracker is not None:
                tracker.poll(now)
                if recheck and self.gate is not None and self.gate.admits(now, self._depth()):
                    self.counters["early_resumes"] += 1
                    break
            await asyncio.sleep(min((until_ns - now) / 1e9, self.settings.poll_s))
            now = self._clock()
        prog.preempted_ns += now - t0
        prog.last_progress_ns = now
        return now - t0

    def _depth(self) -> int:
        """Chunks in flight ahead of the next one: this robot's, on every bulk socket.
        The budget bounds what the robot has queued at the bottleneck, not what one
        socket has (four relayed connections at once would queue four budgets), and a
        chunk written behind another socket's bytes completes after them."""
        return self._coord.outstanding() // self.settings.chunk_bytes

    def _pace(self, paced: bool) -> None:
        """Bound unsent bytes to one chunk while protecting LS; lift it otherwise."""
        if self._paced is paced:
            return
        self._paced = paced
        set_notsent_lowat(self.sock, self.settings.chunk_bytes if paced else _UNPACED_LOWAT)

    async def _writable(self) -> None:
        if self._poller is not None and self._poller.poll(0):
            return
        await self.wait_fd(writable=True)

    async def wait_fd(
        self, *, writable: bool, timeout_s: float | None = None, must: bool = True
    ) -> bool:
        """Wait until the socket is writable/readable, sampling the outstanding bytes
        every ``poll_s``. Returns False on ``timeout_s`` (if not ``must``)."""
        loop = asyncio.get_running_loop()
        fd = self.sock.fileno()
        limit = timeout_s if timeout_s is not None else self.settings.io_timeout_s
        deadline = loop.time() + limit
        fut: asyncio.Future[None] = loop.create_future()

        def ready() -> None:
            if not fut.done():
                fut.set_result(None)

        (loop.add_writer if writable else loop.add_reader)(fd, ready)
        try:
            while True:
                remaining = deadline - loop.time()
                if remaining <= 0:
                    if must:
                        raise PeerTimeoutError(f"{self.name}: socket stalled for {limit:.0f} s")
                    return False
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(min(remaining, self.settings.poll_s * 5)):
                        await asyncio.shield(fut)
                if fut.done():
                    return True
                if self._tracker is not None:
                    self._tracker.poll(self._clock())
        finally:
            (loop.remove_writer if writable else loop.remove_reader)(fd)
