"""Subscribers: one bounded queue per subscriber fed by every path, one blocking wait.

Messages from the same bus (no copy), from shared memory (zero-copy views of iceoryx2
samples) and from the network (views of the received frame) end up behind one
``receive()``. Shared-memory samples stay in iceoryx2's per-subscriber queue until taken;
the other paths use a local bounded deque with the topic's :class:`QueuePolicy`. A
blocked ``receive()`` sleeps on the topic's futex wake word (:mod:`._wake`; publishers
wake all its subscribers in one system call, local arrivals wake this one alone) or,
with ``Bus(wake="iceoryx2")`` or where futexes are unavailable, on an iceoryx2 WaitSet
that watches the topic's event service and an eventfd for local arrivals -- no busy
polling either way.

Each sender numbers its messages; a gap in the numbers is counted as a drop, and a number
seen before (the same message over a second path) is ignored, so every message is
delivered at most once and in each publisher's order.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import contextlib
import ctypes
import os
import select
import threading
from collections.abc import AsyncIterator, Iterator
from typing import Any, Protocol

import numpy as np

from coorp._errors import CoorpError, UsageError
from coorp.transport._codec import Codec, array_spec
from coorp.transport._deadline import DeadlineMiss, DeadlineMonitor, MissHandler
from coorp.transport._errors import (
    DeliveryTimeoutError,
    MalformedFrameError,
    TopicTypeMismatchError,
    TransportClosedError,
)
from coorp.transport._frame import HEADER1, MAGIC, VERSION, Flags, FrameHeader, Kind, parse
from coorp.transport._machine import CreditReporter, ShmInlet, ShmNode, Waiter
from coorp.transport._message import Message, OwnerTracker
from coorp.transport._options import QueuePolicy, Reach
from coorp.transport._topic import Topic

__all__ = ["Subscriber", "SubscriberStats"]


class _Host(Protocol):
    """What a subscriber needs of the bus that made it (:class:`~._bus.Bus`): stated
    here, so that the bus imports its subscribers and not the other way round."""

    id: int
    shm: ShmNode | None

    def clock(self) -> int: ...

    def forget_subscriber(self, sub: Subscriber) -> None: ...


_FOREVER = 3600.0
#: Upper bound of ``Bus.subscriber(spin=...)`` (s): polling is for microseconds.
MAX_SPIN = 0.01


class SubscriberStats:
    """Counters of one subscriber."""

    __slots__ = (
        "blocked",
        "deadline_misses",
        "dropped",
        "duplicates",
        "polled",
        "received",
        "rejected",
    )

    def __init__(self) -> None:
        self.received = 0
        #: Waits that went to sleep (on the WaitSet) because nothing arrived in time.
        self.blocked = 0
        #: Waits that a message (or wake-up) ended while the subscriber was still
        #: polling, i.e. within its ``spin`` budget, without sleeping.
        self.polled = 0
        #: Messages lost to KEEP_LAST queues on any path: the gaps in each publisher's
        #: sequence numbers after the first message this subscriber received from it.
        self.dropped = 0
        #: The same message seen again over a second path (ignored).
        self.duplicates = 0
        #: Frames refused: malformed, wrong type, or pickle from the network.
        self.rejected = 0
        self.deadline_misses = 0


def _empty(dtype: np.dtype[Any], shape: tuple[int, ...]) -> np.ndarray:
    empty = np.empty(shape, dtype)
    empty.flags.writeable = False
    return empty


def _readonly(obj: Any) -> Any:
    if isinstance(obj, np.ndarray):
        view = obj.view()
        view.flags.writeable = False
        return view
    if isinstance(obj, bytearray | memoryview):
        return memoryview(obj).toreadonly()
    return obj


class Subscriber:
    """Receives messages of one :class:`Topic` on one :class:`Bus`."""

    def __init__(
        self,
        bus: _Host,
        topic: Topic,
        *,
        depth: int,
        deadline: float | None,
        on_deadline_miss: MissHandler | None,
        uid: int,
        spin: float = 0.0,
    ) -> None:
        if not 1 <= depth <= topic.max_depth:
            raise UsageError(
                f"depth must be within 1..{topic.max_depth} (Topic.max_depth), got {depth}"
            )
        if deadline is None and on_deadline_miss is not None:
            raise UsageError("on_deadline_miss needs a deadline")
        if not 0.0 <= spin <= MAX_SPIN:
            raise UsageError(f"spin must be within 0..{MAX_SPIN} s, got {spin}")
        #: Busy-poll budget of a blocking receive before it sleeps (ns).
        self._spin_ns = int(spin * 1e9)
        self._spinning = False
        #: A receive is running (futex mode: local arrivals must wake it).
        self._receiving = False
        self.bus = bus
        self.topic = topic
        self.depth = depth
        self.uid = uid
        self.stats = SubscriberStats()
        self._codec = Codec(topic)
        self._queue: collections.deque[Any] = collections.deque()
        self._cond = threading.Condition()
        self._last_seq: dict[tuple[int, int], int] = {}
        self._owners = OwnerTracker()
        self._error: CoorpError | None = None
        self._closed = False
        self._wake_generation = 0
        self._unclaimed: collections.deque[Message[Any]] = collections.deque()
        self._executor: concurrent.futures.ThreadPoolExecutor | None = None
        self._wake_fd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        self._handler = on_deadline_miss
        self._monitor = (
            None
            if deadline is None
            else DeadlineMonitor(topic.name, int(deadline * 1e9), bus.clock())
        )
        self._inlet: ShmInlet | None = None
        self._credits: CreditReporter | None = None
        self._waitset: Any = None
        self._guards: list[Any] = []
        self._waiter: Waiter | None = None
        if bus.shm is not None:
            iox = bus.shm.iox
            self._inlet = ShmInlet(bus.shm, topic, depth, uid)
            if topic.policy is QueuePolicy.BLOCK:
                self._credits = CreditReporter(bus.shm, topic, uid, depth, os.getpid())
            self._waiter = self._inlet.waiter
        if self._inlet is not None and self._waiter is None:
            self._waitset = (
                iox.WaitSetBuilder.new()
                .signal_handling_mode(iox.SignalHandlingMode.Disabled)
                .create(iox.ServiceType.Ipc)
            )
            self._guards = [
                self._waitset.attach_notification(self._inlet.listener),
                self._waitset.attach_notification_fd(
                    iox.FileDescriptor.non_owning_new(self._wake_fd)
                ),
            ]
            self._iox = iox

    def _signal(self) -> None:
        """Wake this subscriber's blocked receive (called holding ``_cond``, not closed)."""
        if self._waiter is not None:
            if self._receiving:
                self._waiter.wake()
        else:
            os.eventfd_write(self._wake_fd, 1)

    # -- feeding (called by the bus and the network transport) ---------------------------
    def push(self, item: Any, timeout: float | None) -> None:
        """Queue a local/network delivery, applying the topic's queue policy."""
        with self._cond:
            if self._closed:
                return
            if len(self._queue) >= self.depth:
                if self.topic.policy is QueuePolicy.KEEP_LAST:
                    # Counted later, from the gap in the sender's sequence numbers.
                    self._queue.popleft()
                else:
                    ok = self._cond.wait_for(
                        lambda: len(self._queue) < self.depth or self._closed,
                        _FOREVER if timeout is None else timeout,
                    )
                    if not ok:
                        raise DeliveryTimeoutError(
                            f"subscriber of {self.topic.name!r} (policy BLOCK, depth "
                            f"{self.depth}) did not read for {timeout} s"
                        )
                    if self._closed:
                        return
            self._queue.append(item)
            self._signal()

    def fail(self, error: CoorpError) -> None:
        """Make the next ``receive()`` raise ``error`` (e.g. a peer's type mismatch)."""
        with self._cond:
            self._error = error
            if not self._closed:
                self._signal()

    # -- taking -------------------------------------------------------------------------
    def _accept(self, origin: tuple[int, int], seq: int) -> bool:
        last = self._last_seq.get(origin, 0)
        if seq <= last:
            self.stats.duplicates += 1
            return False
        self.stats.dropped += seq - last - 1 if last else 0
        self._last_seq[origin] = seq
        return True

    def _from_shm(self) -> Message[Any] | None:
        inlet = self._inlet
        max_size = self.topic.max_payload
        while inlet is not None:
            got = inlet.receive()
            if got is None:
                return None
            owner, address, size = got
            # Fast path: a one-buffer array or bytes frame (every loan, every published
            # array) is read with one unpack, its meta decoded once per shape.
            fields = HEADER1.unpack_from(owner, 0) if size >= HEADER1.size else None
            if (
                fields is not None
                and fields[0] == MAGIC
                and fields[1] == VERSION
                and fields[7] == 1
                and (fields[2] == Kind.ARRAY or fields[2] == Kind.BYTES)
                and size <= max_size
            ):
                (_m, _v, kind, flags, type_id, bus_id, pub_id, _n, seq, stamp, meta_len) = fields[
                    :11
                ]
                off, nbytes = fields[12], fields[13]
                if off < HEADER1.size + meta_len or off + nbytes > size:
                    self.stats.rejected += 1
                    continue
                head = FrameHeader(kind, flags, type_id, bus_id, pub_id, seq, stamp)
                if not self._take(head):
                    continue
                try:
                    if kind == Kind.ARRAY:
                        meta = ctypes.string_at(address + HEADER1.size, meta_len)
                        dtype, shape, count, want = array_spec(meta)
                        if want != nbytes:
                            raise MalformedFrameError(
                                f"array {dtype}{list(shape)} needs {want} bytes, got {nbytes}"
                            )
                        if count == 0:
                            value: Any = _empty(dtype, shape)
                        else:
                            value = np.frombuffer(
                                memoryview(owner).toreadonly(), dtype, count, offset=off
                            )
                            if len(shape) != 1:
                                value = value.reshape(shape)
                    else:
                        value = memoryview(owner).cast("B").toreadonly()[off : off + nbytes]
                except MalformedFrameError:
                    self.stats.rejected += 1
                    continue
            else:
                frame = memoryview(owner).cast("B").toreadonly()
                try:
                    head, meta_view, buffers = parse(frame, max_size=max_size)
                except MalformedFrameError:
                    self.stats.rejected += 1
                    continue
                if not self._take(head):
                    continue
                try:
                    value = self._codec.decode(head.kind, meta_view, buffers, trusted=True)
                except MalformedFrameError:
                    self.stats.rejected += 1
                    continue
            self._owners.add(owner)
            return self._message(head, value, Reach.MACHINE)
        return None

    def _take(self, head: FrameHeader) -> bool:
        """Credit, type, same-bus and sequence checks of a shared-memory frame."""
        if self._credits is not None:
            self._credits.consumed(head.bus_id, head.pub_id, head.seq)
        if head.type_id != self.topic.type_id:
            self.stats.rejected += 1
            return False
        if head.bus_id == self.bus.id and not head.flags & Flags.LOANED:
            return False  # already delivered in-process, without a copy
        return self._accept((head.bus_id, head.pub_id), head.seq)

    def _from_queue(self) -> Message[Any] | None:
        with self._cond:
            while self._queue:
                item = self._queue.popleft()
                self._cond.notify_all()
                msg = self._materialize(item)
                if msg is not None:
                    return msg
        return None

    def _materialize(self, item: Any) -> Message[Any] | None:
        if isinstance(item, Message):
            if not self._accept(item.origin, item.seq):
                return None
            # Delivery time is when the application takes it, as for the other paths.
            item.received_ns = self.bus.clock()
            item.latency_ns = item.received_ns - item.stamp_ns
            return item
        frame, owner = item  # a network frame
        try:
            head, meta, buffers = parse(frame, max_size=self.topic.max_payload)
            if head.type_id != self.topic.type_id:
                self._error = TopicTypeMismatchError(
                    self.topic.name, self.topic.type_name, "another type (network peer)"
                )
                self.stats.rejected += 1
                return None
            if not self._accept((head.bus_id, head.pub_id), head.seq):
                return None
            value = self._codec.decode(head.kind, meta, buffers, trusted=False)
        except MalformedFrameError:
            self.stats.rejected += 1
            return None
        del owner  # `value`'s views keep the receive buffer alive on their own
        return self._message(head, value, Reach.NETWORK)

    def _message(self, head: Any, value: Any, via: Reach) -> Message[Any]:
        """A decoded frame as delivered now; only same-machine stamps share our clock."""
        return Message(
            self.topic.name,
            value,
            seq=head.seq,
            stamp_ns=head.stamp_ns,
            received_ns=self.bus.clock(),
            origin=(head.bus_id, head.pub_id),
            via=via,
            same_clock=via is Reach.MACHINE,
        )

    def try_receive(self) -> Message[Any] | None:
        """The next message if one is waiting, else ``None`` (never blocks)."""
        if self._closed:
            raise TransportClosedError(f"subscriber of {self.topic.name!r} is closed")
        if self._error is not None:
            error, self._error = self._error, None
            raise error
        if self._unclaimed:
            with self._cond:
                return self._unclaimed.popleft()  # already counted and checked
        msg = self._from_shm() or self._from_queue()
        if msg is not None:
            self.stats.received += 1
            if self._monitor is not None:
                stamp = msg.stamp_ns if msg.latency_ns is not None else None
                self._report(self._monitor.on_message(stamp, msg.received_ns, msg))
        elif self._monitor is not None:
            self._report(self._monitor.poll(self.bus.clock()))
        return msg

    def receive(self, timeout: float | None = None) -> Message[Any] | None:
        """Wait for the next message; ``None`` after ``timeout`` seconds (``None``: forever).

        While waiting, a deadline handler runs when the topic stays silent too long.
        """
        return self._receive(timeout, self._wake_generation)

    def _receive(self, timeout: float | None, generation: int) -> Message[Any] | None:
        # `generation` is read by the caller, so a wake() issued after the call was made
        # (e.g. an asyncio cancellation racing the worker thread's start) still counts.
        clock = self.bus.clock
        end = None if timeout is None else clock() + int(timeout * 1e9)
        waiter = self._waiter
        if waiter is None:
            return self._receive_loop(clock, end, generation, None)
        # In-process deliveries and wake() signal the futex only while a receive runs
        # (`_receiving`), saving two system calls per local message otherwise: they set
        # their state before reading the flag, this thread sets the flag before looking
        # at that state, so one of the two always sees the other.
        self._receiving = True
        try:
            return self._receive_loop(clock, end, generation, waiter)
        finally:
            self._receiving = False

    def _receive_loop(
        self, clock: Any, end: int | None, generation: int, waiter: Waiter | None
    ) -> Message[Any] | None:
        seen = 0
        while True:
            if waiter is not None:
                # Read before looking: whatever arrives after this moves the word, and
                # the futex refuses to sleep on a stale value (no lost wake-up).
                seen = waiter.value()
            msg = self.try_receive()
            if msg is not None:
                return msg
            if self._wake_generation != generation:
                return None  # wake() before this wait (it signals only a running one)
            now = clock()
            if end is not None and now >= end:
                return None
            wait_ns = int(_FOREVER * 1e9) if end is None else end - now
            if self._monitor is not None:
                wait_ns = min(wait_ns, max(0, self._monitor.next_due_ns - now))
            if self._spin_ns and self._poll(min(wait_ns, self._spin_ns), generation):
                self.stats.polled += 1
            else:
                self.stats.blocked += 1
                if waiter is not None:
                    waiter.wait(seen, wait_ns)
                else:
                    self._wait(wait_ns)
            if self._wake_generation != generation:
                return None  # wake() was called while we waited

    def _poll(self, budget_ns: int, generation: int) -> bool:
        """Busy-poll for up to ``budget_ns``: whether something arrived (a shared-memory
        sample, a local or network delivery, an error, a wake-up). Checks are reads of
        shared memory and Python state, no system calls; between checks the thread
        yields the CPU to any other runnable thread (``sched_yield``), so polling never
        starves the producer it waits for on a busy machine."""
        port = self._inlet._port if self._inlet is not None else None
        queue, unclaimed = self._queue, self._unclaimed
        clock = self.bus.clock
        end = clock() + budget_ns
        self._spinning = True
        try:
            while True:
                if (
                    (port is not None and port.has_samples())
                    or queue
                    or unclaimed
                    or self._error is not None
                    or self._wake_generation != generation
                ):
                    return True
                if clock() >= end:
                    return False
                os.sched_yield()
        finally:
            self._spinning = False

    def _report(self, miss: DeadlineMiss | None) -> None:
        if miss is None:
            return
        self.stats.deadline_misses += 1
        if self._handler is not None:
            self._handler(miss)

    def _wait(self, wait_ns: int) -> None:
        # Notifications are only consumed here, after a wake-up, and only from the source
        # that fired: a stale one makes the next wait return at once, which is harmless,
        # and the common path (a message already waiting) costs no system call.
        if self._waitset is not None:
            fired, _ = self._waitset.wait_and_process_with_timeout(
                self._iox.Duration.from_nanos(wait_ns)
            )
            for attachment in fired:
                if attachment.has_event_from(self._guards[0]):
                    if self._inlet is not None:
                        self._inlet.drain_events()
                else:
                    self._read_wake_fd()
        else:
            ready, _, _ = select.select([self._wake_fd], [], [], wait_ns / 1e9)
            if ready:
                self._read_wake_fd()

    def _read_wake_fd(self) -> None:
        with self._cond:
            if not self._closed:
                with contextlib.suppress(BlockingIOError):
                    os.eventfd_read(self._wake_fd)

    async def areceive(self, timeout: float | None = None) -> Message[Any] | None:
        """``receive`` for asyncio: waits in a worker thread; cancelling it loses nothing."""
        msg = self.try_receive()
        if msg is not None:
            return msg
        if self._executor is None:
            self._executor = concurrent.futures.ThreadPoolExecutor(
                max_workers=1, thread_name_prefix=f"coorp-sub-{self.topic.name}"
            )
        work = self._executor.submit(self._receive, timeout, self._wake_generation)
        try:
            return await asyncio.wrap_future(work)
        except asyncio.CancelledError:
            # The worker may already have taken a message: keep it for the next receive.
            work.add_done_callback(self._keep_unclaimed)
            self.wake()
            raise

    def _keep_unclaimed(self, work: concurrent.futures.Future[Message[Any] | None]) -> None:
        if work.cancelled() or work.exception() is not None:
            return
        msg = work.result()
        if msg is not None:
            with self._cond:
                self._unclaimed.append(msg)

    def wake(self) -> None:
        """Interrupt a blocked ``receive``: it returns ``None`` unless a message is there."""
        with self._cond:
            if not self._closed:
                self._wake_generation += 1
                self._signal()

    def __iter__(self) -> Iterator[Message[Any]]:
        while not self._closed:
            msg = self.receive(timeout=1.0)
            if msg is not None:
                yield msg

    async def __aiter__(self) -> AsyncIterator[Message[Any]]:
        while not self._closed:
            msg = await self.areceive(timeout=1.0)
            if msg is not None:
                yield msg

    @property
    def borrowed(self) -> int:
        """Shared-memory samples still held by live views of received messages."""
        return len(self._owners)

    def close(self) -> None:
        """Stop receiving; views of received messages stay valid until dropped."""
        self.wake()  # a receive blocked in another thread returns
        with self._cond:
            if self._closed:
                return
            self._closed = True
            self._queue.clear()
            self._cond.notify_all()
        if self._credits is not None:
            self._credits.close()
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)
        self._guards = []
        self._waitset = None
        if self._inlet is not None:
            self._inlet.close()
        with self._cond:
            os.close(self._wake_fd)
        self.bus.forget_subscriber(self)

    def __enter__(self) -> Subscriber:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def local_message(
    topic: Topic, obj: Any, seq: int, stamp: int, origin: tuple[int, int], now: int
) -> Message[Any]:
    """The in-process delivery of ``obj``: the object itself, arrays made read-only."""
    return Message(
        topic.name,
        _readonly(obj),
        seq=seq,
        stamp_ns=stamp,
        received_ns=now,
        origin=origin,
        via=Reach.PROCESS,
        same_clock=True,
    )
