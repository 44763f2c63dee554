"""Which 802.11 PHY a channel runs, and the standard-independent view of a transmit vector.

``PhyStandard.AC`` is 802.11ac (VHT, clause 21), ``PhyStandard.AX`` 802.11ax (HE, clause
27). A *mode* is a :class:`~coorp.phy.VhtMode` or a :class:`~coorp.phy.HeMode`; the
functions here take either and answer with the right standard's tables, so the MAC and
the scenario checks never ask which one they hold.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Final

from coorp.phy._he import HE_MAX_MCS, HeMode, he_max_psdu_bytes, he_ppdu_duration_ns
from coorp.phy._vht import VhtMode, is_valid_vht_mcs, vht_max_psdu_bytes, vht_ppdu_duration_ns

__all__ = [
    "PhyMode",
    "PhyStandard",
    "is_valid_mcs",
    "max_psdu_bytes",
    "ppdu_duration_ns",
    "ppdu_quantum_ns",
    "valid_mcs",
]

PhyMode = VhtMode | HeMode


class PhyStandard(StrEnum):
    """The PHY of every data frame on the channel (control frames stay non-HT)."""

    AC = "ac"
    """802.11ac: VHT PPDUs, MCS 0-9, 0.8/0.4 µs guard intervals."""
    AX = "ax"
    """802.11ax: HE SU (and, with UL OFDMA, HE TB) PPDUs, HE-MCS 0-11, 0.8/1.6/3.2 µs
    guard intervals."""


#: Every PPDU of a standard lasts a whole number of this many ns: 4 µs for VHT (either
#: guard interval: the short-GI data field is rounded up to 4 µs), 0.4 µs for HE (its
#: symbols are 13.6/14.4/16 µs, its HE-LTFs 4.0-16.0 µs, its packet extensions 4k µs).
_QUANTUM_NS: Final = {PhyStandard.AC: 4_000, PhyStandard.AX: 400}


def ppdu_quantum_ns(standard: PhyStandard) -> int:
    """Every PPDU duration of ``standard`` is a multiple of this, so the largest PSDU for
    a duration depends on that duration only in these steps."""
    return _QUANTUM_NS[standard]


def is_valid_mcs(standard: PhyStandard, mcs: int, nss: int, width_mhz: int) -> bool:
    """Whether (MCS, spatial streams, width) is a rate of the standard (HE: over the
    whole channel; every HE-MCS 0-11 exists there for 1-8 streams)."""
    if standard is PhyStandard.AC:
        return is_valid_vht_mcs(mcs, nss, width_mhz)
    return 0 <= mcs <= HE_MAX_MCS and 1 <= nss <= 8 and width_mhz in (20, 40, 80, 160)


def valid_mcs(standard: PhyStandard, nss: int, width_mhz: int) -> list[int]:
    """Every MCS the standard defines for these streams and width."""
    top = 9 if standard is PhyStandard.AC else HE_MAX_MCS
    return [m for m in range(top + 1) if is_valid_mcs(standard, m, nss, width_mhz)]


def ppdu_duration_ns(psdu_bytes: int, mode: PhyMode) -> int:
    """TXTIME of a PPDU carrying ``psdu_bytes`` in ``mode`` (VHT or HE)."""
    if isinstance(mode, HeMode):
        return he_ppdu_duration_ns(psdu_bytes, mode)
    return vht_ppdu_duration_ns(psdu_bytes, mode)


def max_psdu_bytes(max_ns: int, mode: PhyMode) -> int:
    """Largest PSDU whose PPDU in ``mode`` lasts at most ``max_ns``."""
    if isinstance(mode, HeMode):
        return he_max_psdu_bytes(max_ns, mode)
    return vht_max_psdu_bytes(max_ns, mode)
