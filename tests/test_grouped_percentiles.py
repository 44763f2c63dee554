"""coorp.stats: grouped percentiles against numpy's own, value for value."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from coorp.stats import grouped_percentiles, percentile

finite = st.floats(min_value=-1e12, max_value=1e12, allow_nan=False, allow_infinity=False)


@settings(max_examples=300, deadline=None)
@given(
    groups=st.lists(st.lists(finite, max_size=40), max_size=12),
    qs=st.lists(st.floats(min_value=0, max_value=100), min_size=1, max_size=4),
)
def test_grouped_percentiles_are_numpys_bit_for_bit(
    groups: list[list[float]], qs: list[float]
) -> None:
    values = np.array([v for g in groups for v in sorted(g)], dtype=np.float64)
    counts = np.array([len(g) for g in groups], dtype=np.int64)
    got = grouped_percentiles(values, counts, qs)
    assert got.shape == (len(groups), len(qs))
    for i, g in enumerate(groups):
        for j, q in enumerate(qs):
            if not g:
                assert math.isnan(got[i, j])
                continue
            want = float(np.percentile(np.array(g), q, method="linear"))
            assert got[i, j] == want or (math.isnan(want) and math.isnan(got[i, j])), (g, q)


def test_grouped_percentiles_interpolate_and_clamp() -> None:
    values = np.array([1.0, 2.0, 3.0, 4.0, 7.0, 10.0, 20.0])
    counts = np.array([4, 0, 1, 2], dtype=np.int64)
    got = grouped_percentiles(values, counts, [0, 50, 99, 100])
    assert got[0].tolist() == pytest.approx([1.0, 2.5, 3.97, 4.0], abs=1e-12)
    assert np.isnan(got[1]).all()
    assert got[2].tolist() == [7.0] * 4
    assert got[3].tolist() == pytest.approx([10.0, 15.0, 19.9, 20.0], abs=1e-12)


def test_percentile_of_nothing_is_the_empty_value() -> None:
    assert percentile([], 50, empty=None) is None
    assert percentile([3.0, 1.0, 2.0], 50) == 2.0
