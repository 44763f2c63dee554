"""VHT and legacy PHY timing against IEEE Std 802.11-2016 (clauses 17 and 21).

Expected numbers come from the standard's rate tables (Tables 21-30..21-61, which print
rates rounded to 0.1 Mb/s) or are worked out by hand in the comments from the TXTIME
equations (17-29 for non-HT, 21-65/21-66 for VHT with BCC).
"""

from __future__ import annotations

from itertools import pairwise

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from coorp.phy import (
    ACK_BYTES,
    BAR_BYTES,
    BLOCK_ACK_BYTES,
    CTS_BYTES,
    MAX_PPDU_NS,
    RTS_BYTES,
    GuardInterval,
    LinkBudget,
    VhtMode,
    is_valid_vht_mcs,
    legacy_duration_ns,
    min_sensitivity_dbm,
    packet_error_rate,
    valid_vht_mcs,
    vht_ppdu_duration_ns,
)
from coorp.scenario import PhyConfig
from coorp.sim.timing import ExchangeTiming

LONG, SHORT = GuardInterval.LONG, GuardInterval.SHORT

# -- rates ---------------------------------------------------------------------------------

# (MCS, NSS, width MHz, Mb/s at 800 ns GI, Mb/s at 400 ns GI) as printed in 802.11-2016
# (rounded to 0.1 Mb/s, so 29.25 prints as 29.3: compare within half a unit).
STANDARD_RATES = [
    (0, 1, 20, 6.5, 7.2),
    (7, 1, 20, 65.0, 72.2),
    (8, 1, 20, 78.0, 86.7),
    (4, 2, 20, 78.0, 86.7),
    (9, 3, 20, 260.0, 288.9),
    (0, 1, 40, 13.5, 15.0),
    (5, 2, 40, 216.0, 240.0),
    (9, 1, 40, 180.0, 200.0),
    (0, 1, 80, 29.3, 32.5),
    (4, 1, 80, 175.5, 195.0),
    (9, 1, 80, 390.0, 433.3),
    (7, 2, 80, 585.0, 650.0),
    (9, 2, 80, 780.0, 866.7),
    (9, 3, 80, 1170.0, 1300.0),
    (9, 4, 80, 1560.0, 1733.3),
    (0, 1, 160, 58.5, 65.0),
    (9, 1, 160, 780.0, 866.7),
    (8, 3, 160, 2106.0, 2340.0),
    (9, 4, 160, 3120.0, 3466.7),
]


@pytest.mark.parametrize(("mcs", "nss", "width", "lgi", "sgi"), STANDARD_RATES)
def test_vht_rate_matches_standard_table(
    mcs: int, nss: int, width: int, lgi: float, sgi: float
) -> None:
    assert VhtMode(mcs, nss, width, LONG).rate_mbps == pytest.approx(lgi, abs=0.051)
    assert VhtMode(mcs, nss, width, SHORT).rate_mbps == pytest.approx(sgi, abs=0.051)


def test_headline_rates() -> None:
    assert VhtMode(9, 2, 80, SHORT).rate_mbps == pytest.approx(866.7, abs=0.05)
    assert VhtMode(7, 1, 20, LONG).rate_mbps == 65.0
    assert VhtMode(0, 1, 20).rate_mbps == 6.5


@pytest.mark.parametrize(
    ("mcs", "nss", "width", "n_es"),
    [(0, 1, 20, 1), (6, 2, 80, 1), (7, 2, 80, 2), (9, 2, 80, 2), (9, 3, 80, 3), (9, 4, 160, 6)],
)
def test_bcc_encoder_count_matches_standard(mcs: int, nss: int, width: int, n_es: int) -> None:
    assert VhtMode(mcs, nss, width).bcc_encoders == n_es


@pytest.mark.parametrize(
    ("mcs", "nss", "width"),
    [(9, 1, 20), (9, 2, 20), (9, 4, 20), (6, 3, 80), (9, 3, 160)],
)
def test_combinations_excluded_by_the_standard_are_rejected(mcs: int, nss: int, width: int) -> None:
    assert not is_valid_vht_mcs(mcs, nss, width)
    assert mcs not in valid_vht_mcs(nss, width)
    with pytest.raises(ValueError, match=rf"MCS {mcs} .*valid MCS: \["):
        VhtMode(mcs, nss, width)


