"""Shared-memory path (iceoryx2) between two buses: exact bytes, lifetimes, error paths.

Two buses in one process never see each other's in-process registry, so everything here
travels through iceoryx2 exactly as between processes; the multi-process tests live in
``test_processes.py``.
"""

from __future__ import annotations

import gc

import numpy as np
import pytest

from coorp._errors import UsageError
from coorp.transport import (
    BorrowLimitError,
    Bus,
    DeliveryTimeoutError,
    PayloadTooLargeError,
    QueuePolicy,
    Reach,
    Topic,
    TopicTypeMismatchError,
)

from .conftest import needs_iceoryx2

pytestmark = needs_iceoryx2


def test_exact_bytes_in_order_to_every_subscriber(shm_pair: tuple[Bus, Bus], name: str) -> None:
    a, b = shm_pair
    topic = Topic(name=name, type=object, max_payload=1 << 22)
    pub = a.publisher(topic)
    subs = [b.subscriber(topic, depth=16) for _ in range(2)]
    rng = np.random.default_rng(0)
    sent = [rng.integers(0, 255, int(n), dtype=np.uint8) for n in rng.integers(1, 300_000, 12)]
    sent.append({"k": np.arange(5.0), "blob": b"z" * 5000})
    for obj in sent:
        pub.publish(obj)
    for sub in subs:
        for i, obj in enumerate(sent):
            msg = sub.receive(timeout=2.0)
            assert msg is not None and msg.via is Reach.MACHINE and msg.seq == i + 1
            if isinstance(obj, np.ndarray):
                assert msg.value.tobytes() == obj.tobytes()
                assert not msg.value.flags.writeable
            else:
                np.testing.assert_array_equal(msg.value["k"], obj["k"])
                assert bytes(msg.value["blob"]) == obj["blob"]
            msg.release()
        assert sub.try_receive() is None
        assert sub.stats.dropped == 0 and sub.stats.rejected == 0


def test_loaned_array_reaches_subscribers_without_copy(
    shm_pair: tuple[Bus, Bus], name: str
) -> None:
    a, b = shm_pair
    topic = Topic(name=name, type=np.ndarray, max_payload=1 << 22)
    pub = a.publisher(topic)
    sub_other = b.subscriber(topic)
    sub_same = a.subscriber(topic)  # same bus: a loaned frame still comes through shm
    with pub.loan_array((256, 256), np.float32) as loan:
        loan.array[:] = np.arange(256, dtype=np.float32)
    for sub in (sub_other, sub_same):
        msg = sub.receive(timeout=2.0)
        assert msg is not None and msg.via is Reach.MACHINE
        assert msg.value.shape == (256, 256) and msg.value[3, 7] == 7.0
        assert msg.value.ctypes.data % 64 == 0  # aligned inside the sample
        msg.release()
        assert sub.try_receive() is None


def test_same_bus_publish_is_not_duplicated(shm_pair: tuple[Bus, Bus], name: str) -> None:
    a, b = shm_pair
    topic = Topic(name=name, type=int)
    pub = a.publisher(topic)
    local, remote = a.subscriber(topic), b.subscriber(topic)
    pub.publish(41)
    got_local = local.receive(timeout=2.0)
    got_remote = remote.receive(timeout=2.0)
    assert got_local is not None and got_local.via is Reach.PROCESS
    assert got_remote is not None and got_remote.via is Reach.MACHINE
    assert local.try_receive() is None and remote.try_receive() is None


def test_views_keep_their_sample_alive(shm_pair: tuple[Bus, Bus], name: str) -> None:
    a, b = shm_pair
    topic = Topic(name=name, type=np.ndarray, max_borrowed=4)
    pub, sub = a.publisher(topic), b.subscriber(topic, depth=4)
    pub.publish(np.full(10_000, 3, np.uint8))
    msg = sub.receive(timeout=2.0)
    assert msg is not None
    view = msg.value[100:200]
    msg.release()
    assert sub.borrowed == 1  # the slice still pins the sample
    for i in range(20):  # the publisher keeps going; our sample must not be reused
        pub.publish(np.full(10_000, i, np.uint8))
        other = sub.receive(timeout=2.0)
        assert other is not None
        other.release()
    assert (view == 3).all()
    del view
    gc.collect()
    assert sub.borrowed == 0


def test_holding_too_many_messages_is_a_clear_error(shm_pair: tuple[Bus, Bus], name: str) -> None:
    a, b = shm_pair
    topic = Topic(name=name, type=np.ndarray, max_borrowed=2, max_depth=8)
    pub, sub = a.publisher(topic), b.subscriber(topic, depth=8)
    for i in range(4):
        pub.publish(np.full(8, i))
    held = [sub.receive(timeout=2.0), sub.receive(timeout=2.0)]
    with pytest.raises(BorrowLimitError, match="max_borrowed"):
        sub.receive(timeout=2.0)
    held[0].release()  # type: ignore[union-attr]
    msg = sub.receive(timeout=2.0)
    assert msg is not None and int(msg.value[0]) == 2
    del held, msg
    gc.collect()
    assert sub.borrowed == 0


