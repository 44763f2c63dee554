"""Keyword-only options of the transport, as enums with documented members."""

from __future__ import annotations

import enum

from coorp._errors import UsageError

__all__ = ["DeadlineMissKind", "QueuePolicy", "Reach", "Wake"]


class QueuePolicy(enum.Enum):
    """What happens when a subscriber's bounded queue is full and a new message arrives."""

    #: Drop the oldest queued message so the newest fits (sensor streams, commands where
    #: only the latest value matters). The publisher never waits; drops are counted.
    KEEP_LAST = "keep_last"
    #: Make the publisher wait until every subscriber has room, up to the publish timeout,
    #: then raise :class:`~coorp.transport.DeliveryTimeoutError` (nothing is lost, nothing
    #: hangs forever).
    BLOCK = "block"


class Reach(enum.Flag):
    """Which paths a bus uses to find peers of a topic (combine with ``|``)."""

    #: Publishers and subscribers on the same :class:`~coorp.transport.Bus` (no copy).
    PROCESS = enum.auto()
    #: Other processes on this machine through iceoryx2 shared memory (zero-copy).
    MACHINE = enum.auto()
    #: Other machines through the bus's network transport (sockets).
    NETWORK = enum.auto()
    #: Everything available.
    ALL = PROCESS | MACHINE | NETWORK


class DeadlineMissKind(enum.Enum):
    """Why a deadline handler ran."""

    #: A message arrived, but later than ``deadline`` after it was published.
    LATE = "late"
    #: No message arrived within ``deadline`` of the previous one (or of subscribing).
    SILENT = "silent"


class Wake(enum.StrEnum):
    """How a bus's subscribers sleep while nothing is waiting (``Bus(wake=...)``)."""

    #: :attr:`FUTEX` where it works, else :attr:`ICEORYX2` with one ``RuntimeWarning``.
    AUTO = "auto"
    #: On the topic's shared futex wake word: every publisher on the machine advances it
    #: and wakes all its sleepers in one system call (Linux on x86_64/aarch64).
    FUTEX = "futex"
    #: On iceoryx2's event: one notification per subscriber.
    ICEORYX2 = "iceoryx2"

    @classmethod
    def parse(cls, value: Wake | str) -> Wake:
        """``value`` as a :class:`Wake` (its name in lower case works too); a
        :class:`~coorp.UsageError` naming the value and the allowed ones otherwise."""
        try:
            return cls(value)
        except ValueError:
            allowed = ", ".join(repr(m.value) for m in cls)
            raise UsageError(
                f"Bus(wake={value!r}): not a wake mode; allowed: {allowed} "
                f"(or Wake.AUTO, Wake.FUTEX, Wake.ICEORYX2)"
            ) from None
