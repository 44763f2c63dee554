"""Algorithm 2: the virtual-preemption gate."""

from __future__ import annotations

import itertools
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
    explore=st.booleans(),
)
def test_gate_never_admits_a_packet_that_would_overlap_a_window(
    flows: list[tuple[int, int, int]],
    seed: int,
    margin: int,
    probes: list[tuple[int, int]],
    explore: bool,
) -> None:
    # Algorithm 2's guarantee, for every packet it admits; exploration probes are
    # the bounded exception (checked here to go out only at the start of a gap,
    # into an empty queue, never inside a window).
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
    gate = Gate(planner, ctt, explore=explore)
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
    resume: int | None = None
    for now, depth in times:
        decision = gate.decide(now, depth)
        if decision.explore:
            assert explore and decision.allow and depth == 0
            assert resume is not None and now >= resume  # the first ask after a pause
            busy = Interval(now, now)  # not inside any window, whatever its length
        else:
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
        resume = decision.resume_ns if decision.explore or not decision.allow else None


class Link:
    """A FIFO NIC (at most ``capacity`` packets) with a fixed service time per packet,
    driven like a driver drives the gate: ask; if allowed, enqueue and ask again (at
    once, or when a packet leaves a full queue); if denied, come back at
    ``resume_ns``. Completions are reported when they happen."""

    def __init__(self, gate: Gate, service_ns: int, capacity: int = 16) -> None:
        self.gate = gate
        self.service_ns = service_ns
        self.capacity = capacity
        self.queue: list[tuple[int, int]] = []  # (packet id, completion time)
        self.next_id = 1
        self.admitted: list[tuple[int, GateDecision, int]] = []  # (time, decision, depth)
        self.asked: list[tuple[int, int]] = []  # (time, depth) of every decision

    def run(self, start: int, end: int) -> None:
        t = start
        for _ in range(200_000):
            if t >= end:
                return
            while self.queue and self.queue[0][1] <= t:
                pid, done = self.queue.pop(0)
                self.gate.on_complete(pid, done)
            depth = len(self.queue)
            if depth == self.capacity:
                t = self.queue[0][1]
                continue
            decision = self.gate.decide(t, depth)
            self.asked.append((t, depth))
            if decision.allow:
                free = self.queue[-1][1] if self.queue else t
                self.queue.append((self.next_id, max(free, t) + self.service_ns))
                self.gate.on_enqueue(self.next_id, t, depth)
                self.next_id += 1
                self.admitted.append((t, decision, depth))
            else:
                assert decision.resume_ns is not None
                nxt = decision.resume_ns
                if self.queue:
                    nxt = min(nxt, max(self.queue[0][1], t + 1))
                t = nxt
        raise AssertionError("the driver loop did not end")


def periodic_windows(start: int, count: int, gap: int, length: int) -> list[Interval]:
    every = gap + length
    return [Interval(start + i * every + gap, start + i * every + gap + length - 1)
            for i in range(count)]  # fmt: skip


