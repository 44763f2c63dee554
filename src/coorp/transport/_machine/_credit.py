"""Cross-process back-pressure for ``QueuePolicy.BLOCK`` topics.

iceoryx2 can make a publisher wait for a full subscriber queue, but it waits inside one
native call, holding the GIL, with no timeout and even after the subscriber died (tested
with iceoryx2 0.10). Coorp therefore keeps its own credits: each subscriber of a BLOCK
topic reports, on a small side service ``<topic>/__credit``, that it joined (with its
queue depth and pid) and the highest sequence number it consumed from each publisher.
Before sending, a publisher drains those reports and waits -- on an iceoryx2 event, with a
timeout -- until every live subscriber has room. Reports are cumulative, so losing an
intermediate one costs nothing; a subscriber whose pid is gone is forgotten.
"""

from __future__ import annotations

import ctypes
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from coorp.transport._errors import DeliveryTimeoutError
from coorp.transport._machine._shm import ShmNode, pid_alive
from coorp.transport._topic import Topic

__all__ = ["CreditGate", "CreditReporter"]

_JOIN, _CONSUMED, _LEAVE = 1, 2, 3


class _Credit(ctypes.Structure):
    _fields_ = [
        ("sub_uid", ctypes.c_uint64),
        ("pub_bus", ctypes.c_uint64),
        ("seq", ctypes.c_uint64),
        ("pub_id", ctypes.c_uint32),
        ("kind", ctypes.c_uint32),
        ("depth", ctypes.c_uint32),
        ("pid", ctypes.c_uint32),
    ]


def _services(node: ShmNode, topic: Topic) -> tuple[Any, Any]:
    iox = node.iox
    name = iox.ServiceName.new(f"coorp/{topic.name}/__credit")
    pubsub = (
        node.node.service_builder(name)
        .publish_subscribe(_Credit)
        .max_publishers(topic.max_subscribers + 1)
        .max_subscribers(topic.max_publishers + 1)
        .subscriber_max_buffer_size(256)
        .history_size(1)
        .enable_safe_overflow(True)
        .open_or_create()
    )
    event = node.node.service_builder(name).event().open_or_create()
    return pubsub, event


class CreditReporter:
    """Subscriber side: tells publishers how far this subscriber has consumed."""

    def __init__(self, node: ShmNode, topic: Topic, sub_uid: int, depth: int, pid: int) -> None:
        pubsub, event = _services(node, topic)
        self._port = pubsub.publisher_builder().create()
        self._notifier = event.notifier_builder().create()
        self._uid, self._depth, self._pid = sub_uid, depth, pid
        self._send(_JOIN, 0, 0, 0)

    def _send(self, kind: int, bus: int, pub: int, seq: int) -> None:
        self._port.send_copy(_Credit(self._uid, bus, seq, pub, kind, self._depth, self._pid))
        self._notifier.notify()

    def consumed(self, bus: int, pub: int, seq: int) -> None:
        self._send(_CONSUMED, bus, pub, seq)

    def close(self) -> None:
        if self._port is not None:
            self._send(_LEAVE, 0, 0, 0)
            self._port = None


@dataclass(slots=True)
class _Peer:
    depth: int
    pid: int
    base: int  # our sequence number when we learned about it, or what it consumed


class CreditGate:
    """Publisher side: waits until every live subscriber has room for one more message.

    A subscriber that existed before this publisher announced itself to nobody we can
    hear (iceoryx2 replays history only when the reporting side sends again), so the
    gate also compares the topic's subscriber count with the peers it knows: each
    unknown one becomes an anonymous peer with depth 1, counted from now, until its first
    report names it. Conservative, never wrong: at worst the first messages wait.
    """

    def __init__(
        self,
        node: ShmNode,
        topic: Topic,
        bus_id: int,
        pub_id: int,
        count: Callable[[], int],
        clock: Any = time.monotonic,
    ) -> None:
        pubsub, event = _services(node, topic)
        self._iox = node.iox
        self._node = node
        self._port = pubsub.subscriber_builder().buffer_size(256).create()
        self._listener = event.listener_builder().create()
        self._bus, self._pub = bus_id, pub_id
        self._peers: dict[int, _Peer] = {}
        self._topic = topic
        self._clock = clock
        self._count = count
        self._anonymous = 0  # next key for an anonymous peer (keys are negative)

    def _reconcile(self, sent: int) -> None:
        n = self._count()
        anonymous = [uid for uid in self._peers if uid < 0]
        while n > len(self._peers):
            self._anonymous -= 1
            self._peers[self._anonymous] = _Peer(1, 0, sent)
        while n < len(self._peers) and anonymous:
            del self._peers[anonymous.pop()]

    def _drain(self, sent: int) -> None:
        while True:
            sample = self._port.receive()
            if sample is None:
                return
            c = sample.payload().contents
            uid, kind = int(c.sub_uid), int(c.kind)
            if kind == _LEAVE:
                self._peers.pop(uid, None)
                continue
            peer = self._peers.get(uid)
            if peer is None:
                anonymous = [k for k in self._peers if k < 0]
                # A report from a peer we only counted so far: it takes that place.
                base = self._peers.pop(anonymous[0]).base if anonymous else sent
                peer = self._peers[uid] = _Peer(int(c.depth), int(c.pid), base)
            if kind == _CONSUMED and c.pub_bus == self._bus and c.pub_id == self._pub:
                peer.base = max(peer.base, int(c.seq))

    def _blocked(self, sent: int) -> list[int]:
        return [uid for uid, p in self._peers.items() if sent - p.base >= p.depth]

    def wait_for_room(self, sent: int, timeout: float | None) -> None:
        """Block until ``sent + 1`` can be delivered to everyone, or raise on timeout."""
        self._drain(sent)
        self._reconcile(sent)
        blocked = self._blocked(sent)
        if not blocked:
            return
        end = None if timeout is None else self._clock() + timeout
        while blocked:
            for uid in blocked:
                if uid >= 0 and not pid_alive(self._peers[uid].pid):
                    del self._peers[uid]
            if any(uid < 0 for uid in blocked):
                # Only iceoryx2 knows whether an anonymous peer died: let it reclaim the
                # dead, which lowers the subscriber count that _reconcile reads.
                self._node.cleanup_dead()
            remaining = 0.25 if end is None else min(0.25, end - self._clock())
            if remaining <= 0:
                raise DeliveryTimeoutError(
                    f"publish on {self._topic.name!r} (policy BLOCK) timed out after "
                    f"{timeout} s: {len(blocked)} subscriber(s) did not consume their queue"
                )
            # Bounded slices so a subscriber that died silently is noticed by pid.
            self._listener.timed_wait(self._iox.Duration.from_secs_f64(remaining))
            self._drain(sent)
            self._reconcile(sent)
            blocked = self._blocked(sent)

    def close(self) -> None:
        self._port = None
        self._listener = None
