"""The bus: one per process (or per component), the factory of publishers and subscribers.

A :class:`Bus` decides which paths a topic uses -- in-process, shared memory, network --
so that publishers and subscribers never have to know where their peers run. It owns the
iceoryx2 node, the registry of same-bus subscribers, the network transport (if any) and
the injected clock used for stamps and deadlines.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable
from typing import Any

from coorp._errors import UsageError
from coorp.transport._deadline import MissHandler
from coorp.transport._errors import (
    DeliveryTimeoutError,
    TopicTypeMismatchError,
    TransportClosedError,
)
from coorp.transport._machine import ShmNode, iceoryx2_available
from coorp.transport._network import NetworkTransport
from coorp.transport._options import Reach, Wake
from coorp.transport._publisher import Publisher
from coorp.transport._subscriber import Subscriber, local_message
from coorp.transport._topic import Topic

__all__ = ["Bus"]


class Bus:
    """Publishers and subscribers of one process, reaching peers wherever they run.

    ``reach`` selects the paths (default: this process, this machine when iceoryx2 is
    installed, and the network when ``network`` is given); asking for
    ``Reach.MACHINE`` explicitly without iceoryx2 raises a ``ConfigurationError`` naming
    the extra to install. ``clock`` returns integer nanoseconds (``time.monotonic_ns``,
    shared by all processes of a machine, so same-machine latencies are meaningful).

    ``wake`` (a :class:`~coorp.transport.Wake`, or its value as a string) chooses how
    this bus's subscribers sleep when nothing is waiting: ``Wake.FUTEX`` on the topic's
    shared wake word, which every publisher on the machine advances and wakes in one
    system call however many subscribers there are (Linux on x86_64/aarch64);
    ``Wake.ICEORYX2`` on iceoryx2's event, one notification per subscriber;
    ``Wake.AUTO`` (default) is ``FUTEX`` where it works and otherwise ``ICEORYX2`` with
    one ``RuntimeWarning``. Publishers signal both ways, so buses with different
    settings share topics. Any other value is a ``UsageError`` naming the allowed ones.
    """

    def __init__(
        self,
        name: str = "coorp",
        *,
        reach: Reach | None = None,
        network: NetworkTransport | None = None,
        clock: Callable[[], int] = time.monotonic_ns,
        wake: Wake | str = Wake.AUTO,
    ) -> None:
        if reach is None:
            reach = Reach.PROCESS
            if iceoryx2_available():
                reach |= Reach.MACHINE
            if network is not None:
                reach |= Reach.NETWORK
        wake = Wake.parse(wake)
        if Reach.NETWORK in reach and network is None:
            raise UsageError(
                "Reach.NETWORK needs a network transport, e.g. Bus(network=TcpTransport(...))"
            )
        self.name = name
        self.reach = reach
        self.clock = clock
        self.id = int.from_bytes(os.urandom(8), "little") or 1
        self.shm: ShmNode | None = ShmNode(name, wake) if Reach.MACHINE in reach else None
        self.network = network if Reach.NETWORK in reach else None
        self._lock = threading.RLock()
        self._topics: dict[str, Topic] = {}
        self._subs: dict[str, list[Subscriber]] = {}
        self._pubs: dict[str, list[Publisher]] = {}
        self._next_id = 0
        self._closed = False
        if self.network is not None:
            self.network.bind(self, self.id)

    # -- factories ----------------------------------------------------------------------
    def _declare(self, topic: Topic) -> None:
        if self._closed:
            raise TransportClosedError(f"bus {self.name!r} is closed")
        known = self._topics.get(topic.name)
        if known is None:
            return
        if known.type_id != topic.type_id:
            raise TopicTypeMismatchError(topic.name, known.type_name, topic.type_name)
        elif known != topic:
            raise UsageError(
                f"topic {topic.name!r} is declared twice with different options: {known} vs {topic}"
            )

    def _uid(self) -> int:
        self._next_id += 1
        return self._next_id

    def publisher(self, topic: Topic) -> Publisher:
        """A new publisher on ``topic``."""
        with self._lock:
            self._declare(topic)
            pub = Publisher(self, topic, self._uid())
            self._topics.setdefault(topic.name, topic)
            self._pubs.setdefault(topic.name, []).append(pub)
            return pub

    def subscriber(
        self,
        topic: Topic,
        *,
        depth: int = 4,
        deadline: float | None = None,
        on_deadline_miss: MissHandler | None = None,
        spin: float = 0.0,
    ) -> Subscriber:
        """A new subscriber on ``topic`` with a queue of ``depth`` messages.

        ``deadline`` (seconds) with ``on_deadline_miss`` runs the handler when a message
        arrives later than ``deadline`` after publishing, or none arrives for that long.
        ``spin`` (seconds, at most 0.01) makes a blocking receive busy-poll that long
        before it sleeps: a reply that comes within the budget is taken without a
        wake-up, at the cost of up to ``spin`` of CPU per wait (yielding to other
        runnable threads between polls). 0 (the default) sleeps at once.
        """
        with self._lock:
            self._declare(topic)
            uid = (self.id << 16) ^ self._uid()
            sub = Subscriber(
                self,
                topic,
                depth=depth,
                deadline=deadline,
                on_deadline_miss=on_deadline_miss,
                uid=uid & (2**64 - 1),
                spin=spin,
            )
            self._topics.setdefault(topic.name, topic)
            first = not self._subs.get(topic.name)
            self._subs.setdefault(topic.name, []).append(sub)
        if first and self.network is not None and not topic.allow_pickle:
            self.network.subscribe(topic)
        return sub

    # -- routing ------------------------------------------------------------------------
    def shm_subscribers_here(self, topic: Topic) -> int:
        """How many of the topic's iceoryx2 subscribers belong to this bus."""
        subs = self._subs.get(topic.name)
        return len(subs) if subs and self.shm is not None else 0

    def deliver_local(
        self, topic: Topic, obj: Any, seq: int, stamp: int, pub_id: int, timeout: float | None
    ) -> None:
        """Hand ``obj`` to this bus's subscribers of ``topic`` (no copy)."""
        subs = self._subs.get(topic.name)
        if not subs:
            return
        for sub in list(subs):
            sub.push(
                local_message(topic, obj, seq, stamp, (self.id, pub_id), self.clock()), timeout
            )

    # FrameSink (for the network transport)
    def deliver_frame(self, topic_name: str, frame: memoryview, owner: object) -> None:
        for sub in list(self._subs.get(topic_name, ())):
            # A subscriber too slow even for BLOCK loses the frame; that shows up as a gap
            # in the sender's sequence numbers (stats.dropped).
            with contextlib.suppress(DeliveryTimeoutError):
                sub.push((frame, owner), timeout=5.0)

    def subscribed_topics(self) -> list[Topic]:
        with self._lock:
            return [
                self._topics[n]
                for n, subs in self._subs.items()
                if subs and not self._topics[n].allow_pickle
            ]

    def published_topic(self, name: str) -> Topic | None:
        with self._lock:
            return self._topics.get(name) if self._pubs.get(name) else None

    def remote_error(self, topic_name: str, error: Exception) -> None:
        for sub in list(self._subs.get(topic_name, ())):
            sub.fail(error)  # type: ignore[arg-type]

    # -- lifecycle ----------------------------------------------------------------------
    def forget_publisher(self, pub: Publisher) -> None:
        with self._lock:
            pubs = self._pubs.get(pub.topic.name, [])
            if pub in pubs:
                pubs.remove(pub)

    def forget_subscriber(self, sub: Subscriber) -> None:
        with self._lock:
            subs = self._subs.get(sub.topic.name, [])
            if sub in subs:
                subs.remove(sub)
            last = not subs
        if last and self.network is not None and not self._closed:
            self.network.unsubscribe(sub.topic)

    def cleanup_dead_peers(self) -> None:
        """Reclaim shared-memory ports and samples of peer processes that crashed."""
        if self.shm is not None:
            self.shm.cleanup_dead()

    def close(self) -> None:
        """Close every publisher, subscriber and the network transport."""
        with self._lock:
            if self._closed:
                return
            subs = [s for ss in self._subs.values() for s in ss]
            pubs = [p for pp in self._pubs.values() for p in pp]
        for s in subs:
            s.close()
        for p in pubs:
            p.close()
        with self._lock:
            self._closed = True
        if self.network is not None:
            self.network.close()
        if self.shm is not None:
            # Tidy up after peers that crashed while we shared topics with them.
            self.shm.cleanup_dead()
            self.shm.close()

    def __enter__(self) -> Bus:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
