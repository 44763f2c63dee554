"""Adaptive serialization and frame parsing: exact round trips, refusals of bad input."""

from __future__ import annotations

import msgspec
import numpy as np
import pytest

from coorp.transport import MalformedFrameError, Topic, UnsupportedPayloadError
from coorp.transport._codec import OOB_THRESHOLD, Codec
from coorp.transport._frame import ALIGN, FrameHeader, Kind, layout, parse, write_prefix


def roundtrip(topic: Topic, obj: object, *, trusted: bool = True) -> tuple[object, int, int]:
    """Encode into a frame, parse it back, decode; returns (value, kind, n buffers)."""
    codec = Codec(topic)
    enc = codec.encode(obj)
    lay = layout(len(enc.meta), enc.buffer_lengths)
    frame = bytearray(lay.total)
    view = memoryview(frame)
    head = FrameHeader(enc.kind, 0, topic.type_id, 7, 1, 1, 0)
    write_prefix(view, head, enc.meta, lay, enc.buffer_lengths)
    for off, buf in zip(lay.buffer_offsets, enc.buffers, strict=True):
        view[off : off + buf.nbytes] = buf
    got, meta, buffers = parse(view.toreadonly(), max_size=topic.max_payload)
    assert got == head
    return codec.decode(got.kind, meta, buffers, trusted=trusted), enc.kind, len(buffers)


@pytest.mark.parametrize("dtype", ["u1", "<i4", ">f8", "<c16", "?", "<f2"])
@pytest.mark.parametrize("shape", [(0,), (1,), (7, 3), (2, 3, 4)])
def test_arrays_roundtrip_out_of_band(dtype: str, shape: tuple[int, ...]) -> None:
    arr = (np.arange(int(np.prod(shape))) % 7).astype(dtype).reshape(shape)
    value, kind, nbuf = roundtrip(Topic(name="t/a", type=np.ndarray), arr)
    assert kind == Kind.ARRAY and nbuf == 1
    assert isinstance(value, np.ndarray)
    assert value.dtype == arr.dtype and value.shape == arr.shape
    np.testing.assert_array_equal(value, arr)
    assert not value.flags.writeable


def test_non_contiguous_and_structured_arrays() -> None:
    base = np.arange(100, dtype=np.int32).reshape(10, 10)
    value, _, _ = roundtrip(Topic(name="t/a"), base[::2, 1::3])
    np.testing.assert_array_equal(value, base[::2, 1::3])
    rec = np.zeros(3, dtype=[("x", "<f4"), ("id", "<u2")])
    rec["x"], rec["id"] = [1.5, 2.5, 3.5], [1, 2, 3]
    value, _, _ = roundtrip(Topic(name="t/a"), rec)
    assert value.dtype == rec.dtype
    np.testing.assert_array_equal(value, rec)


def test_buffers_are_aligned() -> None:
    lay = layout(13, [5, 1000, 3])
    assert all(off % ALIGN == 0 for off in lay.buffer_offsets)
    assert lay.total == lay.buffer_offsets[-1] + 3


def test_bytes_arrive_as_readonly_views() -> None:
    payload = bytes(range(256)) * 10
    value, kind, _ = roundtrip(Topic(name="t/b", type=bytes), bytearray(payload))
    assert kind == Kind.BYTES
    assert isinstance(value, memoryview) and value.readonly
    assert value == payload


def test_nested_structures_move_large_values_out_of_band() -> None:
    img = np.random.default_rng(1).integers(0, 255, (48, 64, 3), dtype=np.uint8)
    blob = b"x" * OOB_THRESHOLD
    msg = {
        "stamp": 12,
        "pose": [1.0, 2.0, 3.0],
        "img": img,
        "nested": {"blob": blob, "small": b"ab", "depth": [img[0], {"z": None}]},
    }
    value, kind, nbuf = roundtrip(Topic(name="t/d", type=dict), msg)
    assert kind == Kind.MSGPACK and nbuf == 3  # img, blob, img[0]
    assert value["stamp"] == 12 and value["pose"] == [1.0, 2.0, 3.0]
    np.testing.assert_array_equal(value["img"], img)
    assert bytes(value["nested"]["blob"]) == blob
    assert value["nested"]["small"] == b"ab"
    np.testing.assert_array_equal(value["nested"]["depth"][0], img[0])
    assert value["nested"]["depth"][1] == {"z": None}


