"""The wire and shared-memory frame: one contiguous layout for every non-local path.

::

    [header 56 B][buffer table: nbuf x (offset u64, length u64)][meta][pad][buf 0][pad][buf 1]...

Buffers start on 64-byte boundaries so numpy views of them are aligned for any dtype and
SIMD loads. ``meta`` is the msgpack (or pickle) part of an adaptively serialized message.
Offsets are relative to the frame start, which lets the same bytes live in an iceoryx2
sample or arrive through a socket. Parsing validates every length against the frame size
before anything is sliced: frames from peers are untrusted.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

from coorp.transport._errors import MalformedFrameError

__all__ = [
    "ALIGN",
    "HEADER",
    "HEADER1",
    "MAGIC",
    "SEQ_STAMP",
    "SEQ_STAMP_OFFSET",
    "FrameHeader",
    "FrameLayout",
    "Kind",
    "layout",
    "parse",
    "prefix_template",
    "write_prefix",
]

MAGIC = 0x31505243  # "CRP1" little-endian
VERSION = 1
ALIGN = 64
#: magic, version, kind, flags, type_id, bus_id, pub_id, nbuf, seq, stamp_ns, meta_len, rsv
HEADER = struct.Struct("<IBBHQQIIQqII")
_ENTRY = struct.Struct("<QQ")
#: The header followed by the first buffer-table entry: one unpack for one-buffer frames.
HEADER1 = struct.Struct(HEADER.format + "QQ")
#: Where ``seq`` and ``stamp_ns`` sit in the header (patched per message into a template).
SEQ_STAMP = struct.Struct("<Qq")
SEQ_STAMP_OFFSET = struct.calcsize("<IBBHQQII")
_MAX_BUFFERS = 1 << 16


class Kind:
    """Frame kinds (how ``meta`` and the buffers are to be decoded)."""

    ARRAY = 1  # meta = msgpack [dtype, shape]; one buffer
    BYTES = 2  # no meta; one buffer, delivered as a read-only memoryview
    MSGPACK = 3  # meta = msgpack tree whose ext values reference buffers
    PICKLE = 4  # meta = pickle protocol 5 stream; buffers out-of-band (local only)
    ALL = (ARRAY, BYTES, MSGPACK, PICKLE)


class Flags:
    """Header flag bits."""

    #: The publisher wrote the payload into a loaned iceoryx2 sample; such frames reach
    #: same-bus subscribers through shared memory (there is no in-process copy of them).
    LOANED = 1


class FrameHeader(NamedTuple):
    """The decoded fixed header (a tuple: it is built once per received message)."""

    kind: int
    flags: int
    type_id: int
    bus_id: int
    pub_id: int
    seq: int
    stamp_ns: int


@dataclass(frozen=True, slots=True)
class FrameLayout:
    """Where meta and each buffer go in a frame of ``total`` bytes."""

    meta_offset: int
    buffer_offsets: tuple[int, ...]
    total: int


def _up(n: int) -> int:
    return (n + ALIGN - 1) & ~(ALIGN - 1)


def layout(meta_len: int, buffer_lengths: Sequence[int]) -> FrameLayout:
    """Compute the frame layout for ``meta_len`` bytes of meta and the given buffers."""
    meta_offset = HEADER.size + _ENTRY.size * len(buffer_lengths)
    pos = _up(meta_offset + meta_len)
    offsets = []
    for n in buffer_lengths:
        offsets.append(pos)
        pos = _up(pos + n)
    end = offsets[-1] + buffer_lengths[-1] if buffer_lengths else meta_offset + meta_len
    return FrameLayout(meta_offset, tuple(offsets), end)


def write_prefix(
    dest: memoryview,
    head: FrameHeader,
    meta: bytes,
    lay: FrameLayout,
    buffer_lengths: Sequence[int],
) -> None:
    """Write header, buffer table and meta into ``dest`` (buffers are the caller's job)."""
    HEADER.pack_into(
        dest,
        0,
        MAGIC,
        VERSION,
        head.kind,
        head.flags,
        head.type_id,
        head.bus_id,
        head.pub_id,
        len(buffer_lengths),
        head.seq,
        head.stamp_ns,
        len(meta),
        0,
    )
    pos = HEADER.size
    for off, n in zip(lay.buffer_offsets, buffer_lengths, strict=True):
        _ENTRY.pack_into(dest, pos, off, n)
        pos += _ENTRY.size
    dest[lay.meta_offset : lay.meta_offset + len(meta)] = meta


def prefix_template(
    head: FrameHeader, meta: bytes, lay: FrameLayout, buffer_lengths: Sequence[int]
) -> bytearray:
    """Header, buffer table and meta of a frame, ready to be copied in front of its
    buffers; only ``seq``/``stamp_ns`` change from message to message (patch them with
    :data:`SEQ_STAMP` at :data:`SEQ_STAMP_OFFSET`)."""
    out = bytearray(lay.meta_offset + len(meta))
    write_prefix(memoryview(out), head, meta, lay, buffer_lengths)
    return out


def parse(frame: memoryview, *, max_size: int) -> tuple[FrameHeader, memoryview, list[memoryview]]:
    """Validate ``frame`` and return its header, meta and buffer views (no copies)."""
    size = len(frame)
    if size > max_size:
        raise MalformedFrameError(f"frame of {size} bytes exceeds the limit of {max_size}")
    if size < HEADER.size:
        raise MalformedFrameError(f"frame of {size} bytes is shorter than its header")
    (magic, version, kind, flags, type_id, bus_id, pub_id, nbuf, seq, stamp, meta_len, _rsv) = (
        HEADER.unpack_from(frame, 0)
    )
    if magic != MAGIC or version != VERSION:
        raise MalformedFrameError(f"not a coorp frame (magic {magic:#x}, version {version})")
    if kind not in Kind.ALL:
        raise MalformedFrameError(f"unknown frame kind {kind}")
    if nbuf > _MAX_BUFFERS:
        raise MalformedFrameError(f"frame claims {nbuf} buffers")
    meta_offset = HEADER.size + _ENTRY.size * nbuf
    if meta_offset + meta_len > size:
        raise MalformedFrameError("frame meta runs past its end")
    buffers = []
    for i in range(nbuf):
        off, n = _ENTRY.unpack_from(frame, HEADER.size + _ENTRY.size * i)
        if off < meta_offset + meta_len or off + n > size:
            raise MalformedFrameError(f"buffer {i} ({off}+{n}) lies outside the frame")
        buffers.append(frame[off : off + n])
    head = FrameHeader(kind, flags, type_id, bus_id, pub_id, seq, stamp)
    return head, frame[meta_offset : meta_offset + meta_len], buffers
