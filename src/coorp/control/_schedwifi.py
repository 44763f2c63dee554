"""The SchedWiFi baseline (paper §VI, Eq. 4): a global time-aware schedule.

Every LS message owns an exclusive, periodic scheduled-traffic window (STW) sized by
Eq. 4; every robot's time-aware shaper stops feeding bulk packets to its NIC early
enough that none is on air when any window opens. Unlike COORP this needs all robots
to share a synchronized clock: ``clock_skew_ns`` pads each window for its error.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from fractions import Fraction
from typing import Any, NamedTuple

from coorp._errors import UsageError
from coorp.control._gate import Gate
from coorp.control._interval import Interval
from coorp.control._windows import first_window

__all__ = ["PeriodicWindow", "SchedWifiPlanner", "TimeAwareShaper", "stw_duration_ns"]

_FOREVER_NS = 2**63 - 1


def stw_duration_ns(
    message_bytes: int,
    rate_mbps: float,
    *,
    retries: int = 7,
    sifs_ns: int = 16_000,
    tx_ack_ns: int = 30_000,
    guard_ns: int = 25_000,
    clock_skew_ns: int = 0,
) -> int:
    """Eq. 4: ``STW = 2·guard + (L/rate + 2·SIFS + TX_ack)·(1 + R) + 2·clock_skew``.

    ``L/rate`` is rounded up to a whole nanosecond. The skew pads both ends: a robot
    whose clock is off by up to ``clock_skew_ns`` still stays inside the window.
    """
    if message_bytes < 0:
        raise UsageError(f"message_bytes={message_bytes}: must be >= 0")
    if not rate_mbps > 0:
        raise UsageError(f"rate_mbps={rate_mbps}: must be > 0 Mb/s")
    for name, value in (
        ("retries", retries),
        ("sifs_ns", sifs_ns),
        ("tx_ack_ns", tx_ack_ns),
        ("guard_ns", guard_ns),
        ("clock_skew_ns", clock_skew_ns),
    ):
        if value < 0:
            raise UsageError(f"{name}={value}: must be >= 0")
    # bits / (Mb/s) = µs; ×1000 for ns. Exact rationals so the ceiling is honest.
    airtime_ns = math.ceil(Fraction(message_bytes * 8 * 1000) / Fraction(rate_mbps))
    return 2 * guard_ns + (airtime_ns + 2 * sifs_ns + tx_ack_ns) * (1 + retries) + 2 * clock_skew_ns


class PeriodicWindow(NamedTuple):
    """Windows ``[offset + j·period, offset + j·period + duration − 1]`` for every j."""

    offset_ns: int
    period_ns: int
    duration_ns: int

    def next_after(self, t_ns: int) -> Interval:
        """The earliest window of this series that ends at or after ``t_ns``."""
        j = -((self.offset_ns + self.duration_ns - 1 - t_ns) // self.period_ns)
        start = self.offset_ns + j * self.period_ns
        return Interval(start, start + self.duration_ns - 1)


class SchedWifiPlanner:
    """The global schedule: one periodic exclusive window per LS message.

    Built from explicit ``(offset_ns, period_ns, duration_ns)`` triples, or with
    :meth:`back_to_back` / :meth:`from_messages`, which lay the windows of one MPC
    period one after another (all perceptions are generated together, so their
    windows cannot overlap in an exclusive schedule).
    """

    def __init__(self, windows: Sequence[tuple[int, int, int]]) -> None:
        checked: list[PeriodicWindow] = []
        for i, triple in enumerate(windows):
            offset, period, duration = triple
            if period < 1:
                raise UsageError(f"windows[{i}].period_ns={period}: must be >= 1")
            if not 1 <= duration <= period:
                raise UsageError(
                    f"windows[{i}].duration_ns={duration}: must be >= 1 and <= period_ns "
                    f"({period}), or a window would overlap its own next occurrence"
                )
            checked.append(PeriodicWindow(offset, period, duration))
        self._windows = tuple(checked)
        self._sources = [w.next_after for w in checked]
        # (valid from, valid through, answer): see next_window.
        self._cached: tuple[int, int, Interval | None] | None = None

    @classmethod
    def back_to_back(
        cls, durations: Sequence[int], *, period_ns: int, start_ns: int = 0
    ) -> SchedWifiPlanner:
        """Windows of the given durations laid end to end from ``start_ns``, each
        repeating every ``period_ns``; their total must fit in one period."""
        total = sum(durations)
        if total > period_ns:
            raise UsageError(
                f"durations={list(durations)}: total {total} ns exceeds period_ns={period_ns}"
            )
        windows, offset = [], start_ns
        for duration in durations:
            windows.append((offset, period_ns, duration))
            offset += duration
        return cls(windows)

    @classmethod
    def from_messages(
        cls,
        messages: Sequence[tuple[int, float]],
        *,
        period_ns: int,
        start_ns: int = 0,
        **stw_kwargs: Any,
    ) -> SchedWifiPlanner:
        """One Eq. 4 window per ``(message_bytes, rate_mbps)``, laid back to back."""
        durations = [stw_duration_ns(size, rate, **stw_kwargs) for size, rate in messages]
        return cls.back_to_back(durations, period_ns=period_ns, start_ns=start_ns)

    @property
    def windows(self) -> tuple[PeriodicWindow, ...]:
        return self._windows

    @property
    def reserved_fraction(self) -> float:
        """Share of airtime the schedule takes away from bulk traffic (overlaps counted
        twice, so this is an upper bound when windows overlap)."""
        return sum(w.duration_ns / w.period_ns for w in self._windows)

    def next_window(self, now_ns: int) -> Interval | None:
        """The merged window containing ``now_ns``, else the next one (None if empty).

        The shaper asks for every bulk packet, so the answer is reused while it cannot
        change: the schedule is fixed, and every window the merge chose ends at or
        after the merged start ``t1``, so for any later ``now <= t1`` each series
        offers the same window again.
        """
        c = self._cached
        if c is not None and c[0] <= now_ns <= c[1]:
            return c[2]
        window = first_window(self._sources, now_ns)
        through = window.start_ns if window is not None else _FOREVER_NS
        self._cached = (now_ns, max(through, now_ns), window)
        return window


class TimeAwareShaper(Gate):
    """SchedWiFi's time-aware shaper on every robot, built like the paper's testbed:
    the virtual-preemption rule applied to the global schedule, so bulk packets stop
    being fed early enough (per the CTT) to be off the air when a window opens.

    Built as a :class:`Gate`: ``TimeAwareShaper(planner, ctt, **gate_kwargs)`` with a
    :class:`SchedWifiPlanner`. (It inherits ``Gate.__init__``: a constructor that
    forwards ``**kwargs`` to a compiled base class is what mypyc gets wrong.)"""
