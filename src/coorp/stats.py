"""Statistics every layer reports the same way: means with 95% confidence intervals over
seeds (Student's t) and percentiles of samples.

Part of the ground floor (see README, "Layout"): any package may import it, and it
imports nothing of Coorp's.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal, overload

import numpy as np
import numpy.typing as npt

__all__ = [
    "MeanCI",
    "PercentileMethod",
    "grouped_percentiles",
    "mean_ci",
    "percentile",
    "t_quantile_975",
]

#: How :func:`percentile` picks between samples (numpy's names): ``inverted_cdf`` is the
#: empirical quantile (a sample itself, no interpolation), ``linear`` interpolates.
PercentileMethod = Literal["inverted_cdf", "linear"]

#: t_{0.975, df} for df = 1..30 (two-sided 95%), to 9 decimals.
_T975 = (
    12.706204736, 4.302652730, 3.182446305, 2.776445105, 2.570581836, 2.446911851,
    2.364624252, 2.306004135, 2.262157163, 2.228138852, 2.200985160, 2.178812830,
    2.160368656, 2.144786688, 2.131449546, 2.119905299, 2.109815578, 2.100922040,
    2.093024054, 2.085963447, 2.079613845, 2.073873068, 2.068657610, 2.063898562,
    2.059538553, 2.055529439, 2.051830516, 2.048407142, 2.045229642, 2.042272456,
)  # fmt: skip
_Z975 = 1.959963984540054


def t_quantile_975(df: int) -> float:
    """The 97.5% quantile of Student's t with ``df`` degrees of freedom.

    Exact table values up to 30; beyond, the Cornish-Fisher expansion in 1/df
    (Abramowitz & Stegun 26.7.5), within 1e-6 of the exact value there.
    """
    if df < 1:
        raise ValueError(f"degrees of freedom must be >= 1, got {df}")
    if df <= len(_T975):
        return _T975[df - 1]
    z, n = _Z975, float(df)
    g1 = (z**3 + z) / 4
    g2 = (5 * z**5 + 16 * z**3 + 3 * z) / 96
    g3 = (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / 384
    g4 = (79 * z**9 + 776 * z**7 + 1482 * z**5 - 1920 * z**3 - 945 * z) / 92160
    return z + g1 / n + g2 / n**2 + g3 / n**3 + g4 / n**4


@dataclass(frozen=True)
class MeanCI:
    """Mean of the values that exist, the half-width of its 95% CI and how many there are.

    ``n`` counts finite values (a run without a finished epoch has no epoch time); if any
    value is infinite (a percentile among abandoned loops) the mean is infinite and the
    CI is undefined (NaN). ``ci95`` is NaN with fewer than two values.
    """

    mean: float
    ci95: float
    n: int

    @property
    def low(self) -> float:
        return self.mean - self.ci95

    @property
    def high(self) -> float:
        return self.mean + self.ci95


def mean_ci(values: Iterable[float]) -> MeanCI:
    """Mean and 95% CI half-width of ``values``; NaNs are left out (see :class:`MeanCI`)."""
    vals = [float(v) for v in values if not math.isnan(v)]
    n = len(vals)
    if n == 0:
        return MeanCI(math.nan, math.nan, 0)
    if any(math.isinf(v) for v in vals):
        return MeanCI(math.inf if max(vals) == math.inf else -math.inf, math.nan, n)
    mean = math.fsum(vals) / n
    if n < 2:
        return MeanCI(mean, math.nan, n)
    var = math.fsum((v - mean) ** 2 for v in vals) / (n - 1)
    return MeanCI(mean, t_quantile_975(n - 1) * math.sqrt(var / n), n)


@overload
def percentile(values: npt.ArrayLike, q: float, *, method: PercentileMethod = ...) -> float: ...
@overload
def percentile(
    values: npt.ArrayLike, q: float, *, empty: float, method: PercentileMethod = ...
) -> float: ...
@overload
def percentile(
    values: npt.ArrayLike, q: float, *, empty: None, method: PercentileMethod = ...
) -> float | None: ...
def percentile(
    values: npt.ArrayLike | Sequence[float],
    q: float,
    *,
    empty: float | None = math.nan,
    method: PercentileMethod = "inverted_cdf",
) -> float | None:
    """The ``q``-th percentile (0..100) of ``values``, or ``empty`` when there are none.

    The default is the empirical quantile (``inverted_cdf``): a percentile that falls
    among infinite samples (abandoned loops) is infinite, never ``inf - inf = NaN``.
    """
    a = np.asarray(values)
    if not a.size:
        return empty
    return float(np.percentile(a, q, method=method))


def grouped_percentiles(
    values: npt.NDArray[np.float64], counts: npt.NDArray[np.int64], qs: Sequence[float]
) -> npt.NDArray[np.float64]:
    """Linear-interpolation percentiles (numpy's ``method="linear"``) of many groups at once.

    ``values`` holds the groups one after the other, each sorted ascending, and
    ``counts`` their sizes (zero allowed). Returns a ``(len(counts), len(qs))`` array, NaN
    for an empty group. Each value is bit-identical to ``np.percentile(group, q,
    method="linear")`` for finite values: the same index, weight and interpolation
    arithmetic (numpy's ``_quantile`` and ``_lerp``), done for every group in one pass
    instead of one call per group (a fleet has hundreds of flows);
    tests/test_grouped_percentiles.py checks the identity.
    """
    counts = np.asarray(counts, dtype=np.int64)
    q = np.true_divide(np.asarray(qs, dtype=np.float64), 100)
    out = np.full((counts.size, q.size), np.nan)
    some = counts > 0
    if not some.any():
        return out
    n = counts[some]
    start = (np.cumsum(counts) - counts)[some]
    last = (n - 1)[:, None]
    virtual = last * q[None, :]  # numpy: (n - 1) * quantiles
    prev = np.floor(virtual)
    nxt = prev + 1
    # At or past the last index both neighbours are the last value (numpy's -1).
    above = virtual >= last
    prev_i = np.where(above, last, prev).astype(np.intp)
    next_i = np.where(above, last, nxt).astype(np.intp)
    gamma = virtual - np.where(above, -1.0, prev)
    a = values[start[:, None] + prev_i]
    b = values[start[:, None] + next_i]
    diff = b - a
    res = a + diff * gamma
    hi = gamma >= 0.5
    res[hi] = (b - diff * (1 - gamma))[hi]
    out[some] = res
    return out
