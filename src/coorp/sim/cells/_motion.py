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
        self._distance = sc.links.mode == "distance"
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
        rssi = {}
        for ap, a in aps:
            # The link table's budget (compiled; the scenario's path loss and PHY).
            rx = links.rx_at(math.dist(pos, a.position_m))
            rssi[ap] = rx
            if self._distance:
                # One budget, both directions: the same MCS each way (MCS 0 below every
                # sensitivity: the edge of coverage).
                mcs = links.mcs_at(rx)
                code = 0 if mcs is None else mcs
                links.set_link(idx, a.idx, code, rx)
                links.set_link(a.idx, idx, code, rx)
            else:
                for src, dst in ((idx, a.idx), (a.idx, idx)):
                    links.set_link(src, dst, links.rate_code(src, dst), rx)
        self.rssi[robot] = rssi
