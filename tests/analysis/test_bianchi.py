"""Bianchi's saturation model on its own: closed forms, orderings, and Monte-Carlo runs of
the backoff chain and of slotted contention (numpy, seeded), written here independently of
``coorp.analysis.bianchi``. Nothing here runs the simulator."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from coorp.analysis import (
    ampdu_size,
    attempt_probability,
    bar_fraction,
    bianchi_table,
    dcf_fixed_point,
    saturation_throughput,
    slot_throughput,
)
from coorp.phy import MAX_PPDU_NS, SIFS_NS, SLOT_NS
from coorp.scenario import AccessCategory, EdcaOverride, MacConfig, PhyConfig, RetryPolicy
from coorp.sim.timing import ExchangeTiming, mpdu_bytes, psdu_bytes

PHY = PhyConfig()  # 80 MHz, 2 spatial streams, long GI, 24 Mb/s control frames
NO_AGG = MacConfig(edca={AccessCategory.BE: EdcaOverride(aggregation=False)})
CLASSIC = MacConfig()
NS3 = MacConfig(retry_policy=RetryPolicy.NS3)
BE_AIFS_NS = SIFS_NS + 3 * SLOT_NS


# -- helpers written from the definitions, not from the module ----------------------------
def _k_by_brute_force(payload: int, mcs: int, mac: MacConfig, phy: PhyConfig = PHY) -> int:
    timing = ExchangeTiming(phy)
    best = 1
    for k in range(1, mac.max_ampdu_mpdus + 1):
        psdu = psdu_bytes([mpdu_bytes(payload)] * k)
        if psdu <= mac.max_ampdu_bytes and timing.data_ns(psdu, mcs) <= MAX_PPDU_NS:
            best = k
    return best


def _windows(cw_min: int, cw_max: int, stages: int) -> np.ndarray:
    return np.array([min((cw_min + 1) * 2**i, cw_max + 1) for i in range(stages)])


# -- N = 1: no contention ----------------------------------------------------------------
@pytest.mark.parametrize(
    ("mac", "rts"),
    [(NO_AGG, False), (NO_AGG, True), (CLASSIC, False), (CLASSIC, True), (NS3, False)],
)
def test_single_station_closed_form(mac: MacConfig, rts: bool) -> None:
    payload, mcs = 1500, 7
    r = saturation_throughput(1, payload_bytes=payload, mcs=mcs, phy=PHY, mac=mac, rts=rts)
    w = 16  # CWmin + 1 for AC_BE
    assert r.tau == pytest.approx(2 / (w + 1), rel=1e-12)
    assert r.p == 0.0
    assert r.p_success == pytest.approx(1.0)

    timing = ExchangeTiming(PHY)
    aggregating = mac is not NO_AGG
    k = _k_by_brute_force(payload, mcs, mac) if aggregating else 1
    data_ns = timing.data_ns(psdu_bytes([payload + 38] * k), mcs)
    response = timing.block_ack_ns if k > 1 else timing.ack_ns
    t_s = data_ns + SIFS_NS + response + BE_AIFS_NS
    if rts:
        t_s += timing.rts_ns + SIFS_NS + timing.cts_ns + SIFS_NS
    mean_backoff_ns = (w - 1) / 2 * SLOT_NS
    expected_mbps = 8 * payload * k / (mean_backoff_ns + t_s) * 1e3
    assert r.mpdus_per_ppdu == k
    assert r.throughput_mbps == pytest.approx(expected_mbps, rel=1e-12)


def test_default_k_is_64_at_mcs7_and_ppdu_limited_at_mcs0() -> None:
    assert ampdu_size(1500, 7, PHY, CLASSIC) == 64
    slow = PhyConfig(width_mhz=20, spatial_streams=1)
    k = ampdu_size(1500, 0, slow, CLASSIC)
    assert k == _k_by_brute_force(1500, 0, CLASSIC, slow)
    assert 1 < k < 64  # 5.484 ms at 6.5 Mb/s holds ~4.4 kB
    timing = ExchangeTiming(slow)
    assert timing.data_ns(psdu_bytes([1538] * (k + 1)), 0) > MAX_PPDU_NS


def test_ampdu_size_respects_count_bytes_txop_and_aggregation_off() -> None:
    assert ampdu_size(1500, 7, PHY, NO_AGG) == 1
    assert ampdu_size(1500, 7, PHY, MacConfig(max_ampdu_mpdus=10)) == 10
    small = MacConfig(max_ampdu_bytes=20_000)
    k = ampdu_size(1500, 7, PHY, small)
    assert psdu_bytes([1538] * k) <= 20_000 < psdu_bytes([1538] * (k + 1))
    # AC_VI has a 3.008 ms TXOP: the whole exchange (DATA + SIFS + BlockAck) must fit.
    slow = PhyConfig(width_mhz=20, spatial_streams=1)
    timing = ExchangeTiming(slow)
    k = ampdu_size(1500, 2, slow, CLASSIC, AccessCategory.VI)

    def exchange(k: int) -> int:
        return timing.data_ns(psdu_bytes([1538] * k), 2) + SIFS_NS + timing.block_ack_ns

    assert exchange(k) <= 3_008_000 < exchange(k + 1)


# -- the fixed point ---------------------------------------------------------------------
@pytest.mark.parametrize("p", [0.0, 0.05, 0.3, 0.49, 0.51, 0.8, 1.0])
@pytest.mark.parametrize(("w", "m"), [(32, 3), (32, 5), (16, 6), (128, 3)])
def test_infinite_retries_reduce_to_bianchi_eq7(p: float, w: int, m: int) -> None:
    """Bianchi 2000, eq. 7: tau = 2(1-2p) / ((1-2p)(W+1) + pW(1-(2p)^m))."""
    tau = attempt_probability(p, cw_min=w - 1, cw_max=w * 2**m - 1, retry_limit=None)
    if abs(1 - 2 * p) < 1e-12:
        pytest.skip("eq. 7 is 0/0 at p = 1/2")
    eq7 = 2 * (1 - 2 * p) / ((1 - 2 * p) * (w + 1) + p * w * (1 - (2 * p) ** m))
    assert tau == pytest.approx(eq7, rel=1e-12)


def test_finite_retry_limit_matches_chain_sum() -> None:
    # tau = sum_i p^i / sum_i p^i (W_i + 1)/2 over stages 0..R, written out by hand.
    p, r = 0.3, 7
    w = _windows(15, 1023, r + 1)
    expected = sum(p**i for i in range(r + 1)) / sum(p**i * (w[i] + 1) / 2 for i in range(r + 1))
    assert attempt_probability(p, cw_min=15, cw_max=1023, retry_limit=r) == pytest.approx(expected)
    # Long retry limit -> Bianchi's infinite chain.
    long = attempt_probability(p, cw_min=15, cw_max=1023, retry_limit=200)
    assert long == pytest.approx(attempt_probability(p, cw_min=15, cw_max=1023, retry_limit=None))


@pytest.mark.parametrize("n", [2, 3, 5, 10, 40, 200])
def test_fixed_point_is_consistent(n: int) -> None:
    tau, p = dcf_fixed_point(n, cw_min=15, cw_max=1023, retry_limit=7)
    assert p == pytest.approx(1 - (1 - tau) ** (n - 1), abs=1e-10)
    assert tau == pytest.approx(
        attempt_probability(p, cw_min=15, cw_max=1023, retry_limit=7), rel=1e-10
    )


def test_collision_probability_grows_and_attempt_rate_falls_with_n() -> None:
    rs = bianchi_table([1, 2, 3, 5, 10, 20, 40], payload_bytes=1500, mcs=7, phy=PHY, mac=CLASSIC)
    assert [r.n for r in rs] == [1, 2, 3, 5, 10, 20, 40]
    ps = [r.p for r in rs]
    taus = [r.tau for r in rs]
    assert all(a < b for a, b in itertools.pairwise(ps))
    assert all(a > b for a, b in itertools.pairwise(taus))
    busy = [r.p_busy for r in rs]
    assert all(a < b for a, b in itertools.pairwise(busy))
    # Long A-MPDUs with basic access: collisions are as long as successes, so throughput
    # falls monotonically once there is contention.
    thr = [r.throughput_mbps for r in rs]
    assert all(a > b for a, b in itertools.pairwise(thr))


def test_rts_wins_for_long_frames_at_large_n_and_loses_for_short_frames() -> None:
    def thr(n: int, mac: MacConfig, rts: bool) -> float:
        return saturation_throughput(
            n, payload_bytes=1500, mcs=7, phy=PHY, mac=mac, rts=rts
        ).throughput_mbps

    for n in (10, 20, 40):
        assert thr(n, CLASSIC, True) > thr(n, CLASSIC, False)
    # A single 1500-byte MPDU at 585 Mb/s is ~70 µs: RTS/CTS costs more than it saves.
    for n in (1, 2, 5):
        assert thr(n, NO_AGG, False) > thr(n, NO_AGG, True)
    # Without an explicit flag the threshold decides; 0 means always.
    always = MacConfig(rts_threshold_bytes=0)
    r = saturation_throughput(20, payload_bytes=1500, mcs=7, phy=PHY, mac=always)
    assert r.throughput_mbps == pytest.approx(thr(20, CLASSIC, True))


def test_rts_throughput_is_nearly_flat_in_n() -> None:
    """Bianchi 2000 §V: with RTS/CTS, collisions are short, so throughput barely depends on n."""
    rs = bianchi_table(
        [2, 5, 10, 20, 40], payload_bytes=1500, mcs=7, phy=PHY, mac=CLASSIC, rts=True
    )
    thr = [r.throughput_mbps for r in rs]
    assert max(thr) / min(thr) < 1.05
    basic = bianchi_table([2, 40], payload_bytes=1500, mcs=7, phy=PHY, mac=CLASSIC, rts=False)
    assert basic[0].throughput_mbps / basic[1].throughput_mbps > 1.3


# -- the ns3 retry policy ------------------------------------------------------------------
@pytest.mark.parametrize("n", [2, 5, 10, 20, 40])
def test_ns3_policy_bounds_for_the_same_chain(n: int) -> None:
    """(1 - p) S_classic <= S_ns3 < S_classic with basic access (derivation in bianchi.py)."""
    kw = dict(
        slot_ns=SLOT_NS, t_success_ns=1_500_000, t_collision_ns=1_450_000,
        cw_min=15, cw_max=1023, retry_limit=7, payload_bits=8 * 1500 * 64,
    )  # fmt: skip
    classic = slot_throughput(n, **kw)
    ns3 = slot_throughput(n, **kw, bar_success_ns=120_000, bar_collision_ns=120_000)
    assert (ns3.tau, ns3.p) == (classic.tau, classic.p)
    assert (1 - classic.p) * classic.throughput_mbps <= ns3.throughput_mbps
    assert ns3.throughput_mbps < classic.throughput_mbps


def test_ns3_policy_against_classic_in_the_real_configuration() -> None:
    def thr(n: int, mac: MacConfig, rts: bool = False) -> float:
        return saturation_throughput(
            n, payload_bytes=1500, mcs=7, phy=PHY, mac=mac, rts=rts
        ).throughput_mbps

    assert thr(1, NS3) == pytest.approx(thr(1, CLASSIC), rel=1e-12)
    for n in (2, 5, 10, 20, 40):
        assert thr(n, NS3) < thr(n, CLASSIC)
        # With RTS/CTS collisions lose the RTS, never a BlockAck: no BAR is ever sent.
        assert thr(n, NS3, True) == pytest.approx(thr(n, CLASSIC, True), rel=1e-12)
    # The policy is about BlockAcks: without aggregation it changes nothing.
    no_agg_ns3 = MacConfig(
        retry_policy=RetryPolicy.NS3, edca={AccessCategory.BE: EdcaOverride(aggregation=False)}
    )
    assert thr(10, no_agg_ns3) == pytest.approx(thr(10, NO_AGG), rel=1e-12)
    # One more chain stage (the BAR may fail retry_limit + 1 times): tau barely moves.
    a = saturation_throughput(40, payload_bytes=1500, mcs=7, phy=PHY, mac=NS3)
    b = saturation_throughput(40, payload_bytes=1500, mcs=7, phy=PHY, mac=CLASSIC)
    assert a.tau == pytest.approx(b.tau, rel=0.03)


def test_bar_fraction_is_probability_of_a_stage_above_zero() -> None:
    for p in (0.0, 0.2, 0.6, 0.95):
        r = 8
        b0 = (1 - p) / (1 - p ** (r + 1)) if p < 1 else 1 / (r + 1)  # stationary P(stage 0)
        assert bar_fraction(p, r) == pytest.approx(1 - b0)
        assert bar_fraction(p, r) <= p


# -- Monte-Carlo: the backoff chain alone (checks tau(p) and beta(p)) -------------------------
@pytest.mark.parametrize("p", [0.1, 0.4, 0.7])
def test_backoff_chain_monte_carlo(p: float) -> None:
    """Independent stations whose attempts fail w.p. p: attempts per slot -> tau(p),
    share of attempts above stage 0 -> beta(p)."""
    rng = np.random.default_rng(20240611)
    r, stations, slots = 7, 4000, 3000
    w = _windows(15, 1023, r + 1)
    stage = np.zeros(stations, dtype=np.int64)
    ctr = rng.integers(0, w[0], size=stations)
    attempts = upper = 0
    for t in range(slots):
        tx = ctr == 0
        if t >= 300:  # drop the start-up transient
            attempts += int(tx.sum())
            upper += int((tx & (stage > 0)).sum())
        fail = tx & (rng.random(stations) < p)
        stage = np.where(tx, np.where(fail, stage + 1, 0), stage)
        stage[stage > r] = 0
        ctr = np.where(tx, rng.integers(0, w[stage]), ctr - 1)
    tau_hat = attempts / (stations * (slots - 300))
    assert tau_hat == pytest.approx(
        attempt_probability(p, cw_min=15, cw_max=1023, retry_limit=r), rel=0.02
    )
    assert upper / attempts == pytest.approx(bar_fraction(p, r), rel=0.02)


# -- Monte-Carlo: slotted contention (checks the decoupling fixed point and slot mix) ------
def _slotted_contention(
    n: int, *, retry_limit: int, reps: int, slots: int, seed: int
) -> dict[str, int]:
    """``reps`` independent networks of ``n`` saturated stations on Bianchi's virtual
    slots; stages above 0 count as BlockAckReqs (ns3 policy) in the slot classification."""
    rng = np.random.default_rng(seed)
    w = _windows(15, 1023, retry_limit + 1)
    stage = np.zeros((reps, n), dtype=np.int64)
    ctr = rng.integers(0, w[0], size=(reps, n))
    keys = ("idle", "s_data", "s_bar", "c_data", "c_bar", "c_mix", "att", "fail")
    c = dict.fromkeys(keys, 0)
    warmup = 500
    for t in range(slots + warmup):
        tx = ctr == 0
        k = tx.sum(axis=1)
        kb = (tx & (stage > 0)).sum(axis=1)
        coll = k > 1
        if t >= warmup:
            one = k == 1
            c["idle"] += int((k == 0).sum())
            c["s_data"] += int((one & (kb == 0)).sum())
            c["s_bar"] += int((one & (kb == 1)).sum())
            c["c_data"] += int((coll & (kb == 0)).sum())
            c["c_bar"] += int((coll & (kb == k)).sum())
            c["c_mix"] += int((coll & (kb > 0) & (kb < k)).sum())
            c["att"] += int(k.sum())
            c["fail"] += int(k[coll].sum())
        nxt = np.where(coll[:, None], stage + 1, 0)
        nxt[nxt > retry_limit] = 0
        stage = np.where(tx, nxt, stage)
        ctr = np.where(tx, rng.integers(0, w[stage]), ctr - 1)
    return c


@pytest.mark.parametrize("n", [5, 10, 20])
def test_fixed_point_against_slotted_contention_monte_carlo(n: int) -> None:
    reps, slots = 100, 4000
    c = _slotted_contention(n, retry_limit=7, reps=reps, slots=slots, seed=n)
    tau, p = dcf_fixed_point(n, cw_min=15, cw_max=1023, retry_limit=7)
    # Bianchi's decoupling assumption is an approximation; these margins are its
    # known accuracy at n >= 5, several times the Monte-Carlo noise at this size.
    assert c["att"] / (reps * slots * n) == pytest.approx(tau, rel=0.02)
    assert c["fail"] / c["att"] == pytest.approx(p, rel=0.03)

    t_s, t_c, t_b, sigma = 1_400_000.0, 1_380_000.0, 123_000.0, float(SLOT_NS)
    payload = 8.0 * 1500 * 64
    # classic: BAR or not does not matter, every success carries data
    succ = c["s_data"] + c["s_bar"]
    coll = c["c_data"] + c["c_bar"] + c["c_mix"]
    mc_classic = succ * payload / (c["idle"] * sigma + succ * t_s + coll * t_c) * 1e3
    model = slot_throughput(
        n, slot_ns=sigma, t_success_ns=t_s, t_collision_ns=t_c,
        cw_min=15, cw_max=1023, retry_limit=7, payload_bits=payload,
    )  # fmt: skip
    assert model.throughput_mbps == pytest.approx(mc_classic, rel=0.01)
    busy = sum(c[k] for k in ("s_data", "s_bar", "c_data", "c_bar", "c_mix"))
    assert model.p_busy == pytest.approx(busy / (busy + c["idle"]), rel=0.02)
    assert model.p_success == pytest.approx(succ / busy, rel=0.02)
    # ns3: stage > 0 attempts are BARs
    elapsed = (
        c["idle"] * sigma + c["s_data"] * t_s + c["s_bar"] * t_b
        + c["c_data"] * t_c + c["c_bar"] * t_b + c["c_mix"] * max(t_c, t_b)
    )  # fmt: skip
    mc_ns3 = c["s_data"] * payload / elapsed * 1e3
    model3 = slot_throughput(
        n, slot_ns=sigma, t_success_ns=t_s, t_collision_ns=t_c,
        cw_min=15, cw_max=1023, retry_limit=7, payload_bits=payload,
        bar_success_ns=t_b, bar_collision_ns=t_b,
    )  # fmt: skip
    assert model3.throughput_mbps == pytest.approx(mc_ns3, rel=0.02)


# -- Bianchi's own numbers -------------------------------------------------------------------
def test_bianchi_2000_fhss_parameters() -> None:
    """Bianchi 2000 Table II (FHSS, 1 Mb/s, so 1 bit = 1 µs): payload 8184 bits, MAC
    header 272, PHY header 128, ACK 112 + PHY header, RTS 160 + PHY, CTS 112 + PHY, slot
    50 µs, SIFS 28 µs, DIFS 128 µs, propagation delay 1 µs. T_s, T_c from his eqs. 19-20."""
    us = 1_000.0
    h, payload, ack, rts, cts = 400.0, 8184.0, 240.0, 288.0, 240.0
    sifs, difs, delta, sigma = 28.0, 128.0, 1.0, 50.0
    ts_bas = (h + payload + sifs + delta + ack + difs + delta) * us
    tc_bas = (h + payload + difs + delta) * us
    ts_rts = (rts + sifs + delta + cts + sifs + delta + h + payload + sifs + delta + ack + difs
              + delta) * us  # fmt: skip
    tc_rts = (rts + difs + delta) * us
    assert (ts_bas, tc_bas, ts_rts, tc_rts) == (8982e3, 8713e3, 9568e3, 417e3)

    def s(n: int, w: int, m: int, ts: float, tc: float) -> float:
        r = slot_throughput(
            n, slot_ns=sigma * us, t_success_ns=ts, t_collision_ns=tc,
            cw_min=w - 1, cw_max=w * 2**m - 1, retry_limit=None, payload_bits=payload,
        )  # fmt: skip
        return r.throughput_mbps  # normalised: the channel carries 1 Mb/s

    # His figures' shape: basic access W=32, m=3 loses throughput as n grows; RTS/CTS
    # stays flat; a larger W (m = 6) helps basic access at large n.
    basic = [s(n, 32, 3, ts_bas, tc_bas) for n in (5, 10, 20, 50)]
    assert all(a > b for a, b in itertools.pairwise(basic))
    assert 0.7 < basic[0] < 0.9  # a normalised throughput well below the 8184/8982 ceiling
    assert s(50, 128, 3, ts_bas, tc_bas) > s(50, 32, 3, ts_bas, tc_bas)
    rts_curve = [s(n, 32, 3, ts_rts, tc_rts) for n in (5, 10, 20, 50)]
    assert max(rts_curve) - min(rts_curve) < 0.02
    assert rts_curve[-1] > basic[-1]
    # Bianchi eq. 27: maximum throughput near tau_opt ~ 1/(n sqrt(T_c*/2)), T_c* = T_c/sigma.
    # The W that puts the fixed point closest to tau_opt gives near-maximal throughput.
    n = 20
    tau_opt = 1 / (n * math.sqrt(tc_bas / us / sigma / 2))
    best_w = min(
        (2**j for j in range(4, 12)),
        key=lambda w: abs(
            dcf_fixed_point(n, cw_min=w - 1, cw_max=w - 1, retry_limit=None)[0] - tau_opt
        ),
    )
    thr = {w: s(n, w, 0, ts_bas, tc_bas) for w in (2**j for j in range(4, 12))}
    assert thr[best_w] >= 0.99 * max(thr.values())


def test_rejects_bad_arguments() -> None:
    with pytest.raises(ValueError):
        dcf_fixed_point(0, cw_min=15, cw_max=1023, retry_limit=7)
    with pytest.raises(ValueError):
        attempt_probability(1.5, cw_min=15, cw_max=1023, retry_limit=7)
    with pytest.raises(ValueError):
        saturation_throughput(3, payload_bytes=1500, mcs=7, phy=PHY, mac=NO_AGG, mpdus_per_ampdu=8)
