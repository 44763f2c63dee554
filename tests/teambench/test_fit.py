"""The CSLV fit on synthetic cells: thresholds, censoring, loss, the fitted curve."""

from __future__ import annotations

import math

import pytest

from coorp.teambench import fit_cslv

LOADS = [1e3, 1e4, 1e5, 1e6, 2e6, 4e6]


def test_threshold_between_the_last_passing_and_first_failing_load() -> None:
    fit = fit_cslv(LOADS, [1, 1.2, 2, 10, 40, 400], [0] * 6, bound_ms=33)
    assert (fit.low, fit.high, fit.misclassified) == (1e6, 2e6, 0)
    assert fit.cslv == pytest.approx(math.sqrt(1e6 * 2e6))
    assert not fit.all_pass and not fit.all_fail


def test_loss_over_the_limit_fails_a_cell_with_a_fast_p99() -> None:
    fit = fit_cslv(LOADS, [1] * 6, [0, 0, 0, 0.05, 0.2, 0.5], loss_limit=0.01)
    assert (fit.low, fit.high) == (1e5, 1e6)


def test_censored_when_everything_passes_or_fails() -> None:
    ok = fit_cslv(LOADS, [1] * 6, [0] * 6)
    assert ok.all_pass and ok.cslv is None and ok.high == 4e6
    assert ok.describe().startswith("> 4,000 kB/s")
    bad = fit_cslv(LOADS, [100] * 6, [0] * 6)
    assert bad.all_fail and bad.cslv is None and bad.low == 1e3
    assert bad.describe().startswith("< 1 kB/s")


def test_an_outlier_is_counted_not_obeyed() -> None:
    # One slow cell at a low load: the threshold stays where most cells put it.
    fit = fit_cslv(LOADS, [1, 50, 2, 10, 40, 400], [0] * 6)
    assert (fit.low, fit.high, fit.misclassified) == (1e6, 2e6, 1)


def test_fitted_curve_recovers_a_queue_shape() -> None:
    r0, l_sat = 2.0, 5e6
    loads = [1e4, 1e5, 1e6, 2e6, 3e6, 4e6, 4.5e6]
    p99 = [r0 / (1 - x / l_sat) for x in loads]
    fit = fit_cslv(loads, p99, [0] * len(loads), bound_ms=33)
    assert fit.l_sat == pytest.approx(l_sat, rel=0.03)
    assert fit.r0_ms == pytest.approx(r0, rel=0.05)
    assert fit.curve_cslv == pytest.approx(l_sat * (1 - r0 / 33), rel=0.05)


def test_mismatched_lengths_are_refused() -> None:
    with pytest.raises(ValueError, match="same length"):
        fit_cslv([1.0, 2.0], [1.0], [0.0, 0.0])
