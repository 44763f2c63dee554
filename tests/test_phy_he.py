"""HE (802.11ax) PHY timing against IEEE Std 802.11ax-2021 clause 27.

Rates come from the standard's HE-MCS tables (Tables 27-55..27-110, printed to 0.1 Mb/s);
TXTIMEs are worked out by hand in the comments from eq. 27-135 with the pre-FEC padding
and LDPC steps of 27.3.12.
"""

from __future__ import annotations

import math
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from coorp.phy import (
    HeMode,
    PhyStandard,
    basic_trigger_bytes,
    bsrp_trigger_bytes,
    equal_ru_tones,
    he_data_symbols,
    he_max_psdu_bytes,
    he_ppdu_duration_ns,
    he_tb_ppdu_duration_ns,
    is_valid_mcs,
    max_psdu_bytes,
    multi_sta_block_ack_bytes,
    ppdu_duration_ns,
    ppdu_quantum_ns,
    rus_per_width,
    valid_mcs,
)
from coorp.scenario import PhyConfig
from coorp.sim.timing import ExchangeTiming

# (HE-MCS, NSS, RU tones (None: whole channel), width, Mb/s at 0.8, 1.6, 3.2 µs GI) as the
# standard's tables print them.
HE_RATES = [
    (0, 1, None, 20, 8.6, 8.1, 7.3),
    (11, 1, None, 20, 143.4, 135.4, 121.9),
    (7, 2, None, 80, 720.6, 680.6, 612.5),
    (11, 1, None, 80, 600.4, 567.1, 510.4),
    (11, 2, None, 80, 1201.0, 1134.2, 1020.8),
    (11, 2, None, 160, 2401.9, 2268.5, 2041.6),
    (0, 1, 26, 20, 0.9, 0.8, 0.8),
    (9, 1, 106, 80, 50.0, 47.2, 42.5),
    (7, 2, 242, 80, 172.1, 162.5, 146.3),
]


@pytest.mark.parametrize(("mcs", "nss", "ru", "width", "r08", "r16", "r32"), HE_RATES)
def test_he_rates_match_the_standards_tables(
    mcs: int, nss: int, ru: int | None, width: int, r08: float, r16: float, r32: float
) -> None:
    for gi, printed in ((800, r08), (1600, r16), (3200, r32)):
        ltf = 4 if gi == 3200 else 2
        mode = HeMode(mcs, nss, width, gi, ltf, ru_tones=ru, tb=ru is not None and gi != 800)
        assert mode.rate_mbps == pytest.approx(printed, abs=0.051), (gi, mode)


def test_n_dbps_is_the_integer_part_the_tables_list() -> None:
    # 980 data subcarriers x 10 bits x 5/6 = 8166.67: the table lists 8166 (600.4 Mb/s).
    assert HeMode(11, 1, 80).data_bits_per_symbol == 8166
    assert HeMode(11, 2, 80).data_bits_per_symbol == 16333


def test_txtime_worked_example_with_ldpc_extra_symbol() -> None:
    # HE SU, 1 stream, 20 MHz, HE-MCS 0, 0.8 µs GI, 2x HE-LTF, a 100-byte PSDU:
    # 8*100 + 16 = 816 bits over N_DBPS = 117: N_SYM,init = 7, N_excess = 114,
    # N_DBPS,short = 30 -> a_init = 4. N_pld = 819, N_avbits = 7 * 234 = 1638 -> one
    # 1944-bit codeword, N_shrt = 972 - 819 = 153, N_punc = 1944 - 1638 - 153 = 153 >
    # 0.1 * 972 and N_shrt < 1.2 * 153: the LDPC extra symbol; a_init = 4, so N_SYM = 8,
    # a = 1. TXTIME = 20 + 4 (RL-SIG) + 8 (HE-SIG-A) + 4 (HE-STF) + 7.2 (one 2x HE-LTF
    # with its 0.8 µs GI) + 8 * 13.6 = 152.0 µs; T_PE = 0 with no nominal padding, 4 µs
    # with 16 µs of nominal padding at a = 1.
    mode = HeMode(0, 1, 20)
    assert he_data_symbols(100, mode) == (8, 1)
    assert he_ppdu_duration_ns(100, mode) == 152_000
    assert he_ppdu_duration_ns(100, HeMode(0, 1, 20, packet_padding_us=16)) == 156_000
    assert he_ppdu_duration_ns(100, HeMode(0, 1, 20, packet_padding_us=8)) == 152_000


