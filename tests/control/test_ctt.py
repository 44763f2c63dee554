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


@settings(max_examples=150)
@given(
    durations=st.lists(st.integers(0, 1_000), min_size=1, max_size=120),
    size=st.integers(1, 20),
    percentile=st.sampled_from([0.0, 50.0, 95.0, 99.9, 100.0]),
)
def test_every_answer_matches_a_fresh_sort_of_the_current_ring(
    durations: list[int], size: int, percentile: float
) -> None:
    # The table keeps its samples sorted incrementally (evictions included, duplicates
    # likely with this small range): asked after every record, it must answer the
    # percentile of the current ring, as numpy computes it from scratch.
    ctt = CompletionTimeTable(samples_per_depth=size, percentile=percentile)
    for d in durations:
        ctt.record(0, d)
        ring = np.array(ctt.samples(0), dtype=np.float64)
        expected = float(np.percentile(ring, percentile))
        assert expected - 1e-9 <= ctt.query(0) < expected + 1


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
    assert ctt.query(0) == 20  # the answer borrowed from the deeper depth follows too


def test_before_any_sample_the_answer_is_one_max_ppdu_per_packet() -> None:
    ctt = CompletionTimeTable(default_ns=5_484_000)
    assert ctt.query(0) == 5_484_000
    assert ctt.query(9) == 10 * 5_484_000


def test_unsampled_depth_below_every_sampled_one_uses_the_nearest_deeper_depth() -> None:
    ctt = CompletionTimeTable(percentile=50.0)
    for d in (1_000, 9_000, 2_000):
        ctt.record(5, d)
    ctt.record(8, 50_000)
    # A packet behind fewer packets does not finish later: CTT(5) bounds depth 2.
    assert ctt.query(2) == 2_000


def test_unsampled_depth_scales_the_nearest_shallower_depth_by_depth() -> None:
    ctt = CompletionTimeTable(default_ns=5_484_000)
    ctt.record(2, 90_000)  # three packets (2 ahead + itself): 30 µs each
    assert ctt.query(4) == 150_000  # five packets, not (4+1)·5.484 ms
    assert ctt.query(3) == 120_000
    ctt.record(3, 100_000)
    assert ctt.query(4) == 125_000  # now scaled from depth 3
    ctt2 = CompletionTimeTable()
    ctt2.record(2, 10)
    assert ctt2.query(4) == 17  # rounded up


def test_unsampled_depth_between_sampled_ones_is_bounded_by_both() -> None:
    ctt = CompletionTimeTable(percentile=50.0)
    for d in (1_000, 9_000, 2_000):
        ctt.record(5, d)  # median 2_000
    ctt.record(8, 50_000)
    assert ctt.query(6) == 2_334  # 2_000·7/6, rounded up; below CTT(8)
    ctt.record(7, 2_100)
    assert ctt.query(6) == 2_100  # the scaled 2_334 exceeds what depth 7 takes
    assert ctt.query(0) == 2_000  # and nothing changed below the shallowest


@settings(max_examples=200)
@given(
    sampled=st.sets(st.integers(0, 30), min_size=1, max_size=10),
    per_packet=st.integers(1_000, 100_000),
    query=st.integers(0, 40),
)
def test_a_linear_queue_is_extrapolated_exactly(
    sampled: set[int], per_packet: int, query: int
) -> None:
    # Ground truth: every packet ahead (and the packet itself) takes per_packet.
    ctt = CompletionTimeTable(max_depth=30, default_ns=10**9)
    for depth in sampled:
        ctt.record(depth, (depth + 1) * per_packet)
    q = min(query, 30)
    if q >= min(sampled):
        assert ctt.query(query) == (q + 1) * per_packet


@settings(max_examples=300)
@given(
    rings=st.dictionaries(
        st.integers(0, 30), st.lists(st.integers(0, 10**8), min_size=1, max_size=6), max_size=8
    ),
    default=st.integers(1, 10**7),
    query=st.integers(0, 40),
)
def test_unsampled_depths_lie_between_their_sampled_neighbours(
    rings: dict[int, list[int]], default: int, query: int
) -> None:
    ctt = CompletionTimeTable(max_depth=30, default_ns=default)
    for depth, durations in rings.items():
        for d in durations:
            ctt.record(depth, d)
    q = min(query, 30)
    if q in rings:
        return
    got = ctt.query(query)
    lower = [k for k in rings if k < q]
    upper = [k for k in rings if k > q]
    if not lower and not upper:
        assert got == (q + 1) * default
    if lower:
        assert got >= ctt.query(max(lower))
    if upper and (not lower or ctt.query(min(upper)) >= ctt.query(max(lower))):
        assert got <= ctt.query(min(upper))
    if upper and not lower:
        assert got == ctt.query(min(upper))


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


def test_the_floor_keeps_unmeasured_depths_above_what_their_packets_need() -> None:
    # Realized samples of 0 at depth 2 (the sends came late enough): scaling them says
    # a full ring clears at once; the floor says each extra packet costs >= 10 ns.
    plain = CompletionTimeTable(percentile=100.0)
    floored = CompletionTimeTable(percentile=100.0, min_per_packet_ns=10)
    for t in (plain, floored):
        t.record(2, 0)
        t.record(100, 5)  # a deeper sample below the floor: it no longer caps
    assert plain.query(50) == 0
    assert floored.query(50) == 0 + (50 - 2) * 10
    assert floored.query(2) == 0  # a measured depth answers what it measured
    assert floored.query(100) == 5
    assert floored.query(150) == 5 + 50 * 10
    # A measured answer already above the floor is kept.
    big = CompletionTimeTable(percentile=100.0, min_per_packet_ns=1)
    big.record(0, 1_000)
    assert big.query(9) == 10_000  # scaled by depth: 1000 · 10 / 1
    with pytest.raises(UsageError, match="min_per_packet_ns"):
        CompletionTimeTable(min_per_packet_ns=-1)


