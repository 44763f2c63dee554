"""A fleet's contention domains and associations on one simulation, and hand-overs.

Owns: one :class:`~coorp.sim.mac.Channel` per contention domain (the first is the
simulation's own channel, the others keep their pending event in the loop's heap), which
AP each robot is associated with, and the mechanics of a hand-over (leave on an idle
medium, flush, the gap off the air, join). It decides nothing about *when* to hand over
(:class:`~coorp.sim.cells.Motion` does, or a caller) and nothing about traffic (the
workload's and the policy's ``on_leave``/``on_join`` callbacks do).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from coorp._errors import UsageError
from coorp.phy import SLOT_NS
from coorp.scenario import (
    AmpduGrouping,
    Domain,
    HwQueueMode,
    contention_domains,
    initial_association,
)
from coorp.sim.cells._flush import lay_out_rings, purge
from coorp.sim.mac import Channel
from coorp.sim.station import Station
from coorp.units import us

__all__ = ["Cells", "HandoverRecord"]

#: ``(robot, ap, now_ns)``.
CellCallback = Callable[[str, str, int], None]


@dataclass(frozen=True, slots=True)
class HandoverRecord:
    """One hand-over: decided, off the air (left its AP), on the air again (joined)."""

    robot: str
    from_ap: str
    to_ap: str
    decided_ns: int
    left_ns: int
    joined_ns: int

    @property
    def gap_ns(self) -> int:
        """Off the air: from leaving the old AP to joining the new one."""
        return self.joined_ns - self.left_ns


class Cells:
    """Access points, contention domains and associations of one fleet simulation.

    ``sim`` is the :class:`~coorp.sim.Simulation` being built (its stations exist, no
    traffic has started); ``rng(name)`` its named random streams.
    """

    def __init__(self, sim: Any, rng: Callable[[str], random.Random], trace: bool = False) -> None:
        sc = sim.scenario
        fleet = sc.fleet
        if fleet is None:
            raise UsageError(f"scenario {sc.name!r} has no [fleet]: one BSS needs no cells")
        self._sim = sim
        self.fleet = fleet
        self.domains: list[Domain] = contention_domains(sc)
        #: Domain name -> its channel.
        self.channels: dict[str, Channel] = {}
        for k, d in enumerate(self.domains):
            if k == 0:
                ch = sim.channel
            else:
                ch = Channel(
                    sim.loop, sim.timing, sc.mac, sim.links, rng=rng(f"packet-errors:{d.name}"),
                    receiver=sim, trace=trace,
                )  # fmt: skip
            self.channels[d.name] = ch
        self.access_points: tuple[str, ...] = tuple(fleet.ap_names())
        #: AP -> its contention domain's name; AP -> its primary channel number.
        self.domain_of_ap = {ap: d.name for d in self.domains for ap in d.access_points}
        self.channel_of_ap = {a.name: a.channel for a in fleet.access_points}
        #: Robot -> the AP it is associated with (None: between two, off the air).
        self.ap_of: dict[str, str | None] = dict(initial_association(sc))
        self.robots: tuple[str, ...] = tuple(self.ap_of)
        self._members: dict[str, list[str]] = {ap: [] for ap in self.access_points}
        for r, ap in self.ap_of.items():
            assert ap is not None
            self._members[ap].append(r)
        grouped = sc.mac.ampdu_grouping is AmpduGrouping.PER_RECEIVER_TID
        for a in fleet.access_points:
            lay_out_rings(sim.station(a.name), HwQueueMode(a.hw_queue), grouped)
        for name, st in sim.stations.items():
            ap = name if name in self.domain_of_ap else self.ap_of[name]
            assert ap is not None
            st.channel = self.channels[self.domain_of_ap[ap]]
        #: Called when a robot leaves its AP (after its queues were flushed) and when it
        #: joins another (on the air again), in subscription order.
        self.on_leave: list[CellCallback] = []
        self.on_join: list[CellCallback] = []
        self.handovers: list[HandoverRecord] = []
        #: Robots whose hand-over is under way: robot -> (new AP, decided at).
        self._moving: dict[str, tuple[str, int]] = {}
        roaming = fleet.roaming
        self.gap_ns = us(roaming.gap_us())

    # -- reading ----------------------------------------------------------------------------
    def members(self, ap: str) -> list[str]:
        """The robots associated with ``ap`` now, in the order they joined."""
        return list(self._members[ap])

    def roaming(self, robot: str) -> bool:
        """Whether ``robot``'s hand-over is under way (decided, not yet joined)."""
        return robot in self._moving

    def channel_of(self, station: str) -> Channel:
        """The medium ``station`` is on (an AP's, or its AP's; the old one while away)."""
        st: Station = self._sim.station(station)
        assert st.channel is not None
        return st.channel

    def domain_of(self, station: str) -> str | None:
        """The contention domain of ``station`` now (None: a robot between two APs)."""
        ap = station if station in self.domain_of_ap else self.ap_of.get(station)
        return None if ap is None else self.domain_of_ap[ap]

    # -- hand-over -------------------------------------------------------------------------
    def consider(self, robot: str, rssi: dict[str, float]) -> str | None:
        """A robot's roaming trigger on its latest measurement of every AP (``rssi``: AP ->
        received power, dBm): hand over to the strongest AP when it is stronger than the
        robot's own by ``[fleet.roaming] hysteresis_db`` (the first listed on a tie).
        Returns the AP it moves to, or None (it stays, or is moving already)."""
        current = self.ap_of[robot]
        if current is None or robot in self._moving:
            return None
        aps = self.access_points
        # The strongest, the first listed on a tie (a loop: ``max`` with a key built a
        # tuple and searched the list for every AP, ten times a second per robot).
        best = aps[0]
        strongest = rssi[best]
        for a in aps:
            r = rssi[a]
            if r > strongest:
                best, strongest = a, r
        if best != current and rssi[best] >= rssi[current] + self.fleet.roaming.hysteresis_db:
            self.handover(robot, best)
            return best
        return None

    def handover(self, robot: str, to_ap: str) -> None:
        """Start moving ``robot`` to ``to_ap``: it leaves its AP as soon as its medium is
        idle, stays off the air for the gap, then joins. A robot already moving, or
        already there, is left alone."""
        if robot not in self.ap_of:
            raise UsageError(f"{robot!r} is not a robot of this fleet: {self.robots[:10]}")
        if to_ap not in self.domain_of_ap:
            raise UsageError(f"{to_ap!r} is not an access point: {self.access_points}")
        if robot in self._moving or self.ap_of[robot] == to_ap:
            return
        sim = self._sim
        self._moving[robot] = (to_ap, sim.now_ns)
        self._leave_when_idle(robot)

    def _leave_when_idle(self, robot: str) -> None:
        # Nothing of the robot (or of its AP, which flushes what it holds for it) may be
        # on the air: wait for the medium to go idle, one slot at a time.
        sim = self._sim
        if self.channel_of(robot).busy:
            sim.call_control_at(sim.now_ns + SLOT_NS, self._leave_when_idle, robot)
            return
        self._leave(robot)

    def _leave(self, robot: str) -> None:
        sim = self._sim
        now = sim.now_ns
        old = self.ap_of[robot]
        assert old is not None
        st: Station = sim.station(robot)
        ap_st: Station = sim.station(old)
        channel = self.channel_of(robot)
        channel.detach(st)
        purge(st, lambda _flow: True, now)
        if purge(ap_st, lambda flow: flow.dst is st, now):
            channel.queues_changed(ap_st, now)
        self.ap_of[robot] = None
        self._members[old].remove(robot)
        for cb in self.on_leave:
            cb(robot, old, now)
        sim.call_control_at(now + self.gap_ns, self._join, robot, old, now)

    def _join(self, robot: str, old: str, left_ns: int) -> None:
        sim = self._sim
        now = sim.now_ns
        new, decided = self._moving.pop(robot)
        self.channels[self.domain_of_ap[new]].attach(sim.station(robot), now)
        self.ap_of[robot] = new
        self._members[new].append(robot)
        self.handovers.append(HandoverRecord(robot, old, new, decided, left_ns, now))
        for cb in self.on_join:
            cb(robot, new, now)
