"""Robots that move: positions along ``[[fleet.routes]]``, links to the APs, hand-over
decisions.

Every beacon interval (``fleet.roaming.check_us``) each moving robot's position is
updated, then its links to every AP (both directions): the received power from the
scenario's log-distance budget and, in ``distance`` link mode, the fastest MCS it
sustains (MCS 0 below every sensitivity: the robot is at the edge of coverage); in
``fixed`` mode the MCS stays as configured. Only robot-AP links change: robots talk to
APs only. Then, unless a hand-over is already under way, the robot hands over to the
strongest AP when that one is stronger than its own by ``hysteresis_db`` (a station's
roaming trigger, measured on beacons; no fading or shadowing is drawn).
"""

from __future__ import annotations

import math
from typing import Any

from coorp.phy import LinkBudget
from coorp.scenario import route_position
from coorp.sim.cells._cells import Cells
from coorp.units import us

__all__ = ["Motion"]


class Motion:
    """Moves the fleet's routed robots on ``sim`` and triggers their hand-overs."""

    def __init__(self, sim: Any, cells: Cells) -> None:
        sc = sim.scenario
        fleet = sc.fleet
        self._sim = sim
        self._cells = cells
        self.routes = {r.robot: r for r in fleet.routes}
        self._start = {s.name: s.position_m for s in sc.stations}
        pl = sc.links.pathloss
        self._budget = LinkBudget(pl.tx_power_dbm, pl.reference_loss_db, pl.exponent, pl.margin_db)
        self._distance = sc.links.mode == "distance"
        phy = sc.phy
        self._nss, self._width, self._std = phy.spatial_streams, phy.width_mhz, phy.standard
        # ``LinkBudget.rx_power_dbm`` and ``best_mcs_at`` inlined in ``_update_links``
        # (the same arithmetic in the same order): the checks visit every robot-AP pair
        # ten times a simulated second, a few percent of a 200-robot fleet's run.
        b = self._budget
        self._b0 = b.tx_power_dbm - b.reference_loss_db
        self._slope = 10.0 * b.exponent
        self._thresholds = b.mcs_thresholds(self._nss, self._width, self._std)
        #: The APs' stations (APs do not move), looked up once.
        self._ap_stations: list[tuple[str, Any]] | None = None
        self.check_ns = max(1, us(fleet.roaming.check_us))
        self._aps = cells.access_points
        #: Robot -> its received power from each AP at the last check (dBm).
        self.rssi: dict[str, dict[str, float]] = {}
        #: Robot -> its position at the last check.
        self.position: dict[str, tuple[float, float]] = {r: self._start[r] for r in self.routes}

    def begin(self) -> None:
        """Schedule the checks (the first one at 0, the scenario's start positions)."""
        if self.routes:
            self._sim.call_control_at(0, self._check)

    def _check(self) -> None:
        sim = self._sim
        now = sim.now_ns
        t_s = now / 1e9
        for robot, route in self.routes.items():
            pos = route_position(self._start[robot], route, t_s)
            self.position[robot] = pos
            st = sim.station(robot)
            st.position_m = pos
            self._update_links(robot, st.idx, pos)
            self._cells.consider(robot, self.rssi[robot])
        sim.call_control_at(now + self.check_ns, self._check)

    def _update_links(self, robot: str, idx: int, pos: tuple[float, float]) -> None:
        sim = self._sim
        links = sim.links
        aps = self._ap_stations
        if aps is None:
            aps = self._ap_stations = [(ap, sim.station(ap)) for ap in self._aps]
        b0, slope = self._b0, self._slope
        rssi = {}
        for ap, a in aps:
            d = math.dist(pos, a.position_m)
            rx = b0 - slope * math.log10(d if d >= 1.0 else 1.0)
            rssi[ap] = rx
            if self._distance:
                # One budget, both directions: the same MCS each way (MCS 0 below every
                # sensitivity: the edge of coverage).
                code = 0
                for mcs, threshold in self._thresholds:
                    if rx >= threshold:
                        code = mcs
                        break
                links.set_link(idx, a.idx, code, rx)
                links.set_link(a.idx, idx, code, rx)
            else:
                for src, dst in ((idx, a.idx), (a.idx, idx)):
                    links.set_link(src, dst, links.rate_code(src, dst), rx)
        self.rssi[robot] = rssi