def test_txtime_without_extra_symbol() -> None:
    # HE-MCS 7, 2 streams, 80 MHz: N_DBPS = 9800. A 1546-byte PSDU (one 1500-byte IP
    # packet as an S-MPDU): 12 384 bits -> N_SYM,init = 2, N_excess = 2584, N_DBPS,short
    # = 600 -> a_init = 4 (ceil(4.3) capped). TXTIME = 20 + 4 + 8 + 4 + 2 * 7.2 + 2 * 13.6
    # = 77.6 µs.
    mode = HeMode(7, 2, 80)
    n_sym, _ = he_data_symbols(1546, mode)
    assert n_sym == 2
    assert he_ppdu_duration_ns(1546, mode) == 77_600
    # 3.2 µs GI with 4x HE-LTFs: 36 + 2 * 16 + 2 * 16 = 100 µs.
    assert he_ppdu_duration_ns(1546, HeMode(7, 2, 80, 3200, 4)) == 100_000


def test_tb_ppdu_shares_one_length_and_the_largest_ltf_count() -> None:
    a = HeMode(7, 1, 80, 1600, 2, ru_tones=242, tb=True)
    b = HeMode(7, 2, 80, 1600, 2, ru_tones=242, tb=True)
    one = he_tb_ppdu_duration_ns([(1000, a)])
    # TB preamble: 20 + 4 + 8 + 8 (HE-STF of a TB PPDU) + LTFs of 8 µs (6.4 + 1.6).
    n_sym, _ = he_data_symbols(1000, a)
    assert one == 40_000 + 8_000 + n_sym * 14_400
    both = he_tb_ppdu_duration_ns([(1000, a), (10, b)])
    assert both == 40_000 + 2 * 8_000 + n_sym * 14_400  # b's 2 streams: 2 HE-LTFs
    with pytest.raises(ValueError, match="at least one user"):
        he_tb_ppdu_duration_ns([])


@settings(max_examples=200, deadline=None)
@given(
    psdu=st.integers(0, 400_000),
    mcs=st.integers(0, 11),
    nss=st.integers(1, 4),
    width=st.sampled_from([20, 40, 80, 160]),
    gi=st.sampled_from([800, 1600, 3200]),
    padding=st.sampled_from([0, 8, 16]),
)
def test_txtime_never_decreases_and_max_psdu_inverts_it(
    psdu: int, mcs: int, nss: int, width: int, gi: int, padding: int
) -> None:
    mode = HeMode(mcs, nss, width, gi, 4 if gi == 3200 else 2, packet_padding_us=padding)
    d = he_ppdu_duration_ns(psdu, mode)
    assert he_ppdu_duration_ns(psdu + 1, mode) >= d
    assert d % ppdu_quantum_ns(PhyStandard.AX) == 0
    best = he_max_psdu_bytes(d, mode)
    assert best >= psdu
    assert he_ppdu_duration_ns(best, mode) <= d < he_ppdu_duration_ns(best + 1, mode)
    assert max_psdu_bytes(d, mode) == best and ppdu_duration_ns(psdu, mode) == d


def test_invalid_modes_are_refused_with_what_is_allowed() -> None:
    with pytest.raises(ValueError, match=r"HE-MCS 12 does not exist; allowed: 0\.\.11"):
        HeMode(12, 1, 20)
    with pytest.raises(ValueError, match="1024-QAM"):
        HeMode(10, 1, 80, 1600, 2, ru_tones=106, tb=True)
    with pytest.raises(ValueError, match="not an HE TB PPDU format"):
        HeMode(7, 1, 80, 800, 2, ru_tones=242, tb=True)  # TB PPDUs have no 0.8 µs GI
    with pytest.raises(ValueError, match="not an HE SU PPDU format"):
        HeMode(7, 1, 80, 3200, 2)
    with pytest.raises(ValueError, match="does not fit"):
        HeMode(7, 1, 20, ru_tones=484)


def test_resource_units() -> None:
    assert [rus_per_width(t, 80) for t in (26, 52, 106, 242, 484, 996, 1992)] == [
        37, 16, 8, 4, 2, 1, 0,
    ]  # fmt: skip
    assert equal_ru_tones(80, 1) == 996
    assert equal_ru_tones(80, 4) == 242
    assert equal_ru_tones(80, 5) == 106
    assert equal_ru_tones(20, 9) == 26
    with pytest.raises(ValueError, match="at most 9 26-tone RUs"):
        equal_ru_tones(20, 10)


