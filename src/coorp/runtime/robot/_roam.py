"""A robot that roams: which cell it is in, and following it to that cell's leader.

A fleet's team file lists its cells (``[fleet]``: a leader per access point and channel).
An agent with no fixed leader finds the cell it is in and joins that cell's leader;
when the robot moves to another cell, :class:`CellFollower` moves its control link
(:meth:`ControlLink.move_to`): the old leader sees the connection close (the robot's
request and permit go back to the channel's coordinator), the new one sees a join.
Nothing else changes on the robot: its LS channels, marking, local preemption (time
models, completion times) and, in transparent mode, its kernel rules stay as they are.

Which cell: :func:`default_gateway` — the gateway of the default route, read from
``/proc/net/route`` of the agent's network namespace. An L3 roam (another AP's subnet)
changes it; in namespaces a route change stands for the roam. On a robot roaming
between APs of one subnet the cell is the associated BSSID, which the kernel reports
over nl80211 (``iw dev wlan0 link``): not read here yet (docs/runtime.md, "A fleet").
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from ..wire import Address, format_address
from ._link import ControlLink

__all__ = ["CellFollower", "Roaming", "RoamingCell", "default_gateway"]

log = logging.getLogger("coorp.runtime.agent")


def default_gateway(route_file: str = "/proc/net/route") -> str | None:
    """The IPv4 gateway of this namespace's default route (the lowest metric), or None
    when there is no default route (or the table cannot be read)."""
    try:
        with open(route_file, encoding="ascii") as f:
            lines = f.read().splitlines()[1:]
    except OSError:
        return None
    best: tuple[int, str] | None = None
    for line in lines:
        cols = line.split()
        # Iface Destination Gateway Flags RefCnt Use Metric Mask ...
        if len(cols) < 8 or cols[1] != "00000000" or cols[7] != "00000000":
            continue
        try:
            flags, gw, metric = int(cols[3], 16), int(cols[2], 16), int(cols[6])
        except ValueError:
            continue
        if not flags & 0x1 or not flags & 0x2:  # RTF_UP, RTF_GATEWAY
            continue
        addr = ".".join(str((gw >> s) & 0xFF) for s in (0, 8, 16, 24))  # little-endian
        if best is None or metric < best[0]:
            best = (metric, addr)
    return None if best is None else best[1]


@dataclass(frozen=True, slots=True)
class RoamingCell:
    name: str
    gateway: str
    leader: Address


@dataclass(frozen=True, slots=True)
class Roaming:
    """The cells a robot may be in (``[fleet]``) and how it finds out which."""

    cells: tuple[RoamingCell, ...]
    every_s: float = 0.05
    locate: Callable[[], str | None] = default_gateway

    def cell_at(self, gateway: str | None) -> RoamingCell | None:
        for c in self.cells:
            if c.gateway == gateway:
                return c
        return None


class CellFollower:
    """Checks every ``roaming.every_s`` which cell the robot is in and moves ``link``
    to that cell's leader. In no known cell, the robot stays with the leader it has."""

    def __init__(
        self,
        link: ControlLink,
        roaming: Roaming,
        cell: RoamingCell,
        *,
        clock: Callable[[], int] = time.monotonic_ns,
    ) -> None:
        self.link = link
        self.roaming = roaming
        self.cell = cell
        self._clock = clock
        #: (when, from cell, to cell) of every move, this robot's clock.
        self.moves: list[tuple[int, str, str]] = []
        self._task: asyncio.Task[None] | None = None
        self._unknown: str | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name=f"coorp-roam-{self.link.robot}")

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    def check(self) -> RoamingCell:
        """One look: move if the robot is in another known cell; the cell it is in."""
        gateway = self.roaming.locate()
        cell = self.roaming.cell_at(gateway)
        if cell is None:
            if gateway != self._unknown:
                self._unknown = gateway
                log.warning("%s: gateway %s is no cell of the fleet; staying with cell %s",
                            self.link.robot, gateway, self.cell.name)  # fmt: skip
            return self.cell
        self._unknown = None
        if cell.name != self.cell.name:
            log.info("%s: roamed from cell %s to %s (leader %s)", self.link.robot,
                     self.cell.name, cell.name, format_address(cell.leader))  # fmt: skip
            self.moves.append((self._clock(), self.cell.name, cell.name))
            self.cell = cell
            self.link.move_to(cell.leader)
        return cell

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.roaming.every_s)
            self.check()
