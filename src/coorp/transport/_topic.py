"""Topic descriptors: the contract every publisher and subscriber of a name agrees on.

A :class:`Topic` fixes the message type, the largest payload, the queue policy and the
iceoryx2 service limits. Its :attr:`Topic.type_id` travels in every frame and in the
service attributes, so a participant that declares the same name with another type gets
:class:`~coorp.transport.TopicTypeMismatchError` when it opens the topic, not garbage.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from typing import Any

import msgspec
import numpy as np

from coorp._errors import UsageError
from coorp.transport._errors import TopicTypeMismatchError
from coorp.transport._options import QueuePolicy

__all__ = ["BYTES_LIKE", "Topic"]

#: Python types accepted on a topic declared with ``bytes``.
BYTES_LIKE = (bytes, bytearray, memoryview)

_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_./-]{0,180}$")
_MiB = 1 << 20


def _type_name(tp: Any) -> str:
    if tp is object:
        return "any"
    if isinstance(tp, type) and issubclass(tp, msgspec.Struct):
        # Field names and annotations are part of the contract: renaming a field is a
        # type change that must be caught at open time, not decoded wrongly.
        fields = ",".join(f"{f.name}:{f.type!r}" for f in msgspec.structs.fields(tp))
        return f"struct:{tp.__module__}.{tp.__qualname__}({fields})"
    if tp is np.ndarray:
        return "ndarray"
    if tp in (bytes, dict, list, str, int, float):
        return tp.__name__
    raise UsageError(
        f"unsupported topic type {tp!r}: use numpy.ndarray, bytes, dict, list, str, int, "
        f"float, a msgspec.Struct subclass, or object (anything)"
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class Topic:
    """One named stream of messages of one type.

    ``name`` is a path-like string (``"camera/front"``). ``type`` is ``numpy.ndarray``,
    ``bytes``, ``dict``, ``list``, ``str``, ``int``, ``float``, a ``msgspec.Struct``
    subclass, or ``object`` for anything serializable. ``max_payload`` bounds one
    serialized message in bytes. ``policy`` is the queue policy every subscriber of the
    topic applies when its queue is full. ``allow_pickle`` lets objects that msgpack cannot
    carry travel as pickle *between processes of this machine only*: such a topic can
    never use the network, because Coorp never unpickles network data.
    """

    name: str
    type: Any = object
    max_payload: int = 64 * _MiB
    policy: QueuePolicy = QueuePolicy.KEEP_LAST
    allow_pickle: bool = False
    #: iceoryx2 service limits, fixed when the first participant creates the service.
    max_subscribers: int = 8
    max_publishers: int = 4
    max_depth: int = 16
    max_borrowed: int = 4
    type_name: str = field(init=False, repr=False)
    type_id: int = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if not _NAME.match(self.name) or ".." in self.name or "__" in self.name:
            raise UsageError(
                f"invalid topic name {self.name!r}: use letters, digits, '_', '-', '.', '/' "
                f"(no '..' or '__', at most 181 characters)"
            )
        if not isinstance(self.policy, QueuePolicy):
            raise UsageError(f"policy must be a QueuePolicy, got {self.policy!r}")
        if self.max_payload <= 0:
            raise UsageError(f"max_payload must be positive, got {self.max_payload}")
        for attr in ("max_subscribers", "max_publishers", "max_depth", "max_borrowed"):
            if getattr(self, attr) < 1:
                raise UsageError(f"{attr} must be at least 1")
        name = _type_name(self.type)
        digest = hashlib.blake2b(name.encode(), digest_size=8).digest()
        object.__setattr__(self, "type_name", name)
        object.__setattr__(self, "type_id", int.from_bytes(digest, "little"))

    def check(self, obj: object) -> None:
        """Raise :class:`TopicTypeMismatchError` unless ``obj`` may be published here."""
        tp = self.type
        if tp is object:
            return
        ok = isinstance(obj, BYTES_LIKE) if tp is bytes else isinstance(obj, tp)
        if tp in (int, float) and isinstance(obj, bool):
            ok = False
        if not ok:
            raise TopicTypeMismatchError(self.name, self.type_name, type(obj).__name__)

    def check_peer(self, type_id: int, type_name: str) -> None:
        """Raise :class:`TopicTypeMismatchError` if a peer declared another type."""
        if type_id != self.type_id:
            raise TopicTypeMismatchError(self.name, self.type_name, type_name)
