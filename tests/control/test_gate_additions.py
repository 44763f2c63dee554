"""Coorp's additions to Algorithm 2 (docs/control.md, "Beyond the paper"): the pure
admission query, lead-conditioned completion times, completion measured against the
LS send a packet had to clear, and re-asking when the lead enters the next bucket."""

from __future__ import annotations

import pytest

from coorp import UsageError
from coorp.control import CompletionTimeTable, Gate, Interval

MS = 1_000_000
EDGES = (1 * MS, 2 * MS, 4 * MS, 8 * MS, 16 * MS)


class FixedWindows:
    def __init__(self, windows: list[Interval]) -> None:
        self.windows = windows

    def next_window(self, now_ns: int) -> Interval | None:
        return next((w for w in self.windows if w.end_ns >= now_ns), None)


# -- Gate.admits ---------------------------------------------------------------------------


def test_admits_answers_the_rule_without_touching_counters() -> None:
    ctt = CompletionTimeTable(percentile=100.0)
    ctt.record(0, 300)
    ctt.record(5, 900)
    gate = Gate(FixedWindows([Interval(1000, 2000)]), ctt)
    assert gate.admits(0, 0)  # 0 + 300 < 1000
    assert gate.admits(0, 5)  # 0 + 900 < 1000
    assert gate.admits(200, 0)  # 200 + 300 < 1000
    assert not gate.admits(200, 5)  # 200 + 900 ≥ 1000: a deeper queue no longer fits
    assert not gate.admits(1500, 0)  # inside the window
    assert gate.stats.allowed == gate.stats.denied_ahead == gate.stats.denied_inside == 0


# -- lead-conditioned table ----------------------------------------------------------------


def test_a_lead_bucket_answers_once_it_has_samples_and_the_whole_table_before() -> None:
    ctt = CompletionTimeTable(percentile=100.0, lead_edges_ns=EDGES)
    ctt.record(0, 10 * MS, lead_ns=12 * MS)  # caught in a burst, enqueued early
    # No sample with a lead in [1, 2) ms yet: the whole table answers.
    assert ctt.query(0, lead_ns=1_500_000) == 10 * MS
    ctt.record(0, 400_000, lead_ns=1_200_000)  # quiet just before the window
    assert ctt.query(0, lead_ns=1_500_000) == 400_000
    assert ctt.query(0, lead_ns=9 * MS) == 10 * MS
    # No lead: the whole table (both samples).
    assert ctt.query(0) == 10 * MS
    assert ctt.samples(0) == (10 * MS, 400_000)


def test_bucket_boundaries_and_bad_edges() -> None:
    ctt = CompletionTimeTable(percentile=100.0, lead_edges_ns=(1 * MS, 2 * MS))
    ctt.record(0, 7, lead_ns=1 * MS)  # exactly at an edge: the bucket above it
    assert ctt.query(0, lead_ns=1 * MS) == 7
    assert ctt.query(0, lead_ns=2 * MS - 1) == 7
    assert ctt.query(0, lead_ns=1 * MS - 1) == 7  # [0, 1 ms) empty: whole table
    ctt.record(0, 3, lead_ns=0)
    assert ctt.query(0, lead_ns=1 * MS - 1) == 3
    for bad in [(0,), (2, 1), (5, 5), (-1, 3)]:
        with pytest.raises(UsageError, match="lead_edges_ns"):
            CompletionTimeTable(lead_edges_ns=bad)


def test_the_gate_records_the_lead_at_enqueue() -> None:
    ctt = CompletionTimeTable(percentile=100.0, lead_edges_ns=EDGES)
    gate = Gate(FixedWindows([Interval(20 * MS, 21 * MS)]), ctt)
    gate.on_enqueue(1, 10 * MS, 0)  # lead 10 ms: bucket [8, 16)
    gate.on_complete(1, 11 * MS)
    gate.on_enqueue(2, 18_500_000, 0)  # lead 1.5 ms: bucket [1, 2)
    gate.on_complete(2, 18_700_000)
    assert ctt.query(0, lead_ns=9 * MS) == 1 * MS
    assert ctt.query(0, lead_ns=1_100_000) == 200_000


# -- realized completion -------------------------------------------------------------------


def test_realized_samples_measure_completion_against_the_send_that_followed() -> None:
    # Window predicted over [20, 24] ms; the LS send really happens at 23 ms.
    ctt = CompletionTimeTable(percentile=100.0)
    gate = Gate(FixedWindows([Interval(20 * MS, 24 * MS)]), ctt, realized=True)
    gate.on_enqueue(1, 10 * MS, 0)  # lead 10 ms
    gate.on_complete(1, 22 * MS)  # took 12 ms, but the send had not happened yet
    assert ctt.samples(0) == ()  # waits for the send to know
    gate.on_enqueue(2, 15 * MS, 0)  # lead 5 ms, still in the NIC at the send
    gate.on_ls_send(23 * MS)
    # 1: completion − send + lead = 22 − 23 + 10 = 9 ms (it cleared the send by 1 ms).
    assert ctt.samples(0) == (9 * MS,)
    gate.on_complete(2, 24 * MS)
    # 2: 24 − 23 + 5 = 6 ms: it was 1 ms late, so its lead was 1 ms too short.
    assert ctt.samples(0) == (9 * MS, 6 * MS)