@pytest.mark.parametrize(
    ("mcs", "nss", "width"), [(10, 1, 20), (-1, 1, 20), (0, 0, 20), (0, 5, 80), (0, 1, 30)]
)
def test_out_of_range_parameters_are_rejected(mcs: int, nss: int, width: int) -> None:
    assert not is_valid_vht_mcs(mcs, nss, width)
    with pytest.raises(ValueError):
        VhtMode(mcs, nss, width)


def test_valid_mcs_lists() -> None:
    assert valid_vht_mcs(1, 20) == list(range(9))
    assert valid_vht_mcs(3, 20) == list(range(10))
    assert valid_vht_mcs(3, 80) == [0, 1, 2, 3, 4, 5, 7, 8, 9]
    assert valid_vht_mcs(3, 160) == list(range(9))
    assert valid_vht_mcs(2, 80) == list(range(10))


# -- VHT PPDU durations --------------------------------------------------------------------
# Preamble: L-STF 8 + L-LTF 8 + L-SIG 4 + VHT-SIG-A 8 + VHT-STF 4 + VHT-SIG-B 4 = 36 µs,
# plus 4 µs per VHT-LTF (1, 2, 4, 4 LTFs for 1..4 streams).
# N_SYM = ceil((8·PSDU + 16 service + 6·N_ES tail) / N_DBPS).


@pytest.mark.parametrize(
    ("psdu", "mode", "expected_us"),
    [
        # MCS 7 1SS 20 MHz: N_DBPS 260. 8000+16+6 = 8022 bits -> 31 symbols = 124 µs; +40.
        (1000, VhtMode(7, 1, 20, LONG), 164),
        # MCS 9 2SS 80 MHz SGI: N_DBPS 3120, N_ES 2. 12336+16+12 = 12364 -> 4 symbols;
        # 4·3.6 = 14.4 µs rounded up to 16 µs; preamble 36 + 2·4 = 44.
        (1542, VhtMode(9, 2, 80, SHORT), 60),
        # MCS 0 1SS 20 MHz SGI: N_DBPS 26. 30 bytes: 262 bits -> 11 symbols = 39.6 -> 40 µs.
        (30, VhtMode(0, 1, 20, SHORT), 80),
        # 29 bytes: 254 bits -> 10 symbols = 36.0 µs exactly (no rounding needed).
        (29, VhtMode(0, 1, 20, SHORT), 76),
        # Same 10 symbols at long GI: 40 µs.
        (29, VhtMode(0, 1, 20, LONG), 80),
        # MCS 0 3SS 80 MHz: N_DBPS 351, 4 VHT-LTFs. 822 bits -> 3 symbols; 36+16+12 = 64.
        (100, VhtMode(0, 3, 80, LONG), 64),
        # Empty PSDU: 22 bits still need one symbol.
        (0, VhtMode(0, 1, 20, LONG), 44),
    ],
)
def test_vht_ppdu_duration_by_hand(psdu: int, mode: VhtMode, expected_us: int) -> None:
    assert vht_ppdu_duration_ns(psdu, mode) == expected_us * 1000


def test_vht_ppdu_duration_rejects_negative_length() -> None:
    with pytest.raises(ValueError):
        vht_ppdu_duration_ns(-1, VhtMode(0, 1, 20))


# -- legacy (non-HT) control frames ----------------------------------------------------------
# TXTIME = 20 µs preamble + 4 µs · ceil((16 + 8·bytes + 6) / N_DBPS); N_DBPS 24 at 6 Mb/s,
# 96 at 24 Mb/s.


@pytest.mark.parametrize(
    ("frame_bytes", "rate", "expected_us"),
    [
        (ACK_BYTES, 6, 44),  # 134 bits -> 6 symbols
        (ACK_BYTES, 24, 28),  # 134 bits -> 2 symbols
        (CTS_BYTES, 6, 44),
        (CTS_BYTES, 24, 28),
        (RTS_BYTES, 6, 52),  # 182 bits -> 8 symbols
        (RTS_BYTES, 24, 28),  # 182 bits -> 2 symbols
        (BLOCK_ACK_BYTES, 6, 68),  # 278 bits -> 12 symbols
        (BLOCK_ACK_BYTES, 24, 32),  # 278 bits -> 3 symbols
        (BAR_BYTES, 24, 32),  # 214 bits -> 3 symbols
    ],
)
def test_legacy_control_frame_durations(frame_bytes: int, rate: int, expected_us: int) -> None:
    assert legacy_duration_ns(frame_bytes, rate) == expected_us * 1000


