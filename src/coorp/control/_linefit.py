"""Fitting a periodic flow's sends to a line: the numbering and least squares behind
:class:`~coorp.control.SendTimeModel` (paper §IV-B).

Each segment's sends get slot numbers, the pooled line ``t ≈ p·k + q_segment`` is fitted
by least squares, and the numbering is revised against the line until it is stable
(:func:`fit_runs`). Pure functions of the sends; the model keeps the state.
"""

from __future__ import annotations

import math

from coorp.control._residuals import refine_period

__all__ = ["IRREGULAR_COST", "Line", "fit_runs", "round_div"]

#: Numbering/fitting rounds per starting numbering; two are usually enough.
_MAX_ROUNDS = 6

#: Residuals (RMS) below this fraction of the period: the numbering is beyond doubt.
_CLEAR_FRACTION = 8

#: Cost of one irregular step (an empty slot, or two sends in one slot) when the best
#: numbering against a line is searched, on the scale of ``n·ln(SSR/n)``; and of an
#: extra segment (a phase jump: one more offset to fit).
IRREGULAR_COST = 6.0


#: Most the period's prior (its previous value) can cost a candidate: two irregular steps.
_MAX_PERIOD_CHANGE_COST = 2 * IRREGULAR_COST


class Line:
    """A pooled fit: one slope; per segment the fitted time of its first index
    (relative to its first send); the residual sum of squares; the fitted time of the
    newest send."""

    __slots__ = ("at_first", "newest_ns", "numbered", "slope", "ssr", "sxx")

    def __init__(
        self, slope: float, at_first: list[float], newest_ns: int, ssr: float, sxx: float
    ) -> None:
        self.slope = slope
        self.at_first = at_first
        self.newest_ns = newest_ns
        self.ssr = ssr
        self.sxx = sxx
        #: Each segment's slot numbers (what the line was fitted with).
        self.numbered: list[list[int]] = []

    def slope_error(self, n: int, segments: int) -> float:
        """Standard error of the slope (infinite when it is not determined)."""
        dof = n - segments - 1
        if dof <= 0 or self.sxx <= 0.0:
            return math.inf
        return math.sqrt(self.ssr / dof / self.sxx)