def test_a_send_after_the_window_is_credited_only_up_to_the_window_end() -> None:
    # Window [20, 21] ms; the send comes at 23 ms, after the window (a late loop).
    ctt = CompletionTimeTable(percentile=100.0)
    gate = Gate(FixedWindows([Interval(20 * MS, 21 * MS)]), ctt, realized=True)
    gate.on_enqueue(1, 10 * MS, 0)  # lead 10 ms, done at 22 ms before the send
    gate.on_complete(1, 22 * MS)
    gate.on_enqueue(2, 15 * MS, 0)  # lead 5 ms, still in the NIC at the send
    gate.on_ls_send(23 * MS)
    # 1: 22 − min(23, 21) + 10 = 11 ms: it would have missed a send on time.
    assert ctt.samples(0) == (11 * MS,)
    gate.on_complete(2, 24 * MS)
    assert ctt.samples(0) == (11 * MS, 8 * MS)  # 24 − 21 + 5


@pytest.mark.parametrize("in_window", [False, True])
def test_a_send_no_window_predicted_prices_a_packet_only_without_realized_in_window(
    in_window: bool,
) -> None:
    # Windows [20, 21] and [53, 54] ms. A tail send of the first window's flow comes at
    # 40 ms, after that window ended: no window predicted it. Packets enqueued at 30 ms
    # aim at the second window (lead 23 ms).
    ctt = CompletionTimeTable(percentile=100.0)
    windows = FixedWindows([Interval(20 * MS, 21 * MS), Interval(53 * MS, 54 * MS)])
    gate = Gate(windows, ctt, realized=True, realized_in_window=in_window)
    gate.on_enqueue(1, 30 * MS, 0)
    gate.on_complete(1, 31 * MS)  # done long before the second window
    gate.on_enqueue(2, 30 * MS, 1)
    gate.on_ls_send(40 * MS)  # the tail send
    gate.on_complete(2, 41 * MS)  # in the NIC when the tail send came, gone by 53 ms
    if not in_window:
        # Priced against the tail send: 31 − 40 + 23 = 14 ms and 41 − 40 + 23 = 24 ms
        # for packets that cleared their own window by 22 and 12 ms.
        assert (ctt.samples(0), ctt.samples(1)) == ((14 * MS,), (24 * MS,))
        return
    assert (ctt.samples(0), ctt.samples(1)) == ((), ())  # they wait for their send
    gate.on_ls_send(53_500_000)  # the predicted send, 0.5 ms into its window
    # Their durations (1 and 11 ms) less that slack: 31 − 53.5 + 23, 41 − 53.5 + 23.
    assert (ctt.samples(0), ctt.samples(1)) == ((MS // 2,), (10_500_000,))


def test_realized_samples_never_go_below_zero_and_plain_mode_ignores_sends() -> None:
    ctt = CompletionTimeTable(percentile=100.0)
    gate = Gate(FixedWindows([Interval(20 * MS, 21 * MS)]), ctt, realized=True)
    gate.on_enqueue(1, 19 * MS, 0)  # lead 1 ms
    gate.on_complete(1, 19_100_000)
    gate.on_ls_send(20_500_000)  # inside the window, 1.5 ms after the packet was done
    assert ctt.samples(0) == (0,)
    plain_ctt = CompletionTimeTable(percentile=100.0)
    plain = Gate(FixedWindows([Interval(20 * MS, 21 * MS)]), plain_ctt)
    plain.on_enqueue(1, 10 * MS, 0)
    plain.on_ls_send(11 * MS)
    plain.on_complete(1, 22 * MS)
    assert plain_ctt.samples(0) == (12 * MS,)  # the bare duration, as in the paper


def test_a_packet_enqueued_inside_a_window_records_its_duration() -> None:
    ctt = CompletionTimeTable(percentile=100.0)
    gate = Gate(FixedWindows([Interval(20 * MS, 21 * MS)]), ctt, realized=True)
    gate.on_enqueue(1, 20_500_000, 0)  # no window ahead: no lead
    gate.on_complete(1, 21 * MS)
    assert ctt.samples(0) == (500_000,)


# -- resume at the next lead bucket ---------------------------------------------------------


def test_a_denial_ahead_resumes_when_the_lead_enters_the_next_bucket() -> None:
    ctt = CompletionTimeTable(percentile=100.0, lead_edges_ns=EDGES)
    ctt.record(0, 12 * MS, lead_ns=10 * MS)  # [8, 16): slow
    ctt.record(0, 1 * MS, lead_ns=5 * MS)  # [4, 8): quick
    window = Interval(40 * MS, 41 * MS)
    gate = Gate(FixedWindows([window]), ctt, explore=False)
    d = gate.decide(30 * MS, 0)  # lead 10 ms, needs 12: denied
    assert not d.allow
    # The lead drops below 8 ms just after 32 ms: ask again then, not after the window.
    assert d.resume_ns == 40 * MS - 8 * MS + 1
    assert gate.decide(d.resume_ns, 0).allow  # lead just under 8 ms: 1 ms fits
    # Without lead buckets the denial lasts until the window is over (the paper).
    plain = CompletionTimeTable(percentile=100.0)
    plain.record(0, 12 * MS)
    assert Gate(FixedWindows([window]), plain).decide(30 * MS, 0).resume_ns == window.end_ns + 1


def test_in_the_lowest_bucket_a_denial_waits_for_the_window_to_pass() -> None:
    ctt = CompletionTimeTable(percentile=100.0, lead_edges_ns=EDGES)
    ctt.record(0, 2 * MS, lead_ns=500_000)
    window = Interval(40 * MS, 41 * MS)
    d = Gate(FixedWindows([window]), ctt, explore=False).decide(40 * MS - 600_000, 0)
    assert not d.allow and d.resume_ns == window.end_ns + 1


# -- ageing --------------------------------------------------------------------------------


def test_samples_age_out_and_an_emptied_depth_falls_back_to_its_neighbours() -> None:
    ctt = CompletionTimeTable(percentile=100.0, max_age_ns=1_000)
    ctt.record(0, 100, at_ns=0)
    ctt.record(3, 5_000, at_ns=10)  # a congested moment: depth 3 "too slow"
    ctt.record(0, 120, at_ns=600)
    assert ctt.query(3, now_ns=900) == 5_000
    # At 1_011 the depth-3 sample is over 1 µs old: depth 3 scales CTT[0]'s 120 ns.
    assert ctt.query(3, now_ns=1_011) == 120 * 4
    assert ctt.samples(3) == () and ctt.samples(0) == (120,)
    # Without now_ns nothing expires (and queries stay pure).
    ctt.record(5, 9, at_ns=2_000)
    assert ctt.query(5) == 9 and ctt.samples(5) == (9,)


def test_ageing_needs_the_recording_time_and_a_positive_age() -> None:
    ctt = CompletionTimeTable(max_age_ns=10)
    with pytest.raises(UsageError, match="at_ns"):
        ctt.record(0, 5)
    with pytest.raises(UsageError, match="max_age_ns"):
        CompletionTimeTable(max_age_ns=0)


def test_a_gate_over_an_ageing_table_forgets_what_it_no_longer_admits() -> None:
    ctt = CompletionTimeTable(percentile=100.0, max_age_ns=1_000 * MS)
    window = Interval(10_000 * MS, 10_001 * MS)
    gate = Gate(FixedWindows([window]), ctt, explore=False)
    gate.on_enqueue(1, 0, 4)
    gate.on_complete(1, 9_000 * MS)  # one awful sample at depth 4
    assert not gate.admits(9_500 * MS, 4)  # 9.5 s + 9 s would overlap
    gate.on_enqueue(2, 9_600 * MS, 0)
    gate.on_complete(2, 9_600 * MS + 100_000)  # depth 0 is quick now
    # A second later the old sample is gone and depth 4 scales depth 0's 0.1 ms.
    assert gate.admits(9_998 * MS, 4) is False  # still inside its age
    assert ctt.query(4, now_ns=10_001 * MS) == 500_000


def test_a_bucket_crossing_with_an_idle_nic_may_probe_that_bucket() -> None:
    # Stale samples in a near bucket (learned while others sent) would deny it for good:
    # the first decision at a crossing, with nothing in the NIC, sends one probe.
    ctt = CompletionTimeTable(percentile=100.0, lead_edges_ns=EDGES)
    ctt.record(0, 30 * MS, lead_ns=10 * MS)  # [8, 16): stale, far too slow
    ctt.record(0, 30 * MS, lead_ns=5 * MS)  # [4, 8): stale too
    window = Interval(40 * MS, 41 * MS)
    gate = Gate(FixedWindows([window]), ctt)
    first = gate.decide(30 * MS, 1)  # a packet in the NIC: no probe, resume at the crossing
    assert not first.allow and first.resume_ns == 32 * MS + 1
    probe = gate.decide(first.resume_ns, 0)
    assert probe.allow and probe.explore and gate.stats.explored == 1
    # Without the crossing (no lead buckets) the same state waits for the window's end.
    plain = CompletionTimeTable(percentile=100.0)
    plain.record(0, 30 * MS)
    plain_gate = Gate(FixedWindows([window]), plain)
    d = plain_gate.decide(30 * MS, 1)
    assert d.resume_ns == window.end_ns + 1
