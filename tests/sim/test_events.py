"""The event loop: ordering by (time, priority, insertion), cancellation, monotone time."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from coorp import InvariantError
from coorp.sim.events import PRIO_ACCESS, PRIO_CONTROL, PRIO_MEDIUM, PRIO_TRAFFIC, EventLoop


def test_priorities_put_the_medium_first_and_access_last() -> None:
    assert PRIO_MEDIUM < PRIO_CONTROL < PRIO_TRAFFIC < PRIO_ACCESS


def test_exact_trace_of_a_tiny_program() -> None:
    loop = EventLoop()
    log: list[tuple[int, str]] = []

    def rec(tag: str) -> None:
        log.append((loop.now_ns, tag))

    def spawner() -> None:
        rec("spawner")
        # Same instant, lower priority number than the running event: runs next, before
        # the PRIO_ACCESS event already queued for this instant.
        loop.call_at(loop.now_ns, PRIO_MEDIUM, rec, "spawned-now-medium")
        # Same instant, same priority as an already queued event: after it (insertion).
        loop.call_at(loop.now_ns, PRIO_ACCESS, rec, "spawned-now-access")
        loop.call_at(loop.now_ns + 5, PRIO_TRAFFIC, rec, "spawned-later")

    loop.call_at(20, PRIO_ACCESS, rec, "t20-access-a")
    loop.call_at(10, PRIO_TRAFFIC, rec, "t10-traffic")
    loop.call_at(20, PRIO_TRAFFIC, spawner)
    loop.call_at(10, PRIO_MEDIUM, rec, "t10-medium")
    loop.call_at(20, PRIO_ACCESS, rec, "t20-access-b")
    cancelled = loop.call_at(15, PRIO_MEDIUM, rec, "cancelled")
    loop.call_at(10, PRIO_TRAFFIC, rec, "t10-traffic-2")
    loop.call_at(30, PRIO_MEDIUM, rec, "after-until")
    cancelled.cancel()

    loop.run(until_ns=25)

    assert log == [
        (10, "t10-medium"),
        (10, "t10-traffic"),
        (10, "t10-traffic-2"),
        (20, "spawner"),
        (20, "spawned-now-medium"),
        (20, "t20-access-a"),
        (20, "t20-access-b"),
        (20, "spawned-now-access"),
        (25, "spawned-later"),
    ]
    # Cancelled events are skipped and not counted; run() ends at until_ns exactly.
    assert loop.events_processed == 9
    assert loop.now_ns == 25

    loop.run(until_ns=40)
    assert log[-1] == (30, "after-until")
    assert loop.events_processed == 10
    assert loop.now_ns == 40


def test_event_at_until_is_processed() -> None:
    loop = EventLoop()
    hits: list[int] = []
    loop.call_at(100, PRIO_ACCESS, hits.append, 1)
    loop.call_at(101, PRIO_ACCESS, hits.append, 2)
    loop.run(100)
    assert hits == [1]


def test_callback_receives_its_arguments() -> None:
    loop = EventLoop()
    got: list[tuple[Any, ...]] = []
    loop.call_at(1, PRIO_TRAFFIC, lambda *a: got.append(a), "x", 2, None)
    loop.run(1)
    assert got == [("x", 2, None)]


def test_scheduling_in_the_past_raises() -> None:
    loop = EventLoop()
    loop.call_at(50, PRIO_TRAFFIC, lambda: None)
    loop.run(60)
    with pytest.raises(InvariantError, match="in the past"):
        loop.call_at(59, PRIO_TRAFFIC, lambda: None)
    # "now" itself is allowed.
    loop.call_at(60, PRIO_TRAFFIC, lambda: None)


def test_scheduling_in_the_past_from_a_callback_raises() -> None:
    loop = EventLoop()
    errors: list[Exception] = []

    def bad() -> None:
        try:
            loop.call_at(loop.now_ns - 1, PRIO_MEDIUM, lambda: None)
        except InvariantError as exc:
            errors.append(exc)

    loop.call_at(10, PRIO_TRAFFIC, bad)
    loop.run(20)
    assert len(errors) == 1


def test_cancel_from_an_earlier_event() -> None:
    loop = EventLoop()
    hits: list[str] = []
    victim = loop.call_at(10, PRIO_ACCESS, hits.append, "victim")
    loop.call_at(10, PRIO_MEDIUM, victim.cancel)
    loop.call_at(10, PRIO_ACCESS, hits.append, "survivor")
    loop.run(10)
    assert hits == ["survivor"]


_event = st.tuples(st.integers(0, 50), st.sampled_from([0, 1, 2, 3]), st.booleans())


@settings(max_examples=100, deadline=None)
@given(st.lists(_event, max_size=40), st.integers(0, 60))
def test_order_is_time_then_priority_then_insertion(
    events: list[tuple[int, int, bool]], until: int
) -> None:
    loop = EventLoop()
    ran: list[int] = []
    seen_now: list[int] = []

    def cb(i: int) -> None:
        seen_now.append(loop.now_ns)
        ran.append(i)

    handles = [loop.call_at(t, p, cb, i) for i, (t, p, _) in enumerate(events)]
    for h, (_, _, cancel) in zip(handles, events, strict=True):
        if cancel:
            h.cancel()
    loop.run(until)

    expected = sorted(
        (i for i, (t, _, cancel) in enumerate(events) if not cancel and t <= until),
        key=lambda i: (events[i][0], events[i][1], i),
    )
    assert ran == expected
    assert seen_now == sorted(seen_now)  # now_ns never goes back
    assert all(events[i][0] == t for i, t in zip(ran, seen_now, strict=True))
    assert loop.now_ns == until
    assert loop.events_processed == len(expected)


def test_run_with_an_earlier_horizon_does_not_move_time_back() -> None:
    loop = EventLoop()
    loop.call_at(50, PRIO_TRAFFIC, lambda: None)
    loop.run(60)
    try:
        loop.run(30)
    except InvariantError:
        return  # refusing is fine too
    assert loop.now_ns >= 60


@settings(max_examples=200, deadline=None)
@given(
    ops=st.lists(
        st.one_of(
            st.tuples(st.integers(0, 50), st.integers(0, 3)),  # push (time, prio)
            st.just(None),  # pop
        ),
        max_size=120,
    )
)
def test_the_compiled_heap_pops_what_heapq_pops(ops: list[tuple[int, int] | None]) -> None:
    """``events._heappush``/``_heappop`` (heapq's sifts with the events' own comparison):
    under any mix of pushes and pops, the same events as ``heapq`` on the same keys."""
    import heapq

    from coorp.sim.events import Event, _heappop, _heappush

    heap: list[Event] = []
    ref: list[tuple[int, int, int]] = []
    for seq, op in enumerate(ops):
        if op is None:
            if ref:
                got = _heappop(heap)
                assert (got.time_ns, got.prio, got.seq) == heapq.heappop(ref)
            continue
        t, prio = op
        _heappush(heap, Event(t, print, (), prio, seq))
        heapq.heappush(ref, (t, prio, seq))
        assert (heap[0].time_ns, heap[0].prio, heap[0].seq) == ref[0]
    while ref:
        got = _heappop(heap)
        assert (got.time_ns, got.prio, got.seq) == heapq.heappop(ref)
    assert heap == []
