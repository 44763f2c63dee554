"""Publishers and loans: one ``publish`` that reaches every kind of peer.

``publish(obj)`` hands ``obj`` itself to subscribers on the same bus (no copy, no
serialization: arrays arrive as read-only views of the publisher's array), serializes it
*once* for everything else, writes the frame into one loaned iceoryx2 sample (the only
copy on the same machine) and gives the same frame to the network transport.

``loan_array(shape, dtype)`` / ``loan(nbytes)`` skip even that copy: the producer fills a
writable numpy view of a shared-memory sample in place, and ``Loan.send()`` publishes it.
Subscribers on the same bus receive a loaned message through shared memory too, so a
loaned frame is never copied on this machine.
"""

from __future__ import annotations

import asyncio
import math
import threading
from collections.abc import Callable
from typing import Any, Protocol

import numpy as np

from coorp._errors import UsageError
from coorp.transport._codec import Codec, Encoded, _descr, _pack
from coorp.transport._errors import PayloadTooLargeError, TransportClosedError
from coorp.transport._frame import (
    SEQ_STAMP,
    SEQ_STAMP_OFFSET,
    Flags,
    FrameHeader,
    FrameLayout,
    Kind,
    layout,
    prefix_template,
    write_prefix,
)
from coorp.transport._machine import CreditGate, ShmNode, ShmOutlet
from coorp.transport._network import NetworkTransport
from coorp.transport._options import QueuePolicy
from coorp.transport._topic import Topic

__all__ = ["Loan", "Publisher", "PublisherStats"]


class _Host(Protocol):
    """What a publisher needs of the bus that made it (:class:`~._bus.Bus`): stated
    here, so that the bus imports its publishers and not the other way round."""

    id: int
    shm: ShmNode | None
    network: NetworkTransport | None

    def clock(self) -> int: ...

    def shm_subscribers_here(self, topic: Topic) -> int: ...

    def deliver_local(
        self, topic: Topic, obj: Any, seq: int, stamp: int, pub_id: int, timeout: float | None
    ) -> None: ...

    def forget_publisher(self, pub: Publisher) -> None: ...


class PublisherStats:
    """Counters of one publisher."""

    __slots__ = ("bytes_shared", "published", "shm_deliveries")

    def __init__(self) -> None:
        self.published = 0
        self.shm_deliveries = 0
        self.bytes_shared = 0


