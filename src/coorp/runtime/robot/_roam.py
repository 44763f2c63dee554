"""A robot that roams: which cell it is in, and following it to that cell's leader.

A fleet's team file lists its cells (``[fleet]``: a leader per access point and channel).
An agent with no fixed leader finds the cell it is in and joins that cell's leader;
when the robot moves to another cell, :class:`CellFollower` moves its control link
(:meth:`ControlLink.move_to`): the old leader sees the connection close (the robot's
request and permit go back to the channel's coordinator), the new one sees a join.
Nothing else changes on the robot: its LS channels, marking, local preemption (time
models, completion times) and, in transparent mode, its kernel rules stay as they are.

Which cell (``fleet.locate``):

* ``gateway``: :func:`default_gateway` — the gateway of the default route, read from
  ``/proc/net/route`` of the agent's network namespace. An L3 roam (another AP's
  subnet) changes it; in namespaces a route change stands for the roam. The follower
  looks again as soon as the kernel announces a route change (:func:`route_changes`:
  a netlink socket subscribed to IPv4 route events; one wake-up, no parsing), and every
  ``locate_every_ms`` in any case (a missed event costs at most that).
* ``bssid``: the access point the robot is associated with (robots roaming between
  APs of one subnet keep their gateway), read by :func:`bssid_reader` from
  ``fleet.bssid_file``, which whatever watches the association keeps up to date (a
  wpa_supplicant action script on ``CONNECTED``, an ``iw event`` hook; the kernel
  reports it over nl80211, and machines without a WiFi stack have none to read). The
  source is injectable (:class:`Roaming`'s ``locate``): tests write the file.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

from ..wire import Address, format_address
from ._link import ControlLink

__all__ = [
    "CellFollower",
    "Roaming",
    "RoamingCell",
    "bssid_reader",
    "default_gateway",
    "route_changes",
]

#: rtnetlink's multicast group of IPv4 route changes (``RTMGRP_IPV4_ROUTE``).
_RTMGRP_IPV4_ROUTE = 0x40
_NETLINK_ROUTE = 0

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


def bssid_reader(path: str) -> Callable[[], str | None]:
    """A ``locate`` for ``fleet.locate = "bssid"``: the BSSID in ``path`` (its first
    line, lower case), or None when the file is missing, empty or not one BSSID (not
    associated)."""

    def read() -> str | None:
        try:
            with open(path, encoding="ascii", errors="replace") as f:
                line = f.readline(64).strip().lower()
        except OSError:
            return None
        parts = line.split(":")
        ok = len(parts) == 6 and all(len(x) == 2 and x.isalnum() for x in parts)
        return line if ok else None

    return read


def route_changes() -> socket.socket | None:
    """A non-blocking netlink socket that turns readable when this namespace's IPv4
    routes change (what :class:`CellFollower` waits on between its looks), or None
    where netlink cannot be opened (the periodic look still runs)."""
    try:
        sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, _NETLINK_ROUTE)
    except (OSError, AttributeError):
        return None
    try:
        sock.setblocking(False)
        sock.bind((0, _RTMGRP_IPV4_ROUTE))
    except OSError:
        sock.close()
        return None
    return sock


@dataclass(frozen=True, slots=True)
class RoamingCell:
    name: str
    gateway: str | None
    leader: Address
    bssids: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Roaming:
    """The cells a robot may be in (``[fleet]``) and how it finds out which: ``locate``
    says where the robot is (a gateway, or with ``by="bssid"`` a BSSID); ``watch``, if
    given, opens a socket that turns readable when that may have changed."""

    cells: tuple[RoamingCell, ...]
    every_s: float = 0.05
    locate: Callable[[], str | None] = default_gateway
    by: str = "gateway"
    watch: Callable[[], socket.socket | None] | None = None

    def cell_at(self, where: str | None) -> RoamingCell | None:
        if where is None:
            return None
        for c in self.cells:
            if (where in c.bssids) if self.by == "bssid" else (c.gateway == where):
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
                log.warning("%s: %s %s is no cell of the fleet; staying with cell %s",
                            self.link.robot, self.roaming.by, gateway,
                            self.cell.name)  # fmt: skip
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
        wake = asyncio.Event()
        sock = self.roaming.watch() if self.roaming.watch is not None else None
        loop = asyncio.get_running_loop()
        if sock is not None:
            loop.add_reader(sock.fileno(), partial(_drain, sock, wake))
        try:
            while True:
                # A look every every_s, and at once when the kernel says routes changed.
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(self.roaming.every_s):
                        await wake.wait()
                wake.clear()
                self.check()
        finally:
            if sock is not None:
                loop.remove_reader(sock.fileno())
                sock.close()


def _drain(sock: socket.socket, wake: asyncio.Event) -> None:
    """Read every pending notification (bounded), then wake the follower once."""
    for _ in range(256):
        try:
            if not sock.recv(65536):
                break
        except BlockingIOError:
            break
        except OSError:  # ENOBUFS: events were dropped; looking again covers them
            break
    wake.set()
