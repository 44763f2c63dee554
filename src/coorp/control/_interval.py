"""The closed time interval shared by every planner, and the checks on injected time.

Everything in :mod:`coorp.control` takes time as an argument; this module owns the
one value type for a span of time and the guard that keeps injected time monotone.
"""

from __future__ import annotations

from typing import NamedTuple

from coorp._errors import UsageError

__all__ = ["Interval", "MonotoneClock"]


class Interval(NamedTuple):
    """A closed interval ``[start_ns, end_ns]`` of integer nanoseconds."""

    start_ns: int
    end_ns: int

    def contains(self, t_ns: int) -> bool:
        return self.start_ns <= t_ns <= self.end_ns

    def overlaps(self, other: Interval) -> bool:
        return self.start_ns <= other.end_ns and other.start_ns <= self.end_ns


class MonotoneClock:
    """Remembers the latest injected ``now_ns`` and rejects going back in time.

    Objects whose state depends on the order of events (who expired first, which
    grant is older) would silently corrupt themselves if fed an earlier time, so they
    refuse it loudly instead.
    """

    __slots__ = ("_last_ns", "_owner")

    def __init__(self, owner: str) -> None:
        self._owner = owner
        self._last_ns: int | None = None

    @property
    def last_ns(self) -> int | None:
        return self._last_ns

    def advance(self, now_ns: int) -> None:
        if self._last_ns is not None and now_ns < self._last_ns:
            raise UsageError(
                f"{self._owner}: now_ns={now_ns} is earlier than the last time seen "
                f"({self._last_ns}); time passed to control objects must never decrease"
            )
        self._last_ns = now_ns
