"""Adaptive serialization: big buffers out-of-band, small structure through msgpack.

HPRM's observation (thesis §2.4) is that serializing a large array *into* a byte stream
costs copies that out-of-band transfer avoids. The codec therefore splits every message
into ``meta`` (small, msgpack) and a list of ``buffers`` (large, never copied by the
codec):

* a numpy array -> :data:`Kind.ARRAY`: meta ``[dtype, shape]``, the array's memory as one
  buffer; decoded as a numpy view of the received buffer, no copy.
* ``bytes``/``bytearray``/``memoryview`` -> :data:`Kind.BYTES`: one buffer, decoded as a
  read-only ``memoryview`` of the received buffer.
* dicts, lists, scalars, strings, ``msgspec.Struct`` -> :data:`Kind.MSGPACK`. Arrays and
  bytes-like values of at least :data:`OOB_THRESHOLD` bytes found anywhere inside are
  replaced by msgpack extension values that reference a buffer, so a dict holding a
  camera frame still moves the frame out-of-band.
* anything else -> :data:`Kind.PICKLE` (protocol 5, buffers out-of-band) only when the
  topic allows pickle; decoding pickle is refused unless the caller says the frame came
  from this machine. Network frames are never unpickled.
"""

from __future__ import annotations

import math
import pickle
from dataclasses import dataclass
from typing import Any

import msgspec
import numpy as np

from coorp.transport._errors import MalformedFrameError, UnsupportedPayloadError
from coorp.transport._frame import Kind
from coorp.transport._topic import BYTES_LIKE, Topic

__all__ = [
    "OOB_THRESHOLD",
    "Codec",
    "Encoded",
    "array_spec",
    "as_bytes_view",
    "decode_array_meta",
]

#: Bytes-like values at least this large travel out-of-band inside structured messages.
OOB_THRESHOLD = 1024

_EXT_ARRAY = 1
_EXT_BYTES = 2
_pack = msgspec.msgpack.encode
_unpack = msgspec.msgpack.decode


@dataclass(frozen=True, slots=True)
class Encoded:
    """A serialized message: its kind, its in-band meta and its out-of-band buffers."""

    kind: int
    meta: bytes
    buffers: list[memoryview]

    @property
    def buffer_lengths(self) -> list[int]:
        return [b.nbytes for b in self.buffers]


