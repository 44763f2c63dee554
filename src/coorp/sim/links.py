"""Link rates: which MCS each (sender, receiver) pair uses, and optional packet errors.

``fixed`` mode gives every link the scenario's MCS (with per-link overrides); ``distance``
mode picks the highest MCS whose receiver sensitivity the log-distance link budget meets.
An override may also set the link's spatial streams. Packet errors, when enabled, use
the received power from the same link budget.

The table holds each link's *rate code* (``coorp.sim.timing.rate_code``): the plain MCS
for a link at the PHY's spatial streams, the MCS and the link's own streams otherwise;
``ExchangeTiming`` decodes it, so the MAC passes it along unchanged.
"""

from __future__ import annotations

import math

from coorp._errors import ScenarioError, ScenarioProblem
from coorp.phy import LinkBudget, packet_error_rate
from coorp.scenario import Scenario
from coorp.sim.timing import rate_code, rate_code_mcs, rate_code_streams

__all__ = ["LinkTable"]


class LinkTable:
    def __init__(self, scenario: Scenario, source: str = "<scenario>") -> None:
        stations = scenario.stations
        n = len(stations)
        cfg = scenario.links
        phy = scenario.phy
        pl = cfg.pathloss
        self.budget = LinkBudget(pl.tx_power_dbm, pl.reference_loss_db, pl.exponent, pl.margin_db)
        self.width_mhz = phy.width_mhz
        self.spatial_streams = phy.spatial_streams
        self.packet_errors = cfg.packet_errors
        self._rx_dbm = [[0.0] * n for _ in range(n)]
        self._mcs = [[cfg.mcs] * n for _ in range(n)]
        distance = cfg.mode == "distance"
        # A fleet's robots talk only to APs: a pair out of range of each other (two robots
        # at opposite ends of a hall) carries no frame, and takes MCS 0 here (scenario
        # loading checked each robot against its AP; ``coorp.sim.cells`` updates a moving
        # robot's links to the APs).
        fleet = scenario.fleet is not None
        nss, width = phy.spatial_streams, phy.width_mhz
        # Path loss is symmetric: each pair of stations is computed once (n (n - 1) / 2
        # pairs; the tables themselves hold every ordered pair, see MAX_STATIONS).
        # The budget's constants, for ``rx_at`` and ``mcs_at`` (compiled: the budget's
        # own methods were two interpreted calls per pair, most of a fleet's setup).
        self._b0 = self.budget.tx_power_dbm - self.budget.reference_loss_db
        self._slope = 10.0 * self.budget.exponent
        self._thresholds = self.budget.mcs_thresholds(nss, width, phy.standard)
        for i, a in enumerate(stations):
            rx_i, mcs_i = self._rx_dbm[i], self._mcs[i]
            for j in range(i + 1, n):
                b = stations[j]
                d = math.dist(a.position_m, b.position_m)
                rx = self.rx_at(d)
                rx_i[j] = self._rx_dbm[j][i] = rx
                if distance:
                    mcs = self.mcs_at(rx)
                    if mcs is None and fleet:
                        mcs = 0
                    if mcs is None:
                        raise ScenarioError(source, [ScenarioProblem(
                            "stations", f"{a.name} -> {b.name}",
                            f"out of range: {d:.1f} m gives {rx:.1f} dBm, below "
                            "the MCS 0 sensitivity; move the stations closer or lower "
                            "links.pathloss.exponent",
                        )])  # fmt: skip
                    mcs_i[j] = self._mcs[j][i] = mcs
        index = {s.name: i for i, s in enumerate(stations)}
        for o in cfg.overrides:
            code, streams = o.mcs, o.spatial_streams
            if streams is not None and streams != phy.spatial_streams:
                code = rate_code(o.mcs, streams)
            self._mcs[index[o.src]][index[o.dst]] = code
        self._per_cache: dict[tuple[int, int, int], float] = {}
        #: ``mcs_table[src][dst]``: the rate code of each link (read-only; the MCS itself
        #: unless an override gave the link its own spatial streams).
        self.mcs_table = self._mcs

    def mcs(self, src: int, dst: int) -> int:
        """The link's MCS index."""
        return rate_code_mcs(self._mcs[src][dst])

    def spatial_streams_of(self, src: int, dst: int) -> int:
        """The link's spatial streams (the PHY's unless an override sets them)."""
        return rate_code_streams(self._mcs[src][dst], self.spatial_streams)

    def rate_code(self, src: int, dst: int) -> int:
        """The link's rate code, what ``ExchangeTiming`` takes (``timing.mode(code)``)."""
        return self._mcs[src][dst]

    def rx_power_dbm(self, src: int, dst: int) -> float:
        return self._rx_dbm[src][dst]

    def rx_at(self, distance_m: float) -> float:
        """``LinkBudget.rx_power_dbm(distance_m)`` of the scenario's budget: the same
        arithmetic in the same order, so the same bits."""
        d = distance_m if distance_m >= 1.0 else 1.0
        return self._b0 - self._slope * math.log10(d)

    def mcs_at(self, rx_dbm: float) -> int | None:
        """``LinkBudget.best_mcs_at`` at the scenario's PHY: the fastest MCS whose
        sensitivity (plus margin) ``rx_dbm`` meets, else None."""
        for mcs, threshold in self._thresholds:
            if rx_dbm >= threshold:
                return mcs
        return None

    def set_link(self, src: int, dst: int, mcs: int, rx_power_dbm: float) -> None:
        """Change one directed link at run time (the co-simulation's moving robots).

        ``mcs`` at the PHY's spatial streams; the MAC reads the table at each exchange,
        so the next frame on the link uses it (one on the air keeps its own rate). The
        received power feeds the packet error rate when packet errors are on.
        """
        if self._mcs[src][dst] != mcs or self._rx_dbm[src][dst] != rx_power_dbm:
            self._mcs[src][dst] = mcs
            self._rx_dbm[src][dst] = rx_power_dbm
            self._per_cache.clear()

    def error_prob(self, src: int, dst: int, mpdu_bytes: int) -> float:
        key = (src, dst, mpdu_bytes)
        p = self._per_cache.get(key)
        if p is None:
            p = packet_error_rate(
                self._rx_dbm[src][dst],
                rate_code_mcs(self._mcs[src][dst]),
                self.width_mhz,
                mpdu_bytes,
            )
            self._per_cache[key] = p
        return p
