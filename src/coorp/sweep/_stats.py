"""Means and 95% confidence intervals over seeds (Student's t)."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

__all__ = ["MeanCI", "mean_ci", "t_quantile_975"]

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
