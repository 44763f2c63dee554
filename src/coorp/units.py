"""Time units. Simulator and algorithm time is always an ``int`` count of nanoseconds.

Conversions round to the nearest nanosecond once, at the boundary (scenario loading,
CLI flags), so no float ever accumulates inside the simulator.
"""

from __future__ import annotations

__all__ = ["NS_PER_MS", "NS_PER_S", "NS_PER_US", "ms", "ns_to_ms", "ns_to_s", "s", "us"]

NS_PER_US = 1_000
NS_PER_MS = 1_000_000
NS_PER_S = 1_000_000_000


def us(value: float) -> int:
    """Microseconds to integer nanoseconds."""
    return round(value * NS_PER_US)


def ms(value: float) -> int:
    """Milliseconds to integer nanoseconds."""
    return round(value * NS_PER_MS)


def s(value: float) -> int:
    """Seconds to integer nanoseconds."""
    return round(value * NS_PER_S)


def ns_to_ms(value: int | float) -> float:
    return value / NS_PER_MS


def ns_to_s(value: int | float) -> float:
    return value / NS_PER_S
