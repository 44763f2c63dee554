"""Same-bus delivery: no copy, read-only views, queue policies, type checks, deadlines."""

from __future__ import annotations

import asyncio
import threading

import numpy as np
import pytest

from coorp._errors import UsageError
from coorp.transport import (
    Bus,
    DeadlineMiss,
    DeadlineMissKind,
    DeliveryTimeoutError,
    QueuePolicy,
    Reach,
    Topic,
    TopicTypeMismatchError,
    TransportClosedError,
)


def test_same_bus_delivery_is_zero_copy_and_read_only(local_bus: Bus, name: str) -> None:
    topic = Topic(name=name, type=np.ndarray)
    pub, sub = local_bus.publisher(topic), local_bus.subscriber(topic)
    arr = np.arange(1000.0)
    pub.publish(arr)
    msg = sub.receive(timeout=1.0)
    assert msg is not None and msg.via is Reach.PROCESS
    assert np.shares_memory(msg.value, arr)
    assert not msg.value.flags.writeable
    with pytest.raises(ValueError):
        msg.value[0] = 1.0
    assert arr.flags.writeable  # the publisher's own array is untouched


def test_every_subscriber_sees_every_message_in_order(local_bus: Bus, name: str) -> None:
    topic = Topic(name=name, type=dict)
    pub = local_bus.publisher(topic)
    subs = [local_bus.subscriber(topic, depth=16) for _ in range(3)]
    for i in range(10):
        pub.publish({"i": i})
    for sub in subs:
        got = [sub.try_receive() for _ in range(10)]
        assert [m.value["i"] for m in got if m is not None] == list(range(10))
        assert [m.seq for m in got if m is not None] == list(range(1, 11))
        assert sub.try_receive() is None


def test_keep_last_drops_oldest_and_counts(local_bus: Bus, name: str) -> None:
    topic = Topic(name=name, type=int, policy=QueuePolicy.KEEP_LAST)
    pub, sub = local_bus.publisher(topic), local_bus.subscriber(topic, depth=3)
    pub.publish(-1)
    assert sub.receive(timeout=1.0).value == -1  # type: ignore[union-attr]
    for i in range(10):
        pub.publish(i)
    got = []
    while (msg := sub.try_receive()) is not None:
        got.append(msg.value)
    assert got == [7, 8, 9]
    assert sub.stats.dropped == 7


def test_block_times_out_then_resumes(local_bus: Bus, name: str) -> None:
    topic = Topic(name=name, type=int, policy=QueuePolicy.BLOCK)
    pub, sub = local_bus.publisher(topic), local_bus.subscriber(topic, depth=2)
    pub.publish(1)
    pub.publish(2)
    with pytest.raises(DeliveryTimeoutError, match="did not read"):
        pub.publish(3, timeout=0.05)
    first = sub.try_receive()
    assert first is not None and first.value == 1
    pub.publish(4, timeout=0.05)
    assert [sub.try_receive().value, sub.try_receive().value] == [2, 4]  # type: ignore[union-attr]


def test_block_waits_for_a_reader(local_bus: Bus, name: str) -> None:
    topic = Topic(name=name, type=int, policy=QueuePolicy.BLOCK)
    pub, sub = local_bus.publisher(topic), local_bus.subscriber(topic, depth=1)
    received: list[int] = []

    def reader() -> None:
        for _ in range(50):
            msg = sub.receive(timeout=5.0)
            assert msg is not None
            received.append(msg.value)

    t = threading.Thread(target=reader)
    t.start()
    try:
        for i in range(50):
            pub.publish(i, timeout=5.0)
    finally:
        t.join(timeout=10)
    assert received == list(range(50))


def test_type_checks(local_bus: Bus, name: str) -> None:
    topic = Topic(name=name, type=np.ndarray)
    pub = local_bus.publisher(topic)
    with pytest.raises(TopicTypeMismatchError, match="ndarray"):
        pub.publish({"not": "an array"})
    with pytest.raises(TopicTypeMismatchError):
        local_bus.subscriber(Topic(name=name, type=dict))
    with pytest.raises(UsageError, match="different options"):
        local_bus.subscriber(Topic(name=name, type=np.ndarray, max_payload=10))


@pytest.mark.parametrize("bad", ["", "a b", "x/../y", "a__b", "é"])
def test_invalid_topic_names(bad: str) -> None:
    with pytest.raises(UsageError, match="topic name"):
        Topic(name=bad)


def test_unsupported_topic_type() -> None:
    with pytest.raises(UsageError, match="unsupported topic type"):
        Topic(name="x", type=set)


def test_closed_objects_raise(local_bus: Bus, name: str) -> None:
    topic = Topic(name=name, type=int)
    pub, sub = local_bus.publisher(topic), local_bus.subscriber(topic)
    pub.publish(1)
    msg = sub.receive(timeout=1.0)
    assert msg is not None
    msg.release()
    with pytest.raises(TransportClosedError, match="released"):
        _ = msg.value
    pub.close()
    sub.close()
    with pytest.raises(TransportClosedError):
        pub.publish(2)
    with pytest.raises(TransportClosedError):
        sub.try_receive()


class FakeClock:
    def __init__(self) -> None:
        self.now = 1_000_000_000

    def __call__(self) -> int:
        return self.now


