"""The SchedWiFi baseline: Eq. 4 windows, the global schedule, the time-aware shaper."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from coorp import UsageError
from coorp.control import (
    CompletionTimeTable,
    Interval,
    PeriodicWindow,
    SchedWifiPlanner,
    TimeAwareShaper,
    stw_duration_ns,
)
from coorp.control._windows import first_window

MS = 1_000_000


def test_stw_for_a_12_kib_perception_at_100_mbps_by_hand() -> None:
    # L/rate       = 12288 B · 8 bit/B / 100 Mb/s = 98304 bit / 100 bit/µs = 983.04 µs
    # one attempt  = 983.04 + 2·16 (SIFS) + 30 (TX_ack)                    = 1045.04 µs
    # R = 7        = 1045.04 · (1 + 7)                                      = 8360.32 µs
    # guards       = 8360.32 + 2·25                                         = 8410.32 µs
    assert stw_duration_ns(12_288, 100.0) == 8_410_320
    # A 10 µs clock skew pads both ends: + 20 µs.
    assert stw_duration_ns(12_288, 100.0, clock_skew_ns=10_000) == 8_430_320


def test_stw_rounds_the_airtime_up_to_a_whole_nanosecond() -> None:
    # 1000 B at 6 Mb/s = 8000/6 µs = 1333.333… µs → 1_333_334 ns; no retries:
    # 2·25 µs + (1_333_334 + 32_000 + 30_000) ns = 1_445_334 ns.
    assert stw_duration_ns(1_000, 6.0, retries=0) == 1_445_334


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"message_bytes": -1, "rate_mbps": 6.0}, "message_bytes=-1"),
        ({"message_bytes": 1, "rate_mbps": 0.0}, "rate_mbps=0.0"),
        ({"message_bytes": 1, "rate_mbps": 6.0, "retries": -1}, "retries=-1"),
        ({"message_bytes": 1, "rate_mbps": 6.0, "clock_skew_ns": -5}, "clock_skew_ns=-5"),
    ],
)
def test_stw_rejects_bad_arguments(kwargs: dict, name: str) -> None:
    with pytest.raises(UsageError, match=name):
        stw_duration_ns(**kwargs)


def test_schedule_repeats_every_period() -> None:
    planner = SchedWifiPlanner([(5 * MS, 33 * MS, 2 * MS)])
    assert planner.next_window(0) == Interval(5 * MS, 7 * MS - 1)
    assert planner.next_window(6 * MS) == Interval(5 * MS, 7 * MS - 1)
    assert planner.next_window(7 * MS) == Interval(38 * MS, 40 * MS - 1)
    assert planner.next_window(100 * 33 * MS + 1) == Interval(
        100 * 33 * MS + 5 * MS, 100 * 33 * MS + 7 * MS - 1
    )
    assert planner.reserved_fraction == pytest.approx(2 / 33)


def test_back_to_back_lays_windows_end_to_end() -> None:
    planner = SchedWifiPlanner.back_to_back(
        [1 * MS, 2 * MS, 3 * MS], period_ns=10 * MS, start_ns=MS
    )
    assert planner.windows == (
        PeriodicWindow(1 * MS, 10 * MS, 1 * MS),
        PeriodicWindow(2 * MS, 10 * MS, 2 * MS),
        PeriodicWindow(4 * MS, 10 * MS, 3 * MS),
    )
    with pytest.raises(UsageError, match="exceeds period_ns"):
        SchedWifiPlanner.back_to_back([6 * MS, 6 * MS], period_ns=10 * MS)


def test_from_messages_sizes_each_window_with_eq4() -> None:
    planner = SchedWifiPlanner.from_messages(
        [(12_288, 100.0), (1_000, 6.0)], period_ns=33 * MS, retries=0
    )
    durations = [w.duration_ns for w in planner.windows]
    assert durations == [stw_duration_ns(12_288, 100.0, retries=0), 1_445_334]
    assert planner.windows[1].offset_ns == durations[0]


def test_schedule_rejects_windows_longer_than_their_period() -> None:
    with pytest.raises(UsageError, match=r"windows\[1\].duration_ns=11"):
        SchedWifiPlanner([(0, 10, 5), (0, 10, 11)])
    with pytest.raises(UsageError, match=r"windows\[0\].period_ns=0"):
        SchedWifiPlanner([(0, 0, 0)])
    assert SchedWifiPlanner([]).next_window(0) is None


@settings(max_examples=200)
@given(
    windows=st.lists(
        st.tuples(st.integers(0, 50 * MS), st.integers(5 * MS, 50 * MS), st.integers(1, 3 * MS)),
        min_size=1,
        max_size=4,
    ),
    per_packet=st.integers(10_000, 2 * MS),
    now=st.integers(0, 500 * MS),
    depth=st.integers(0, 10),
)
def test_shaper_never_admits_a_packet_that_would_reach_a_window(
    windows: list[tuple[int, int, int]], per_packet: int, now: int, depth: int
) -> None:
    planner = SchedWifiPlanner(windows)
    ctt = CompletionTimeTable(default_ns=per_packet)
    shaper = TimeAwareShaper(planner, ctt)
    decision = shaper.decide(now, depth)
    busy = Interval(now, now + ctt.query(depth))
    for w in planner.windows:
        occurrence = w.next_after(now)
        if decision.allow:
            assert not occurrence.overlaps(busy)
    if not decision.allow:
        assert decision.resume_ns is not None and decision.resume_ns > now


def test_shaper_feeds_its_ctt_like_the_gate() -> None:
    ctt = CompletionTimeTable()
    shaper = TimeAwareShaper(SchedWifiPlanner([]), ctt)
    shaper.on_enqueue(1, 0, 2)
    shaper.on_complete(1, 40)
    assert ctt.samples(2) == (40,)


@settings(max_examples=200, deadline=None)
@given(
    windows=st.lists(
        st.tuples(st.integers(0, 5_000), st.integers(100, 3_000), st.integers(1, 100)),
        min_size=1, max_size=5,
    ),
    queries=st.lists(st.integers(0, 40_000), min_size=1, max_size=60),
    ordered=st.booleans(),
)  # fmt: skip
def test_reused_answers_equal_a_fresh_merge(
    windows: list[tuple[int, int, int]], queries: list[int], ordered: bool
) -> None:
    # next_window reuses its last answer while it cannot change; asked in any order,
    # it must say exactly what a fresh merge over the same series says.
    planner = SchedWifiPlanner(windows)
    fresh = [w.next_after for w in planner.windows]
    for t in sorted(queries) if ordered else queries:
        assert planner.next_window(t) == first_window(fresh, t)
