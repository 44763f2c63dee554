"""What each role writes when it is done (``--result``, JSON; the leader's model versions
beside it as ``.npy``) and the orchestrator reads back: typed, so every field a report
uses is named once."""

from __future__ import annotations

from pathlib import Path
from typing import Any, NamedTuple, TypeVar

import msgspec

from coorp._errors import ConfigurationError

__all__ = [
    "ControlIn",
    "PerceptionIn",
    "PerceptionOut",
    "Receipt",
    "Record",
    "ServerResult",
    "WorkerResult",
    "read_result",
    "write_result",
]


class Record(NamedTuple):
    """One sync message as sent or received: the digests at both ends must agree."""

    peer: str
    kind: str
    version: int
    sha256: str
    nbytes: int


class Receipt(msgspec.Struct, kw_only=True):
    """How one sync message went out: its time from hand-over to confirmation and, on a
    coordinated bulk stream, what the permit and the gate cost it."""

    kind: str
    nbytes: int
    ns: int
    permit_wait_ns: int = 0
    preempted_ns: int = 0
    preemptions: int = 0
    #: Host monotonic instants (every role of a ``--runtime`` run shares the clock):
    #: handed to the transport, first and last payload byte written (coordinated
    #: streams; None otherwise), confirmed. They place the message on one timeline
    #: with the other robots' (docs/learn.md, "Where a shared-queue round's time
    #: goes"; ``benchmarks/learn_sync_timeline.py``).
    start_ns: int = 0
    first_write_ns: int | None = None
    last_write_ns: int | None = None
    end_ns: int = 0


class PerceptionIn(NamedTuple):
    """A perception as the leader received it."""

    robot: str
    k: int
    sent_ns: int
    received_ns: int


class PerceptionOut(NamedTuple):
    """A perception as its worker sent it."""

    k: int
    sent_ns: int


class ControlIn(NamedTuple):
    """A control as its worker received it."""

    k: int
    sent_ns: int
    received_ns: int


class ServerResult(msgspec.Struct, kw_only=True):
    """The leader's run: the model versions' times, the perceptions it received, every
    sync message, and the permit service's counters (coordinated runs)."""

    robot: str
    grid_ns: int
    t0_ns: int
    t_end_ns: int
    times_s: list[float]
    staleness: list[int]
    train_returns: list[float]
    samples: int
    perceptions: list[PerceptionIn]
    sent: list[Record]
    received: list[Record]
    receipts: list[Receipt]
    leader: dict[str, Any]
    team: dict[str, Any]


class WorkerResult(msgspec.Struct, kw_only=True):
    """A worker's run: its perceptions and the controls it got back (its own clock), the
    clock handshake, every sync message and its training time."""

    robot: str
    perceptions_sent: int
    controls: list[ControlIn]
    perceptions: list[PerceptionOut]
    clock_offset_ns: int | None
    clock_samples: int
    #: From the first model received to the stop (None: no model came).
    learning_ns: tuple[int | None, int]
    sent: list[Record]
    received: list[Record]
    receipts: list[Receipt]
    updates: int
    compute_s: float
    ls: dict[str, Any]
    team: dict[str, Any]


def write_result(path: str | Path, result: ServerResult | WorkerResult) -> None:
    Path(path).write_bytes(msgspec.json.encode(result))


R = TypeVar("R", ServerResult, WorkerResult)


def read_result(path: str | Path, kind: type[R]) -> R:
    """A role's result file; a :class:`~coorp.ConfigurationError` if it is not one."""
    try:
        return msgspec.json.decode(Path(path).read_bytes(), type=kind)
    except (msgspec.ValidationError, msgspec.DecodeError) as exc:
        raise ConfigurationError(f"{path} is not a coorp learn result: {exc}") from None
