"""The per-flow time model T_k ≈ p·k + q + N(0, σ²)."""

from __future__ import annotations

from collections import deque

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from coorp import UsageError
from coorp.control import Interval, SendTimeModel

P = 33_333_333  # 30 Hz
MS = 1_000_000


def noisy_sends(seed: int, n: int, *, p: int = P, q: int = 7 * 10**9, sigma: float = 300_000.0):
    rng = np.random.default_rng(seed)
    noise = rng.normal(0.0, sigma, size=n)
    return [q + p * k + round(e) for k, e in enumerate(noise)]


def feed(model: SendTimeModel, sends: list[int]) -> None:
    for t in sends:
        model.observe(t)


def centre(interval: Interval) -> int:
    return (interval.start_ns + interval.end_ns) // 2


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"confidence": 0.0}, "confidence=0.0"),
        ({"confidence": 1.0}, "confidence=1.0"),
        ({"confidence": 1.5}, "confidence=1.5"),
        ({"min_samples": 2}, "min_samples=2"),
        ({"history": 3, "min_samples": 4}, "history=3"),
        ({"refit_interval_ns": 0}, "refit_interval_ns=0"),
        ({"miss_sigmas": 0.0}, "miss_sigmas=0.0"),
        ({"min_sigma_ns": 0}, "min_sigma_ns=0"),
        ({"jump_after": 0}, "jump_after=0"),
        ({"idle_periods": 0}, "idle_periods=0"),
    ],
)
def test_bad_arguments_raise_usage_errors_naming_them(kwargs: dict, name: str) -> None:
    with pytest.raises(UsageError, match=name):
        SendTimeModel(**kwargs)


def test_nothing_is_predicted_before_min_samples() -> None:
    m = SendTimeModel(min_samples=5)
    for t in noisy_sends(0, 4):
        m.observe(t)
        assert m.predict(t) is None
        assert m.period_ns is None and m.offset_ns is None and m.sigma_ns is None
    m.observe(noisy_sends(0, 5)[-1])
    assert m.predict(0) is not None
    assert m.refits == 1


@pytest.mark.parametrize("seed", [1, 2, 3, 4, 5])
def test_recovers_period_and_phase_from_noisy_sends(seed: int) -> None:
    sigma = 300_000
    q = 7 * 10**9
    sends = noisy_sends(seed, 300, q=q, sigma=sigma)
    m = SendTimeModel()
    feed(m, sends)
    assert m.period_ns is not None and m.sigma_ns is not None
    # Slope standard error over 32 samples is about σ/52 ≈ 6 µs; allow 5x that.
    assert abs(m.period_ns - P) < 30_000
    assert 0.5 * sigma < m.sigma_ns < 2 * sigma
    # The next predicted send sits on the true line q + p·300 to within one σ.
    nxt = m.predict(sends[-1] + 1)
    assert nxt is not None
    assert abs(centre(nxt) - (q + P * 300)) < sigma


def test_prediction_interval_is_z_sigma_wide() -> None:
    for confidence, z in [(0.95, 1.959964), (0.6827, 1.0), (0.9973, 3.0)]:
        m = SendTimeModel(confidence=confidence)
        feed(m, noisy_sends(9, 64, sigma=400_000))
        assert m.sigma_ns is not None and m.delta_ns is not None
        assert m.delta_ns == pytest.approx(z * m.sigma_ns, rel=1e-3)
        nxt = m.predict(0)
        assert nxt is not None
        assert nxt.end_ns - nxt.start_ns == 2 * m.delta_ns


def test_about_c_of_the_sends_fall_inside_their_predicted_interval() -> None:
    sends = noisy_sends(11, 1000, sigma=500_000)
    m = SendTimeModel(confidence=0.95)
    inside = total = 0
    for t in sends:
        if m.period_ns is not None:
            interval = m.predict(m.last_send_ns + 1)  # type: ignore[operator]
            assert interval is not None
            total += 1
            inside += interval.contains(t)
        m.observe(t)
    assert total > 900
    assert 0.88 < inside / total <= 1.0


def test_skipped_sends_do_not_break_the_fit() -> None:
    rng = np.random.default_rng(3)
    sends = [t for t in noisy_sends(3, 400, sigma=200_000) if rng.random() > 0.3]
    m = SendTimeModel()
    feed(m, sends)
    assert m.period_ns is not None
    assert abs(m.period_ns - P) < 30_000


