"""The wire between the roles: sync messages (typed, tagged) with their tensors, and the
layout of the MPC loop's LS datagrams.

A sync message is one frame::

    b"CLRN" | header length (u32) | parameters (u32) | header | float32 parameters | zeros

The header is one of :data:`SyncMessage` as msgpack, tagged by ``kind`` (``hello``,
``model``, ``update``, ``stop``); the parameters are the raw ``float32`` tensor (a model
or an update carries one, a hello or a stop none); zeros pad the frame to the size asked
for (``4 × air_params`` bytes: the parameter count the air should carry). A frame that
does not decode as exactly this is a :class:`~coorp.MalformedFrameError`, naming what is
wrong.

LS datagrams are fixed-size byte strings: the first 8 bytes are the loop number ``k``
(little-endian); a clock datagram (``k == CLOCK_K``) then carries the loop grid on the
leader's clock and its round.
"""

from __future__ import annotations

import hashlib
import struct
from typing import Any, Literal, NamedTuple

import msgspec
import numpy as np

from coorp._errors import InvariantError, MalformedFrameError
from coorp.learn._formation import FormationSpec
from coorp.learn._ppo import PPOConfig
from coorp.scenario import SyncMode

__all__ = [
    "CLOCK_GAP_S",
    "CLOCK_K",
    "CLOCK_ROUNDS",
    "WARM_LOOPS",
    "Frame",
    "Hello",
    "Learning",
    "Mode",
    "Model",
    "SharedSettings",
    "Stop",
    "SyncMessage",
    "Update",
    "clock_datagram",
    "clock_grid",
    "decode",
    "digest",
    "encode",
    "kind_of",
    "loop_of",
    "set_loop",
]


#: How syncs travel: coorp.runtime bulk streams with permits and the gate, or plain TCP.
Mode = Literal["coorp", "tcp"]


class Learning(msgspec.Struct, kw_only=True):
    """The learning and the MPC loop of one run: what every role must agree on."""

    mode: Mode
    sync: SyncMode
    workers: list[str]
    ppo: PPOConfig
    task: FormationSpec
    init_seed: int
    air_bytes: int
    duration_s: float
    max_versions: int | None
    period_ns: int
    deadline_ns: int
    perception_bytes: int
    control_bytes: int

    def learning_fields(self) -> dict[str, Any]:
        """This struct's :class:`Learning` fields, by name."""
        return {name: getattr(self, name) for name in Learning.__struct_fields__}


class SharedSettings(Learning, kw_only=True):
    """What every role of one run must agree on, and the run's seed (a worker's hello
    carries them)."""

    #: The run's seed (a role's own seed is ``seed * 1000 + its index``).
    seed: int

    def differences(self, other: SharedSettings) -> list[tuple[str, Any, Any]]:
        """``(field, mine, theirs)`` for every field where ``other`` differs."""
        return [
            (name, getattr(self, name), getattr(other, name))
            for name in self.__struct_fields__
            if getattr(self, name) != getattr(other, name)
        ]


class Hello(msgspec.Struct, frozen=True, tag="hello", tag_field="kind"):
    """A worker joins: who it is, where its inbox listens, and its settings."""

    robot: str
    inbox: str
    settings: SharedSettings


class Model(msgspec.Struct, frozen=True, tag="model", tag_field="kind"):
    """The leader's model ``version`` (the tensor follows the header)."""

    version: int


class Update(msgspec.Struct, frozen=True, tag="update", tag_field="kind"):
    """A worker's parameters after training on model ``version`` (the tensor follows),
    the return of its rollouts and how many samples they had."""

    version: int
    ret: float = 0.0
    samples: int = 0


class Stop(msgspec.Struct, frozen=True, tag="stop", tag_field="kind"):
    """The run is over at model ``version``; with a ``reason``, the leader refused the
    worker (before any model)."""

    version: int
    reason: str = ""


SyncMessage = Hello | Model | Update | Stop
_WITH_TENSOR = (Model, Update)


class Frame(NamedTuple):
    """A decoded sync message and its tensor (``None`` for a hello or a stop)."""

    msg: SyncMessage
    params: np.ndarray | None


_MAGIC = b"CLRN"
_PREFIX = struct.Struct("<4sII")  # magic, header length, parameter count
_ENCODER = msgspec.msgpack.Encoder()
_DECODER = msgspec.msgpack.Decoder(SyncMessage)


