"""Per-topic deadlines, as Lingua Franca's ``deadline``: pure logic, clock injected.

A subscriber declares ``deadline`` (seconds) and a handler. A miss is either

* :attr:`DeadlineMissKind.LATE` -- a message was delivered more than ``deadline`` after it
  was published (measured with the publisher's stamp, so only when both ends share a
  clock: same machine), or
* :attr:`DeadlineMissKind.SILENT` -- no message arrived within ``deadline`` of the
  previous one (or of subscribing). One SILENT miss is reported per silent period.

The monitor never reads a clock: every call receives ``now_ns``, which makes the policy
testable without sleeping.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from coorp._errors import UsageError
from coorp.transport._options import DeadlineMissKind

__all__ = ["DeadlineMiss", "DeadlineMonitor", "MissHandler"]


@dataclass(frozen=True, slots=True)
class DeadlineMiss:
    """One missed deadline, handed to the subscriber's handler."""

    topic: str
    kind: DeadlineMissKind
    #: How far past the deadline, in nanoseconds.
    overdue_ns: int
    #: The late message (for LATE), else ``None``.
    message: Any = None


MissHandler = Callable[[DeadlineMiss], None]


class DeadlineMonitor:
    """Tracks one topic's deadline for one subscriber."""

    def __init__(self, topic: str, deadline_ns: int, start_ns: int) -> None:
        if deadline_ns <= 0:
            raise UsageError(f"deadline must be positive, got {deadline_ns} ns")
        self.topic = topic
        self.deadline_ns = deadline_ns
        self._due_ns = start_ns + deadline_ns
        self.missed = 0

    @property
    def next_due_ns(self) -> int:
        """When the next SILENT miss fires if nothing arrives before it."""
        return self._due_ns

    def on_message(self, stamp_ns: int | None, now_ns: int, message: Any) -> DeadlineMiss | None:
        """Record an arrival; return a LATE miss if it came too long after ``stamp_ns``."""
        self._due_ns = now_ns + self.deadline_ns
        if stamp_ns is None:
            return None
        overdue = now_ns - stamp_ns - self.deadline_ns
        if overdue <= 0:
            return None
        self.missed += 1
        return DeadlineMiss(self.topic, DeadlineMissKind.LATE, overdue, message)

    def poll(self, now_ns: int) -> DeadlineMiss | None:
        """Return a SILENT miss if the deadline passed without a message (once per period)."""
        if now_ns < self._due_ns:
            return None
        overdue = now_ns - self._due_ns
        # The next silent period starts now: one report per period, not one per poll.
        self._due_ns = now_ns + self.deadline_ns
        self.missed += 1
        return DeadlineMiss(self.topic, DeadlineMissKind.SILENT, overdue)
