"""Analytical models that the simulator is validated against (no simulation here)."""

from .bianchi import (
    BianchiResult,
    ampdu_size,
    attempt_probability,
    bar_fraction,
    bianchi_table,
    dcf_fixed_point,
    saturation_throughput,
    slot_throughput,
)

__all__ = [
    "BianchiResult",
    "ampdu_size",
    "attempt_probability",
    "bar_fraction",
    "bianchi_table",
    "dcf_fixed_point",
    "saturation_throughput",
    "slot_throughput",
]