def kind_of(msg: SyncMessage) -> str:
    """The message's tag: ``hello``, ``model``, ``update`` or ``stop``."""
    tag = type(msg).__struct_config__.tag
    assert isinstance(tag, str)
    return tag


def encode(msg: SyncMessage, params: np.ndarray | None = None, *, pad_to: int = 0) -> bytearray:
    """The frame of ``msg`` (with ``params`` as ``float32`` for a model or an update),
    zero-padded to ``pad_to`` bytes."""
    if isinstance(msg, _WITH_TENSOR) != (params is not None):
        need = "needs a" if params is None else "has no"
        raise InvariantError(f"a {kind_of(msg)} message {need} tensor")
    head = _ENCODER.encode(msg)
    body = b"" if params is None else np.ascontiguousarray(params, np.float32).tobytes()
    n = 0 if params is None else len(params)
    size = _PREFIX.size + len(head) + len(body)
    buf = bytearray(max(size, pad_to))
    buf[:size] = _PREFIX.pack(_MAGIC, len(head), n) + head + body
    return buf


def decode(payload: bytes | bytearray | memoryview) -> Frame:
    """The message and tensor of one frame; :class:`~coorp.MalformedFrameError` if it is
    not a whole, well-formed sync message."""
    mv = memoryview(payload)
    if len(mv) < _PREFIX.size:
        raise MalformedFrameError(f"sync message of {len(mv)} B is shorter than its prefix")
    magic, n_head, n = _PREFIX.unpack_from(mv)
    end = _PREFIX.size + n_head + 4 * n
    if magic != _MAGIC:
        raise MalformedFrameError(f"not a coorp learn sync message (magic {bytes(magic)!r})")
    if len(mv) < end:
        raise MalformedFrameError(
            f"sync message of {len(mv)} B is shorter than its header and tensor ({end} B)"
        )
    try:
        msg = _DECODER.decode(mv[_PREFIX.size : _PREFIX.size + n_head])
    except msgspec.ValidationError as exc:
        raise MalformedFrameError(f"invalid sync message header: {exc}") from None
    except msgspec.DecodeError as exc:
        raise MalformedFrameError(f"undecodable sync message header: {exc}") from None
    if isinstance(msg, _WITH_TENSOR) != (n > 0):
        raise MalformedFrameError(f"a {kind_of(msg)} message with {n} parameters")
    params = None
    if n:
        params = np.frombuffer(mv, np.float32, count=n, offset=_PREFIX.size + n_head).copy()
    return Frame(msg, params)


def digest(payload: bytes | bytearray | memoryview) -> str:
    """The SHA-256 of a frame as sent or received (the run checks both ends agree)."""
    return hashlib.sha256(payload).hexdigest()


# -- LS datagrams ---------------------------------------------------------------------------

# Robots without a shared clock (a team file, see coorp.learn._robots): the leader sends
# every worker CLOCK_ROUNDS datagrams on its control channel, marked with loop number
# CLOCK_K and carrying the loop grid on the leader's clock; a worker maps the grid to its
# own clock with the smallest (arrival − sent) it saw (exact up to the smallest one-way
# delay). The leader broadcasts the first model once WARM_LOOPS loops were complete.
CLOCK_K = 2**64 - 1
CLOCK_ROUNDS = 8
CLOCK_GAP_S = 0.02
WARM_LOOPS = 8
_U64 = struct.Struct("<Q")


def set_loop(buf: bytearray, k: int) -> None:
    """Write loop number ``k`` into a perception or control datagram."""
    buf[:8] = k.to_bytes(8, "little")


def loop_of(payload: bytes | bytearray | memoryview) -> int:
    """The loop number of an LS datagram (``CLOCK_K``: a clock datagram)."""
    return int.from_bytes(bytes(payload[:8]), "little")


def clock_datagram(size: int, grid_ns: int, rnd: int) -> bytes:
    """Round ``rnd`` of the leader's clock datagrams: the loop grid on its clock."""
    msg = bytearray(max(24, size))
    msg[:8], msg[8:16], msg[16:24] = _U64.pack(CLOCK_K), _U64.pack(grid_ns), _U64.pack(rnd)
    return bytes(msg)


def clock_grid(payload: bytes | bytearray | memoryview) -> int:
    """The loop grid (leader's clock) a clock datagram carries."""
    grid: int = _U64.unpack_from(payload, 8)[0]
    return grid