class Publisher:
    """Publishes messages of one :class:`Topic` from one :class:`Bus`."""

    def __init__(self, bus: _Host, topic: Topic, pub_id: int) -> None:
        self.bus = bus
        self.topic = topic
        self.pub_id = pub_id
        self.stats = PublisherStats()
        self._codec = Codec(topic)
        self._seq = 0
        self._lock = threading.Lock()
        self._closed = False
        self._plans: dict[tuple[int, int, bytes, tuple[int, ...]], _Plan] = {}
        self._array_ok = topic.type in (np.ndarray, object)
        self._outlet: ShmOutlet | None = None
        self._gate: CreditGate | None = None
        if bus.shm is not None:
            self._outlet = ShmOutlet(bus.shm, topic)
            if topic.policy is QueuePolicy.BLOCK:
                self._gate = CreditGate(
                    bus.shm, topic, bus.id, pub_id, count=self._outlet.subscribers
                )

    # -- helpers ------------------------------------------------------------------------
    def _check_open(self) -> None:
        if self._closed:
            raise TransportClosedError(f"publisher of {self.topic.name!r} is closed")

    def _head(self, kind: int, flags: int, seq: int, stamp: int) -> FrameHeader:
        return FrameHeader(kind, flags, self.topic.type_id, self.bus.id, self.pub_id, seq, stamp)

    def _plan(self, kind: int, flags: int, meta: bytes, lengths: tuple[int, ...]) -> _Plan:
        """Layout and prefix template of a frame; cached, as a topic usually carries
        messages of a few shapes (the per-message work is then two slice copies)."""
        key = (kind, flags, meta, lengths)
        plan = self._plans.get(key)
        if plan is None:
            lay = layout(len(meta), lengths)
            self._limit(lay.total)
            head = self._head(kind, flags, 0, 0)
            plan = _Plan(lay, prefix_template(head, meta, lay, lengths))
            if len(self._plans) >= 64:
                self._plans.clear()
            self._plans[key] = plan
        return plan

    def _shm_peers(self) -> int:
        """Subscribers outside this bus that shared memory must reach."""
        if self._outlet is None:
            return 0
        return self._outlet.subscribers() - self.bus.shm_subscribers_here(self.topic)

    def _limit(self, total: int) -> None:
        if total > self.topic.max_payload:
            raise PayloadTooLargeError(self.topic.name, total, self.topic.max_payload)

    # -- publish ------------------------------------------------------------------------
    def publish(self, obj: Any, *, timeout: float | None = 5.0) -> int:
        """Publish ``obj`` to every subscriber; returns its sequence number.

        ``timeout`` bounds the wait for room under ``QueuePolicy.BLOCK`` (``None`` waits
        forever); it raises :class:`DeliveryTimeoutError` when exceeded.
        """
        self.topic.check(obj)
        with self._lock:
            self._check_open()
            seq = self._seq + 1
            shm_peers = self._shm_peers()
            net = self.bus.network
            to_net = net is not None and net.has_subscribers(self.topic)
            enc: Encoded | None = None
            plan: _Plan | None = None
            if shm_peers > 0 or to_net:
                enc = self._codec.encode(obj)
                if enc.kind == Kind.ARRAY or enc.kind == Kind.BYTES:
                    plan = self._plan(enc.kind, 0, enc.meta, tuple(enc.buffer_lengths))
                    lay = plan.layout
                else:  # meta changes from message to message: nothing to cache
                    lay = layout(len(enc.meta), enc.buffer_lengths)
                    self._limit(lay.total)
                if to_net and enc.kind == Kind.PICKLE:
                    raise UsageError(
                        f"topic {self.topic.name!r} allows pickle and is "
                        f"therefore never sent over the network"
                    )
            if enc is not None and shm_peers > 0 and self._gate is not None:
                # Wait for room before anything is delivered, so a timeout leaves no
                # trace: the sequence number is only used once the message goes out.
                self._gate.wait_for_room(seq - 1, timeout)
            self._seq = seq
            stamp = self.bus.clock()
            self.bus.deliver_local(self.topic, obj, seq, stamp, self.pub_id, timeout)
            if enc is not None and shm_peers > 0:
                sample, owner = self._outlet.loan(lay.total)  # type: ignore[union-attr]
                dest = memoryview(owner).cast("B")
                if plan is not None:
                    plan.write(dest, seq, stamp)
                else:
                    head = self._head(enc.kind, 0, seq, stamp)
                    write_prefix(dest, head, enc.meta, lay, enc.buffer_lengths)
                for off, buf in zip(lay.buffer_offsets, enc.buffers, strict=True):
                    dest[off : off + buf.nbytes] = buf
                del dest, owner
                self.stats.shm_deliveries += self._outlet.send(sample)  # type: ignore[union-attr]
                self.stats.bytes_shared += lay.total
            if enc is not None and to_net:
                head = self._head(enc.kind, 0, seq, stamp)
                prefix = bytearray(lay.buffer_offsets[0] if enc.buffers else lay.total)
                write_prefix(memoryview(prefix), head, enc.meta, lay, enc.buffer_lengths)
                parts: list[bytes | memoryview] = [memoryview(prefix)]
                pos = len(prefix)
                for off, buf in zip(lay.buffer_offsets, enc.buffers, strict=True):
                    if off > pos:
                        parts.append(bytes(off - pos))
                    parts.append(buf)
                    pos = off + buf.nbytes
                net.send(self.topic, parts, timeout=timeout)  # type: ignore[union-attr]
            self.stats.published += 1
            return seq

    async def apublish(self, obj: Any, *, timeout: float | None = 5.0) -> int:
        """``publish`` for asyncio: runs inline for KEEP_LAST topics (it never waits for
        subscribers), in a worker thread for BLOCK topics (it may)."""
        if self.topic.policy is QueuePolicy.KEEP_LAST:
            return self.publish(obj, timeout=timeout)
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(None, lambda: self.publish(obj, timeout=timeout))

    # -- loans --------------------------------------------------------------------------
    def loan_array(self, shape: int | tuple[int, ...], dtype: Any = np.uint8) -> Loan:
        """Loan a writable array of ``shape``/``dtype`` in shared memory; fill it, ``send()``."""
        if not self._array_ok:
            self.topic.check(np.empty(0))
        dt = dtype if isinstance(dtype, np.dtype) else np.dtype(dtype)
        shp = (shape,) if isinstance(shape, int) else tuple(shape)
        count = math.prod(shp)
        meta = _pack([_descr(dt), shp])
        return self._loan(
            Kind.ARRAY,
            meta,
            count * dt.itemsize,
            lambda owner, start: np.frombuffer(owner, dt, count, offset=start).reshape(shp),
        )

    def loan(self, nbytes: int) -> Loan:
        """Loan ``nbytes`` of writable shared memory as a ``uint8`` array; ``send()`` it.

        Subscribers receive a ``uint8`` array on a ``numpy.ndarray`` topic and a read-only
        ``memoryview`` on a ``bytes`` (or ``object``) topic.
        """
        if self.topic.type is np.ndarray:
            return self.loan_array(nbytes, np.uint8)
        self.topic.check(b"")
        return self._loan(
            Kind.BYTES,
            b"",
            nbytes,
            lambda owner, start: np.frombuffer(owner, np.uint8, nbytes, offset=start),
        )

    def _loan(
        self, kind: int, meta: bytes, nbytes: int, make: Callable[[Any, int], np.ndarray]
    ) -> Loan:
        self._check_open()
        plan = self._plan(kind, Flags.LOANED, meta, (nbytes,))
        if self._outlet is None:
            return Loan(self, kind, None, bytearray(nbytes), make, meta, plan)
        sample, owner = self._outlet.loan(plan.layout.total)
        return Loan(self, kind, sample, owner, make, meta, plan)

    def _send_loan(self, loan: Loan, owner: Any) -> int:
        with self._lock:
            self._check_open()
            seq = self._seq + 1
            if self._gate is not None:
                self._gate.wait_for_room(seq - 1, 5.0)
            self._seq = seq
            stamp = self.bus.clock()
            lay = loan.layout
            dest = memoryview(owner).cast("B")
            loan.plan.write(dest, seq, stamp)
            net = self.bus.network
            if net is not None and net.has_subscribers(self.topic):
                # The sample belongs to subscribers once sent, so the network gets a copy.
                net.send(self.topic, [bytes(dest[: lay.total])], timeout=5.0)
            del dest
            self.stats.shm_deliveries += self._outlet.send(loan.sample)  # type: ignore[union-attr]
            self.stats.bytes_shared += lay.total
            self.stats.published += 1
            return seq

    def close(self) -> None:
        """Stop publishing; loans not yet sent are discarded."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            if self._outlet is not None:
                self._outlet.close()
            if self._gate is not None:
                self._gate.close()
        self.bus.forget_publisher(self)

    def __enter__(self) -> Publisher:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Loan:
    """A writable shared-memory buffer that becomes a message on :meth:`send`.

    ``array`` is a numpy view of the sample: fill it in place. After ``send()`` (or
    ``discard()``) the array object handed out is made read-only; the memory itself stays
    mapped as long as any view exists, so a stale view can never touch freed memory.
    As a context manager the loan is sent on normal exit and discarded on an exception.
    Without shared memory (no iceoryx2, or a bus without ``Reach.MACHINE``) the loan is an
    ordinary heap buffer and ``send()`` is ``publish(array)``.
    """

    def __init__(
        self,
        publisher: Publisher,
        kind: int,
        sample: Any,
        owner: Any,
        make: Callable[[Any, int], np.ndarray],
        meta: bytes,
        plan: _Plan,
    ) -> None:
        self.publisher = publisher
        self.kind = kind
        self.sample = sample
        self.meta = meta
        self.plan = plan
        self.layout = plan.layout
        self._owner = owner
        start = plan.layout.buffer_offsets[0] if sample is not None else 0
        self._array: np.ndarray | None = make(owner, start)
        self.seq: int | None = None

    @property
    def array(self) -> np.ndarray:
        """The writable view to fill."""
        if self._array is None:
            raise TransportClosedError("this loan was already sent or discarded")
        return self._array

    def send(self) -> int:
        """Publish the filled buffer; returns its sequence number."""
        arr = self.array
        try:
            if self.sample is None:
                value: Any = arr if self.kind == Kind.ARRAY else memoryview(self._owner)
                self.seq = self.publisher.publish(value)
            else:
                self.seq = self.publisher._send_loan(self, self._owner)
        finally:
            arr.flags.writeable = False
            self._array = None
            self._owner = None
            self.sample = None
        return self.seq

    def discard(self) -> None:
        """Give the buffer back unsent."""
        if self._array is not None:
            self._array.flags.writeable = False
        self._array = None
        self._owner = None
        self.sample = None  # dropping an uninitialised sample returns it to the pool

    def __enter__(self) -> Loan:
        return self

    def __exit__(self, exc_type: object, *exc: object) -> None:
        if self._array is None:
            return
        if exc_type is None:
            self.send()
        else:
            self.discard()


class _Plan:
    """A frame layout plus its prefix (header, buffer table, meta) as a template."""

    __slots__ = ("layout", "template")

    def __init__(self, lay: FrameLayout, template: bytearray) -> None:
        self.layout = lay
        self.template = template

    def write(self, dest: memoryview, seq: int, stamp: int) -> None:
        """Write the prefix of message ``seq`` into ``dest`` (the frame's first bytes)."""
        template = self.template
        SEQ_STAMP.pack_into(template, SEQ_STAMP_OFFSET, seq, stamp)
        dest[: len(template)] = template
