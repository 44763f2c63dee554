"""Summaries of a time model's residuals that do not assume them Gaussian.

:class:`~coorp.control.SendTimeModel`'s windows from the ranks of recent out-of-sample
residuals, as split-conformal prediction takes them (``window="empirical"`` and
``window="conformal"``), and its robust fits: ``fit="robust"`` (offsets from medians, σ
from the median absolute residual) and the Theil–Sen line of ``window="conformal"``
(slope from the median of pairwise slopes, offsets from medians), which a minority of
late sends moves neither in slope nor in offset; and the median-based period estimate
the fits number the sends with (:func:`refine_period`).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable

__all__ = ["assign_send", "empirical_bounds", "refine_period", "robust_scale", "theil_sen"]

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


def theil_sen(runs: list[list[int]], numbered: list[list[int]]) -> float | None:
    """The Theil–Sen slope (Theil 1950, Sen 1968) of sends ``runs`` on their slots
    ``numbered``, pooled over segments: the median of ``(t_j − t_i)/(k_j − k_i)`` over
    every pair of sends of one segment in different slots. Up to 29 % of outlying
    sends leave it where the others put it (least squares moves with every one of
    them); with Gaussian jitter it is nearly as precise. None without such a pair."""
    slopes: list[float] = []
    for run, ks in zip(runs, numbered, strict=True):
        m = len(run)
        for i in range(m - 1):
            ti, ki = run[i], ks[i]
            for j in range(i + 1, m):
                dk = ks[j] - ki
                if dk != 0:
                    slopes.append((run[j] - ti) / dk)
    if not slopes:
        return None
    return statistics.median(slopes)


def assign_send(send_ns: int, q: int, p: int, first: int, early_ns: int) -> int:
    """The slot of a send under a line ``q + p·k`` whose slots before ``first`` were all
    observed: the nearest slot, except that a send nearest to slot ``first + 1`` but
    more than ``early_ns`` before its centre is a late one of slot ``first`` (a late send
    is far likelier than a skipped one). Rounding alone made every send later than
    half a period the next slot's, which consumed that slot's window before its own
    send came. ``early_ns`` comes from the fit (a multiple of its robust σ), never from
    the residuals themselves: a slot taken wrongly once would otherwise teach the next
    assignment to take the next one wrongly too."""
    nearest = (2 * (send_ns - q) + p) // (2 * p)
    if nearest == first + 1 and send_ns < q + p * nearest - early_ns:
        return first
    return nearest


def refine_period(runs: list[list[int]], guess: int) -> int:
    """A period close enough to number the whole history with: the median time per
    slot between sends ``L`` apart, ``L`` doubling from 2, each stage counting slots
    (time / period, rounded) with the previous stage's period. Longer baselines
    shrink the error of the estimate in proportion; medians ignore bursts, skipped
    sends and outliers. Returns ``guess`` refined (or unchanged if the history is too
    short)."""
    period = float(guess)
    lag = 2
    while True:
        ratios = []
        for run in runs:
            for a, b in zip(run, run[lag:], strict=False):
                slots = round((b - a) / period)
                if slots >= 1:
                    ratios.append((b - a) / slots)
        if len(ratios) < 3:
            break
        ratios.sort()
        period = ratios[len(ratios) // 2]
        if period < 1.0:
            return guess
        lag *= 2
    return max(round(period), 1)