def test_control_frame_sizes() -> None:
    # Header 16 + Common Info 8 + per user (User Info 5 [+ 1 Basic]) + FCS 4.
    assert basic_trigger_bytes(4) == 52
    assert bsrp_trigger_bytes(4) == 48
    # Header 16 + BA Control 2 + 12 per (station, TID) + FCS 4; all-ack context: 2 each
    # (ns-3 3.44's multi-STA BlockAck after four TB PPDUs is 30 bytes, traced).
    assert multi_sta_block_ack_bytes(4) == 70
    assert multi_sta_block_ack_bytes(4, all_ack=True) == 30


def test_mcs_validity_per_standard() -> None:
    assert valid_mcs(PhyStandard.AX, 1, 20) == list(range(12))
    assert valid_mcs(PhyStandard.AC, 1, 20) == list(range(9))  # VHT: no MCS 9 here
    assert not is_valid_mcs(PhyStandard.AC, 10, 2, 80)
    assert is_valid_mcs(PhyStandard.AX, 10, 2, 80)


def test_exchange_timing_uses_he_ppdus_on_an_ax_channel() -> None:
    phy = PhyConfig(standard=PhyStandard.AX, he_guard_interval_ns=1600)
    t = ExchangeTiming(phy)
    assert t.ppdu_quantum_ns == 400
    mode = t.mode(7)
    assert isinstance(mode, HeMode) and mode.gi_ns == 1600 and mode.ltf == 2
    assert t.data_ns(1546, 7) == he_ppdu_duration_ns(1546, mode)
    assert t.max_psdu_bytes(7, 5_484_000) == he_max_psdu_bytes(5_484_000, mode)
    # Control frames stay non-HT at the basic rate.
    assert t.ack_ns == ExchangeTiming(PhyConfig()).ack_ns
    assert ExchangeTiming(PhyConfig()).ppdu_quantum_ns == 4_000


def _extra_symbol_reference(n_pld: int, n_avbits: int, rate: Fraction) -> bool:
    """802.11-2016 19.3.11.7.5 (Table 19-16) in exact fractions, as printed."""
    if n_avbits <= 648:
        n_cw, lldpc = 1, 1296 if n_avbits >= n_pld + 912 * (1 - rate) else 648
    elif n_avbits <= 1296:
        n_cw, lldpc = 1, 1944 if n_avbits >= n_pld + 1464 * (1 - rate) else 1296
    elif n_avbits <= 1944:
        n_cw, lldpc = 1, 1944
    elif n_avbits <= 2592:
        n_cw, lldpc = 2, 1944 if n_avbits >= n_pld + 2916 * (1 - rate) else 1296
    else:
        n_cw, lldpc = math.ceil(n_pld / (1944 * rate)), 1944
    n_shrt = max(Fraction(0), n_cw * lldpc * rate - n_pld)
    n_punc = max(Fraction(0), n_cw * lldpc - n_avbits - n_shrt)
    parity = n_cw * lldpc * (1 - rate)
    return bool(
        (n_punc > parity / 10 and n_shrt < Fraction(6, 5) * n_punc * rate / (1 - rate))
        or n_punc > Fraction(3, 10) * parity
    )


@settings(max_examples=300, deadline=None)
@given(
    psdu=st.integers(0, 20_000),
    mcs=st.integers(0, 11),
    nss=st.integers(1, 2),
    width=st.sampled_from([20, 80]),
)
def test_integer_ldpc_rule_equals_the_standards_fractions(
    psdu: int, mcs: int, nss: int, width: int
) -> None:
    mode = HeMode(mcs, nss, width)
    n_dbps = mode.data_bits_per_symbol
    bits = 8 * psdu + 16
    n_init = -(-bits // n_dbps)
    excess = bits % n_dbps
    a = 4 if excess == 0 else min(-(-excess // mode.short_bits_per_symbol), 4)
    last_d = n_dbps if a == 4 else a * mode.short_bits_per_symbol
    last_c = mode.coded_bits_per_symbol if a == 4 else a * mode.short_coded_bits_per_symbol
    n_pld = (n_init - 1) * n_dbps + last_d
    n_av = (n_init - 1) * mode.coded_bits_per_symbol + last_c
    extra = _extra_symbol_reference(n_pld, n_av, mode.coding_rate)
    expected = ((n_init + 1, 1) if a == 4 else (n_init, a + 1)) if extra else (n_init, a)
    assert he_data_symbols(psdu, mode) == expected
