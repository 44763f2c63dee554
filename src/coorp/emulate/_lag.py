"""How late the emulator runs: a histogram of lags with exact percentiles to 1 µs.

A lag is how far behind its simulated instant something happened on the wall clock:
a frame written to its receiver's interface ``lag`` ns after its simulated delivery
time, or the emulator waking ``lag`` ns after the next simulated event was due. Lags up
to 100 ms fall in 1 µs bins (exact percentiles at that resolution, constant memory
whatever the run's length); longer ones are kept one by one.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["LagMeter", "LagSummary"]

_BINS = 100_000  # 1 µs bins: 0 .. 100 ms


@dataclass(frozen=True, slots=True)
class LagSummary:
    count: int
    p50_ms: float
    p99_ms: float
    max_ms: float
    #: How many were later than ``late_ms``.
    late: int
    late_ms: float

    def as_dict(self) -> dict[str, float | int]:
        return {"count": self.count, "p50_ms": self.p50_ms, "p99_ms": self.p99_ms,
                "max_ms": self.max_ms, "late": self.late, "late_ms": self.late_ms}  # fmt: skip


class LagMeter:
    """Lags in ns, added one at a time; negative ones count as 0 (early is on time)."""

    def __init__(self, late_ns: int = 1_000_000) -> None:
        self._bins = [0] * _BINS
        self._long: list[int] = []
        self.count = 0
        self.max_ns = 0
        self.late_ns = late_ns
        self.late = 0

    def add(self, lag_ns: int) -> None:
        if lag_ns < 0:
            lag_ns = 0
        us = lag_ns // 1000
        if us < _BINS:
            self._bins[us] += 1
        else:
            self._long.append(lag_ns)
        self.count += 1
        if lag_ns > self.max_ns:
            self.max_ns = lag_ns
        if lag_ns > self.late_ns:
            self.late += 1

    def merge(self, other: LagMeter) -> None:
        for i, v in enumerate(other._bins):
            if v:
                self._bins[i] += v
        self._long += other._long
        self.count += other.count
        self.max_ns = max(self.max_ns, other.max_ns)
        self.late += other.late

    def percentile_ns(self, q: float) -> int:
        """The smallest lag (to 1 µs, at the upper edge of its bin) with at least ``q``
        percent of the lags at or below it; 0 when empty."""
        if self.count == 0:
            return 0
        rank = max(1, -(-int(q * self.count) // 100)) if q > 0 else 1
        seen = 0
        for i, v in enumerate(self._bins):
            seen += v
            if seen >= rank:
                return min((i + 1) * 1000, self.max_ns)
        rest = sorted(self._long)
        return rest[rank - seen - 1]

    def summary(self) -> LagSummary:
        return LagSummary(
            self.count, self.percentile_ns(50) / 1e6, self.percentile_ns(99) / 1e6,
            self.max_ns / 1e6, self.late, self.late_ns / 1e6,
        )  # fmt: skip