class _OOB:
    """Marks a bytes-like value that must leave the msgpack stream."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value


def as_bytes_view(obj: Any) -> memoryview:
    """A flat unsigned-byte view of a contiguous buffer (copies only non-contiguous arrays)."""
    if isinstance(obj, np.ndarray):
        if not obj.flags.c_contiguous:
            obj = np.ascontiguousarray(obj)
        return memoryview(obj.reshape(-1).view(np.uint8))
    view = memoryview(obj)
    if not view.c_contiguous:
        view = memoryview(view.tobytes())
    return view.cast("B") if view.format != "B" or view.ndim != 1 else view


_DTYPES: dict[str, np.dtype[Any]] = {}


def _dtype(descr: Any) -> np.dtype[Any]:
    # Simple dtypes arrive as short strings ('<f4'); caching them keeps numpy's descr
    # parser off the per-message path. Structured descrs (lists) are parsed every time.
    if isinstance(descr, str):
        found = _DTYPES.get(descr)
        if found is None:
            found = np.lib.format.descr_to_dtype(descr)  # type: ignore[arg-type]
            if len(_DTYPES) < 256:
                _DTYPES[descr] = found
        return found
    return np.lib.format.descr_to_dtype(descr)


def decode_array_meta(meta: Any) -> tuple[np.dtype[Any], tuple[int, ...]]:
    """Turn ``[descr, shape]`` from a peer into a dtype and shape, validating both."""
    try:
        descr, shape = meta
        dtype = _dtype(descr)
        shape = tuple(int(n) for n in shape)
    except Exception as exc:
        raise MalformedFrameError(f"invalid array description {meta!r}: {exc}") from None
    if dtype.hasobject or any(n < 0 for n in shape):
        raise MalformedFrameError(f"refusing array of dtype {dtype} and shape {shape}")
    return dtype, shape


_DESCRS: dict[np.dtype[Any], Any] = {}


def _descr(dtype: np.dtype[Any]) -> Any:
    found = _DESCRS.get(dtype)
    if found is None:
        if dtype.hasobject:
            raise UnsupportedPayloadError(
                f"numpy arrays of dtype {dtype} hold Python objects and cannot be shared; "
                f"use a numeric or structured dtype"
            )
        found = np.lib.format.dtype_to_descr(dtype)
        if len(_DESCRS) < 256:
            _DESCRS[dtype] = found
    return found


_SPECS: dict[bytes, tuple[np.dtype[Any], tuple[int, ...], int, int]] = {}


def array_spec(meta: bytes) -> tuple[np.dtype[Any], tuple[int, ...], int, int]:
    """``(dtype, shape, count, nbytes)`` of an array frame's meta (validated, cached: a
    stream of frames of one shape decodes its meta once)."""
    found = _SPECS.get(meta)
    if found is None:
        try:
            described = _unpack(meta)
        except (msgspec.DecodeError, UnicodeDecodeError, ValueError) as exc:
            raise MalformedFrameError(f"undecodable array meta: {exc}") from None
        dtype, shape = decode_array_meta(described)
        count = math.prod(shape)
        found = (dtype, shape, count, count * dtype.itemsize)
        if len(_SPECS) < 1024:
            _SPECS[bytes(meta)] = found
    return found


def _array_from(buf: memoryview, dtype: np.dtype[Any], shape: tuple[int, ...]) -> Any:
    count = math.prod(shape)
    if count * dtype.itemsize != buf.nbytes:
        raise MalformedFrameError(
            f"array {dtype}{list(shape)} needs {count * dtype.itemsize} bytes, got {buf.nbytes}"
        )
    if count == 0:
        empty = np.empty(shape, dtype)
        empty.flags.writeable = False
        return empty
    return np.frombuffer(buf, dtype=dtype, count=count).reshape(shape)


class Codec:
    """Encoder/decoder bound to one topic (not thread-safe: one per publisher/subscriber)."""

    def __init__(self, topic: Topic) -> None:
        self.topic = topic
        self._out: list[memoryview] = []
        self._encoder = msgspec.msgpack.Encoder(enc_hook=self._enc_hook)
        struct_type = topic.type if _is_struct(topic.type) else None
        self._struct_type = struct_type

    # -- encoding -------------------------------------------------------------------
    def encode(self, obj: Any) -> Encoded:
        if isinstance(obj, np.ndarray):
            return Encoded(Kind.ARRAY, _pack([_descr(obj.dtype), obj.shape]), [as_bytes_view(obj)])
        if isinstance(obj, BYTES_LIKE):
            return Encoded(Kind.BYTES, b"", [as_bytes_view(obj)])
        self._out = []
        try:
            meta = self._encoder.encode(_split(obj))
            return Encoded(Kind.MSGPACK, meta, self._out)
        except (TypeError, NotImplementedError, OverflowError) as exc:
            if not self.topic.allow_pickle:
                raise UnsupportedPayloadError(
                    f"cannot serialize {type(obj).__name__} on topic {self.topic.name!r} "
                    f"with msgpack ({exc}); use numpy arrays, bytes, dicts, lists, scalars "
                    f"or msgspec.Struct, or declare Topic(allow_pickle=True) for "
                    f"same-machine use"
                ) from None
        finally:
            self._out = []
        buffers: list[pickle.PickleBuffer] = []
        meta = pickle.dumps(obj, protocol=5, buffer_callback=buffers.append)
        return Encoded(Kind.PICKLE, meta, [as_bytes_view(b.raw()) for b in buffers])

    def _enc_hook(self, obj: Any) -> Any:
        if isinstance(obj, np.ndarray):
            self._out.append(as_bytes_view(obj))
            return msgspec.msgpack.Ext(
                _EXT_ARRAY, _pack([len(self._out) - 1, _descr(obj.dtype), obj.shape])
            )
        if isinstance(obj, _OOB):
            self._out.append(as_bytes_view(obj.value))
            return msgspec.msgpack.Ext(_EXT_BYTES, _pack(len(self._out) - 1))
        if isinstance(obj, np.generic):
            return obj.item()
        raise NotImplementedError(f"{type(obj).__name__} is not msgpack-serializable")

    # -- decoding -------------------------------------------------------------------
    def decode(
        self, kind: int, meta: memoryview, buffers: list[memoryview], *, trusted: bool
    ) -> Any:
        """Rebuild a message; arrays and bytes are views of ``buffers`` (no copy).

        ``trusted`` is true only for frames from this machine; pickle is refused otherwise.
        """
        if kind == Kind.ARRAY:
            if len(buffers) != 1:
                raise MalformedFrameError("array frame must carry exactly one buffer")
            dtype, shape, _count, _nbytes = array_spec(bytes(meta))
            return _array_from(_readonly(buffers[0]), dtype, shape)
        if kind == Kind.BYTES:
            if len(buffers) != 1:
                raise MalformedFrameError("bytes frame must carry exactly one buffer")
            return _readonly(buffers[0])
        if kind == Kind.MSGPACK:
            views = [_readonly(b) for b in buffers]

            def ext_hook(code: int, data: memoryview) -> Any:
                try:
                    if code == _EXT_ARRAY:
                        idx, descr, shape = _unpack(data)
                        dtype, shp = decode_array_meta([descr, shape])
                        return _array_from(views[idx], dtype, shp)
                    if code == _EXT_BYTES:
                        return views[_unpack(data)]
                except (IndexError, TypeError, ValueError) as exc:
                    raise MalformedFrameError(f"bad out-of-band reference: {exc}") from None
                raise MalformedFrameError(f"unknown msgpack extension {code}")

            try:
                if self._struct_type is not None:
                    return _unpack(
                        meta, type=self._struct_type, ext_hook=ext_hook, dec_hook=_dec_hook
                    )
                return _unpack(meta, ext_hook=ext_hook)
            except msgspec.ValidationError as exc:
                raise MalformedFrameError(
                    f"message does not match {self.topic.type_name}: {exc}"
                ) from None
            except (msgspec.DecodeError, UnicodeDecodeError, ValueError, TypeError) as exc:
                raise MalformedFrameError(f"undecodable msgpack: {exc}") from None
        if kind == Kind.PICKLE:
            if not trusted or not self.topic.allow_pickle:
                raise MalformedFrameError(
                    f"refusing a pickle frame on topic {self.topic.name!r}: pickle is only "
                    f"accepted from this machine on topics declared allow_pickle=True"
                )
            return pickle.loads(meta, buffers=[_readonly(b) for b in buffers])
        raise MalformedFrameError(f"unknown frame kind {kind}")


def _readonly(view: memoryview) -> memoryview:
    return view if view.readonly else view.toreadonly()


def _is_struct(tp: Any) -> bool:
    return isinstance(tp, type) and issubclass(tp, msgspec.Struct)


def _dec_hook(tp: Any, obj: Any) -> Any:
    if isinstance(tp, type) and isinstance(obj, tp):
        return obj
    raise NotImplementedError(f"cannot decode {type(obj).__name__} as {tp}")


def _split(obj: Any) -> Any:
    """Copy-free walk replacing large bytes-like values in dicts/lists by :class:`_OOB`."""
    if isinstance(obj, dict):
        return {k: _split(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_split(v) for v in obj]
    if isinstance(obj, BYTES_LIKE) and memoryview(obj).nbytes >= OOB_THRESHOLD:
        return _OOB(obj)
    return obj
