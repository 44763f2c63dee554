"""Received messages and the lifetime rule that keeps zero-copy views safe.

A message that arrived through shared memory is a *view* of an iceoryx2 sample. The rule:
**a view can never outlive its sample.** It holds by construction, not by discipline:
every numpy array or memoryview handed out is derived (through numpy's ``base`` chain and
memoryview's buffer export) from one :class:`SampleOwner`, and the owner holds the
iceoryx2 sample and its subscriber port. The sample goes back to the publisher exactly
when the last view is garbage-collected. ``Message.release()`` drops the message's own
references, so if the application kept no views the sample is returned at once.

The subscriber tracks owners with weak references: :attr:`Subscriber.borrowed` is the
number of samples still held by live views, which is what tests use to prove no leak.
"""

from __future__ import annotations

import ctypes
import weakref
from typing import Any, Generic, TypeVar

import numpy as np

from coorp.transport._errors import TransportClosedError
from coorp.transport._options import Reach

__all__ = ["Message", "OwnerTracker", "SampleOwner", "detach"]

T = TypeVar("T")


def SampleOwner(address: int, size: int, **keep: Any) -> Any:
    """A ctypes byte array over ``size`` bytes at ``address`` that keeps ``keep`` alive.

    ``keep`` holds the iceoryx2 sample and its port; the array is the root of every view.
    """
    owner = (ctypes.c_uint8 * size).from_address(address)
    for name, value in keep.items():
        setattr(owner, "_keep_" + name, value)
    return owner


class OwnerTracker:
    """Counts owners (samples) that are still referenced by live views."""

    def __init__(self) -> None:
        # ctypes arrays are unhashable, so a WeakSet cannot hold them: keep the weak
        # references themselves, each removing itself when its owner dies.
        self._live: dict[int, weakref.ref[Any]] = {}

    def add(self, owner: Any) -> None:
        key = id(owner)
        self._live[key] = weakref.ref(owner, lambda _ref: self._live.pop(key, None))

    def __len__(self) -> int:
        return len(self._live)


def detach(value: Any) -> Any:
    """Deep-copy ``value`` so nothing in it refers to shared memory any more."""
    if isinstance(value, np.ndarray):
        return np.array(value, copy=True)
    if isinstance(value, memoryview):
        return value.tobytes()
    if isinstance(value, dict):
        return {k: detach(v) for k, v in value.items()}
    if isinstance(value, list):
        return [detach(v) for v in value]
    if hasattr(value, "__struct_fields__"):
        import msgspec

        return msgspec.structs.replace(
            value, **{f: detach(getattr(value, f)) for f in value.__struct_fields__}
        )
    return value


class Message(Generic[T]):
    """One received message: its value plus where and when it came from.

    Use as a context manager (or call :meth:`release`) to give a shared-memory sample
    back as soon as you are done; :meth:`detached` returns a private copy that may be
    kept forever.
    """

    __slots__ = ("_value", "latency_ns", "origin", "received_ns", "seq", "stamp_ns", "topic", "via")

    def __init__(
        self,
        topic: str,
        value: T,
        *,
        seq: int,
        stamp_ns: int,
        received_ns: int,
        origin: tuple[int, int],
        via: Reach,
        same_clock: bool,
    ) -> None:
        self.topic = topic
        self._value: Any = value
        self.seq = seq
        self.stamp_ns = stamp_ns
        self.received_ns = received_ns
        #: (bus id, publisher id) of the sender.
        self.origin = origin
        #: Which path delivered it: PROCESS, MACHINE or NETWORK.
        self.via = via
        #: Publish-to-delivery time, or ``None`` when the sender's clock is not ours.
        self.latency_ns: int | None = received_ns - stamp_ns if same_clock else None

    @property
    def value(self) -> T:
        """The payload (numpy arrays and large bytes are read-only views, not copies)."""
        if self._value is _RELEASED:
            raise TransportClosedError(f"message {self.seq} on {self.topic!r} was released")
        return self._value

    def detached(self) -> T:
        """A private deep copy of the value that holds no shared memory."""
        return detach(self.value)

    def release(self) -> None:
        """Drop this message's references; the sample returns when no view remains."""
        self._value = _RELEASED

    @property
    def released(self) -> bool:
        return self._value is _RELEASED

    def __enter__(self) -> Message[T]:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    def __repr__(self) -> str:
        return (
            f"Message(topic={self.topic!r}, seq={self.seq}, via={self.via.name}, "
            f"released={self.released})"
        )


_RELEASED: Any = object()