def test_control_frame_lengths_match_the_standard() -> None:
    # 802.11-2016 9.3.1: RTS 20, CTS 14, Ack 14 bytes; compressed BlockAck 32 (64-bit bitmap).
    assert (RTS_BYTES, CTS_BYTES, ACK_BYTES, BLOCK_ACK_BYTES) == (20, 14, 14, 32)


def test_legacy_duration_rejects_non_ofdm_rate() -> None:
    with pytest.raises(ValueError, match="not an OFDM rate"):
        legacy_duration_ns(14, 11)


# -- the max-PSDU inverse ---------------------------------------------------------------------


def test_max_psdu_by_hand() -> None:
    # MCS 0 1SS 20 MHz, 5.484 ms: 5484 - 40 = 5444 µs = 1361 symbols of 26 bits;
    # 1361·26 - 22 = 35364 bits = 4420 bytes (4421 bytes need a 1362nd symbol).
    timing = ExchangeTiming(PhyConfig(width_mhz=20, spatial_streams=1))
    assert timing.max_psdu_bytes(0, MAX_PPDU_NS) == 4420


@st.composite
def _mode_and_limit(draw: st.DrawFn) -> tuple[PhyConfig, int, int]:
    width = draw(st.sampled_from([20, 40, 80, 160]))
    nss = draw(st.integers(1, 4))
    mcs = draw(st.sampled_from(valid_vht_mcs(nss, width)))
    gi = draw(st.sampled_from([LONG, SHORT]))
    floor = vht_ppdu_duration_ns(0, VhtMode(mcs, nss, width, gi))
    limit = draw(st.integers(floor, MAX_PPDU_NS))
    return PhyConfig(width_mhz=width, spatial_streams=nss, guard_interval=gi), mcs, limit


@settings(max_examples=300, deadline=None)
@given(_mode_and_limit())
def test_max_psdu_is_the_exact_inverse_of_the_duration(case: tuple[PhyConfig, int, int]) -> None:
    phy, mcs, limit = case
    timing = ExchangeTiming(phy)
    mode = VhtMode(mcs, phy.spatial_streams, phy.width_mhz, phy.guard_interval)
    n = timing.max_psdu_bytes(mcs, limit)
    assert vht_ppdu_duration_ns(n, mode) <= limit < vht_ppdu_duration_ns(n + 1, mode)
    assert timing.data_ns(n, mcs) == vht_ppdu_duration_ns(n, mode)


# -- link budget and errors -------------------------------------------------------------------


def test_sensitivity_table_and_width_scaling() -> None:
    # 802.11-2016 Table 21-25: MCS 0 at 20 MHz -82 dBm, MCS 9 -57 dBm; +3 dB per doubling.
    assert min_sensitivity_dbm(0, 20) == -82
    assert min_sensitivity_dbm(9, 20) == -57
    assert min_sensitivity_dbm(0, 80) == -76
    assert min_sensitivity_dbm(7, 160) == -64 + 9


def test_packet_error_rate_anchor_and_monotonicity() -> None:
    # The anchor: 10 % PER for a 4096-byte PSDU at the sensitivity point.
    at_sens = min_sensitivity_dbm(5, 40)
    assert packet_error_rate(at_sens, 5, 40, 4096) == pytest.approx(0.1)
    powers = [at_sens - 10 + k for k in range(21)]
    pers = [packet_error_rate(p, 5, 40, 1500) for p in powers]
    assert all(a > b for a, b in pairwise(pers))
    # Longer frames fail more often at the same power.
    assert packet_error_rate(at_sens, 5, 40, 8000) > packet_error_rate(at_sens, 5, 40, 500)


def test_link_budget_by_hand() -> None:
    lb = LinkBudget()  # 20 dBm, 46.7 dB at 1 m, exponent 3
    # 10 m: 20 - 46.7 - 30 = -56.7 dBm.
    assert lb.rx_power_dbm(10.0) == pytest.approx(-56.7)
    # Closer than 1 m is clamped to 1 m.
    assert lb.rx_power_dbm(0.1) == pytest.approx(20 - 46.7)
    # 80 MHz sensitivities: MCS 9 -51, MCS 8 -53, MCS 7 -58 dBm: -56.7 dBm sustains MCS 7.
    assert lb.best_mcs(10.0, 2, 80) == 7
    assert lb.best_mcs(1.0, 2, 80) == 9
    # 1 km: 20 - 46.7 - 90 = -116.7 dBm, below every sensitivity.
    assert lb.best_mcs(1000.0, 1, 20) is None