def test_a_ctt_too_large_for_every_gap_is_explored_not_starved() -> None:
    # Nothing measured yet and a 5 ms guess per packet, but gaps are 3 ms long and a
    # packet really takes 0.2 ms: Algorithm 2 alone would deny forever.
    windows = periodic_windows(0, 40, gap=3 * MS, length=MS)
    gate = Gate(FixedWindows(windows), CompletionTimeTable(default_ns=5 * MS))
    link = Link(gate, service_ns=MS // 5)
    link.run(0, windows[-1].end_ns)
    probes = [t for t, d, _ in link.admitted if d.explore]
    assert probes == [windows[0].end_ns + 1]  # one probe, at the start of the 2nd gap
    assert gate.stats.explore_late == 0
    # The probe measured CTT[0]; deeper depths are scaled from it: from then on every
    # gap is filled by Algorithm 2 itself, and nothing admitted overlaps a window.
    assert set(gate.ctt.samples(0)) == {MS // 5}
    for w_prev, w in itertools.pairwise(windows):
        in_gap = [t for t, _, _ in link.admitted if w_prev.end_ns < t < w.start_ns]
        assert len(in_gap) >= 10
    for pid_done in (done for _, done in link.queue):
        assert not any(w.contains(pid_done) for w in windows)


def test_stale_samples_are_refreshed_by_one_probe_per_gap() -> None:
    # Depth 0 remembers a congested moment (40 ms); the link is fast again.
    windows = periodic_windows(0, 100, gap=3 * MS, length=MS)
    ctt = CompletionTimeTable(samples_per_depth=8)
    for _ in range(8):
        ctt.record(0, 40 * MS)
    gate = Gate(FixedWindows(windows), ctt)
    link = Link(gate, service_ns=MS // 5)
    link.run(0, windows[-1].end_ns)
    probes = [t for t, d, _ in link.admitted if d.explore]
    assert probes == [w.end_ns + 1 for w in windows[:8]]  # until the ring is fresh
    assert max(ctt.samples(0)) == MS // 5
    assert sum(1 for _, d, _ in link.admitted if not d.explore) > 500


def test_probes_that_run_into_windows_back_off_exponentially() -> None:
    # A packet really takes 5 ms; gaps are 3 ms: every probe is late.
    windows = periodic_windows(0, 400, gap=3 * MS, length=MS)
    gate = Gate(FixedWindows(windows), CompletionTimeTable(default_ns=5 * MS))
    link = Link(gate, service_ns=5 * MS)
    link.run(0, windows[-1].end_ns)
    probe_gaps = [
        next(i for i, w in enumerate(windows) if t < w.start_ns)
        for t, d, _ in link.admitted
        if d.explore
    ]
    spacing = [b - a for a, b in itertools.pairwise(probe_gaps)]
    # After a late probe: the next gap still holds it, then 1, 2, 4... idle gaps (up
    # to 64) are skipped before the next probe.
    assert spacing[:7] == [3, 4, 6, 10, 18, 34, 66]
    assert all(s == 66 for s in spacing[7:])
    assert gate.stats.explore_late == len(probe_gaps)
    assert all(d.explore for _, d, _ in link.admitted)  # Algorithm 2 never admits


def test_exploration_can_be_switched_off() -> None:
    windows = periodic_windows(0, 10, gap=3 * MS, length=MS)
    gate = Gate(FixedWindows(windows), CompletionTimeTable(default_ns=5 * MS), explore=False)
    link = Link(gate, service_ns=MS // 5)
    link.run(0, windows[-1].end_ns)
    assert link.admitted == []
    with pytest.raises(UsageError, match="max_explore_backoff=-1"):
        Gate(FixedWindows(windows), CompletionTimeTable(), max_explore_backoff=-1)


@settings(max_examples=150, deadline=None)
@given(
    gaps=st.lists(st.integers(2 * MS, 20 * MS), min_size=3, max_size=30),
    lengths=st.lists(st.integers(1, 5 * MS), min_size=3, max_size=30),
    service=st.integers(50_000, MS),
    stale=st.dictionaries(st.integers(0, 8), st.integers(0, 10**9), max_size=5),
    default=st.integers(1, 50 * MS),
)
def test_the_gate_never_starves_when_gaps_fit_a_packet(
    gaps: list[int], lengths: list[int], service: int, stale: dict[int, int], default: int
) -> None:
    # Whatever the table holds at first (no sample, or stale ones of any size), a
    # gap that a driver obeying the gate begins with an idle NIC admits a packet,
    # as long as one packet fits in a gap. Probes: at most one per gap, into an idle
    # NIC, never inside a window, and (since a packet fits) never late.
    windows, t = [], 0
    for gap, length in zip(gaps, lengths, strict=False):
        windows.append(Interval(t + gap, t + gap + length - 1))
        t += gap + length
    ctt = CompletionTimeTable(samples_per_depth=4, default_ns=default)
    for depth, duration in stale.items():
        ctt.record(depth, duration)
    gate = Gate(FixedWindows(windows), ctt)
    link = Link(gate, service_ns=service)
    link.run(0, windows[-1].end_ns + 1)
    for w_prev, w in itertools.pairwise(windows):
        asked = [depth for t, depth in link.asked if w_prev.end_ns < t < w.start_ns]
        in_gap = [d for t, d, _ in link.admitted if w_prev.end_ns < t < w.start_ns]
        if asked and asked[0] == 0:
            assert in_gap, f"NIC idle and nothing admitted between {w_prev} and {w}"
        assert sum(d.explore for d in in_gap) <= 1
    for t, d, depth in link.admitted:
        assert not any(w.contains(t) for w in windows)
        if d.explore:
            assert depth == 0
    assert gate.stats.explore_late == 0


@settings(max_examples=60, deadline=None)
@given(
    steps=st.lists(
        st.tuples(st.integers(0, 4), st.integers(1, 6), st.integers(0, 700_000)), max_size=120
    ),
    realized=st.booleans(),
    buckets=st.booleans(),
)
def test_run_calls_are_the_per_packet_calls(
    steps: list[tuple[int, int, int]], realized: bool, buckets: bool
) -> None:
    # Two gates on identical planners see the same traffic: one packet by packet
    # (decide, on_enqueue, on_complete), one a run at a time (admit_run,
    # on_enqueue_run, on_complete_run). Every answer, counter and sample must agree.
    edges = (1_000_000, 2_000_000, 4_000_000) if buckets else ()

    def gate() -> Gate:
        planner = ProtectionPlanner(margin_ns=500_000)
        ctt = CompletionTimeTable(max_depth=30, samples_per_depth=8, lead_edges_ns=edges)
        return Gate(planner, ctt, realized=realized, max_explore_backoff=4)

    one, runs = gate(), gate()
    now, pid, sends = 0, 0, 0
    ring: list[int] = []  # packet ids in the NIC, oldest first
    for kind, count, step in steps:
        now += step
        if now >= sends * 10_000_000:  # a periodic LS send every 10 ms
            for g in (one, runs):
                assert isinstance(g.planner, ProtectionPlanner)
                g.planner.observe("ls", now)
                g.on_ls_send(now)
            sends = now // 10_000_000 + 1
        if kind <= 1:  # the driver offers ``count`` packets
            admitted = 0
            for i in range(count):
                if not one.decide(now, len(ring) + i).allow:
                    break
                one.on_enqueue(pid + i, now, len(ring) + i)
                admitted += 1
            assert runs.admit_run(now, pid, count, len(ring)) == admitted
            ring += range(pid, pid + admitted)
            pid += count
        elif kind == 2:  # TCP acks enqueued without asking
            one_ids = range(pid, pid + count)
            for i, q in enumerate(one_ids):
                one.on_enqueue(q, now, len(ring) + i)
            runs.on_enqueue_run(pid, count, now, len(ring))
            ring += one_ids
            pid += count
        elif ring:  # the oldest ``count`` complete (an unknown id now and then)
            done, ring = ring[:count], ring[count:]
            for q in done:
                one.on_complete(q, now)
            runs.on_complete_run(done[0], len(done), now)  # consecutive: one run
            if kind == 4:
                one.on_complete(10**9, now)
                runs.on_complete_run(10**9, 1, now)
        assert one.stats == runs.stats and one.pending == runs.pending
        assert one.exploring == runs.exploring
        assert one.admits(now, len(ring)) == runs.admits(now, len(ring))
    for d in range(31):
        assert one.ctt.samples(d) == runs.ctt.samples(d)
