"""The TCP network transport on loopback: delivery, type checks, refusals, limits."""

from __future__ import annotations

import socket
import struct
from collections.abc import Iterator

import msgspec
import numpy as np
import pytest

from coorp._errors import UsageError
from coorp.transport import (
    Bus,
    QueuePolicy,
    Reach,
    TcpTransport,
    Topic,
    TopicTypeMismatchError,
)

NET = Reach.PROCESS | Reach.NETWORK


@pytest.fixture
def net_pair() -> Iterator[tuple[Bus, Bus, TcpTransport, TcpTransport]]:
    ta, tb = TcpTransport(("127.0.0.1", 0)), TcpTransport(None)
    a = Bus("net-a", reach=NET, network=ta)
    b = Bus("net-b", reach=NET, network=tb)
    try:
        tb.connect(ta.address)
        yield a, b, ta, tb
    finally:
        b.close()
        a.close()


class Opaque:
    """Something msgpack cannot carry."""


class Pose(msgspec.Struct):
    x: float
    y: float
    cov: np.ndarray


def test_messages_cross_the_network_exactly(
    net_pair: tuple[Bus, Bus, TcpTransport, TcpTransport], name: str
) -> None:
    a, b, ta, _ = net_pair
    topic = Topic(name=name, type=object, max_payload=1 << 23)
    sub = b.subscriber(topic, depth=16)
    assert ta.wait_for_subscribers(topic, timeout=5.0)
    pub = a.publisher(topic)
    rng = np.random.default_rng(3)
    sent: list[object] = [
        rng.integers(0, 255, 3_000_000, dtype=np.uint8),
        {"cmd": "stop", "v": [0.0, 1.5], "img": np.eye(3)},
        b"\x00" * 64,
        "hello",
    ]
    for obj in sent:
        pub.publish(obj)
    for i, obj in enumerate(sent):
        msg = sub.receive(timeout=5.0)
        assert msg is not None and msg.via is Reach.NETWORK and msg.seq == i + 1
        assert msg.latency_ns is None  # another machine's clock is not ours
        if isinstance(obj, np.ndarray):
            assert msg.value.tobytes() == obj.tobytes()
        elif isinstance(obj, dict):
            assert msg.value["cmd"] == "stop" and msg.value["v"] == [0.0, 1.5]
            np.testing.assert_array_equal(msg.value["img"], np.eye(3))
        elif isinstance(obj, bytes):
            assert bytes(msg.value) == obj
        else:
            assert msg.value == obj


def test_struct_topic_and_reverse_direction(
    net_pair: tuple[Bus, Bus, TcpTransport, TcpTransport], name: str
) -> None:
    a, b, _, tb = net_pair
    topic = Topic(name=name, type=Pose)
    sub = a.subscriber(topic)  # the connecting side publishes this time
    assert tb.wait_for_subscribers(topic, timeout=5.0)
    b.publisher(topic).publish(Pose(1.0, 2.0, np.ones((2, 2))))
    msg = sub.receive(timeout=5.0)
    assert msg is not None and isinstance(msg.value, Pose) and msg.value.y == 2.0


def test_type_mismatch_is_reported_to_the_subscriber(
    net_pair: tuple[Bus, Bus, TcpTransport, TcpTransport], name: str
) -> None:
    a, b, _, _ = net_pair
    a.publisher(Topic(name=name, type=np.ndarray))
    sub = b.subscriber(Topic(name=name, type=dict))
    with pytest.raises(TopicTypeMismatchError, match="publisher at"):
        sub.receive(timeout=5.0)


def test_pickle_topics_never_use_the_network(
    net_pair: tuple[Bus, Bus, TcpTransport, TcpTransport], name: str
) -> None:
    a, b, ta, _ = net_pair
    topic = Topic(name=name, allow_pickle=True)
    sub = b.subscriber(topic)
    a.publisher(topic).publish(Opaque())  # only pickle can carry it
    assert not ta.has_subscribers(topic)
    assert sub.receive(timeout=0.05) is None


def test_publishing_pickle_only_objects_to_a_network_subscriber_fails(
    net_pair: tuple[Bus, Bus, TcpTransport, TcpTransport], name: str
) -> None:
    a, b, ta, _ = net_pair
    topic = Topic(name=name)
    b.subscriber(topic)
    assert ta.wait_for_subscribers(topic, timeout=5.0)
    with pytest.raises(UsageError, match="msgpack"):
        a.publisher(topic).publish(Opaque())


def test_keep_last_across_the_network(
    net_pair: tuple[Bus, Bus, TcpTransport, TcpTransport], name: str
) -> None:
    a, b, ta, _ = net_pair
    topic = Topic(name=name, type=int, policy=QueuePolicy.KEEP_LAST)
    sub = b.subscriber(topic, depth=2)
    assert ta.wait_for_subscribers(topic, timeout=5.0)
    pub = a.publisher(topic)
    pub.publish(-2)
    assert sub.receive(timeout=5.0).value == -2  # type: ignore[union-attr]
    for i in range(20):
        pub.publish(i)
    pub.publish(-1)
    last = None
    while (msg := sub.receive(timeout=5.0)) is not None:
        last = msg.value
        if last == -1:
            break
    assert last == -1
    assert sub.stats.received + sub.stats.dropped == 22


def _raw_frame(kind: int, body: bytes) -> bytes:
    return struct.pack("<IB", 1 + len(body), kind) + body


def test_garbage_and_oversized_frames_from_a_peer(name: str) -> None:
    transport = TcpTransport(("127.0.0.1", 0))
    with Bus("victim", reach=NET, network=transport) as bus:
        topic = Topic(name=name, type=bytes, max_payload=1024)
        sub = bus.subscriber(topic)
        tname = name.encode()
        with socket.create_connection(transport.address, timeout=5) as evil:
            # An oversized frame for a real topic: skipped without being allocated.
            body = struct.pack("<H", len(tname)) + tname + b"\x00" * 5000
            evil.sendall(_raw_frame(4, body))
            # A frame that is not a coorp frame: rejected by the subscriber.
            body = struct.pack("<H", len(tname)) + tname + b"\x01" * 100
            evil.sendall(_raw_frame(4, body))
            # Then a control message of an unknown type: the connection is dropped.
            evil.sendall(_raw_frame(99, b"x"))
            evil.settimeout(5)
            assert evil.recv(1 << 16) is not None  # HELLO/SUB from the victim, then EOF
            while evil.recv(1 << 16):
                pass
        assert sub.receive(timeout=0.2) is None
        assert sub.stats.rejected == 1
        assert transport.rejected >= 2
        assert transport.connections == 0
