"""Summaries of a time model's residuals that do not assume them Gaussian.

:class:`~coorp.control.SendTimeModel`'s opt-in ``window="empirical"`` (windows from the
ranks of recent out-of-sample residuals, as split-conformal prediction takes them) and
``fit="robust"`` (offsets from medians, σ from the median absolute residual).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable

__all__ = ["empirical_bounds", "robust_scale"]

#: σ of a normal distribution over its median absolute deviation.
_MAD_TO_SIGMA = 1.4826


def empirical_bounds(residuals: Iterable[int], confidence: float, floor_ns: int) -> tuple[int, int]:
    """``(lo, hi)``: the ``⌊(n + 1)(1 − C)/2⌋``-th and ``⌈(n + 1)(1 + C)/2⌉``-th smallest of
    the ``n`` residuals (clamped to the extremes), never narrower than ``±floor_ns``."""
    r = sorted(residuals)
    n = len(r)
    tail = (1.0 - confidence) / 2.0
    lo_rank = max(math.floor((n + 1) * tail) - 1, 0)
    hi_rank = min(math.ceil((n + 1) * (1.0 - tail)) - 1, n - 1)
    return min(r[lo_rank], -floor_ns), max(r[hi_rank], floor_ns)


def robust_scale(runs: list[list[int]], numbered: list[list[int]], slope: float) -> tuple[int, int]:
    """``(σ, q)`` of ``fit = "robust"`` for sends ``runs`` in slots ``numbered`` on a line
    of ``slope``: each segment's offset is the median of its sends' distances from the
    slope (a late minority does not move it), σ is 1.4826 × the median absolute
    residual from those offsets, and ``q`` the newest send's slot on the newest
    segment's median line. A heavy tail of late sends then widens neither the windows
    nor the offset; its sends are misses, as they are."""
    residuals: list[float] = []
    offset = 0.0
    for run, ks in zip(runs, numbered, strict=True):
        lifted = [(t - run[0]) - slope * (k - ks[0]) for t, k in zip(run, ks, strict=True)]
        offset = statistics.median(lifted)
        residuals.extend(abs(x - offset) for x in lifted)
    run, ks = runs[-1], numbered[-1]
    q = run[0] + round(offset + slope * (ks[-1] - ks[0]))
    return round(_MAD_TO_SIGMA * statistics.median(residuals)), q
