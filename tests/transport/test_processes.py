"""Multi-process behaviour of the shared-memory path: exact delivery and crashed peers.

Every wait has a timeout; every child is joined or killed in ``finally``; no test sleeps
to synchronize (children report readiness through a pipe).
"""

from __future__ import annotations

import gc
import multiprocessing as mp
import os
import signal
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest

from coorp.transport import Bus, DeliveryTimeoutError, QueuePolicy, Reach, Topic

from . import _children
from .conftest import needs_iceoryx2

pytestmark = needs_iceoryx2
CTX = mp.get_context("spawn")


@pytest.fixture
def spawn() -> Iterator[Callable[..., tuple[Any, Any]]]:
    procs: list[Any] = []

    def start(target: Callable[..., None], *args: Any) -> tuple[Any, Any]:
        parent, child = CTX.Pipe()
        p = CTX.Process(target=target, args=(*args, child), daemon=True)
        p.start()
        procs.append(p)
        assert parent.poll(60), "child did not start"
        assert parent.recv() == "ready"
        return p, parent

    try:
        yield start
    finally:
        for p in procs:
            if p.is_alive():
                p.kill()
            p.join(timeout=10)


def _recv(conn: Any, timeout: float = 30.0) -> Any:
    assert conn.poll(timeout), "child did not answer in time"
    return conn.recv()


def test_every_process_gets_exact_bytes_in_order(spawn: Callable[..., Any], name: str) -> None:
    topic = Topic(name=name, type=np.ndarray, max_payload=1 << 22, policy=QueuePolicy.BLOCK)
    rng = np.random.default_rng(7)
    with Bus("parent", reach=Reach.MACHINE) as bus:
        pub = bus.publisher(topic)
        children = [spawn(_children.subscriber_child, topic, 30, 4) for _ in range(2)]
        sent = []
        for i in range(30):
            if i % 3 == 0:
                with pub.loan_array((int(rng.integers(1, 2000)), 3), np.float32) as loan:
                    loan.array[:] = rng.standard_normal(loan.array.shape)
                    arr = loan.array.copy()
            else:
                arr = rng.integers(0, 1 << 30, int(rng.integers(1, 200_000)), dtype=np.int32)
                pub.publish(arr, timeout=20.0)
            sent.append((i + 1, _children.digest(arr)))
        for _, conn in children:
            got, dropped, rejected, borrowed = _recv(conn)
            assert got == sent
            assert (dropped, rejected, borrowed) == (0, 0, 0)


def test_crashed_subscriber_is_reclaimed(spawn: Callable[..., Any], name: str) -> None:
    topic = Topic(name=name, type=np.ndarray, max_borrowed=2, max_depth=2)
    with Bus("parent", reach=Reach.MACHINE) as bus:
        pub = bus.publisher(topic)
        proc, conn = spawn(_children.holding_child, topic, 2)
        assert pub._outlet is not None and pub._outlet.subscribers() == 1
        for i in range(2):
            pub.publish(np.full(50_000, i, np.uint8))
        assert _recv(conn) == ("holding", 2)
        os.kill(proc.pid, signal.SIGKILL)
        proc.join(timeout=10)
        bus.cleanup_dead_peers()
        assert pub._outlet.subscribers() == 0
        for i in range(200):  # its samples and queue slots are back: publishing goes on
            pub.publish(np.full(50_000, i % 250, np.uint8))


def test_block_survives_a_subscriber_that_never_reads(spawn: Callable[..., Any], name: str) -> None:
    topic = Topic(name=name, type=int, policy=QueuePolicy.BLOCK)
    with Bus("parent", reach=Reach.MACHINE) as bus:
        pub = bus.publisher(topic)
        proc, conn = spawn(_children.holding_child, topic, 0)
        assert _recv(conn) == ("holding", 0)
        pub.publish(1, timeout=5.0)  # fills its queue of depth 1
        with pytest.raises(DeliveryTimeoutError, match="did not consume"):
            pub.publish(2, timeout=0.2)
        os.kill(proc.pid, signal.SIGKILL)
        proc.join(timeout=10)
        pub.publish(3, timeout=5.0)  # the dead subscriber no longer holds us back


def test_views_outlive_a_crashed_publisher(spawn: Callable[..., Any], name: str) -> None:
    topic = Topic(name=name, type=np.ndarray)
    with Bus("parent", reach=Reach.MACHINE) as bus:
        sub = bus.subscriber(topic)
        proc, conn = spawn(_children.publisher_child, topic)
        conn.send("go")
        assert _recv(conn) == "sent"
        msg = sub.receive(timeout=10.0)
        assert msg is not None
        view = msg.value
        os.kill(proc.pid, signal.SIGKILL)
        proc.join(timeout=10)
        bus.cleanup_dead_peers()
        np.testing.assert_array_equal(view, np.arange(100_000, dtype=np.int64))
        del msg, view
        gc.collect()
        assert sub.borrowed == 0


def test_block_forgets_a_crashed_subscriber_it_never_heard_from(
    spawn: Callable[..., Any], name: str
) -> None:
    topic = Topic(name=name, type=int, policy=QueuePolicy.BLOCK)
    with Bus("parent", reach=Reach.MACHINE) as bus:
        proc, conn = spawn(_children.holding_child, topic, 0)  # subscribes first
        assert _recv(conn) == ("holding", 0)
        pub = bus.publisher(topic)
        pub.publish(1, timeout=5.0)
        with pytest.raises(DeliveryTimeoutError):
            pub.publish(2, timeout=0.2)
        os.kill(proc.pid, signal.SIGKILL)
        proc.join(timeout=10)
        pub.publish(3, timeout=10.0)
