"""Algorithm 2: the virtual-preemption gate."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from coorp import UsageError
from coorp.control import (
    CompletionTimeTable,
    Gate,
    GateDecision,
    Interval,
    ProtectionPlanner,
    decide_against,
)

MS = 1_000_000
P = 33_333_333


@dataclass
class FixedWindows:
    """A window source with a fixed list of disjoint windows (test double)."""

    windows: list[Interval]

    def next_window(self, now_ns: int) -> Interval | None:
        return next((w for w in self.windows if w.end_ns >= now_ns), None)


def ctt_with(depth: int, duration: int) -> CompletionTimeTable:
    ctt = CompletionTimeTable(percentile=100.0)
    ctt.record(depth, duration)
    return ctt


def test_decision_rule_at_the_boundaries() -> None:
    # Window [1000, 2000]; a packet behind 2 others takes 300 ns.
    gate = Gate(FixedWindows([Interval(1000, 2000)]), ctt_with(2, 300))
    assert gate.decide(699, 2) == GateDecision(True, None)  # t1 − T = 301 > 300
    assert gate.decide(700, 2) == GateDecision(False, 2001)  # t1 − T = 300 ≤ 300
    assert gate.decide(1000, 2) == GateDecision(False, 2001)  # t1 ≤ T ≤ t2
    assert gate.decide(2000, 2) == GateDecision(False, 2001)
    assert gate.decide(2001, 2) == GateDecision(True, None)  # window over, none next
    s = gate.stats
    assert (s.allowed, s.denied_ahead, s.denied_inside) == (2, 1, 2)


def test_deeper_queue_stops_feeding_earlier() -> None:
    ctt = CompletionTimeTable(percentile=100.0)
    ctt.record(0, 100)
    ctt.record(5, 900)
    gate = Gate(FixedWindows([Interval(1000, 1100)]), ctt)
    assert gate.decide(500, 0).allow
    assert not gate.decide(500, 5).allow


def test_no_window_means_allow() -> None:
    gate = Gate(ProtectionPlanner(), CompletionTimeTable())
    assert gate.decide(0, 50) == GateDecision(True, None)
    assert decide_against(None, 0, 10**12).allow


def test_resume_time_is_after_the_window_so_the_caller_always_progresses() -> None:
    gate = Gate(FixedWindows([Interval(10, 20), Interval(21, 30)]), ctt_with(0, 1))
    t, hops = 10, 0
    while not (d := gate.decide(t, 0)).allow:
        assert d.resume_ns is not None and d.resume_ns > t
        t, hops = d.resume_ns, hops + 1
    assert t == 31 and hops == 2


def test_enqueue_and_complete_feed_the_ctt_by_depth_at_enqueue() -> None:
    ctt = CompletionTimeTable()
    gate = Gate(ProtectionPlanner(), ctt)
    gate.on_enqueue(1, 100, 3)
    gate.on_enqueue(2, 150, 4)
    assert gate.pending == 2
    gate.on_complete(1, 600)
    gate.on_complete(2, 1_150)
    assert ctt.samples(3) == (500,)
    assert ctt.samples(4) == (1_000,)
    gate.on_complete(99, 2_000)  # never enqueued
    gate.on_enqueue(3, 2_000, 0)
    gate.on_discard(3)
    gate.on_complete(3, 2_100)
    assert ctt.samples(0) == ()
    assert gate.stats.completions == 2
    assert gate.stats.unknown_completions == 2


def test_recycled_ids_and_the_pending_bound() -> None:
    ctt = CompletionTimeTable()
    gate = Gate(ProtectionPlanner(), ctt, max_pending=2)
    gate.on_enqueue(1, 0, 0)
    gate.on_enqueue(1, 10, 1)  # completion of the first was lost; id reused
    gate.on_complete(1, 15)
    assert ctt.samples(1) == (5,)
    assert gate.stats.replaced_pending == 1
    for pid in (5, 6, 7):
        gate.on_enqueue(pid, 20, 0)
    assert gate.pending == 2 and gate.stats.evicted_pending == 1
    gate.on_complete(5, 30)  # evicted: the oldest went first
    assert gate.stats.unknown_completions == 1


def test_bad_gate_arguments() -> None:
    gate = Gate(ProtectionPlanner(), CompletionTimeTable())
    with pytest.raises(UsageError, match="queue_depth=-1"):
        gate.on_enqueue(1, 0, -1)
    gate.on_enqueue(1, 100, 0)
    with pytest.raises(UsageError, match="now_ns=50"):
        gate.on_complete(1, 50)
    with pytest.raises(UsageError, match="max_pending=0"):
        Gate(ProtectionPlanner(), CompletionTimeTable(), max_pending=0)


def test_coorp_gate_pauses_ahead_of_a_predicted_ls_send() -> None:
    planner = ProtectionPlanner(margin_ns=2 * MS)
    for k in range(10):
        planner.observe("cam", k * P)
    ctt = ctt_with(4, 3 * MS)  # four packets ahead drain in 3 ms
    gate = Gate(planner, ctt)
    delta = planner.model("cam").delta_ns
    assert delta is not None
    t1 = 10 * P - delta
    assert gate.decide(t1 - 3 * MS - 1, 4).allow
    denied = gate.decide(t1 - 3 * MS, 4)
    assert not denied.allow
    assert denied.resume_ns == 10 * P + delta + 2 * MS + 1
    # Once the LS message has gone out, bulk traffic resumes at once.
    planner.observe("cam", 10 * P)
    assert gate.decide(10 * P + 1, 0).allow


@settings(max_examples=200, deadline=None)
@given(
    flows=st.lists(
        st.tuples(st.integers(10 * MS, 60 * MS), st.integers(0, 60 * MS), st.integers(0, 2)),
        min_size=1,
        max_size=4,
    ),
    seed=st.integers(0, 2**32 - 1),
    margin=st.integers(0, 3 * MS),
    probes=st.lists(st.tuples(st.integers(0, 400 * MS), st.integers(0, 40)), max_size=20),
)
def test_gate_never_admits_a_packet_that_would_overlap_a_window(
    flows: list[tuple[int, int, int]],
    seed: int,
    margin: int,
    probes: list[tuple[int, int]],
) -> None:
    rng = np.random.default_rng(seed)
    planner = ProtectionPlanner(margin_ns=margin)
    start = 10**9
    for i, (period, phase, jitter_ms) in enumerate(flows):
        noise = rng.normal(0.0, jitter_ms * 0.3 * MS, size=20)
        sends = sorted(start + phase + period * k + round(e) for k, e in enumerate(noise))
        for t in sends:
            planner.observe(f"f{i}", t)
    ctt = CompletionTimeTable(max_depth=32)
    for depth in range(0, 33, 3):
        for d in rng.integers(depth * 200_000, (depth + 1) * 900_000, size=5):
            ctt.record(depth, int(d))
    gate = Gate(planner, ctt)
    last = max(planner.model(f).last_send_ns or 0 for f in planner.flows)
    times = [(last + offset, depth) for offset, depth in probes]
    # Probes right at every boundary of the first few predicted intervals of each flow.
    for flow in planner.flows:
        t = last
        for _ in range(3):
            iv = planner.model(flow).predict(t)
            if iv is None:
                break
            for depth in (0, 3, 12, 40):
                lead = ctt.query(depth)
                for now in (
                    iv.start_ns - lead - 1,
                    iv.start_ns - lead,
                    iv.start_ns - lead + 1,
                    iv.end_ns,
                    iv.end_ns + margin,
                    iv.end_ns + margin + 1,
                ):
                    times.append((now, depth))
            t = iv.end_ns + 1
    for now, depth in times:
        decision = gate.decide(now, depth)
        busy = Interval(now, now + ctt.query(depth))
        # Every predicted send interval of every flow, extended by the margin.
        for flow in planner.flows:
            model = planner.model(flow)
            t = now - margin
            while (iv := model.predict(t)) is not None and iv.start_ns <= busy.end_ns:
                protected = Interval(iv.start_ns, iv.end_ns + margin)
                if decision.allow:
                    assert not protected.overlaps(busy)
                t = iv.end_ns + 1
        if not decision.allow:
            assert decision.resume_ns is not None and decision.resume_ns > now
