"""Means and 95% confidence intervals against published values (no SciPy)."""

from __future__ import annotations

import math

import pytest

from coorp.sweep import aggregate, mean_ci, t_quantile_975

#: t_{0.975, df} from standard tables (e.g. NIST/SEMATECH e-Handbook, Table 1.3.6.7.2).
PUBLISHED = {1: 12.706, 2: 4.303, 4: 2.776, 9: 2.262, 19: 2.093, 29: 2.045, 30: 2.042,
             40: 2.021, 60: 2.000, 100: 1.984, 120: 1.980}  # fmt: skip


@pytest.mark.parametrize(("df", "t"), sorted(PUBLISHED.items()))
def test_t_quantiles_match_published_tables(df: int, t: float) -> None:
    assert t_quantile_975(df) == pytest.approx(t, abs=5e-4)


def test_t_quantiles_beyond_the_table_are_continuous_and_reach_the_normal() -> None:
    # The expansion at 31 continues the table's 30 (exact 2.039513446).
    assert t_quantile_975(31) == pytest.approx(2.039513446, abs=1e-7)
    assert t_quantile_975(31) < t_quantile_975(30)
    assert t_quantile_975(10**6) == pytest.approx(1.959966, abs=1e-6)
    with pytest.raises(ValueError, match=">= 1"):
        t_quantile_975(0)


def test_mean_ci_of_a_known_sample() -> None:
    # 1..5: mean 3, s = sqrt(2.5), CI half-width = t(4) * s / sqrt(5) = 1.963243...
    ci = mean_ci([1, 2, 3, 4, 5])
    assert ci.mean == 3 and ci.n == 5
    assert ci.ci95 == pytest.approx(2.776445105 * math.sqrt(2.5 / 5), rel=1e-12)
    assert ci.ci95 == pytest.approx(1.963243, abs=1e-6)
    assert (ci.low, ci.high) == (ci.mean - ci.ci95, ci.mean + ci.ci95)


def test_mean_ci_edge_cases() -> None:
    one = mean_ci([4.0])
    assert one.mean == 4.0 and one.n == 1 and math.isnan(one.ci95)
    none = mean_ci([math.nan, math.nan])
    assert none.n == 0 and math.isnan(none.mean)
    skipped = mean_ci([1.0, math.nan, 3.0])  # a run without the value does not count
    assert skipped.n == 2 and skipped.mean == 2.0
    inf = mean_ci([1.0, math.inf])
    assert inf.mean == math.inf and math.isnan(inf.ci95) and inf.n == 2
    same = mean_ci([0.25, 0.25, 0.25])
    assert same.mean == 0.25 and same.ci95 == 0.0


def _row(policy: str, seed: int, metric: str, value: float, infeasible: str | None = None):
    return {"scenario": "s", "team_size": 2, "overrides": "", "policy": policy, "seed": seed,
            "metric": metric, "value": value, "infeasible": infeasible}  # fmt: skip


def test_aggregate_groups_by_policy_and_metric_and_counts_infeasible_runs() -> None:
    rows = [_row("a", s, "bh_mbps", v) for s, v in [(1, 10.0), (2, 12.0), (3, 14.0)]]
    rows += [_row("a", s, "epoch_s", v) for s, v in [(1, 2.0), (2, math.nan), (3, 4.0)]]
    rows += [_row("b", s, "bh_mbps", math.nan, "too slow") for s in (1, 2)]
    agg = {(a["policy"], a["metric"]): a for a in aggregate(rows)}
    bh = agg["a", "bh_mbps"]
    assert (bh["mean"], bh["n"], bh["runs"]) == (12.0, 3, 3)
    assert bh["ci95"] == pytest.approx(4.302652730 * 2 / math.sqrt(3))
    epoch = agg["a", "epoch_s"]
    assert (epoch["mean"], epoch["n"], epoch["runs"]) == (3.0, 2, 3)
    b = agg["b", "bh_mbps"]
    assert (b["n"], b["runs"], b["infeasible"], b["reason"]) == (0, 2, 2, "too slow")
