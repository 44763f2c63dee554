"""802.11ax (HE) PHY timing, from IEEE Std 802.11ax-2021 clause 27.

HE SU PPDUs (a whole channel) and HE TB PPDUs (one resource unit each, sent together in
answer to a trigger frame): data rates by (HE-MCS 0-11, spatial streams, RU size, guard
interval), the number of data symbols with LDPC coding and pre-FEC padding (27.3.12),
packet extension (Table 27-46) and the TXTIME equation (27-135). Also the sizes of the
HE control frames the UL OFDMA exchange uses (trigger frames, multi-STA BlockAck, QoS
Null with a buffer status report). All durations are integer nanoseconds; nothing here
has state.

What the standard leaves open and this module fixes: LDPC coding everywhere (it is
mandatory for HE at widths above 20 MHz and for HE-MCS 10-11; BCC is optional), one
space-time stream per spatial stream (no STBC), no midambles (static channel) and no
signal extension (5 GHz).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from fractions import Fraction
from typing import Final

__all__ = [
    "HE_BLOCK_ACK_256_BYTES",
    "HE_GUARD_INTERVALS_NS",
    "HE_LTF_TYPES",
    "HE_MAX_BA_WINDOW",
    "HE_MAX_MCS",
    "HE_PACKET_PADDINGS_US",
    "HE_QOS_NULL_BSR_BYTES",
    "HE_RU_TONES",
    "HeMode",
    "basic_trigger_bytes",
    "bsrp_trigger_bytes",
    "equal_ru_tones",
    "he_data_symbols",
    "he_default_ltf",
    "he_max_psdu_bytes",
    "he_ppdu_duration_ns",
    "he_tb_ppdu_duration_ns",
    "is_valid_he_gi_ltf",
    "multi_sta_block_ack_bytes",
    "rus_per_width",
]

#: HE-MCS 0..11: (coded bits per subcarrier per stream, coding rate numerator, denominator)
#: (802.11ax-2021 Tables 27-55..27-110; 10 and 11 are 1024-QAM).
_HE_MCS: Final = (
    (1, 1, 2), (2, 1, 2), (2, 3, 4), (4, 1, 2), (4, 3, 4), (6, 2, 3),
    (6, 3, 4), (6, 5, 6), (8, 3, 4), (8, 5, 6), (10, 3, 4), (10, 5, 6),
)  # fmt: skip
HE_MAX_MCS: Final = 11
#: Resource-unit sizes in tones (1992: a 2x996-tone RU, the whole 160 MHz channel).
HE_RU_TONES: Final = (26, 52, 106, 242, 484, 996, 1992)
#: Data subcarriers N_SD and the N_SD,short of pre-FEC padding, per RU size (27.3.12.3).
_RU_DATA: Final = {
    26: (24, 6), 52: (48, 12), 106: (102, 24), 242: (234, 60),
    484: (468, 120), 996: (980, 240), 1992: (1960, 492),
}  # fmt: skip
#: How many RUs of each size fit a channel width (27.3.2.2, Figures 27-5..27-7; central
#: 26-tone RUs included).
_RUS_PER_WIDTH: Final = {
    26: {20: 9, 40: 18, 80: 37, 160: 74},
    52: {20: 4, 40: 8, 80: 16, 160: 32},
    106: {20: 2, 40: 4, 80: 8, 160: 16},
    242: {20: 1, 40: 2, 80: 4, 160: 8},
    484: {40: 1, 80: 2, 160: 4},
    996: {80: 1, 160: 2},
    1992: {160: 1},
}
_FULL_BAND_RU: Final = {20: 242, 40: 484, 80: 996, 160: 1992}

HE_GUARD_INTERVALS_NS: Final = (800, 1600, 3200)
#: HE-LTF types: 1x (3.2 µs), 2x (6.4 µs), 4x (12.8 µs) before the guard interval.
HE_LTF_TYPES: Final = (1, 2, 4)
#: Nominal packet padding a receiver may ask for (µs; its PPE thresholds, 27.3.13).
HE_PACKET_PADDINGS_US: Final = (0, 8, 16)
#: GI and HE-LTF combinations of an HE SU PPDU (27.3.11.10).
_SU_GI_LTF: Final = {(800, 1), (800, 2), (1600, 2), (800, 4), (3200, 4)}
#: HE TB PPDU: the trigger frame's "GI And HE-LTF Type" field (9.3.1.22.1): 1x + 1.6 µs,
#: 2x + 1.6 µs, 4x + 3.2 µs.
_TB_GI_LTF: Final = {(1600, 1), (1600, 2), (3200, 4)}

_DFT_NS: Final = 12_800  # T_DFT,HE: one HE data symbol without its guard interval
_LEGACY_NS: Final = 20_000  # L-STF 8 + L-LTF 8 + L-SIG 4
_RL_SIG_NS: Final = 4_000
_HE_SIG_A_NS: Final = 8_000  # HE SU, HE MU and HE TB PPDUs (16 µs only for HE ER SU)
_HE_STF_NT_NS: Final = 4_000  # non-trigger-based PPDUs
_HE_STF_T_NS: Final = 8_000  # HE TB PPDUs
_SERVICE_BITS: Final = 16
#: HE-LTF symbols per number of space-time streams (Table 27-17).
_N_HE_LTF: Final = {1: 1, 2: 2, 3: 4, 4: 4, 5: 6, 6: 6, 7: 8, 8: 8}
#: T_PE (ns) by pre-FEC padding factor a = 1..4 and nominal packet padding (Table 27-46).
_PE_NS: Final = {
    0: (0, 0, 0, 0),
    8: (0, 0, 4_000, 8_000),
    16: (4_000, 8_000, 12_000, 16_000),
}

#: A compressed BlockAck with a 256-bit bitmap (9.3.1.8.2; 802.11ax's 256-MPDU Block Ack
#: agreements): header 16 + BA Control 2 + Starting Sequence Control 2 + 32 + FCS 4.
HE_BLOCK_ACK_256_BYTES: Final = 56
#: The largest Block Ack window of an HE agreement (and so MPDUs per A-MPDU).
HE_MAX_BA_WINDOW: Final = 256

#: A QoS Null frame carrying a buffer status report in its HT Control field (A-Control
#: BSR, 9.2.4.6.4.5): QoS data header 26 + HT Control 4 + FCS 4.
HE_QOS_NULL_BSR_BYTES: Final = 34


def is_valid_he_gi_ltf(gi_ns: int, ltf: int, *, tb: bool = False) -> bool:
    """Whether the standard allows this guard interval with this HE-LTF type in an HE SU
    PPDU (``tb``: in an HE TB PPDU)."""
    return (gi_ns, ltf) in (_TB_GI_LTF if tb else _SU_GI_LTF)


def he_default_ltf(gi_ns: int) -> int:
    """The HE-LTF type used with a guard interval unless set: 2x with 0.8 and 1.6 µs,
    4x with 3.2 µs (the combinations every HE device supports)."""
    return 4 if gi_ns == 3200 else 2


def rus_per_width(ru_tones: int, width_mhz: int) -> int:
    """How many RUs of ``ru_tones`` fit a channel of ``width_mhz`` (0: none)."""
    return _RUS_PER_WIDTH.get(ru_tones, {}).get(width_mhz, 0)


def equal_ru_tones(width_mhz: int, users: int) -> int:
    """The largest RU size of which at least ``users`` fit the channel: equal-sized RUs,
    one per user (as ns-3's ``HeRu::GetEqualSizedRusForStations``). The whole channel
    for one user; ValueError if more users than 26-tone RUs."""
    if users < 1:
        raise ValueError(f"users must be >= 1, got {users}")
    for tones in reversed(HE_RU_TONES):
        if rus_per_width(tones, width_mhz) >= users:
            return tones
    raise ValueError(
        f"{users} users do not fit a {width_mhz} MHz channel: at most "
        f"{rus_per_width(26, width_mhz)} 26-tone RUs"
    )


@dataclass(frozen=True, slots=True)
class HeMode:
    """One HE transmit vector: HE-MCS, spatial streams, channel width, guard interval
    (ns), HE-LTF type, resource unit (``ru_tones``; ``None``: the whole channel, an HE
    SU PPDU), whether it is an HE TB PPDU, and the receiver's nominal packet padding."""

    mcs: int
    nss: int
    width_mhz: int
    gi_ns: int = 800
    ltf: int = 2
    ru_tones: int | None = None
    tb: bool = False
    packet_padding_us: int = 0

    def __post_init__(self) -> None:
        if not 0 <= self.mcs <= HE_MAX_MCS:
            raise ValueError(f"HE-MCS {self.mcs} does not exist; allowed: 0..{HE_MAX_MCS}")
        if not 1 <= self.nss <= 8:
            raise ValueError(f"HE allows 1..8 spatial streams, got {self.nss}")
        if self.width_mhz not in _FULL_BAND_RU:
            raise ValueError(
                f"HE channel width {self.width_mhz} MHz; allowed: {sorted(_FULL_BAND_RU)}"
            )
        if self.gi_ns not in HE_GUARD_INTERVALS_NS:
            raise ValueError(
                f"HE guard interval {self.gi_ns} ns; allowed: {list(HE_GUARD_INTERVALS_NS)}"
            )
        if not is_valid_he_gi_ltf(self.gi_ns, self.ltf, tb=self.tb):
            kind = "TB" if self.tb else "SU"
            raise ValueError(
                f"{self.ltf}x HE-LTF with a {self.gi_ns} ns guard interval is not an HE {kind} "
                f"PPDU format; allowed (GI ns, LTF): "
                f"{sorted(_TB_GI_LTF if self.tb else _SU_GI_LTF)}"
            )
        ru = self.ru
        if rus_per_width(ru, self.width_mhz) == 0:
            raise ValueError(f"a {ru}-tone RU does not fit a {self.width_mhz} MHz channel")
        if self.mcs > 9 and ru < 242:
            # 1024-QAM is defined for RUs of 242 tones and more only (27.3.7).
            raise ValueError(f"HE-MCS {self.mcs} (1024-QAM) needs an RU of >= 242 tones, not {ru}")
        if self.packet_padding_us not in _PE_NS:
            raise ValueError(
                f"nominal packet padding {self.packet_padding_us} µs; allowed: "
                f"{list(HE_PACKET_PADDINGS_US)}"
            )

    @property
    def ru(self) -> int:
        """The RU size in tones (the whole channel's for an HE SU PPDU)."""
        return _FULL_BAND_RU[self.width_mhz] if self.ru_tones is None else self.ru_tones

    @property
    def data_bits_per_symbol(self) -> int:
        """N_DBPS = floor(N_SD · N_BPSCS · R · N_SS) (e.g. 16 333 for HE-MCS 11, 2 streams,
        996 tones: the standard's tables list the integer part)."""
        bits, num, den = _HE_MCS[self.mcs]
        return _RU_DATA[self.ru][0] * bits * num * self.nss // den

    @property
    def short_bits_per_symbol(self) -> int:
        """N_DBPS,short: data bits in the N_SD,short subcarriers of pre-FEC padding."""
        bits, num, den = _HE_MCS[self.mcs]
        return _RU_DATA[self.ru][1] * bits * num * self.nss // den

    @property
    def coded_bits_per_symbol(self) -> int:
        return _RU_DATA[self.ru][0] * _HE_MCS[self.mcs][0] * self.nss

    @property
    def short_coded_bits_per_symbol(self) -> int:
        return _RU_DATA[self.ru][1] * _HE_MCS[self.mcs][0] * self.nss

    @property
    def coding_rate(self) -> Fraction:
        _, num, den = _HE_MCS[self.mcs]
        return Fraction(num, den)

    @property
    def symbol_ns(self) -> int:
        """T_SYM: 13.6, 14.4 or 16 µs."""
        return _DFT_NS + self.gi_ns

    @property
    def ltf_symbol_ns(self) -> int:
        """T_HE-LTF-SYM: the HE-LTF (3.2 µs per 1x) plus its guard interval."""
        return 3_200 * self.ltf + self.gi_ns

    @property
    def rate_mbps(self) -> float:
        return self.data_bits_per_symbol * 1000 / self.symbol_ns

    def preamble_ns(self, n_ltf: int | None = None) -> int:
        """Everything before the data symbols: L-STF, L-LTF, L-SIG, RL-SIG, HE-SIG-A,
        HE-STF (4 µs, 8 µs in a TB PPDU) and the HE-LTFs (``n_ltf`` of them; default:
        as many as this mode's streams need)."""
        n = _N_HE_LTF[self.nss] if n_ltf is None else n_ltf
        stf = _HE_STF_T_NS if self.tb else _HE_STF_NT_NS
        return _LEGACY_NS + _RL_SIG_NS + _HE_SIG_A_NS + stf + n * self.ltf_symbol_ns


def _ldpc_extra_symbol(n_pld: int, n_avbits: int, num: int, den: int) -> bool:
    """Whether LDPC encoding needs the extra symbol segment (802.11-2016 19.3.11.7.5 and
    Table 19-16, which 802.11ax-2021 27.3.12 applies to HE with its own N_pld, N_avbits),
    at coding rate R = num/den, in integers: L_LDPC · R is a whole number of bits for
    every codeword length and rate, so N_shrt, N_punc and the parity bits are too."""
    r1 = den - num  # (1 - R) · den
    if n_avbits <= 648:
        n_cw, l_ldpc = 1, (1296 if den * n_avbits >= den * n_pld + 912 * r1 else 648)
    elif n_avbits <= 1296:
        n_cw, l_ldpc = 1, (1944 if den * n_avbits >= den * n_pld + 1464 * r1 else 1296)
    elif n_avbits <= 1944:
        n_cw, l_ldpc = 1, 1944
    elif n_avbits <= 2592:
        n_cw, l_ldpc = 2, (1944 if den * n_avbits >= den * n_pld + 2916 * r1 else 1296)
    else:
        n_cw, l_ldpc = -(-(n_pld * den) // (1944 * num)), 1944
    info = n_cw * l_ldpc * num // den  # N_CW · L_LDPC · R
    n_shrt = max(0, info - n_pld)
    n_punc = max(0, n_cw * l_ldpc - n_avbits - n_shrt)
    parity = n_cw * l_ldpc - info  # N_CW · L_LDPC · (1 - R)
    return (10 * n_punc > parity and 5 * n_shrt * r1 < 6 * n_punc * num) or (
        10 * n_punc > 3 * parity
    )


@functools.lru_cache(maxsize=1 << 16)
def he_data_symbols(psdu_bytes: int, mode: HeMode) -> tuple[int, int]:
    """(N_SYM, pre-FEC padding factor a) of an HE PPDU carrying ``psdu_bytes`` with LDPC
    (802.11ax-2021 27.3.12: pre-FEC padding, then the LDPC extra symbol segment)."""
    if psdu_bytes < 0:
        raise ValueError(f"psdu_bytes must be >= 0, got {psdu_bytes}")
    n_dbps = mode.data_bits_per_symbol
    bits = 8 * psdu_bytes + _SERVICE_BITS  # LDPC: no tail bits
    n_sym_init = -(-bits // n_dbps)
    n_excess = bits % n_dbps
    n_short = mode.short_bits_per_symbol
    a_init = 4 if n_excess == 0 else min(-(-n_excess // n_short), 4)
    if a_init < 4:
        n_dbps_last, n_cbps_last = a_init * n_short, a_init * mode.short_coded_bits_per_symbol
    else:
        n_dbps_last, n_cbps_last = n_dbps, mode.coded_bits_per_symbol
    n_pld = (n_sym_init - 1) * n_dbps + n_dbps_last
    n_avbits = (n_sym_init - 1) * mode.coded_bits_per_symbol + n_cbps_last
    _, num, den = _HE_MCS[mode.mcs]
    if _ldpc_extra_symbol(n_pld, n_avbits, num, den):
        return (n_sym_init + 1, 1) if a_init == 4 else (n_sym_init, a_init + 1)
    return n_sym_init, a_init


def _pe_ns(a: int, padding_us: int) -> int:
    return _PE_NS[padding_us][a - 1]


def he_ppdu_duration_ns(psdu_bytes: int, mode: HeMode) -> int:
    """TXTIME of an HE PPDU (SU, or one user's TB PPDU) carrying ``psdu_bytes``
    (802.11ax-2021 eq. 27-135: no midamble, no signal extension)."""
    n_sym, a = he_data_symbols(psdu_bytes, mode)
    return mode.preamble_ns() + n_sym * mode.symbol_ns + _pe_ns(a, mode.packet_padding_us)


def he_tb_ppdu_duration_ns(users: list[tuple[int, HeMode]]) -> int:
    """TXTIME of the HE TB PPDUs answering one trigger frame: every user's PPDU lasts
    the same (the trigger's UL Length), so as long as the longest of them needs, with
    the HE-LTFs of the user with the most streams (Table 27-17); ``users`` are
    (PSDU bytes, TB mode) pairs sharing one guard interval and HE-LTF type."""
    if not users:
        raise ValueError("an HE TB PPDU needs at least one user")
    first = users[0][1]
    n_ltf = max(_N_HE_LTF[m.nss] for _, m in users)
    n_sym, a = max(he_data_symbols(p, m) for p, m in users)
    return first.preamble_ns(n_ltf) + n_sym * first.symbol_ns + _pe_ns(a, first.packet_padding_us)


@functools.lru_cache(maxsize=1 << 12)
def he_max_psdu_bytes(max_ns: int, mode: HeMode) -> int:
    """Largest PSDU whose HE PPDU lasts at most ``max_ns`` (0 if not even an empty
    PSDU fits). TXTIME never decreases with the PSDU length (the pre-FEC padding factor
    and the LDPC extra symbol only move forward), so a bisection finds it."""
    if he_ppdu_duration_ns(0, mode) > max_ns:
        return 0
    n_sym = max(0, (max_ns - mode.preamble_ns()) // mode.symbol_ns)
    hi = (n_sym * mode.data_bits_per_symbol) // 8 + 1  # cannot fit: one bit past N_SYM
    lo = 0
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if he_ppdu_duration_ns(mid, mode) <= max_ns:
            lo = mid
        else:
            hi = mid
    return lo


# -- control frames of the UL OFDMA exchange (9.3.1.22, 9.3.1.8.7) ------------------------
_CTRL_HEADER_BYTES: Final = 16  # Frame Control, Duration, RA, TA
_FCS_BYTES: Final = 4
_TRIGGER_COMMON_BYTES: Final = 8
_TRIGGER_USER_BYTES: Final = 5
_BASIC_TRIGGER_DEP_BYTES: Final = 1  # Trigger Dependent User Info of a Basic trigger
_BA_CONTROL_BYTES: Final = 2
#: Per (station, TID) in a multi-STA BlockAck: AID TID Info 2 + Starting Sequence
#: Control 2 + a 64-bit bitmap 8; in the all-ack context (every MPDU of the station's
#: A-MPDU received: Ack Type 1, TID 14) the AID TID Info alone.
_MULTI_STA_BA_ENTRY_BYTES: Final = 12
_MULTI_STA_BA_ALL_ACK_BYTES: Final = 2


def basic_trigger_bytes(users: int) -> int:
    """A Basic trigger frame soliciting ``users`` stations (no padding field)."""
    per_user = _TRIGGER_USER_BYTES + _BASIC_TRIGGER_DEP_BYTES
    return _CTRL_HEADER_BYTES + _TRIGGER_COMMON_BYTES + per_user * users + _FCS_BYTES


def bsrp_trigger_bytes(users: int) -> int:
    """A Buffer Status Report Poll trigger frame for ``users`` stations."""
    return _CTRL_HEADER_BYTES + _TRIGGER_COMMON_BYTES + _TRIGGER_USER_BYTES * users + _FCS_BYTES


def multi_sta_block_ack_bytes(entries: int, *, all_ack: bool = False) -> int:
    """A multi-STA BlockAck acknowledging ``entries`` (station, TID) pairs with bitmaps,
    or (``all_ack``) ``entries`` stations each of whose MPDUs were all received."""
    per = _MULTI_STA_BA_ALL_ACK_BYTES if all_ack else _MULTI_STA_BA_ENTRY_BYTES
    return _CTRL_HEADER_BYTES + _BA_CONTROL_BYTES + per * entries + _FCS_BYTES
