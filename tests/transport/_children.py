"""Child-process bodies for the multi-process tests (importable under ``spawn``)."""

from __future__ import annotations

import hashlib
from typing import Any

import numpy as np

from coorp.transport import Bus, Reach, Topic


def digest(value: Any) -> str:
    if isinstance(value, np.ndarray):
        return hashlib.sha256(value.tobytes()).hexdigest() + str(value.dtype) + str(value.shape)
    return hashlib.sha256(bytes(value)).hexdigest()


def subscriber_child(topic: Topic, count: int, depth: int, conn: Any) -> None:
    """Receive ``count`` messages; report (seq, digest) of each, then the stats."""
    with Bus("child-sub", reach=Reach.MACHINE) as bus:
        sub = bus.subscriber(topic, depth=depth)
        conn.send("ready")
        got = []
        for _ in range(count):
            msg = sub.receive(timeout=20.0)
            if msg is None:
                break
            with msg:
                got.append((msg.seq, digest(msg.value)))
        conn.send((got, sub.stats.dropped, sub.stats.rejected, sub.borrowed))


def holding_child(topic: Topic, hold: int, conn: Any) -> None:
    """Receive and hold ``hold`` messages (or none), then wait to be killed."""
    bus = Bus("child-hold", reach=Reach.MACHINE)
    sub = bus.subscriber(topic, depth=max(1, hold))  # room for all, whatever the timing
    conn.send("ready")
    held = [sub.receive(timeout=20.0) for _ in range(hold)]
    conn.send(("holding", sum(m is not None for m in held)))
    conn.recv()  # never answered: the parent kills this process


def publisher_child(topic: Topic, conn: Any) -> None:
    """Publish one known array once the parent's subscriber is up, then wait to be killed."""
    bus = Bus("child-pub", reach=Reach.MACHINE)
    pub = bus.publisher(topic)
    conn.send("ready")
    conn.recv()
    pub.publish(np.arange(100_000, dtype=np.int64))
    conn.send("sent")
    conn.recv()