def test_a_skipped_send_is_still_protected() -> None:
    sends = noisy_sends(4, 40, sigma=0.0)
    m = SendTimeModel()
    feed(m, sends)
    # Send 40 never happens; at its due time its interval is still the answer.
    due = sends[-1] + P
    assert m.predict(due).contains(due)  # type: ignore[union-attr]


def test_a_send_consumes_its_own_interval() -> None:
    sends = noisy_sends(5, 40, sigma=0.0)
    m = SendTimeModel()
    feed(m, sends)
    nxt = m.predict(sends[-1])
    assert nxt is not None
    assert abs(centre(nxt) - (sends[-1] + P)) <= 1
    assert nxt.end_ns >= sends[-1]


def test_predict_returns_the_earliest_interval_ending_at_or_after_the_query() -> None:
    sends = noisy_sends(6, 40, sigma=100_000)
    m = SendTimeModel()
    feed(m, sends)
    after = sends[-1] + 3 * P + 5 * MS
    got = m.predict(after)
    assert got is not None
    assert got.end_ns >= after
    assert m.period_ns is not None
    earlier = Interval(got.start_ns - m.period_ns, got.end_ns - m.period_ns)
    assert earlier.end_ns < after


def test_a_single_outlier_triggers_a_refit() -> None:
    sends = noisy_sends(7, 20, sigma=100_000)
    m = SendTimeModel()
    feed(m, sends)
    refits, misses = m.refits, m.misses
    m.observe(sends[-1] + P + 10 * MS)  # 10 ms late: far beyond 2σ
    assert m.misses == misses + 1
    assert m.refits == refits + 1


def test_refits_periodically_when_nothing_misses() -> None:
    m = SendTimeModel(refit_interval_ns=1_000_000_000)
    feed(m, noisy_sends(8, 106, sigma=0.0))  # 3.5 s of perfectly periodic sends
    assert m.misses == 0
    # The first fit (4 sends), refits as the history doubles (8, 16, 32 sends: the
    # last at 1.03 s), then one per elapsed second (2.03 s, 3.03 s).
    assert m.refits == 1 + 3 + 2