def fit_runs(
    runs: list[list[int]], old_p: int | None, old_error: float, min_sigma_ns: int
) -> tuple[float, Line] | None:
    """Number the sends of every segment and fit them; returns ``(cost, line)``.

    Three starting numberings: consecutive sends in consecutive slots, and every send
    in its nearest slot of a period refined (:func:`refine_period`) from the previous
    period and from the median gap. Each is improved by alternating the least-squares
    line and the best numbering against it (:func:`_number_against`) until the
    numbering is stable. The cheapest result wins: ``n·ln(SSR/n)`` (the Gaussian
    likelihood) plus what its irregular steps cost (:func:`_irregularity_cost`), plus
    a bounded prior for keeping the previous period. The returned cost leaves the
    prior out.

    So a wrong period cannot confirm itself (numbering the sends with a fraction of
    the true period costs a hole per send), heavy jitter is not explained away by
    holes, bursts share a slot instead of each claiming a period, and real skips
    are still found.
    """
    n = sum(len(run) for run in runs)
    floor = float(min_sigma_ns) ** 2
    gaps: list[int] = []
    for run in runs:
        for i in range(1, len(run)):
            gaps.append(run[i] - run[i - 1])
    gaps.sort()
    if not gaps:
        if old_p is None:
            return None
        # Only single-send segments: nothing new about p.
        return _costed(n, floor, _pooled_fit(runs, [[0] for _ in runs], slope=float(old_p)))
    best: tuple[float, Line] | None = None
    best_with_prior = math.inf
    seen: list[list[list[int]]] = []
    for guess in (None, old_p, gaps[len(gaps) // 2]):
        if guess is None:
            numbered = [list(range(len(run))) for run in runs]
        elif best is not None and best[1].ssr <= n * (best[1].slope / _CLEAR_FRACTION) ** 2:
            # Consecutive numbering (with the holes it found) explains every send to
            # within a small fraction of a period: no other numbering can do better.
            break
        elif guess >= 1:
            period = refine_period(runs, guess)
            numbered = [[round_div(t - run[0], period) for t in run] for run in runs]
        else:
            continue
        if numbered in seen:
            continue
        line = _pooled_fit(runs, numbered)
        for _ in range(_MAX_ROUNDS):
            seen.append(numbered)
            if line is None or line.slope < 1.0:
                break
            penalty = IRREGULAR_COST * max(line.ssr / n, floor)
            renumbered = [
                _number_against(run, a, line.slope, penalty)
                for run, a in zip(runs, line.at_first, strict=True)
            ]
            if renumbered == numbered:
                break
            numbered = renumbered
            line = _pooled_fit(runs, numbered)
        if line is None or line.slope < 1.0:
            continue
        cost = n * math.log(max(line.ssr / n, floor)) + _irregularity_cost(numbered)
        prior = 0.0
        if old_p is not None:
            # The period rarely changes between fits: moving it by more than the last
            # fit's standard error costs, but never more than a few irregular steps, so
            # a period that was fitted wrong is still abandoned when the sends say so.
            drift = (line.slope - old_p) / max(old_error, 1.0)
            prior = min(drift * drift, _MAX_PERIOD_CHANGE_COST)
        if best is None or cost + prior < best_with_prior:
            best, best_with_prior = (cost, line), cost + prior
    if best is None:
        if old_p is None:
            return None
        consecutive = [list(range(len(run))) for run in runs]
        return _costed(n, floor, _pooled_fit(runs, consecutive, slope=float(old_p)))
    return best


def _costed(n: int, floor: float, line: Line | None) -> tuple[float, Line] | None:
    if line is None:
        return None
    return n * math.log(max(line.ssr / n, floor)), line


def _pooled_fit(
    runs: list[list[int]], numbered: list[list[int]], *, slope: float | None = None
) -> Line | None:
    """Pooled within-segment least squares of send time on send index: one slope, one
    intercept per segment (None if no segment spans two indices and no ``slope`` is
    given). Times and indices are taken relative to each run's first sample so the
    floats stay small whatever the absolute clock value."""
    # Plain loops, each sum accumulated left to right from 0.0 exactly as ``sum()`` of
    # floats does: the same floats as the comprehensions they replace (the golden digests
    # hold them to it), without a list or a generator per sum when compiled.
    sxx = sxy = 0.0
    means: list[tuple[float, float]] = []
    for run, ks in zip(runs, numbered, strict=True):
        m = len(run)
        k0 = ks[0]
        t0 = run[0]
        k_rel: list[float] = []
        t_rel: list[float] = []
        k_sum = 0.0
        for k in ks:
            x = float(k - k0)
            k_rel.append(x)
            k_sum += x
        t_sum = 0.0
        for t in run:
            y = float(t - t0)
            t_rel.append(y)
            t_sum += y
        k_mean = k_sum / m
        t_mean = t_sum / m
        means.append((k_mean, t_mean))
        xx = 0.0
        xy = 0.0
        for i in range(m):
            dk = k_rel[i] - k_mean
            xx += dk**2
            xy += dk * (t_rel[i] - t_mean)
        sxx += xx
        sxy += xy
    if slope is None:
        if sxx <= 0.0:
            return None
        slope = sxy / sxx
    ssr = 0.0
    at_first: list[float] = []
    for j in range(len(runs)):
        run = runs[j]
        ks = numbered[j]
        k_mean, t_mean = means[j]
        at_first.append(t_mean - slope * k_mean)
        k0 = ks[0]
        t0 = run[0]
        for i in range(len(run)):
            ssr += ((run[i] - t0) - t_mean - slope * ((ks[i] - k0) - k_mean)) ** 2
    run, ks = runs[-1], numbered[-1]
    newest = run[0] + round(at_first[-1] + slope * (ks[-1] - ks[0]))
    line = Line(slope, at_first, newest, ssr, sxx)
    line.numbered = numbered
    return line


def _irregularity_cost(numbered: list[list[int]]) -> float:
    """What a numbering's irregular steps cost, on the scale of ``n·ln(SSR/n)``.

    A step between consecutive sends is regular (one slot) or irregular: 0 (a shared
    slot) or several (empty slots). Each irregular slot costs ``IRREGULAR_COST``; and
    the pattern of irregular steps never costs less than its information: ``−2·ln``
    of its Bernoulli likelihood at the rate it shows, plus ``ln(steps)`` for that
    rate. So a few holes cost more than their share (one in 31 steps 12, two 18),
    and heavy jitter is not explained away by a hole or two.
    """
    steps = irregular = units = 0
    for ks in numbered:
        for i in range(1, len(ks)):
            a, b = ks[i - 1], ks[i]
            steps += 1
            if b - a != 1:
                irregular += 1
                units += 1 if b == a else b - a - 1
    if irregular == 0:
        return 0.0
    rate = irregular / steps
    pattern = -2.0 * irregular * math.log(rate) + math.log(steps)
    if irregular < steps:
        pattern -= 2.0 * (steps - irregular) * math.log(1.0 - rate)
    return max(IRREGULAR_COST * units, pattern)


def _number_against(samples: list[int], at_first: float, slope: float, penalty: float) -> list[int]:
    """The numbering of one segment that best fits the line ``t = samples[0] +
    at_first + slope·k``: it minimises the squared distances of the sends to their
    slots plus ``penalty`` per empty slot between consecutive sends and per send that
    shares its predecessor's slot (a Viterbi pass over each send's nearest slot and
    its two neighbours). A late or early send is thus one misplaced send at worst; it
    never shifts the indices of all later sends, as numbering gap by gap would.
    """
    t0 = samples[0]
    nearest = [round(((t - t0) - at_first) / slope) for t in samples]
    for i in range(1, len(nearest)):
        if nearest[i] - nearest[i - 1] != 1:
            break
    else:
        return nearest  # every send in its nearest slot, and no penalty: optimal
    cands = [(r - 1, r, r + 1) for r in nearest]
    inf = math.inf

    def err(t: int, k: int) -> float:
        d = (t - t0) - at_first - slope * k
        return d * d

    cost = [err(samples[0], k) for k in cands[0]]
    back: list[tuple[int, int, int]] = []
    for i in range(1, len(samples)):
        t = samples[i]
        prev = cands[i - 1]
        new_cost = []
        arg = []
        for k in cands[i]:
            best, best_j = inf, 0
            for j in range(3):
                step = k - prev[j]
                if step < 0:
                    continue
                c = cost[j] + penalty * (1 if step == 0 else step - 1)
                if c < best:
                    best, best_j = c, j
            new_cost.append(best + err(t, k))
            arg.append(best_j)
        cost = new_cost
        back.append((arg[0], arg[1], arg[2]))
    j = min(range(3), key=cost.__getitem__)
    out = [0] * len(samples)
    for i in range(len(samples) - 1, -1, -1):
        out[i] = cands[i][j]
        if i:
            j = back[i - 1][j]
    return out


def round_div(num: int, den: int) -> int:
    """``round(num / den)`` in exact integers, halves rounded up (den > 0)."""
    return (2 * num + den) // (2 * den)
