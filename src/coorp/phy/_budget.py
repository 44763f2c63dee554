"""The link budget: received power from distance, and the fastest MCS it sustains.

Log-distance path loss against the receiver minimum input sensitivities of the standards
(802.11-2016 Table 21-25 for VHT MCS 0-9, 802.11ax-2021 Table 27-51 for HE, which adds
HE-MCS 10 and 11), +3 dB per doubling of the width; and an approximate packet error rate
anchored at those sensitivities.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Final

from coorp.phy._standard import PhyStandard, valid_mcs

__all__ = ["LinkBudget", "min_sensitivity_dbm", "packet_error_rate"]

#: Receiver minimum input sensitivity at 20 MHz (dBm), MCS 0..9 (VHT and HE alike) and
#: HE-MCS 10, 11. Each doubling of the width raises it by 3 dB.
_SENSITIVITY_20MHZ_DBM: Final = (-82, -79, -77, -74, -70, -66, -65, -64, -59, -57, -54, -52)


def min_sensitivity_dbm(mcs: int, width_mhz: int) -> float:
    """Minimum input sensitivity: the power at which a 4096-byte PSDU sees 10% PER."""
    doublings = {20: 0, 40: 1, 80: 2, 160: 3}[width_mhz]
    return _SENSITIVITY_20MHZ_DBM[mcs] + 3.0 * doublings


def packet_error_rate(rx_power_dbm: float, mcs: int, width_mhz: int, psdu_bytes: int) -> float:
    """Approximate PER of one MPDU from received power.

    A logistic waterfall (slope 2 per dB) anchored at the standard's sensitivity point
    (10% PER for 4096 bytes), scaled to the MPDU length assuming independent bit errors.
    An approximation, used only when a scenario turns packet errors on.
    """
    margin_db = rx_power_dbm - min_sensitivity_dbm(mcs, width_mhz)
    per_4096 = 1.0 / (1.0 + 9.0 * math.exp(2.0 * margin_db))
    return 1.0 - (1.0 - per_4096) ** (max(psdu_bytes, 1) / 4096.0)


@dataclass(frozen=True, slots=True)
class LinkBudget:
    """Log-distance path loss: received power and the highest MCS it sustains."""

    tx_power_dbm: float = 20.0
    reference_loss_db: float = 46.7  # free space at 1 m, 5.2 GHz
    exponent: float = 3.0
    margin_db: float = 0.0

    def rx_power_dbm(self, distance_m: float) -> float:
        d = max(distance_m, 1.0)
        return self.tx_power_dbm - self.reference_loss_db - 10.0 * self.exponent * math.log10(d)

    def best_mcs(
        self, distance_m: float, nss: int, width_mhz: int, standard: PhyStandard = PhyStandard.AC
    ) -> int | None:
        """Highest valid MCS of ``standard`` whose sensitivity (plus margin) the link
        meets, else None."""
        return self.best_mcs_at(self.rx_power_dbm(distance_m), nss, width_mhz, standard)

    def best_mcs_at(
        self, rx_dbm: float, nss: int, width_mhz: int, standard: PhyStandard = PhyStandard.AC
    ) -> int | None:
        """:meth:`best_mcs` for a received power already computed (one pair of stations
        costs one comparison per MCS: scenarios with many stations check every pair)."""
        for mcs, threshold in _mcs_thresholds(nss, width_mhz, self.margin_db, standard):
            if rx_dbm >= threshold:
                return mcs
        return None

    def mcs_thresholds(
        self, nss: int, width_mhz: int, standard: PhyStandard = PhyStandard.AC
    ) -> tuple[tuple[int, float], ...]:
        """(MCS, sensitivity + margin) of every valid MCS, fastest first: what
        :meth:`best_mcs_at` walks (for callers that check many links in compiled code)."""
        return _mcs_thresholds(nss, width_mhz, self.margin_db, standard)


@functools.cache
def _mcs_thresholds(
    nss: int, width_mhz: int, margin_db: float, standard: PhyStandard
) -> tuple[tuple[int, float], ...]:
    """(MCS, sensitivity + margin) of every valid MCS, fastest first."""
    return tuple(
        (m, min_sensitivity_dbm(m, width_mhz) + margin_db)
        for m in sorted(valid_mcs(standard, nss, width_mhz), reverse=True)
    )