def test_lead_buckets_inherit_the_floor() -> None:
    t = CompletionTimeTable(percentile=100.0, lead_edges_ns=(1_000,), min_per_packet_ns=7)
    t.record(0, 0, lead_ns=2_000)
    assert t.query(10, lead_ns=2_000) == 70
    assert t.min_per_packet_ns == 7


@settings(max_examples=120, deadline=None)
@given(
    ops=st.lists(
        st.tuples(
            st.integers(0, 12),  # depth (beyond max_depth 9 is clamped)
            st.integers(1, 5),  # packets in the run
            st.integers(0, 40),  # duration: a small range, so ties are common
            st.sampled_from([None, 500, 1_500, 5_000]),  # lead
            st.integers(0, 30),  # time step
        ),
        max_size=150,
    ),
    size=st.sampled_from([1, 3, 8, 64]),
    percentile=st.sampled_from([0.0, 37.5, 90.0, 95.0, 99.0, 100.0]),
    max_age=st.sampled_from([None, 40, 200]),
)
def test_runs_ageing_and_lead_buckets_match_a_plain_model(
    ops: list[tuple[int, int, int, int | None, int]],
    size: int,
    percentile: float,
    max_age: int | None,
) -> None:
    # The table (circular buffers, the largest samples kept incrementally) against the
    # plainest model: per table and depth the list of (value, time) recorded, of which
    # the last ``size`` not older than max_age count; a sampled depth answers numpy's
    # percentile of them.
    edges = (1_000, 2_000)
    ctt = CompletionTimeTable(
        max_depth=9, samples_per_depth=size, percentile=percentile,
        lead_edges_ns=edges, max_age_ns=max_age,
    )  # fmt: skip
    model: dict[int | None, dict[int, list[tuple[int, int]]]] = {}
    now = 0
    for depth, count, value, lead, step in ops:
        now += step
        ctt.record_run(depth, count, value, lead, at_ns=now)
        tables = [None] if lead is None else [None, sum(lead >= e for e in edges)]
        for t in tables:
            for d in range(depth, depth + count):
                model.setdefault(t, {}).setdefault(min(d, 9), []).append((value, now))

        def ring(t: int | None, d: int, now: int = now) -> list[int]:
            kept = model.get(t, {}).get(d, [])[-size:]
            return [v for v, at in kept if max_age is None or at >= now - max_age]

        for t in (None, 0, 1, 2):
            bucket = None if t is None else ctt._by_lead[t]
            table = ctt if bucket is None else bucket
            for d in range(10):
                if max_age is not None:
                    table._table(None, now)  # forget what expired (as a query at now)
                assert list(table.samples(d)) == ring(t, d)
                if ring(t, d):
                    expected = float(np.percentile(np.array(ring(t, d), float), percentile))
                    assert expected - 1e-9 <= table.query(d) < expected + 1
            # The sorted list a depth without samples finds its neighbours in is exactly
            # the depths holding samples (kept as samples come, and as they expire).
            assert table._depths == [d for d in range(10) if ring(t, d)]


def test_record_run_is_record_at_consecutive_depths() -> None:
    one, runs = CompletionTimeTable(max_depth=6), CompletionTimeTable(max_depth=6)
    for depth, count, value in [(0, 4, 10), (2, 9, 30), (5, 1, 20), (6, 3, 5)]:
        for i in range(count):
            one.record(depth + i, value)
        runs.record_run(depth, count, value)
    assert [one.samples(d) for d in range(7)] == [runs.samples(d) for d in range(7)]
    assert runs.samples(6) == (30, 30, 30, 30, 30, 5, 5, 5)  # clamped depths, in order
    assert [one.query(d) for d in range(9)] == [runs.query(d) for d in range(9)]
    with pytest.raises(UsageError, match="count=-1"):
        runs.record_run(0, -1, 5)


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 5), st.integers(1, 3), st.integers(0, 10_000),
                       st.sampled_from([None, 500, 1_500, 3_000])), min_size=1, max_size=40),
    st.sampled_from([95.0, 50.0, 99.0, 80.0]),
    st.sampled_from([50.0, 95.0, 10.0]),
)  # fmt: skip
def test_a_new_percentile_answers_as_a_table_built_with_it(
    ops: list[tuple[int, int, int, int | None]], before: float, after: float
) -> None:
    switched = CompletionTimeTable(max_depth=7, samples_per_depth=8, percentile=before,
                                   lead_edges_ns=(1_000, 2_000))  # fmt: skip
    fresh = CompletionTimeTable(max_depth=7, samples_per_depth=8, percentile=after,
                                lead_edges_ns=(1_000, 2_000))  # fmt: skip
    half = len(ops) // 2
    for depth, count, value, lead in ops[:half]:
        switched.record_run(depth, count, value, lead)
        fresh.record_run(depth, count, value, lead)
    [switched.query(d, lead) for d in range(9) for lead in (None, 700, 2_500)]  # warm caches
    switched.set_percentile(after)
    assert switched.percentile == after
    for depth, count, value, lead in ops[half:]:
        switched.record_run(depth, count, value, lead)
        fresh.record_run(depth, count, value, lead)
    for lead in (None, 700, 1_200, 2_500):
        assert [switched.query(d, lead) for d in range(9)] == [
            fresh.query(d, lead) for d in range(9)
        ]
    with pytest.raises(UsageError, match="percentile=101"):
        switched.set_percentile(101)