def test_no_leak_over_many_messages(shm_pair: tuple[Bus, Bus], name: str) -> None:
    a, b = shm_pair
    topic = Topic(name=name, type=np.ndarray, max_payload=1 << 21, max_borrowed=2)
    pub, sub = a.publisher(topic), b.subscriber(topic, depth=2)
    for i in range(300):
        with pub.loan_array(100_000, np.uint8) as loan:
            loan.array[0] = i % 251
        with sub.receive(timeout=2.0) as msg:  # type: ignore[union-attr]
            assert int(msg.value[0]) == i % 251
    assert sub.borrowed == 0


def test_keep_last_overflow_drops_oldest(shm_pair: tuple[Bus, Bus], name: str) -> None:
    a, b = shm_pair
    topic = Topic(name=name, type=int, policy=QueuePolicy.KEEP_LAST)
    pub, sub = a.publisher(topic), b.subscriber(topic, depth=2)
    pub.publish(-1)
    assert sub.receive(timeout=2.0).value == -1  # type: ignore[union-attr]
    for i in range(6):
        pub.publish(i)
    got = [m.value for m in iter(sub.try_receive, None)]
    assert got == [4, 5]
    assert sub.stats.dropped == 4  # counted from the gaps in sequence numbers


def test_block_policy_across_buses(shm_pair: tuple[Bus, Bus], name: str) -> None:
    a, b = shm_pair
    topic = Topic(name=name, type=int, policy=QueuePolicy.BLOCK)
    pub, sub = a.publisher(topic), b.subscriber(topic, depth=2)
    pub.publish(1, timeout=1.0)
    pub.publish(2, timeout=1.0)
    with pytest.raises(DeliveryTimeoutError, match="BLOCK"):
        pub.publish(3, timeout=0.05)
    assert sub.receive(timeout=1.0).value == 1  # type: ignore[union-attr]
    pub.publish(4, timeout=1.0)
    assert [m.value for m in iter(sub.try_receive, None)] == [2, 4]
    assert sub.stats.dropped == 0


def test_oversized_payload(shm_pair: tuple[Bus, Bus], name: str) -> None:
    a, b = shm_pair
    topic = Topic(name=name, type=np.ndarray, max_payload=4096)
    pub, sub = a.publisher(topic), b.subscriber(topic)
    with pytest.raises(PayloadTooLargeError, match="max_payload"):
        pub.publish(np.zeros(5000, np.uint8))
    with pytest.raises(PayloadTooLargeError):
        pub.loan(5000)
    pub.publish(np.zeros(100, np.uint8))
    assert sub.receive(timeout=2.0) is not None


def test_type_mismatch_between_processes(shm_pair: tuple[Bus, Bus], name: str) -> None:
    a, b = shm_pair
    a.publisher(Topic(name=name, type=np.ndarray))
    with pytest.raises(TopicTypeMismatchError, match="another process"):
        b.subscriber(Topic(name=name, type=dict))
    with pytest.raises(UsageError, match="policy"):
        b.subscriber(Topic(name=name, type=np.ndarray, policy=QueuePolicy.BLOCK))


def test_loan_discard_and_failed_block(shm_pair: tuple[Bus, Bus], name: str) -> None:
    a, b = shm_pair
    topic = Topic(name=name, type=np.ndarray)
    pub, sub = a.publisher(topic), b.subscriber(topic)
    with pytest.raises(RuntimeError), pub.loan(1000) as loan:
        loan.array[:] = 1
        raise RuntimeError("producer failed")
    assert sub.try_receive() is None
    for _ in range(10):  # discarded loans go back to the pool
        pub.loan(1000).discard()
    pub.publish(np.ones(3))
    assert sub.receive(timeout=2.0) is not None


def test_block_counts_subscribers_that_joined_before_the_publisher(
    shm_pair: tuple[Bus, Bus], name: str
) -> None:
    a, b = shm_pair
    topic = Topic(name=name, type=int, policy=QueuePolicy.BLOCK)
    sub = b.subscriber(topic, depth=2)  # exists before the publisher does
    pub = a.publisher(topic)
    got = []
    for i in range(6):
        try:
            pub.publish(i, timeout=0.05)
        except DeliveryTimeoutError:
            msg = sub.receive(timeout=2.0)
            assert msg is not None
            got.append(msg.value)
            pub.publish(i, timeout=2.0)
    got += [m.value for m in iter(sub.try_receive, None)]
    assert got == list(range(6))  # nothing was discarded by a full queue
    assert sub.stats.dropped == 0