@pytest.mark.parametrize("jump", [P // 2, P // 3, 8 * MS])
def test_follows_a_phase_jump(jump: int) -> None:
    sigma = 150_000
    q = 10**9
    before = noisy_sends(12, 100, q=q, sigma=sigma)
    after = noisy_sends(13, 40, q=q + 100 * P + jump, sigma=sigma)
    m = SendTimeModel()
    feed(m, before)
    refits = m.refits
    feed(m, after[:3])
    assert m.refits > refits
    nxt = m.predict(after[2] + 1)
    assert nxt is not None
    assert abs(centre(nxt) - (q + 103 * P + jump)) < 3 * sigma
    feed(m, after[3:])
    assert m.period_ns is not None
    assert abs(m.period_ns - P) < 30_000


def test_period_doubling_is_detected_from_the_index_gaps() -> None:
    m = SendTimeModel()
    feed(m, noisy_sends(14, 50, sigma=50_000))
    slow = noisy_sends(15, 100, p=2 * P, q=10**10, sigma=50_000)
    feed(m, slow)
    assert m.period_ns is not None
    assert abs(m.period_ns - 2 * P) < 30_000


def test_a_silent_flow_stops_being_protected() -> None:
    sends = noisy_sends(16, 40, sigma=0.0)
    m = SendTimeModel(idle_periods=4)
    feed(m, sends)
    assert m.predict(sends[-1] + 3 * P) is not None
    assert m.predict(sends[-1] + 5 * P) is None


def test_large_absolute_times_keep_nanosecond_precision() -> None:
    t0 = 1_700_000_000_000_000_000  # a Unix-epoch timestamp in ns: beyond float precision
    m = SendTimeModel()
    feed(m, [t0 + P * k for k in range(40)])
    assert m.period_ns == P
    nxt = m.predict(t0 + P * 39 + 1)
    assert nxt is not None
    assert centre(nxt) == t0 + P * 40


def test_sends_must_be_in_time_order() -> None:
    m = SendTimeModel()
    m.observe(100)
    with pytest.raises(UsageError, match="send_ns=99"):
        m.observe(99)


@settings(max_examples=300, deadline=None)
@given(
    gaps=st.lists(st.integers(0, 200 * MS), min_size=1, max_size=120),
    jump_after=st.integers(1, 40),
    probe=st.integers(-50 * MS, 500 * MS),
)
def test_arbitrary_send_sequences_never_break_the_model(
    gaps: list[int], jump_after: int, probe: int
) -> None:
    m = SendTimeModel(jump_after=jump_after, history=8, min_samples=3)
    t = 10**12
    for gap in gaps:
        t += gap
        m.observe(t)
        if m.period_ns is not None:
            assert m.period_ns >= 1
            assert m.sigma_ns is not None and m.sigma_ns >= 50_000
        after = t + probe
        got = m.predict(after)
        if got is not None:
            assert got.start_ns <= got.end_ns
            assert got.end_ns >= after
            assert got.end_ns > t  # never the interval of a send already observed


# A statistical property: a rare noise draw is genuinely ambiguous (at σ = p/4, four
# gaps of ~2p among 31 look like skipped sends and fit a 9 % shorter period better).
# About one random example in 10^4 does that, so the examples are derandomized (the
# same 150 every run); 12 000 random ones gave one such case (offline).
@settings(max_examples=150, deadline=None, derandomize=True)
@given(
    period=st.integers(1 * MS, 500 * MS),
    jitter=st.floats(0.0, 0.25),
    sends=st.integers(40, 240),
    seed=st.integers(0, 2**32 - 1),
    start=st.integers(0, 2**62),
)
def test_fitted_period_is_within_a_few_percent_under_jitter_up_to_a_quarter_period(
    period: int, jitter: float, sends: int, seed: int, start: int
) -> None:
    # Gaussian jitter with σ up to p/4: consecutive sends are often 1.5 periods
    # apart, or half a period, and sometimes swap. Numbering sends gap by gap turned
    # such flows into a fraction of their period (a 10 ms flow fitted as 3 ms).
    rng = np.random.default_rng(seed)
    noise = rng.normal(0.0, jitter * period, size=sends)
    times = sorted(start + period * k + round(e) for k, e in enumerate(noise))
    m = SendTimeModel()
    feed(m, times)
    assert m.period_ns is not None
    assert abs(m.period_ns - period) <= 0.03 * period


@pytest.mark.parametrize("seed", range(6))
def test_bursts_after_stalls_do_not_shrink_the_period(seed: int) -> None:
    # A sender thread that stalls catches up by sending the missed messages at once
    # (a loop on `next += period`). Those bursts share a slot; they used to claim a
    # period each, and the fit locked onto a fraction of the period.
    p = 10 * MS
    rng = np.random.default_rng(seed)
    t = due = 10**9
    times = []
    for _ in range(600):
        t = max(t, due) + abs(round(rng.normal(0.0, 0.05 * p)))
        if rng.random() < 0.05:
            t += round(rng.exponential(3 * p))
        times.append(t)
        due += p
    m = SendTimeModel()
    wrong = 0
    for t in times:
        m.observe(t)
        wrong += m.period_ns is not None and abs(m.period_ns - p) > 0.05 * p
    assert wrong < 0.05 * len(times)
    assert m.period_ns is not None and abs(m.period_ns - p) <= 0.05 * p


def test_a_wrong_period_does_not_confirm_itself() -> None:
    # Model fitted on a 10 ms flow numbered as if it ran at 10/3 ms: the next fits
    # must find the real period again instead of renumbering the sends in thirds.
    p = 10 * MS
    sends = noisy_sends(21, 200, p=p, q=10**9, sigma=0.2 * p)
    m = SendTimeModel()
    feed(m, sends[:40])
    m._period_ns = p // 3  # as the old gap-by-gap numbering ended up
    feed(m, sends[40:])
    assert m.period_ns is not None and abs(m.period_ns - p) <= 0.03 * p


@settings(max_examples=60, deadline=None)
@given(
    gaps=st.lists(
        st.one_of(
            st.integers(33_000_000, 34_000_000),  # on the period, with jitter
            st.integers(1, 80_000_000),  # anything: misses, phase jumps, bursts
        ),
        min_size=1,
        max_size=120,
    )
)
def test_the_current_segment_is_always_a_suffix_of_the_history(gaps: list[int]) -> None:
    # observe() asks "fewer than min_samples sends in the current segment?" in O(1)
    # from the newest sends; that is the full count only if the segment is a suffix.
    m = SendTimeModel()
    t = 0
    for gap in gaps:
        t += gap
        m.observe(t)
        segments = [seg for _, seg in m._history]
        current = m._segment
        run = len(segments) - next(
            (i + 1 for i in range(len(segments) - 1, -1, -1) if segments[i] != current), 0
        )
        assert segments.count(current) == run  # every current-segment send is at the end
        # The counts observe() keeps beside the deque agree with it (evictions included).
        assert (m._n, m._last_ns, m._seg_len) == (len(segments), m._history[-1][0], run)
        for n in (1, 2, 3, 5, 8, len(segments), len(segments) + 1):
            assert m._segment_shorter_than(n) == (run < n)


def test_empirical_windows_are_residual_quantiles_and_cover_new_sends() -> None:
    # Sends at k·10 ms plus a half-normal delay (never early) and a 3 % tail of 4-8 ms.
    # The window is the split-conformal ranks of the recent out-of-sample residuals
    # (each send against the prediction made before it), and holds about C of the sends
    # that follow.
    rng = np.random.default_rng(7)
    period = 10_000_000

    def delays(n: int) -> list[int]:
        d = np.abs(rng.normal(0, 300_000, n))
        tail = rng.random(n) < 0.03
        d[tail] += rng.uniform(4e6, 8e6, tail.sum())
        return [round(x) for x in d]

    emp = SendTimeModel(history=32, window="empirical", residual_history=64)
    for k, d in enumerate(delays(300)):
        emp.observe(k * period + d)
    r = sorted(emp._residuals)
    assert len(r) == 64
    # ranks floor(65·0.025) = 1 and ceil(65·0.975) = 64 (1-based)
    assert emp.window_bounds_ns == (min(r[0], -50_000), max(r[63], 50_000))
    covered = 0
    future = [300 * period + k * period + d for k, d in enumerate(delays(400))]
    for x in future:
        iv = emp.predict(x - period // 2)
        assert iv is not None
        covered += iv.start_ns <= x <= iv.end_ns
        emp.observe(x)
    assert covered / len(future) >= 0.85


def test_empirical_windows_need_residuals_and_valid_arguments() -> None:
    m = SendTimeModel(window="empirical")
    for k in range(6):
        m.observe(k * 10_000_000)
    assert m.window_bounds_ns == (-m.delta_ns, m.delta_ns)  # type: ignore[operator]
    with pytest.raises(UsageError, match="window='uniform'"):
        SendTimeModel(window="uniform")
    with pytest.raises(UsageError, match="residual_history=4"):
        SendTimeModel(residual_history=4)


def test_a_drifting_flow_that_pauses_and_restarts_at_a_new_phase_is_followed() -> None:
    # crl-5-drift-pause's r1: a 50 ms timer running 2 % slow, 0.3 ms of jitter, silent
    # from 6 s to 9 s, restarting at another phase.
    rng = np.random.default_rng(3)
    period = round(50_000_000 * 1.02)
    before = [k * period + round(abs(rng.normal(0, 300_000))) for k in range(117)]  # < 6 s
    restart = 9_000_000_000 + 17_000_000
    after = [restart + k * period + round(abs(rng.normal(0, 300_000))) for k in range(60)]
    m = SendTimeModel()
    for t in before:
        m.observe(t)
    assert m.period_ns is not None and abs(m.period_ns - period) < 200_000
    # Silent: nothing is protected once idle_periods periods passed without a send.
    assert m.predict(before[-1] + 9 * period) is None
    hits = []
    for t in after:
        iv = m.predict(t - period // 2)
        hits.append(iv is not None and iv.start_ns <= t <= iv.end_ns)
        m.observe(t)
    assert not any(hits[:2])  # the new phase is unknown at first
    assert all(hits[2:6])  # picked up as a phase jump within two sends
    assert sum(hits[2:]) >= 0.85 * len(hits[2:]) and abs(m.period_ns - period) < 200_000


def test_a_robust_fit_ignores_a_late_minority() -> None:
    # 30 % of sends 6-10 ms late: the least-squares offset and σ follow the tail; the
    # robust fit's offset stays on the punctual sends and σ reflects their jitter.
    rng = np.random.default_rng(11)
    period = 20_000_000
    sends = []
    for k in range(40):
        d = abs(rng.normal(0, 200_000)) + (rng.uniform(6e6, 10e6) if rng.random() < 0.3 else 0)
        sends.append(k * period + round(d))
    ls, rb = SendTimeModel(), SendTimeModel(fit="robust")
    for t in sends:
        ls.observe(t)
        rb.observe(t)
    assert rb.sigma_ns is not None and ls.sigma_ns is not None
    assert rb.sigma_ns < 600_000 < ls.sigma_ns
    assert rb.period_ns is not None and abs(rb.period_ns - period) < 100_000
    # The next punctual send lies inside the robust window.
    iv = rb.predict(sends[-1] + 1)
    assert iv is not None and iv.start_ns <= 40 * period + 150_000 <= iv.end_ns
    with pytest.raises(UsageError, match="fit='l1'"):
        SendTimeModel(fit="l1")


def _tail_sends(
    seed: int,
    n: int,
    *,
    period: int,
    start: int = 0,
    share: float = 0.2,
    scale: float = 5e6,
    cap: float = 30e6,
) -> list[int]:
    """Sends k·period + |N(0, 0.3 ms)|, plus on ``share`` of them a Pareto delay (shape
    1.5, from ``scale``, capped at ``cap``): crl-5-heavy-tail's perceptions, heavier."""
    rng = np.random.default_rng(seed)
    out = []
    for k in range(n):
        d = abs(rng.normal(0, 300_000))
        if rng.random() < share:
            d += min(scale * (1 + rng.pareto(1.5)), cap)
        out.append(start + k * period + round(d))
    return out


def _replay(model: SendTimeModel, sends: list[int], warm: int) -> tuple[float, float]:
    """Feed ``sends``; after ``warm`` of them, the share of sends inside the interval
    predicted just after the previous send, and the mean time from that interval's
    start to the send (what a gate pauses for before each send: a window is consumed
    by its send)."""
    covered = paused = counted = 0
    for i, t in enumerate(sends):
        if i >= warm:
            iv = model.predict(sends[i - 1] + 1)
            assert iv is not None
            counted += 1
            covered += iv.start_ns <= t <= iv.end_ns
            paused += min(t, iv.end_ns) - iv.start_ns
        model.observe(t)
    return covered / counted, paused / counted


def test_conformal_windows_make_every_send_pay_for_the_core_only() -> None:
    # 20 % of sends 5-30 ms late. Least squares and ±z·σ: σ follows the tail, so every
    # window opens milliseconds before the punctual majority. Conformal windows: a
    # Theil–Sen line on the punctual sends, the residual ranks for the width: the window
    # opens at the core, reaches into the tail, and covers at least as many sends.
    period = 33_333_333
    sends = _tail_sends(5, 500, period=period)
    gauss, conformal = SendTimeModel(), SendTimeModel(window="conformal")
    g_cov, g_pause = _replay(gauss, sends, 100)
    c_cov, c_pause = _replay(conformal, sends, 100)
    assert c_cov >= 0.9 and c_cov >= g_cov - 0.01
    assert c_pause < 0.6 * g_pause
    assert conformal.period_ns is not None and abs(conformal.period_ns - period) < 30_000
    lo, hi = conformal.window_bounds_ns  # type: ignore[misc]
    assert -1_500_000 < lo < 0 and hi > 10_000_000
    assert conformal.sigma_ns is not None and conformal.sigma_ns < 1_000_000


def test_without_the_tail_the_intervals_stop_at_the_core_and_misses_are_scored_alike() -> None:
    # protect_tail=False: the same fit and residual ranks (the same sends are misses and
    # phase jumps), but each predicted interval ends at the core, ±miss_sigmas·σ: the
    # late sends of the tail are left to the ring budget, and the time a gate pauses
    # before each send shrinks to the core's.
    period = 33_333_333
    sends = _tail_sends(5, 500, period=period, scale=10e6)
    full = SendTimeModel(window="conformal")
    core = SendTimeModel(window="conformal", protect_tail=False)
    f_cov, f_pause = _replay(full, sends, 100)
    c_cov, c_pause = _replay(core, sends, 100)
    assert full.window_bounds_ns == core.window_bounds_ns and full.misses == core.misses
    assert core.sigma_ns is not None
    reach = round(2.0 * core.sigma_ns)  # miss_sigmas = 2
    iv = core.predict(sends[-1] + 1)
    assert iv is not None and iv.end_ns - iv.start_ns <= 2 * reach
    assert 0.7 <= c_cov < f_cov  # the punctual majority stays covered, the tail not
    assert c_pause < 0.5 * f_pause


def test_a_send_later_than_half_a_period_is_its_own_slots() -> None:
    # Rounding to the nearest slot took a send 25 ms late (of 33 ms) for an early one of
    # the next slot: that slot's window was consumed before its own send came, and the
    # residuals learned a period-sized error. In order, it is its own slot's.
    period = 33_333_333
    sends = _tail_sends(9, 200, period=period, share=0.0)
    m = SendTimeModel(window="conformal")
    for t in sends:
        m.observe(t)
    late = 200 * period + 25_000_000
    m.observe(late)
    iv = m.predict(late + 1)
    nxt = 201 * period + 200_000  # the next send, on time: inside its slot's window
    assert iv is not None and iv.start_ns <= nxt <= iv.end_ns
    assert all(r > -period // 2 for r in m._residuals)
    m.observe(nxt)
    assert abs(m._residuals[-1]) < 1_000_000
    # Rounding to the nearest slot (the empirical windows) consumed the next slot's.
    emp = SendTimeModel(window="empirical")
    for t in [*sends, late]:
        emp.observe(t)
    iv = emp.predict(late + 1)
    assert iv is not None and iv.start_ns > nxt


def test_conformal_windows_follow_a_phase_jump_and_keep_the_jitter() -> None:
    rng = np.random.default_rng(3)
    period = 50_000_000
    before = [k * period + round(abs(rng.normal(0, 300_000))) for k in range(100)]
    after = [before[-1] + 17_000_000 + k * period + round(abs(rng.normal(0, 300_000)))
             for k in range(1, 40)]  # fmt: skip
    m = SendTimeModel(window="conformal")
    for t in before:
        m.observe(t)
    kept = len(m._residuals)
    hits = []
    for t in after:
        iv = m.predict(t - period // 2)
        hits.append(iv is not None and iv.start_ns <= t <= iv.end_ns)
        m.observe(t)
    # The first send after the jump is a miss; its residual widens the window, which
    # covers the next ones until four in a row off the core, on one phase, are the jump.
    assert not hits[0] and all(hits[1:3]) and sum(hits[1:]) >= 0.85 * len(hits[1:])
    assert m._segment >= 1  # a new segment: the jump was found
    # The jump's own sends left the residuals; the rest (the jitter) stayed, and the
    # window is the jitter's again.
    assert len(m._residuals) >= min(kept, 64 - 4)
    assert m.window_bounds_ns is not None and m.window_bounds_ns[1] < 2_000_000


@given(st.integers(0, 2**32 - 1), st.floats(0.0, 0.3), st.integers(10_000_000, 100_000_000))
@example(seed=79, share=0.28125, period=14_499_518)  # its 19th send, see below
@settings(max_examples=25, deadline=None)
def test_conformal_windows_never_drift_by_a_slot(seed: int, share: float, period: int) -> None:
    # Whatever the tail (up to 90 % of a period late), no residual is ever taken against
    # the wrong slot by a period: the windows stay on the sends they predict.
    # (The first sends are scored against a fit on a few of them: with most of those
    # late the line itself is off by up to half a period, seed 67297 at 25 %, and a
    # residual then says so; the property is the fitted model's, after 24 sends. Seed 79
    # at 28 % still had one on its 19th send; 400 random draws had none after the 8th.)
    sends = _tail_sends(seed, 300, period=period, share=share, scale=0.15 * period,
                        cap=0.9 * period)  # fmt: skip
    m = SendTimeModel(window="conformal")
    taken: list[int] = []

    class _Recorded(deque[int]):
        def append(self, r: int) -> None:
            taken.append(r)
            super().append(r)

    m._residuals = _Recorded(maxlen=m._residuals.maxlen)
    for i, t in enumerate(sends):
        taken.clear()
        m.observe(t)
        assert i < 24 or all(-period // 2 < r < period for r in taken)
    assert m.period_ns is not None and abs(m.period_ns - period) < period // 100


def test_theil_sen_and_the_slot_of_a_send() -> None:
    from coorp.control._residuals import assign_send, theil_sen

    # A third of the sends far off the line leave the Theil–Sen slope where it was.
    runs = [[k * 100 + (900 if k % 3 == 0 else 0) for k in range(30)]]
    assert theil_sen(runs, [list(range(30))]) == 100
    assert theil_sen([[5]], [[0]]) is None
    # Slots 0..first-1 observed (q = 0, p = 100): nearest slot, except a late one of
    # ``first`` more than early_ns before slot first + 1.
    assert assign_send(240, 0, 100, 2, 10) == 2  # on time-ish
    assert assign_send(285, 0, 100, 2, 10) == 2  # late, nearer the next slot
    assert assign_send(295, 0, 100, 2, 10) == 3  # inside the next slot's reach: a skip
    assert assign_send(410, 0, 100, 2, 10) == 4  # two slots on: skipped
    assert assign_send(105, 0, 100, 2, 10) == 1  # an already observed slot (a burst)
