"""802.11ac (VHT) and legacy OFDM PHY timing, from IEEE Std 802.11-2016 clauses 17 and 21.

Data rates by (MCS, spatial streams, width, guard interval), VHT PPDU durations with
preambles, service and tail bits and symbol rounding, control-frame durations at a basic
rate, and the MAC-level constants every standard here shares (slot, SIFS, frame sizes).
All durations are integer nanoseconds. Nothing here has state.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import StrEnum
from typing import Final

__all__ = [
    "ACK_BYTES",
    "AMPDU_DELIMITER_BYTES",
    "BAR_BYTES",
    "BLOCK_ACK_BYTES",
    "CTS_BYTES",
    "LEGACY_RATES_MBPS",
    "MAC_OVERHEAD_BYTES",
    "MAX_PPDU_NS",
    "RTS_BYTES",
    "SIFS_NS",
    "SLOT_NS",
    "GuardInterval",
    "VhtMode",
    "is_valid_vht_mcs",
    "legacy_duration_ns",
    "valid_vht_mcs",
    "vht_max_psdu_bytes",
    "vht_ppdu_duration_ns",
]

SLOT_NS: Final = 9_000
SIFS_NS: Final = 16_000
#: aPPDUMaxTime for VHT PPDUs (802.11-2016 Table 21-28), and for HE PPDUs too
#: (802.11ax-2021 Table 27-54).
MAX_PPDU_NS: Final = 5_484_000
#: Largest A-MPDU a VHT station may send (maximum A-MPDU length exponent 7).
MAX_VHT_AMPDU_BYTES: Final = 1_048_575

# Control frame lengths in bytes, FCS included (802.11-2016 9.3.1).
RTS_BYTES: Final = 20
CTS_BYTES: Final = 14
ACK_BYTES: Final = 14
BLOCK_ACK_BYTES: Final = 32  # compressed BlockAck, 64-bit bitmap
BAR_BYTES: Final = 24  # compressed BlockAckReq

#: Data frames: QoS data MAC header (26) + LLC/SNAP (8) + FCS (4) around each IP packet.
MAC_OVERHEAD_BYTES: Final = 38
#: Every VHT PSDU is an A-MPDU (a single MPDU is an S-MPDU): 4-byte delimiter per subframe.
AMPDU_DELIMITER_BYTES: Final = 4

#: Non-HT OFDM rates (Mb/s) and data bits per 4 µs symbol (802.11-2016 Table 17-4).
LEGACY_RATES_MBPS: Final = (6, 9, 12, 18, 24, 36, 48, 54)
_LEGACY_NDBPS: Final = {6: 24, 9: 36, 12: 48, 18: 72, 24: 96, 36: 144, 48: 192, 54: 216}
_LEGACY_PREAMBLE_NS: Final = 20_000  # L-STF + L-LTF (16 µs) + L-SIG (4 µs)
_SYMBOL_NS: Final = 4_000
_SERVICE_BITS: Final = 16
_TAIL_BITS: Final = 6

# VHT modulation: (coded bits per subcarrier per stream, coding rate numerator, denominator).
_VHT_MCS: Final = (
    (1, 1, 2), (2, 1, 2), (2, 3, 4), (4, 1, 2), (4, 3, 4),
    (6, 2, 3), (6, 3, 4), (6, 5, 6), (8, 3, 4), (8, 5, 6),
)  # fmt: skip
_DATA_SUBCARRIERS: Final = {20: 52, 40: 108, 80: 234, 160: 468}
#: Combinations excluded by 802.11-2016 Tables 21-30..21-61 (N_DBPS not an integer per encoder).
_INVALID_VHT: Final = {(9, 1, 20), (9, 2, 20), (9, 4, 20), (6, 3, 80), (9, 3, 160)}
_VHT_LTFS: Final = {1: 1, 2: 2, 3: 4, 4: 4}
# L-STF, L-LTF, L-SIG (20) + VHT-SIG-A (8) + VHT-STF (4) + VHT-SIG-B (4); VHT-LTFs added per stream.
_VHT_FIXED_PREAMBLE_NS: Final = 36_000


class GuardInterval(StrEnum):
    """OFDM guard interval of VHT data symbols."""

    LONG = "long"
    """800 ns guard interval: 4.0 µs symbols."""
    SHORT = "short"
    """400 ns guard interval: 3.6 µs symbols (rounded to whole 4 µs units at the end)."""


def is_valid_vht_mcs(mcs: int, nss: int, width_mhz: int) -> bool:
    """Whether (MCS, spatial streams, width) is a rate the 802.11ac standard defines."""
    return (
        0 <= mcs <= 9
        and 1 <= nss <= 4
        and width_mhz in _DATA_SUBCARRIERS
        and (mcs, nss, width_mhz) not in _INVALID_VHT
    )


def valid_vht_mcs(nss: int, width_mhz: int) -> list[int]:
    """All MCS indices defined for this number of spatial streams and width."""
    return [m for m in range(10) if is_valid_vht_mcs(m, nss, width_mhz)]


@dataclass(frozen=True, slots=True)
class VhtMode:
    """One VHT transmit vector: MCS, spatial streams, channel width and guard interval."""

    mcs: int
    nss: int
    width_mhz: int
    guard_interval: GuardInterval = GuardInterval.LONG

    def __post_init__(self) -> None:
        if not is_valid_vht_mcs(self.mcs, self.nss, self.width_mhz):
            raise ValueError(
                f"VHT MCS {self.mcs} with {self.nss} spatial stream(s) at {self.width_mhz} MHz "
                f"does not exist; valid MCS: {valid_vht_mcs(self.nss, self.width_mhz)}"
            )

    @property
    def data_bits_per_symbol(self) -> int:
        bits, num, den = _VHT_MCS[self.mcs]
        return _DATA_SUBCARRIERS[self.width_mhz] * bits * num * self.nss // den

    @property
    def rate_mbps(self) -> float:
        sym_us = 3.6 if self.guard_interval is GuardInterval.SHORT else 4.0
        return self.data_bits_per_symbol / sym_us

    @property
    def bcc_encoders(self) -> int:
        # One BCC encoder per 600 Mb/s at short GI (540 at long): N_DBPS / 2160 either way.
        return max(1, math.ceil(self.data_bits_per_symbol / 2160))


def vht_ppdu_duration_ns(psdu_bytes: int, mode: VhtMode) -> int:
    """TXTIME of a VHT PPDU carrying ``psdu_bytes`` (802.11-2016 eq. 21-65/21-66, BCC)."""
    if psdu_bytes < 0:
        raise ValueError(f"psdu_bytes must be >= 0, got {psdu_bytes}")
    n_dbps = mode.data_bits_per_symbol
    n_sym = math.ceil((8 * psdu_bytes + _SERVICE_BITS + _TAIL_BITS * mode.bcc_encoders) / n_dbps)
    preamble = _VHT_FIXED_PREAMBLE_NS + 4_000 * _VHT_LTFS[mode.nss]
    if mode.guard_interval is GuardInterval.SHORT:
        # Short-GI symbols are 3.6 µs; the data field is rounded up to whole 4 µs units.
        data = _SYMBOL_NS * math.ceil(3_600 * n_sym / _SYMBOL_NS)
    else:
        data = _SYMBOL_NS * n_sym
    return preamble + data


def vht_max_psdu_bytes(max_ns: int, mode: VhtMode) -> int:
    """Largest PSDU whose VHT PPDU lasts at most ``max_ns`` (inverse of
    :func:`vht_ppdu_duration_ns`; 0 if not even an empty PSDU fits)."""
    avail = max_ns - vht_ppdu_duration_ns(0, mode) + _SYMBOL_NS  # preamble only
    if mode.guard_interval is GuardInterval.SHORT:
        n_sym = (avail // _SYMBOL_NS) * _SYMBOL_NS // 3_600
    else:
        n_sym = avail // _SYMBOL_NS
    bits = n_sym * mode.data_bits_per_symbol - _SERVICE_BITS - _TAIL_BITS * mode.bcc_encoders
    out = max(bits // 8, 0)
    while out > 0 and vht_ppdu_duration_ns(out, mode) > max_ns:
        out -= 1
    return out


def legacy_duration_ns(frame_bytes: int, rate_mbps: int) -> int:
    """TXTIME of a non-HT (legacy OFDM) PPDU, e.g. a control frame (802.11-2016 eq. 17-29)."""
    try:
        n_dbps = _LEGACY_NDBPS[rate_mbps]
    except KeyError:
        raise ValueError(
            f"{rate_mbps} Mb/s is not an OFDM rate; allowed: {list(LEGACY_RATES_MBPS)}"
        ) from None
    n_sym = math.ceil((_SERVICE_BITS + 8 * frame_bytes + _TAIL_BITS) / n_dbps)
    return _LEGACY_PREAMBLE_NS + _SYMBOL_NS * n_sym
