"""The completion-time table."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from coorp import UsageError
from coorp.control import CompletionTimeTable


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"max_depth": -1}, "max_depth=-1"),
        ({"samples_per_depth": 0}, "samples_per_depth=0"),
        ({"percentile": 100.5}, "percentile=100.5"),
        ({"percentile": -1.0}, "percentile=-1.0"),
        ({"default_ns": 0}, "default_ns=0"),
    ],
)
def test_bad_arguments_raise_usage_errors_naming_them(kwargs: dict, name: str) -> None:
    with pytest.raises(UsageError, match=name):
        CompletionTimeTable(**kwargs)


@settings(max_examples=300)
@given(
    durations=st.lists(st.integers(0, 50_000_000), min_size=1, max_size=200),
    size=st.integers(1, 70),
    percentile=st.floats(0.0, 100.0),
)
def test_percentile_matches_numpy_on_the_ring_and_the_ring_is_bounded(
    durations: list[int], size: int, percentile: float
) -> None:
    ctt = CompletionTimeTable(samples_per_depth=size, percentile=percentile)
    for d in durations:
        ctt.record(3, d)
    ring = ctt.samples(3)
    assert list(ring) == durations[-size:]  # the most recent samples, oldest first
    expected = float(np.percentile(np.array(ring, dtype=np.float64), percentile))
    got = ctt.query(3)
    # Rounded up to whole nanoseconds, never below the true percentile.
    assert expected - 1e-6 * max(1.0, expected) <= got <= expected + 1 + 1e-6 * expected


def test_extreme_percentiles_are_min_and_max() -> None:
    low = CompletionTimeTable(percentile=0.0)
    high = CompletionTimeTable(percentile=100.0)
    for ctt in (low, high):
        for d in (700, 100, 400):
            ctt.record(0, d)
    assert low.query(0) == 100
    assert high.query(0) == 700


def test_query_reflects_new_samples() -> None:
    ctt = CompletionTimeTable(percentile=100.0)
    ctt.record(1, 10)
    assert ctt.query(1) == 10
    ctt.record(1, 20)
    assert ctt.query(1) == 20
    assert ctt.query(0) == 20  # fallback to the deeper depth follows too


def test_before_any_sample_the_answer_is_one_max_ppdu_per_packet() -> None:
    ctt = CompletionTimeTable(default_ns=5_484_000)
    assert ctt.query(0) == 5_484_000
    assert ctt.query(9) == 10 * 5_484_000


def test_unsampled_depth_uses_the_largest_sample_of_the_nearest_deeper_depth() -> None:
    ctt = CompletionTimeTable(percentile=50.0)
    for d in (1_000, 9_000, 2_000):
        ctt.record(5, d)
    ctt.record(8, 50_000)
    assert ctt.query(2) == 9_000  # the max of depth 5, not its median (2_000)
    assert ctt.query(6) == 50_000


def test_unsampled_depth_beyond_all_samples_is_never_below_a_shallower_one() -> None:
    ctt = CompletionTimeTable(default_ns=1_000)
    ctt.record(2, 80_000)
    assert ctt.query(4) == 80_000  # (4+1)·1000 would undercut what depth 2 took
    ctt2 = CompletionTimeTable(default_ns=1_000)
    ctt2.record(2, 10)
    assert ctt2.query(4) == 5_000


@settings(max_examples=200)
@given(
    sampled=st.sets(st.integers(0, 30), min_size=1, max_size=10),
    per_packet=st.integers(1_000, 100_000),
    query=st.integers(0, 40),
    data=st.data(),
)
def test_fallback_is_conservative_when_completion_time_grows_with_depth(
    sampled: set[int], per_packet: int, query: int, data: st.DataObject
) -> None:
    # Ground truth: behind n packets a packet takes between n and n+1 airtimes.
    ctt = CompletionTimeTable(max_depth=30, default_ns=per_packet)
    for depth in sampled:
        lo, hi = depth * per_packet, (depth + 1) * per_packet
        for d in data.draw(st.lists(st.integers(lo, hi), min_size=1, max_size=5)):
            ctt.record(depth, d)
    q = min(query, 30)
    if q not in sampled:
        # Not below the worst the truth allows at depth q, nor below anything seen
        # at a shallower depth.
        assert ctt.query(query) >= (q + 1) * per_packet
        for d in sampled:
            if d < q:
                assert ctt.query(query) >= max(ctt.samples(d))


def test_depths_beyond_max_depth_are_clamped() -> None:
    ctt = CompletionTimeTable(max_depth=4, samples_per_depth=2)
    ctt.record(10, 111)
    ctt.record(4, 222)
    ctt.record(99, 333)
    assert ctt.samples(4) == (222, 333)
    assert ctt.samples(1000) == (222, 333)
    assert ctt.query(1000) == ctt.query(4)


def test_negative_depth_or_duration_is_a_usage_error() -> None:
    ctt = CompletionTimeTable()
    with pytest.raises(UsageError, match="depth=-1"):
        ctt.record(-1, 5)
    with pytest.raises(UsageError, match="duration_ns=-5"):
        ctt.record(0, -5)
    with pytest.raises(UsageError, match="depth=-2"):
        ctt.query(-2)
