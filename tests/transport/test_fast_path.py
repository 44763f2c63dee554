"""The per-message fast paths (issue 12): cached frame prefixes on the publisher, a
one-unpack read of one-buffer frames on the subscriber, and the bounded busy-poll.

Mechanism tests only: what each path does and that it refuses what the general path
refuses; speed belongs in ``coorp bench broadcast``.
"""

from __future__ import annotations

import threading

import numpy as np
import pytest

from coorp._errors import UsageError
from coorp.transport import Bus, Reach, Topic
from coorp.transport import _codec as codec
from coorp.transport._frame import (
    HEADER1,
    SEQ_STAMP,
    SEQ_STAMP_OFFSET,
    FrameHeader,
    Kind,
    layout,
    prefix_template,
    write_prefix,
)

from .conftest import needs_iceoryx2


def test_patched_template_equals_the_written_prefix() -> None:
    meta = codec._pack(["<f4", [3, 4]])
    lay = layout(len(meta), [48])
    template = prefix_template(FrameHeader(Kind.ARRAY, 1, 7, 8, 9, 0, 0), meta, lay, [48])
    for seq, stamp in ((1, 5), (2**40, -3), (123, 2**62)):
        SEQ_STAMP.pack_into(template, SEQ_STAMP_OFFSET, seq, stamp)
        direct = bytearray(len(template))
        head = FrameHeader(Kind.ARRAY, 1, 7, 8, 9, seq, stamp)
        write_prefix(memoryview(direct), head, meta, lay, [48])
        assert template == direct


def test_array_meta_is_decoded_once_per_shape(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []
    real = codec._unpack
    monkeypatch.setattr(codec, "_SPECS", {})

    def counting(data: bytes) -> object:
        calls.append(1)
        return real(data)

    monkeypatch.setattr(codec, "_unpack", counting)
    meta = codec._pack(["<u2", [2, 3]])
    specs = {codec.array_spec(bytes(meta)) for _ in range(5)}
    assert specs == {(np.dtype("<u2"), (2, 3), 6, 12)} and len(calls) == 1
    with pytest.raises(codec.MalformedFrameError):
        codec.array_spec(codec._pack(["|O", [1]]))  # object arrays are refused, not cached


@needs_iceoryx2
def test_publisher_reuses_one_plan_per_shape(shm_pair: tuple[Bus, Bus], name: str) -> None:
    a, b = shm_pair
    topic = Topic(name=name, type=np.ndarray, max_payload=1 << 16)
    pub, sub = a.publisher(topic), b.subscriber(topic, depth=8)
    sent = [np.arange(12, dtype=np.float32).reshape(3, 4) * k for k in range(3)]
    for arr in sent:
        pub.publish(arr)
    with pub.loan_array((3, 4), np.float32) as loan:
        loan.array[...] = 7
    assert len(pub._plans) == 2  # one published shape, one loaned shape (flag LOANED)
    for want in [*sent, np.full((3, 4), 7, np.float32)]:
        msg = sub.receive(timeout=2.0)
        assert msg is not None
        np.testing.assert_array_equal(msg.value, want)
        assert msg.value.shape == (3, 4) and not msg.value.flags.writeable
        with pytest.raises(ValueError):
            msg.value.flags.writeable = True  # a view of shared memory stays read-only
        msg.release()
    assert sub.stats.rejected == 0


@needs_iceoryx2
def test_fast_path_refuses_what_the_general_parser_refuses(
    shm_pair: tuple[Bus, Bus], name: str
) -> None:
    a, b = shm_pair
    topic = Topic(name=name, type=np.ndarray, max_payload=1 << 16)
    pub, sub = a.publisher(topic), b.subscriber(topic, depth=8)
    outlet = pub._outlet
    assert outlet is not None
    meta = codec._pack(["|u1", [16]])

    seqs = iter(range(1, 100))

    def raw(off: int, n: int, meta: bytes = meta, total: int = 256) -> None:
        lay = layout(len(meta), [16])
        head = FrameHeader(Kind.ARRAY, 0, topic.type_id, a.id, 99, next(seqs), 0)
        sample, owner = outlet.loan(total)
        dest = memoryview(owner).cast("B")
        write_prefix(dest, head, meta, lay, [16])
        HEADER1.pack_into(dest, 0, *HEADER1.unpack_from(dest, 0)[:12], off, n)
        del dest, owner
        outlet.send(sample)

    raw(off=HEADER1.size, n=16)  # buffer overlaps the meta
    raw(off=128, n=200)  # buffer runs past the end of the frame
    raw(off=128, n=8)  # meta says 16 bytes, the table 8
    raw(off=128, n=16)  # a valid frame
    msg = sub.receive(timeout=2.0)
    assert msg is not None and msg.seq == 4 and msg.value.shape == (16,)
    assert sub.stats.rejected == 3


@needs_iceoryx2
def test_a_spinning_receive_takes_the_message_without_sleeping(name: str) -> None:
    # A frozen clock: the budget never runs out, so the receive can only end by polling.
    with (
        Bus("spin-a", reach=Reach.MACHINE, clock=lambda: 0) as a,
        Bus("spin-b", reach=Reach.MACHINE, clock=lambda: 0) as b,
    ):
        topic = Topic(name=name, type=bytes, max_payload=1 << 12)
        pub = a.publisher(topic)
        sub = b.subscriber(topic, depth=2, spin=1e-3)
        got: list[object] = []
        thread = threading.Thread(target=lambda: got.append(sub.receive(timeout=30.0)))
        thread.start()
        while not sub._spinning and thread.is_alive():
            pass  # until the receiver polls (its first try found nothing)
        pub.publish(b"ping")
        thread.join()
        msg = got[0]
        assert msg is not None and bytes(msg.value) == b"ping"  # type: ignore[attr-defined]
        assert (sub.stats.polled, sub.stats.blocked) == (1, 0)


@needs_iceoryx2
def test_spin_is_bounded_then_the_receive_sleeps(shm_pair: tuple[Bus, Bus], name: str) -> None:
    _a, b = shm_pair
    topic = Topic(name=name, type=bytes, max_payload=1 << 12)
    sub = b.subscriber(topic, depth=2, spin=1e-4)
    assert sub.receive(timeout=0.05) is None
    assert sub.stats.blocked >= 1  # the budget ran out and the wait went to sleep
    spinless = b.subscriber(topic, depth=2)
    assert spinless.receive(timeout=0.01) is None
    assert spinless.stats.polled == 0 and spinless.stats.blocked >= 1


def test_spin_budget_is_validated(local_bus: Bus, name: str) -> None:
    topic = Topic(name=name, type=bytes)
    with pytest.raises(UsageError, match="spin"):
        local_bus.subscriber(topic, spin=1.0)
    with pytest.raises(UsageError, match="spin"):
        local_bus.subscriber(topic, spin=-1e-6)


def test_wake_ends_a_spinning_receive(name: str) -> None:
    with Bus("spin-wake", reach=Reach.PROCESS, clock=lambda: 0) as bus:
        sub = bus.subscriber(Topic(name=name, type=bytes), spin=1e-3)
        got: list[object] = ["unset"]

        def receive() -> None:
            got[0] = sub.receive(timeout=30.0)

        thread = threading.Thread(target=receive)
        thread.start()
        while not sub._spinning and thread.is_alive():
            pass
        sub.wake()
        thread.join()
        assert got[0] is None and (sub.stats.polled, sub.stats.blocked) == (1, 0)
