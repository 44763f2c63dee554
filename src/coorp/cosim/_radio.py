"""Path loss, rate adaptation and loss of each robot pair from the physics world.

Model: the IEEE 802.11ax task group's evaluation methodology (IEEE 802.11-14/0980r16,
"TGax simulation scenarios", enterprise scenario SS2)::

    PL(d) = 40.05 + 20 log10(f / 2.4 GHz) + 20 log10(min(d, d_BP))
            + [d > d_BP] 35 log10(d / d_BP) + 7 W          (dB, d >= 1 m)

with breakpoint d_BP = 10 m and W the number of walls the straight line crosses
(counted with MuJoCo's ``mj_ray``), plus an optional per-link log-normal shadowing
draw (σ = 5 dB in the document; 0 by default here so that a link's MCS follows geometry
alone). The received power picks the highest VHT MCS whose minimum sensitivity
(IEEE 802.11-2016 Table 21-25, ``coorp.phy``) plus a margin it meets — the rate
adaptation an ideal Minstrel-like algorithm converges to — and the MPDU error rate at
that power is ``coorp.phy.packet_error_rate``. Below the MCS 0 sensitivity the link
stays at MCS 0 and loses most frames (the MAC retries, the transport repairs).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from coorp.cosim._config import RadioConfig
from coorp.phy import min_sensitivity_dbm, valid_vht_mcs

__all__ = ["LinkState", "Radio"]


@dataclass(frozen=True, slots=True)
class LinkState:
    distance_m: float
    walls: int
    rx_dbm: float
    #: Highest MCS the power supports (None: below MCS 0's sensitivity; the link uses 0).
    best_mcs: int | None

    @property
    def los(self) -> bool:
        return self.walls == 0

    @property
    def mcs(self) -> int:
        return 0 if self.best_mcs is None else self.best_mcs


class Radio:
    """The path loss and rate adaptation of every link, vectorised over link arrays (a
    20-robot world has 190 pairs, each recomputed at every physics step)."""

    def __init__(self, cfg: RadioConfig, *, spatial_streams: int, width_mhz: int) -> None:
        self.cfg = cfg
        self.nss = spatial_streams
        self.width = width_mhz
        self._freq_db = 20.0 * math.log10(cfg.frequency_ghz / 2.4)
        #: (MCS, sensitivity + margin) of every valid MCS, fastest first.
        self._thresholds = tuple(
            (m, min_sensitivity_dbm(m, width_mhz) + cfg.margin_db)
            for m in sorted(valid_vht_mcs(spatial_streams, width_mhz), reverse=True)
        )
        # Sensitivity rises with the MCS: the best MCS is the last threshold met, found
        # by bisection over the thresholds in rising order.
        rising = self._thresholds[::-1]
        self._thr = np.array([t for _, t in rising])
        self._thr_mcs = np.array([-1, *(m for m, _ in rising)], np.int64)
        self._monotonic = bool(np.all(np.diff(self._thr) > 0))

    def path_loss_db(self, distance_m: float, walls: int) -> float:
        return float(self.path_loss_db_array(np.array([distance_m]), np.array([walls]))[0])

    def path_loss_db_array(self, distance_m: np.ndarray, walls: np.ndarray) -> np.ndarray:
        c = self.cfg
        d = np.maximum(distance_m, 1.0)
        bp = c.breakpoint_m
        pl = 40.05 + self._freq_db + 20.0 * np.log10(np.minimum(d, bp))
        pl = pl + 10.0 * c.exponent_after * np.log10(np.maximum(d, bp) / bp)
        out: np.ndarray = pl + c.wall_loss_db * walls
        return out

    def links(
        self, distance_m: np.ndarray, walls: np.ndarray, shadow_db: np.ndarray | float = 0.0
    ) -> tuple[np.ndarray, np.ndarray]:
        """Received power (dBm) and best MCS (-1: below MCS 0's sensitivity) per link."""
        rx = self.cfg.tx_power_dbm - self.path_loss_db_array(distance_m, walls) - shadow_db
        if self._monotonic:
            best: np.ndarray = self._thr_mcs[np.searchsorted(self._thr, rx, side="right")]
            return rx, best
        best = np.full(rx.shape, -1, np.int64)
        for m, threshold in self._thresholds:
            best[(best < 0) & (rx >= threshold)] = m
        return rx, best

    def link(self, distance_m: float, walls: int, shadow_db: float = 0.0) -> LinkState:
        rx, best = self.links(np.array([distance_m]), np.array([walls]), shadow_db)
        b = int(best[0])
        return LinkState(distance_m, walls, float(rx[0]), None if b < 0 else b)