def test_deadline_silent_and_late_with_injected_clock(name: str) -> None:
    clock = FakeClock()
    misses: list[DeadlineMiss] = []
    with Bus("dl", reach=Reach.PROCESS, clock=clock) as bus:
        topic = Topic(name=name, type=int)
        pub = bus.publisher(topic)
        sub = bus.subscriber(topic, deadline=0.010, on_deadline_miss=misses.append)
        clock.now += 5_000_000
        assert sub.try_receive() is None and misses == []
        clock.now += 6_000_000  # 11 ms of silence
        assert sub.try_receive() is None
        assert [m.kind for m in misses] == [DeadlineMissKind.SILENT]
        assert sub.try_receive() is None and len(misses) == 1  # one report per period
        pub.publish(1)
        clock.now += 15_000_000  # delivered 15 ms after it was published
        msg = sub.try_receive()
        assert msg is not None and msg.value == 1
        assert misses[-1].kind is DeadlineMissKind.LATE
        assert misses[-1].overdue_ns == 5_000_000 and misses[-1].message is msg
        pub.publish(2)
        clock.now += 1_000_000
        assert sub.try_receive() is not None and len(misses) == 2
        assert sub.stats.deadline_misses == 2


def test_deadline_needs_deadline(local_bus: Bus, name: str) -> None:
    with pytest.raises(UsageError, match="needs a deadline"):
        local_bus.subscriber(Topic(name=name), on_deadline_miss=print)


def test_receive_times_out(local_bus: Bus, name: str) -> None:
    sub = local_bus.subscriber(Topic(name=name))
    assert sub.receive(timeout=0.01) is None


def test_asyncio_receive(local_bus: Bus, name: str) -> None:
    topic = Topic(name=name, type=str)
    pub, sub = local_bus.publisher(topic), local_bus.subscriber(topic)

    async def main() -> list[str]:
        loop = asyncio.get_running_loop()
        loop.call_later(0.01, pub.publish, "hello")
        first = await asyncio.wait_for(sub.areceive(timeout=5.0), 10)
        await pub.apublish("again")
        second = await sub.areceive(timeout=5.0)
        return [first.value, second.value]  # type: ignore[union-attr]

    assert asyncio.run(main()) == ["hello", "again"]


def test_asyncio_iteration_and_block_publish(local_bus: Bus, name: str) -> None:
    topic = Topic(name=name, type=int, policy=QueuePolicy.BLOCK)
    pub, sub = local_bus.publisher(topic), local_bus.subscriber(topic, depth=1)

    async def produce() -> None:
        for i in range(5):
            await pub.apublish(i, timeout=5.0)

    async def consume() -> list[int]:
        got = []
        async for msg in sub:
            got.append(msg.value)
            if len(got) == 5:
                break
        return got

    async def main() -> list[int]:
        results = await asyncio.gather(produce(), consume())
        return results[1]

    assert asyncio.run(main()) == [0, 1, 2, 3, 4]


def test_loan_without_shared_memory_behaves_like_publish(local_bus: Bus, name: str) -> None:
    topic = Topic(name=name, type=np.ndarray)
    pub, sub = local_bus.publisher(topic), local_bus.subscriber(topic)
    with pub.loan_array((2, 3), np.int16) as loan:
        loan.array[:] = 7
        arr = loan.array
    assert not arr.flags.writeable  # the handed-out view is frozen after send
    msg = sub.receive(timeout=1.0)
    assert msg is not None
    np.testing.assert_array_equal(msg.value, np.full((2, 3), 7, np.int16))


def test_missing_iceoryx2_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    from coorp._errors import ConfigurationError

    monkeypatch.setitem(sys.modules, "iceoryx2", None)  # makes `import iceoryx2` fail
    with pytest.raises(ConfigurationError, match=r"pip install 'coorp\[transport\]'"):
        Bus("x", reach=Reach.MACHINE)
    with Bus("y") as bus:  # without an explicit request the bus stays in-process
        assert bus.reach == Reach.PROCESS and bus.shm is None


def test_network_reach_needs_a_transport() -> None:
    with pytest.raises(UsageError, match="network transport"):
        Bus("z", reach=Reach.NETWORK)


def test_cancelled_areceive_loses_no_message(local_bus: Bus, name: str) -> None:
    topic = Topic(name=name, type=int)
    pub, sub = local_bus.publisher(topic), local_bus.subscriber(topic, depth=8)

    async def main() -> list[int]:
        got = []
        for i in range(20):
            task = asyncio.create_task(sub.areceive())  # no timeout: waits in a thread
            await asyncio.sleep(0)  # let it start (scheduling only, not synchronization)
            if i % 2:
                pub.publish(i)  # races with the cancellation below
            task.cancel()
            try:
                msg = await task
            except asyncio.CancelledError:
                msg = None
            if msg is not None:
                got.append(msg.value)
        while (msg := await sub.areceive(timeout=0.5)) is not None:
            got.append(msg.value)
        return got

    assert sorted(asyncio.run(main())) == list(range(1, 20, 2))


def test_wake_interrupts_a_blocked_receive(local_bus: Bus, name: str) -> None:
    sub = local_bus.subscriber(Topic(name=name))
    result: list[object] = []
    t = threading.Thread(target=lambda: result.append(sub.receive(timeout=30.0)))
    t.start()
    try:
        while t.is_alive() and not result:
            sub.wake()
            t.join(timeout=0.01)
    finally:
        t.join(timeout=10)
    assert result == [None]