class Scan(msgspec.Struct):
    seq: int
    ranges: np.ndarray
    frame: str = "lidar"


def test_struct_with_array_field() -> None:
    scan = Scan(3, np.linspace(0, 1, 360, dtype=np.float32))
    value, kind, nbuf = roundtrip(Topic(name="t/s", type=Scan), scan)
    assert kind == Kind.MSGPACK and nbuf == 1
    assert isinstance(value, Scan) and value.seq == 3 and value.frame == "lidar"
    np.testing.assert_array_equal(value.ranges, scan.ranges)


class Opaque:
    def __init__(self, x: int) -> None:
        self.x = x

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Opaque) and other.x == self.x

    __hash__ = None  # type: ignore[assignment]


def test_pickle_only_when_allowed_and_trusted() -> None:
    with pytest.raises(UnsupportedPayloadError, match="allow_pickle"):
        Codec(Topic(name="t/p")).encode(Opaque(1))
    topic = Topic(name="t/p", allow_pickle=True)
    value, kind, _ = roundtrip(topic, {"o": Opaque(2), "a": np.ones(3)})
    assert kind == Kind.PICKLE and value["o"] == Opaque(2)
    with pytest.raises(MalformedFrameError, match="pickle"):
        roundtrip(topic, Opaque(3), trusted=False)


def test_object_arrays_are_refused() -> None:
    with pytest.raises(UnsupportedPayloadError, match="object"):
        Codec(Topic(name="t/o")).encode(np.array([object()], dtype=object))


def _frame_for(obj: object) -> bytearray:
    topic = Topic(name="t/f")
    enc = Codec(topic).encode(obj)
    lay = layout(len(enc.meta), enc.buffer_lengths)
    frame = bytearray(lay.total)
    write_prefix(
        memoryview(frame),
        FrameHeader(enc.kind, 0, topic.type_id, 1, 1, 1, 0),
        enc.meta,
        lay,
        enc.buffer_lengths,
    )
    for off, buf in zip(lay.buffer_offsets, enc.buffers, strict=True):
        frame[off : off + buf.nbytes] = buf
    return frame


def test_truncated_and_corrupt_frames_are_refused() -> None:
    frame = _frame_for(np.arange(100, dtype=np.int64))
    for cut in (0, 10, 60, len(frame) - 1):
        with pytest.raises(MalformedFrameError):
            head, meta, bufs = parse(memoryview(bytes(frame[:cut])), max_size=1 << 20)
            Codec(Topic(name="t/f")).decode(head.kind, meta, bufs, trusted=False)
    bad = bytearray(frame)
    bad[0] ^= 0xFF
    with pytest.raises(MalformedFrameError, match="magic"):
        parse(memoryview(bytes(bad)), max_size=1 << 20)
    with pytest.raises(MalformedFrameError, match="exceeds"):
        parse(memoryview(bytes(frame)), max_size=10)


def test_fuzzed_frames_never_crash() -> None:
    rng = np.random.default_rng(5)
    base = _frame_for({"a": np.arange(300, dtype=np.float32), "b": b"q" * 2000, "c": [1, "x"]})
    codec = Codec(Topic(name="t/f"))
    for _ in range(400):
        frame = bytearray(base)
        for pos in rng.integers(0, len(frame), 4):
            frame[pos] = int(rng.integers(0, 256))
        try:
            head, meta, bufs = parse(memoryview(bytes(frame)), max_size=1 << 20)
            codec.decode(head.kind, meta, bufs, trusted=False)
        except MalformedFrameError:
            pass
